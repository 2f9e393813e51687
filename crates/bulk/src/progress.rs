//! How far a run is, and when it should end at the pace so far.
use std::time::{Duration, Instant};

use crate::row::{Row, RowStatus};

/// Counts over the rows of one run (a resume counts only what it runs).
#[derive(Debug, Clone)]
pub struct Progress {
    pub done: usize,
    pub failed: usize,
    /// Rows stopped by a cancel.
    pub cancelled: usize,
    /// Rows this run takes.
    pub total: usize,
    pub started: Instant,
}

impl Progress {
    pub fn new(total: usize) -> Self {
        Self { done: 0, failed: 0, cancelled: 0, total, started: Instant::now() }
    }

    pub fn record(&mut self, row: &Row) {
        match row.status {
            RowStatus::Done => self.done += 1,
            RowStatus::Failed => self.failed += 1,
            RowStatus::Cancelled => self.cancelled += 1,
            RowStatus::Pending => {}
        }
    }

    pub fn finished(&self) -> usize {
        self.done + self.failed + self.cancelled
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// The time left if the rest goes as fast as the rows so far (rows in a
    /// continuous batch finish at a steady rate once it is full); `None`
    /// before the first row.
    pub fn eta(&self) -> Option<Duration> {
        eta(self.elapsed(), self.finished(), self.total)
    }
}

pub(crate) fn eta(elapsed: Duration, finished: usize, total: usize) -> Option<Duration> {
    if finished == 0 {
        return None;
    }
    let left = total.saturating_sub(finished) as u32;
    Some(elapsed / finished as u32 * left)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eta_is_the_pace_so_far_times_the_rows_left() {
        assert_eq!(eta(Duration::from_secs(10), 0, 30), None);
        assert_eq!(eta(Duration::from_secs(10), 5, 30), Some(Duration::from_secs(50)));
        assert_eq!(eta(Duration::from_secs(10), 30, 30), Some(Duration::ZERO));
    }
}
