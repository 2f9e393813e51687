//! Download progress: what the app is told, and how often.
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::listing::{RepoFile, RepoListing};

/// Progress of a repository download. `bytes_done` only grows, except when a
/// partial file the server would not resume has to start over.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct DownloadProgress {
    pub repo: String,
    /// The file being downloaded (the last one, in the final event).
    pub file: String,
    pub file_bytes_done: u64,
    pub file_bytes_total: u64,
    /// All files: bytes on disk (verified or partial) out of the listing's total.
    pub bytes_done: u64,
    pub bytes_total: u64,
    pub files_done: usize,
    pub files_total: usize,
    /// Download speed over the last few seconds.
    pub bytes_per_second: f64,
}

pub type ProgressFn = Arc<dyn Fn(&DownloadProgress) + Send + Sync>;

/// Progress bookkeeping and throttled reporting.
pub(crate) struct Tracker {
    event: DownloadProgress,
    /// Bytes fetched over the network in this call.
    pub(crate) fetched: u64,
    pub(crate) bytes_done: u64,
    pub(crate) file_bytes_done: u64,
    /// Recent (time, fetched) samples for the speed.
    samples: VecDeque<(Instant, u64)>,
    last_emit: Option<Instant>,
    interval: Duration,
    callback: Option<ProgressFn>,
}

/// Speed is averaged over this window.
const SPEED_WINDOW: Duration = Duration::from_secs(5);

impl Tracker {
    pub(crate) fn new(
        listing: &RepoListing,
        callback: Option<ProgressFn>,
        interval: Duration,
    ) -> Tracker {
        Tracker {
            event: DownloadProgress {
                repo: listing.repo.clone(),
                file: String::new(),
                file_bytes_done: 0,
                file_bytes_total: 0,
                bytes_done: 0,
                bytes_total: listing.total_bytes(),
                files_done: 0,
                files_total: listing.files.len(),
                bytes_per_second: 0.0,
            },
            fetched: 0,
            bytes_done: 0,
            file_bytes_done: 0,
            samples: VecDeque::from([(Instant::now(), 0)]),
            last_emit: None,
            interval,
            callback,
        }
    }

    pub(crate) fn start_file(&mut self, file: &RepoFile) {
        self.event.file = file.name.clone();
        self.event.file_bytes_total = file.size;
        self.file_bytes_done = 0;
    }

    pub(crate) fn add(&mut self, n: u64) {
        self.fetched += n;
        self.bytes_done += n;
        self.file_bytes_done += n;
        self.emit(false);
    }

    /// A partial file of `had` bytes was thrown away.
    pub(crate) fn restart_file(&mut self, had: u64) {
        self.bytes_done = self.bytes_done.saturating_sub(had);
        self.file_bytes_done = 0;
    }

    pub(crate) fn finish_file(&mut self) {
        self.file_bytes_done = self.event.file_bytes_total;
        self.event.files_done += 1;
        self.emit(true);
    }

    pub(crate) fn emit(&mut self, force: bool) {
        let now = Instant::now();
        if !force && self.last_emit.is_some_and(|t| now.duration_since(t) < self.interval) {
            return;
        }
        self.last_emit = Some(now);
        self.samples.push_back((now, self.fetched));
        while self.samples.len() > 2 && now.duration_since(self.samples[0].0) > SPEED_WINDOW {
            self.samples.pop_front();
        }
        let (t0, f0) = self.samples[0];
        let elapsed = now.duration_since(t0).as_secs_f64();
        self.event.bytes_per_second =
            if elapsed > 0.0 { (self.fetched - f0) as f64 / elapsed } else { 0.0 };
        self.event.bytes_done = self.bytes_done;
        self.event.file_bytes_done = self.file_bytes_done;
        if let Some(callback) = &self.callback {
            callback(&self.event);
        }
    }
}
