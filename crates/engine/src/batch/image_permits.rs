//! A bound on the bytes of image patches prepared but not yet encoded.
//! Preparation workers decode and cut images into patches (float32:
//! megabytes each, hundreds for a 12-megapixel image at a processor's
//! largest size) faster than the vision tower encodes them; 200 dropped
//! photos must not all sit in memory as patches. A worker takes permits for
//! a request's patch bytes once it has cut them, before handing them on (it
//! waits there while the engine is behind), and the engine gives them back
//! once it has encoded them: at most the capacity waits for the tower, plus
//! the one request each worker is preparing.
use std::sync::{Arc, Condvar, Mutex};

pub struct ImagePermits {
    available: Mutex<usize>,
    freed: Condvar,
    capacity: usize,
}

/// Held for a request's images until they are encoded (or the request goes).
pub struct ImagePermit {
    pool: Arc<ImagePermits>,
    count: usize,
}

impl ImagePermits {
    pub fn new(capacity: usize) -> Arc<Self> {
        let capacity = capacity.max(1);
        Arc::new(Self { available: Mutex::new(capacity), freed: Condvar::new(), capacity })
    }

    /// Waits until `units` permits (bytes) are free and takes them, all at
    /// once (a worker never holds some while waiting for more, so two
    /// requests cannot wait on each other). A request larger than the
    /// capacity takes all of it.
    pub fn acquire(self: &Arc<Self>, units: usize) -> ImagePermit {
        let count = units.clamp(1, self.capacity);
        let mut available = self.available.lock().unwrap_or_else(|p| p.into_inner());
        while *available < count {
            available = self.freed.wait(available).unwrap_or_else(|p| p.into_inner());
        }
        *available -= count;
        ImagePermit { pool: self.clone(), count }
    }

    #[cfg(test)]
    pub fn available(&self) -> usize {
        *self.available.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for ImagePermit {
    fn drop(&mut self) {
        let mut available = self.pool.available.lock().unwrap_or_else(|p| p.into_inner());
        *available += self.count;
        self.pool.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_come_back_when_dropped_and_a_big_request_takes_all() {
        let pool = ImagePermits::new(4);
        let a = pool.acquire(3);
        assert_eq!(pool.available(), 1);
        drop(a);
        assert_eq!(pool.available(), 4);
        let all = pool.acquire(10);
        assert_eq!(pool.available(), 0);
        let waiter = {
            let pool = pool.clone();
            std::thread::spawn(move || pool.acquire(2).count)
        };
        drop(all);
        assert_eq!(waiter.join().unwrap(), 2);
        assert_eq!(pool.available(), 4);
    }
}
