//! The bytes of images sent lately, by the sha256 they are stored under.
//! Every turn of a chat sends its images again (the engine's vision cache
//! then skips the tower, but its preprocessing needs the bytes): keeping
//! them here spares reading the files again, and their name is their hash,
//! so nothing is hashed again either. Bounded by bytes; the least recently
//! used go first.
use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// How many bytes of images are kept (a few dozen photos).
pub const IMAGE_BYTES_KEPT: usize = 128 << 20;

pub struct ImageBytes {
    cap: usize,
    /// (sha256, bytes), least recently used first.
    entries: Mutex<VecDeque<(String, Arc<[u8]>)>>,
}

impl ImageBytes {
    pub fn new(cap: usize) -> Self {
        Self { cap, entries: Mutex::new(VecDeque::new()) }
    }

    /// The image stored as `sha256` at `path`: from memory, or read once.
    pub async fn get(&self, sha256: &str, path: &Path) -> std::io::Result<Arc<[u8]>> {
        if let Some(bytes) = self.lookup(sha256) {
            return Ok(bytes);
        }
        let bytes: Arc<[u8]> = tokio::fs::read(path).await?.into();
        self.insert(sha256, bytes.clone());
        Ok(bytes)
    }

    fn lookup(&self, sha256: &str) -> Option<Arc<[u8]>> {
        let mut entries = self.entries.lock().unwrap();
        let at = entries.iter().position(|(k, _)| k == sha256)?;
        let entry = entries.remove(at).expect("found above");
        let bytes = entry.1.clone();
        entries.push_back(entry);
        Some(bytes)
    }

    fn insert(&self, sha256: &str, bytes: Arc<[u8]>) {
        if bytes.len() > self.cap {
            return;
        }
        let mut entries = self.entries.lock().unwrap();
        if entries.iter().any(|(k, _)| k == sha256) {
            return;
        }
        let mut held: usize = entries.iter().map(|(_, b)| b.len()).sum::<usize>() + bytes.len();
        while held > self.cap {
            let Some((_, old)) = entries.pop_front() else { break };
            held -= old.len();
        }
        entries.push_back((sha256.to_string(), bytes));
    }

    /// The images kept now, for tests.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_image_is_read_once_and_the_oldest_go_past_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, size: usize| {
            let p = dir.path().join(name);
            std::fs::write(&p, vec![name.as_bytes()[0]; size]).unwrap();
            p
        };
        let (a, b, c) = (file("a", 40), file("b", 40), file("c", 40));
        let cache = ImageBytes::new(100);
        assert_eq!(cache.get("a", &a).await.unwrap().len(), 40);
        // read once: gone from disk, still served
        std::fs::remove_file(&a).unwrap();
        assert_eq!(cache.get("a", &a).await.unwrap()[0], b'a');
        cache.get("b", &b).await.unwrap();
        // "a" was used last before "b": "a" is the oldest when "c" comes
        cache.get("c", &c).await.unwrap();
        assert_eq!(cache.len(), 2);
        assert!(cache.get("a", &a).await.is_err(), "the least recently used went");
        assert_eq!(cache.get("b", &b).await.unwrap()[0], b'b');
    }
}
