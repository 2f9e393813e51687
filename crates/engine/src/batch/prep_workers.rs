//! The threads that prepare image requests (decode, resize, patches; see
//! [`super::prepare`]) so the engine thread never does that work.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;

/// A job is told whether the pool is stopping (then it only says so to its caller).
type Job = Box<dyn FnOnce(bool) + Send>;

pub struct PrepWorkers {
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    threads: Mutex<Vec<thread::JoinHandle<()>>>,
    stopping: Arc<AtomicBool>,
}

impl PrepWorkers {
    /// One worker per core, at most 4 (decoding is the work; more threads
    /// would only compete with MLX for the same cores).
    pub fn new() -> Self {
        let n = thread::available_parallelism().map_or(2, |n| n.get()).clamp(1, 4);
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let stopping = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .filter_map(|i| {
                let rx = rx.clone();
                let stopping = stopping.clone();
                thread::Builder::new()
                    .name(format!("prepare-{i}"))
                    .spawn(move || loop {
                        let job = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                        match job {
                            Ok(job) => job(stopping.load(Ordering::Relaxed)),
                            Err(_) => return, // the pool was dropped
                        }
                    })
                    .ok()
            })
            .collect();
        Self { jobs: Mutex::new(Some(tx)), threads: Mutex::new(threads), stopping }
    }

    /// Runs `job` on a worker; false when the pool is shut down. The job is
    /// told whether the pool is stopping by the time a worker takes it.
    pub fn run(&self, job: impl FnOnce(bool) + Send + 'static) -> bool {
        match &*self.jobs.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(tx) => tx.send(Box::new(job)).is_ok(),
            None => false,
        }
    }

    /// Tells queued jobs to stop and waits for the workers.
    pub fn shutdown(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        self.jobs.lock().unwrap_or_else(|p| p.into_inner()).take();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        for t in threads {
            let _ = t.join();
        }
    }
}

impl Default for PrepWorkers {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for PrepWorkers {
    fn drop(&mut self) {
        self.shutdown();
    }
}
