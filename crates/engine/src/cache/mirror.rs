//! A cache kept in step with copies in other processes: a model split
//! across ranks (see `crate::distributed`) keeps, on every rank, a cache of
//! the same rows holding that rank's share of the keys and values. Rank 0's
//! scheduler changes its caches as in one process; a cache created with a
//! [`Mirror`] records each change as a [`CacheEvent`] in a [`MirrorLog`],
//! and the followers replay the log before each forward pass, so rows join,
//! leave, split and are kept by the prefix cache on every rank alike.
//!
//! Only structure travels (ids, rows, lengths), never keys or values: each
//! rank derives its own from its own forward passes.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::KvQuantization;

/// One change to a mirrored cache, naming caches by the ids rank 0 gave them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CacheEvent {
    /// An empty cache of `rows` rows.
    New { cache: u64, rows: usize, quantization: Option<KvQuantization> },
    /// A copy of `from` (it stays).
    Copy { from: u64, into: u64 },
    /// `from` split into one cache per row, after its last pass's padding
    /// ([`super::BatchCache::split`]); `from` is gone after.
    Split { from: u64, into: Vec<u64> },
    /// Row `row` of `from`, detached ([`super::BatchCache::row_snapshot`]).
    Snapshot { from: u64, row: usize, into: u64 },
    /// `from`'s rows appended to `into`; `from` is gone after.
    Join { into: u64, from: u64 },
    /// Only rows `keep` of `cache` stay, in that order.
    Filter { cache: u64, keep: Vec<usize> },
    /// A one-row cache cut back to its first `len` tokens.
    Truncate { cache: u64, len: usize },
    /// `cache` is gone.
    Drop { cache: u64 },
}

/// Where mirrored caches record their events until they are sent.
#[derive(Debug, Default)]
pub struct MirrorLog {
    next_id: AtomicU64,
    events: Mutex<Vec<CacheEvent>>,
}

impl MirrorLog {
    pub fn new() -> Arc<MirrorLog> {
        Arc::new(MirrorLog::default())
    }

    /// The events recorded since the last call, oldest first.
    pub fn take(&self) -> Vec<CacheEvent> {
        std::mem::take(&mut *self.events.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn record(&self, event: CacheEvent) {
        self.events.lock().unwrap_or_else(|p| p.into_inner()).push(event);
    }

    fn id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }
}

/// A cache's id in its log. Cloning it records a copy; dropping it, the
/// cache's end; the operations that consume a cache (split, join) take it
/// by value and record no end.
#[derive(Debug)]
pub struct Mirror {
    id: u64,
    log: Arc<MirrorLog>,
    /// False once consumed: its end was recorded by the consuming event.
    live: bool,
}

impl Mirror {
    /// A new cache of `rows` rows in `log`.
    pub fn new(log: &Arc<MirrorLog>, rows: usize, quantization: Option<KvQuantization>) -> Mirror {
        let mirror = Mirror { id: log.id(), log: log.clone(), live: true };
        log.record(CacheEvent::New { cache: mirror.id, rows, quantization });
        mirror
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// The log this cache records in.
    pub fn log(&self) -> &Arc<MirrorLog> {
        &self.log
    }

    fn sibling(&self) -> Mirror {
        Mirror { id: self.log.id(), log: self.log.clone(), live: true }
    }

    fn consume(mut self) -> u64 {
        self.live = false;
        self.id
    }

    /// This cache split into `rows` one-row caches.
    pub fn split(self, rows: usize) -> Vec<Mirror> {
        let into: Vec<Mirror> = (0..rows).map(|_| self.sibling()).collect();
        let log = self.log.clone();
        log.record(CacheEvent::Split {
            from: self.consume(),
            into: into.iter().map(Mirror::id).collect(),
        });
        into
    }

    /// Row `row` of this cache, detached.
    pub fn snapshot(&self, row: usize) -> Mirror {
        let into = self.sibling();
        self.log.record(CacheEvent::Snapshot { from: self.id, row, into: into.id });
        into
    }

    /// `from`'s rows appended to this cache's.
    pub fn join(&self, from: Mirror) {
        self.log.record(CacheEvent::Join { into: self.id, from: from.consume() });
    }

    pub fn filter(&self, keep: &[usize]) {
        self.log.record(CacheEvent::Filter { cache: self.id, keep: keep.to_vec() });
    }

    pub fn truncate(&self, len: usize) {
        self.log.record(CacheEvent::Truncate { cache: self.id, len });
    }
}

impl Clone for Mirror {
    fn clone(&self) -> Mirror {
        let into = self.sibling();
        self.log.record(CacheEvent::Copy { from: self.id, into: into.id });
        into
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        if self.live {
            self.log.record(CacheEvent::Drop { cache: self.id });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_change_is_recorded_once_in_order() {
        let log = MirrorLog::new();
        let a = Mirror::new(&log, 2, None);
        let rows = a.split(2);
        let copy = rows[0].clone();
        let batch = Mirror::new(&log, 0, None);
        let mut rows = rows.into_iter();
        batch.join(rows.next().unwrap());
        batch.join(rows.next().unwrap());
        batch.filter(&[1]);
        drop(copy);
        assert_eq!(
            log.take(),
            vec![
                CacheEvent::New { cache: 0, rows: 2, quantization: None },
                CacheEvent::Split { from: 0, into: vec![1, 2] },
                CacheEvent::Copy { from: 1, into: 3 },
                CacheEvent::New { cache: 4, rows: 0, quantization: None },
                CacheEvent::Join { into: 4, from: 1 },
                CacheEvent::Join { into: 4, from: 2 },
                CacheEvent::Filter { cache: 4, keep: vec![1] },
                CacheEvent::Drop { cache: 3 },
            ]
        );
        drop(batch);
        assert_eq!(log.take(), vec![CacheEvent::Drop { cache: 4 }]);
    }
}
