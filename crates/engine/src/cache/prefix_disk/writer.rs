//! The thread that writes kept prefixes to disk, so the engine thread never
//! waits on the disk (it only copies the arrays' bytes out of MLX first), and
//! keeps the whole cache folder within its byte budget: least recently used
//! files go first, by modification time (a hit touches its file), across
//! every model's subfolder.
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::SystemTime;

use super::file::Encoded;
use super::{DiskEntry, Shared};
use crate::cache::KeyToken;

pub struct Job {
    pub key: Vec<KeyToken>,
    pub path: PathBuf,
    pub encoded: Encoded,
    /// Older entries this one serves in full (they can be deleted).
    pub replaces: Vec<PathBuf>,
}

pub struct Writer {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Writer {
    pub fn start(root: PathBuf, capacity: u64, shared: Arc<Shared>) -> Self {
        let (jobs, queue) = mpsc::channel::<Job>();
        let thread = thread::Builder::new()
            .name("prefix-cache-writer".into())
            .spawn(move || {
                for job in queue {
                    let bytes = job.encoded.data_bytes();
                    write_one(&root, capacity, &shared, job);
                    shared.pending_bytes.fetch_sub(bytes, Ordering::SeqCst);
                }
            })
            .expect("a thread can start");
        Self { jobs: Some(jobs), thread: Some(thread) }
    }

    pub fn send(&self, job: Job) {
        if let Some(jobs) = &self.jobs {
            let _ = jobs.send(job);
        }
    }
}

impl Drop for Writer {
    /// Writes what is queued before the engine goes (a restart finds it).
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn write_one(root: &Path, capacity: u64, shared: &Shared, job: Job) {
    if let Err(e) = job.encoded.write(&job.path) {
        tracing::warn!(path = %job.path.display(), error = %e, "could not write a prefix-cache file");
        let _ = std::fs::remove_file(job.path.with_extension("tmp"));
        shared.write_errors.fetch_add(1, Ordering::SeqCst);
        return;
    }
    shared.writes.fetch_add(1, Ordering::SeqCst);
    let bytes = std::fs::metadata(&job.path).map(|m| m.len()).unwrap_or(0);
    {
        let mut index = shared.index.lock().unwrap_or_else(|p| p.into_inner());
        index.retain(|e| e.path != job.path && !job.replaces.contains(&e.path));
        index.push(DiskEntry { key: job.key, path: job.path.clone(), bytes });
    }
    for old in &job.replaces {
        let _ = std::fs::remove_file(old);
    }
    evict_to(root, capacity, &shared.index);
}

/// Deletes the least recently used files under `root` until they fit in
/// `capacity` bytes.
pub fn evict_to(root: &Path, capacity: u64, index: &Mutex<Vec<DiskEntry>>) {
    let mut files = cache_files(root);
    let mut total: u64 = files.iter().map(|f| f.2).sum();
    if total <= capacity {
        return;
    }
    files.sort_by_key(|f| f.0);
    let mut gone = Vec::new();
    for (_, path, bytes) in files {
        if total <= capacity {
            break;
        }
        if std::fs::remove_file(&path).is_ok() {
            tracing::debug!(path = %path.display(), bytes, "prefix-cache file evicted");
            total -= bytes;
            gone.push(path);
        }
    }
    index.lock().unwrap_or_else(|p| p.into_inner()).retain(|e| !gone.contains(&e.path));
}

/// Every cache file under `root` (one folder per model): modified, path, bytes.
fn cache_files(root: &Path) -> Vec<(SystemTime, PathBuf, u64)> {
    let mut files = Vec::new();
    for model in std::fs::read_dir(root).into_iter().flatten().flatten() {
        for entry in std::fs::read_dir(model.path()).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|x| x == "safetensors") {
                if let Ok(m) = entry.metadata() {
                    files.push((m.modified().unwrap_or(SystemTime::UNIX_EPOCH), path, m.len()));
                }
            }
        }
    }
    files
}
