//! The prompt (prefix) cache: the KV state of finished sequences, kept so a
//! new request whose tokens start the same way prefills only the rest. The
//! second turn of a chat starts with the whole first turn (system prompt,
//! question, answer), so it prefills only the new message; a system prompt
//! shared by several chats is reused by all of them.
//!
//! Entries are bounded by bytes and evicted least-recently-used first.
//!
//! Keys are [`KeyToken`]s, not token ids: every image-feature slot of a
//! vision prompt has the same placeholder token id, so its key is derived from
//! the image's content hash instead, and a different image at the same
//! place never reuses a prefix.
use mlx_rs::{ops::indexing::IndexOp, Array};
use serde::Serialize;

use super::lru::{evict_to, LruEntry};
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

/// One kept sequence: the key of the tokens its KV state covers, and per
/// layer the keys and values `[1, kv_heads, tokens.len(), head_dim]`.
struct Entry {
    tokens: Vec<KeyToken>,
    layers: Vec<(Array, Array)>,
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
}

/// A reusable prefix: its length and the per-layer KV slices covering it.
pub struct PrefixHit {
    pub len: usize,
    pub layers: Vec<(Array, Array)>,
}

pub struct PrefixCache {
    entries: Vec<Entry>,
    capacity_bytes: usize,
    clock: u64,
    stats: PrefixCacheStats,
}

/// Shortest prefix worth reusing: below this, prefilling is as cheap as copying.
const MIN_REUSE: usize = 4;

impl PrefixCache {
    pub fn new(capacity_bytes: usize) -> Self {
        Self {
            entries: Vec::new(),
            capacity_bytes,
            clock: 0,
            stats: PrefixCacheStats { capacity_bytes, ..Default::default() },
        }
    }

    pub fn stats(&self) -> PrefixCacheStats {
        PrefixCacheStats {
            entries: self.entries.len(),
            bytes: self.entries.iter().map(|e| e.bytes).sum(),
            ..self.stats.clone()
        }
    }

    /// The longest kept prefix of `prompt`, leaving at least one prompt token
    /// to prefill (its logits give the first generated token).
    pub fn lookup(&mut self, prompt: &[KeyToken]) -> Option<PrefixHit> {
        let usable = prompt.len().saturating_sub(1);
        let best = self
            .entries
            .iter_mut()
            .map(|e| {
                let common = e.tokens.iter().zip(prompt).take_while(|(a, b)| a == b).count();
                (common.min(usable), e)
            })
            .max_by_key(|(n, _)| *n);
        let Some((len, entry)) = best.filter(|(n, _)| *n >= MIN_REUSE) else {
            self.stats.misses += 1;
            return None;
        };
        self.clock += 1;
        entry.last_used = self.clock;
        self.stats.hits += 1;
        self.stats.reused_tokens += len as u64;
        let end = len as i32;
        let layers = entry
            .layers
            .iter()
            .map(|(k, v)| (k.index((.., .., ..end, ..)), v.index((.., .., ..end, ..))))
            .collect();
        Some(PrefixHit { len, layers })
    }

    /// Keeps a finished sequence's KV state. `layers` may be views into a
    /// batch's buffers: they are copied out (evaluated) so the batch can move on.
    pub fn insert(&mut self, tokens: Vec<KeyToken>, layers: Vec<(Array, Array)>) -> Result<()> {
        if self.capacity_bytes == 0 || tokens.len() < MIN_REUSE {
            return Ok(());
        }
        // An entry that is a prefix of the new one adds nothing: replace it.
        self.entries.retain(|e| !(e.tokens.len() <= tokens.len() && tokens.starts_with(&e.tokens)));
        // And if a kept entry already covers these tokens, just refresh it.
        if let Some(e) = self.entries.iter_mut().find(|e| e.tokens.starts_with(&tokens)) {
            self.clock += 1;
            e.last_used = self.clock;
            return Ok(());
        }
        let mut copied = Vec::with_capacity(layers.len());
        for (k, v) in layers {
            // `+ 0` would still alias; a contiguous copy detaches from the batch buffer.
            let k = k.contiguous()?;
            let v = v.contiguous()?;
            copied.push((k, v));
        }
        let refs: Vec<&Array> = copied.iter().flat_map(|(k, v)| [k, v]).collect();
        mlx_rs::transforms::eval(refs)?;
        let bytes = copied.iter().map(|(k, v)| k.nbytes() + v.nbytes()).sum();
        if bytes > self.capacity_bytes {
            return Ok(());
        }
        self.clock += 1;
        self.entries.push(Entry { tokens, layers: copied, bytes, last_used: self.clock });
        evict_to(&mut self.entries, self.capacity_bytes);
        Ok(())
    }

    /// Drops everything (model unload, memory pressure).
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}
