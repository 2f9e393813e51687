//! The prompt (prefix) cache: the KV state of finished sequences, kept so a
//! new request whose tokens start the same way prefills only the rest. The
//! second turn of a chat starts with the whole first turn (system prompt,
//! question, answer), so it prefills only the new message; a system prompt
//! shared by several chats is reused by all of them.
//!
//! Entries are bounded by bytes and evicted least-recently-used first. With
//! a disk tier ([`super::prefix_disk`]) every kept entry is also written to
//! disk, and a prompt that matches a file further than anything in memory
//! resumes from that file (after a restart, or once memory evicted it).
//!
//! Keys are [`KeyToken`]s, not token ids: every image-feature slot of a
//! vision prompt has the same placeholder token id, so its key is derived from
//! the image's content hash instead, and a different image at the same
//! place never reuses a prefix.
use serde::Serialize;

use super::lru::{evict_to, LruEntry};
use super::prefix_disk::{DiskPrefixCache, DiskPrefixStats};
use super::BatchCache;
use crate::error::Result;

/// One position of a prefix key: a token id, or (top bit set) an image slot.
pub type KeyToken = u64;

const IMAGE_SLOT: u64 = 1 << 63;

/// The key of plain text tokens.
pub fn text_key(tokens: &[u32]) -> Vec<KeyToken> {
    tokens.iter().map(|&t| t as KeyToken).collect()
}

/// The key of feature slot `index` of the image whose SHA-256 (hex) is `sha256`.
pub fn image_slot_key(sha256: &str, index: usize) -> KeyToken {
    let digest = u64::from_str_radix(sha256.get(..15).unwrap_or("0"), 16).unwrap_or(0);
    IMAGE_SLOT | (digest << 3).wrapping_add(index as u64) & !IMAGE_SLOT
}

/// One kept sequence: the key of the tokens its cache covers, and that
/// cache (one row, detached from any batch).
struct Entry {
    tokens: Vec<KeyToken>,
    cache: BatchCache,
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

#[derive(Debug, Clone, Default, Serialize)]
pub struct PrefixCacheStats {
    pub entries: usize,
    pub bytes: usize,
    pub capacity_bytes: usize,
    /// Requests that reused a prefix, and prompt tokens not prefilled thanks to it.
    pub hits: u64,
    pub misses: u64,
    pub reused_tokens: u64,
    /// The disk tier, when on (its hits are also counted in `hits`).
    pub disk: Option<DiskPrefixStats>,
}

/// A reusable prefix: its length and a one-row cache holding exactly it.
pub struct PrefixHit {
    pub len: usize,
    pub cache: BatchCache,
    /// It was read from disk (not in memory).
    pub from_disk: bool,
}

pub struct PrefixCache {
    entries: Vec<Entry>,
    capacity_bytes: usize,
    clock: u64,
    stats: PrefixCacheStats,
    disk: Option<DiskPrefixCache>,
}

/// Shortest prefix worth reusing: below this, prefilling is as cheap as copying.
pub(super) const MIN_REUSE: usize = 4;

impl PrefixCache {
    pub fn new(capacity_bytes: usize) -> Self {
        Self {
            entries: Vec::new(),
            capacity_bytes,
            clock: 0,
            stats: PrefixCacheStats { capacity_bytes, ..Default::default() },
            disk: None,
        }
    }

    /// Adds a disk tier (see the module docs).
    pub fn with_disk(mut self, disk: DiskPrefixCache) -> Self {
        self.disk = Some(disk);
        self
    }

    pub fn stats(&self) -> PrefixCacheStats {
        PrefixCacheStats {
            entries: self.entries.len(),
            bytes: self.entries.iter().map(|e| e.bytes).sum(),
            disk: self.disk.as_ref().map(DiskPrefixCache::stats),
            ..self.stats.clone()
        }
    }

    /// The longest kept prefix of `prompt` that every layer of its cache can
    /// resume from (see [`BatchCache::truncate`]: a sliding window must still
    /// hold the tokens before the prefix's end, a recurrent state must be
    /// exactly at it), leaving at least one prompt token to prefill (its
    /// logits give the first generated token).
    pub fn lookup(&mut self, prompt: &[KeyToken]) -> Option<PrefixHit> {
        let usable = prompt.len().saturating_sub(1);
        let mut best: Option<(usize, usize, BatchCache)> = None;
        for (i, e) in self.entries.iter().enumerate() {
            let common =
                e.tokens.iter().zip(prompt).take_while(|(a, b)| a == b).count().min(usable);
            if common < MIN_REUSE || best.as_ref().is_some_and(|(n, _, _)| *n >= common) {
                continue;
            }
            let mut cache = e.cache.clone();
            if cache.truncate(common) {
                best = Some((common, i, cache));
            }
        }
        let in_memory = best.as_ref().map_or(0, |(n, _, _)| *n);
        if let Some((len, cache, whole)) =
            self.disk.as_mut().and_then(|d| d.lookup(prompt, usable, in_memory))
        {
            // From now on memory serves it.
            self.keep(whole.key, whole.cache);
            self.stats.hits += 1;
            self.stats.reused_tokens += len as u64;
            return Some(PrefixHit { len, cache, from_disk: true });
        }
        let Some((len, index, cache)) = best else {
            self.stats.misses += 1;
            return None;
        };
        self.clock += 1;
        self.entries[index].last_used = self.clock;
        self.stats.hits += 1;
        self.stats.reused_tokens += len as u64;
        Some(PrefixHit { len, cache, from_disk: false })
    }

    /// Keeps row `row` of `batch` (its first `tokens.len()` tokens) as a
    /// detached copy, so the batch can move on.
    pub fn insert(&mut self, tokens: Vec<KeyToken>, batch: &BatchCache, row: usize) -> Result<()> {
        if self.capacity_bytes == 0 || tokens.len() < MIN_REUSE {
            return Ok(());
        }
        // A kept entry that already serves these tokens: refresh it.
        if let Some(e) = self
            .entries
            .iter_mut()
            .find(|e| e.tokens.starts_with(&tokens) && e.cache.can_truncate(tokens.len()))
        {
            self.clock += 1;
            e.last_used = self.clock;
            return Ok(());
        }
        let cache = batch.row_snapshot(row)?;
        debug_assert_eq!(
            cache.offsets()[0] as usize,
            tokens.len(),
            "the key covers the row's tokens"
        );
        if let Some(disk) = &self.disk {
            disk.save(&tokens, &cache);
        }
        self.keep(tokens, cache);
        Ok(())
    }

    /// Keeps a detached one-row cache holding exactly `tokens`.
    fn keep(&mut self, tokens: Vec<KeyToken>, cache: BatchCache) {
        // An entry this one can serve in full adds nothing: replace it.
        self.entries
            .retain(|e| !(tokens.starts_with(&e.tokens) && cache.can_truncate(e.tokens.len())));
        let bytes = cache.nbytes();
        if bytes > self.capacity_bytes {
            return;
        }
        self.clock += 1;
        self.entries.push(Entry { tokens, cache, bytes, last_used: self.clock });
        evict_to(&mut self.entries, self.capacity_bytes);
    }

    /// Drops everything (model unload, memory pressure).
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}
