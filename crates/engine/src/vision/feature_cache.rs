//! The vision-feature cache: the vision tower's output per image, so an image
//! seen before (the same photo asked about again, or every later turn of a
//! chat about it) skips decoding, preprocessing and the tower entirely.
//!
//! Keyed by the SHA-256 of the image file's bytes, the preprocessing
//! parameters and the model, so a changed byte, another resize policy or
//! another model never reuses features. Bounded by bytes, least recently
//! used first out; cleared with the model.
use mlx_rs::Array;
use serde::Serialize;

use crate::cache::lru::{evict_to, LruEntry};

/// What the cache keeps for one image: its features `[tokens, hidden]` and
/// the patch grid they came from (M-RoPE positions need it).
#[derive(Clone)]
pub struct CachedFeatures {
    pub features: Array,
    pub grid: [i32; 3],
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct VisionCacheStats {
    pub entries: usize,
    pub bytes: usize,
    pub capacity_bytes: usize,
    pub hits: u64,
    pub misses: u64,
}

struct Entry {
    key: String,
    value: CachedFeatures,
    bytes: usize,
    last_used: u64,
}

impl LruEntry for Entry {
    fn bytes(&self) -> usize {
        self.bytes
    }
    fn last_used(&self) -> u64 {
        self.last_used
    }
}

pub struct VisionFeatureCache {
    entries: Vec<Entry>,
    capacity_bytes: usize,
    clock: u64,
    hits: u64,
    misses: u64,
}

impl VisionFeatureCache {
    pub fn new(capacity_bytes: usize) -> Self {
        Self { entries: Vec::new(), capacity_bytes, clock: 0, hits: 0, misses: 0 }
    }

    /// The cache key of one image for one model and preprocessing.
    pub fn key(image_sha256: &str, preprocessing: &str, model: &str) -> String {
        format!("{image_sha256}|{preprocessing}|{model}")
    }

    /// Looks an image up; counts a hit or a miss.
    pub fn get(&mut self, key: &str) -> Option<CachedFeatures> {
        self.clock += 1;
        match self.entries.iter_mut().find(|e| e.key == key) {
            Some(e) => {
                e.last_used = self.clock;
                self.hits += 1;
                Some(e.value.clone())
            }
            None => {
                self.misses += 1;
                None
            }
        }
    }

    /// Whether an image is cached, without counting a hit or a miss.
    pub fn contains(&self, key: &str) -> bool {
        self.entries.iter().any(|e| e.key == key)
    }

    /// Keeps evaluated features. An entry larger than the whole cache is not kept.
    pub fn insert(&mut self, key: String, value: CachedFeatures) {
        let bytes = value.features.nbytes();
        if bytes > self.capacity_bytes {
            return;
        }
        self.clock += 1;
        self.entries.retain(|e| e.key != key);
        self.entries.push(Entry { key, value, bytes, last_used: self.clock });
        evict_to(&mut self.entries, self.capacity_bytes);
    }

    fn bytes(&self) -> usize {
        self.entries.iter().map(|e| e.bytes).sum()
    }

    pub fn stats(&self) -> VisionCacheStats {
        VisionCacheStats {
            entries: self.entries.len(),
            bytes: self.bytes(),
            capacity_bytes: self.capacity_bytes,
            hits: self.hits,
            misses: self.misses,
        }
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn features(rows: i32) -> CachedFeatures {
        CachedFeatures {
            features: Array::from_slice(&vec![1.0f32; rows as usize * 4], &[rows, 4]),
            grid: [1, 2, 2],
        }
    }

    #[test]
    fn hit_miss_and_lru_eviction_by_bytes() {
        // Each entry is rows × 4 floats × 4 bytes; capacity holds two 2-row entries.
        let mut cache = VisionFeatureCache::new(2 * 2 * 4 * 4);
        let a = VisionFeatureCache::key("aa", "p", "m");
        let b = VisionFeatureCache::key("bb", "p", "m");
        let c = VisionFeatureCache::key("cc", "p", "m");
        assert!(cache.get(&a).is_none());
        cache.insert(a.clone(), features(2));
        cache.insert(b.clone(), features(2));
        assert_eq!(cache.get(&a).map(|f| f.grid), Some([1, 2, 2]));
        // `b` is now the least recently used: `c` pushes it out.
        cache.insert(c.clone(), features(2));
        assert!(cache.get(&b).is_none());
        assert!(cache.get(&a).is_some() && cache.get(&c).is_some());
        let stats = cache.stats();
        assert_eq!((stats.entries, stats.bytes, stats.hits, stats.misses), (2, 64, 3, 2));
    }

    #[test]
    fn key_separates_models_and_preprocessing() {
        let mut cache = VisionFeatureCache::new(1 << 20);
        cache.insert(VisionFeatureCache::key("aa", "p", "m"), features(1));
        assert!(cache.get(&VisionFeatureCache::key("aa", "p", "other-model")).is_none());
        assert!(cache.get(&VisionFeatureCache::key("aa", "p2", "m")).is_none());
        assert!(cache.get(&VisionFeatureCache::key("aa", "p", "m")).is_some());
    }

    #[test]
    fn oversized_entry_is_not_kept_and_clear_empties() {
        let mut cache = VisionFeatureCache::new(16);
        cache.insert("big".into(), features(2));
        assert_eq!(cache.stats().entries, 0);
        cache.insert("small".into(), features(1));
        assert_eq!(cache.stats().entries, 1);
        cache.clear();
        assert_eq!(cache.stats().entries, 0);
    }
}
