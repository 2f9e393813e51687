//! KV caches. A model's forward pass sees only the [`KvCache`] trait, so the
//! same model code runs on a single sequence's cache and on a batch cache whose
//! rows have their own offsets and padding.
pub mod batch;
pub mod lru;
pub mod prefill;
pub mod prefix;
pub mod rope_shift;
pub mod simple;
pub mod store;

use mlx_rs::Array;

use crate::error::Result;

pub use batch::{BatchKvCache, KvQuantization};
pub use prefill::PrefillBatchCache;
pub use prefix::{image_slot_key, text_key, KeyToken, PrefixCache, PrefixCacheStats};
pub use simple::SimpleKvCache;

/// The RoPE position of the first query token of this step.
pub enum RopeOffset {
    /// Every row starts at the same position.
    Shared(i32),
    /// One position per row, shape `[B]` (rows of a batch differ).
    PerRow(Array),
    /// Explicit M-RoPE positions `[3, B, L]` (temporal, height, width) for a
    /// step whose tokens include image features; only vision-language models
    /// accept it.
    Explicit(Array),
}

/// The attention mask for this step.
pub enum AttentionMask {
    /// Single query token and nothing to hide.
    None,
    /// Causal, aligned so the last query sees every key.
    Causal,
    /// Additive or boolean mask broadcastable to `[B, heads, L, T]`.
    Array(Array),
}

/// The keys and values a step attends to: float, or still MLX-quantized
/// (packed, scales, biases) so attention can use quantized matmuls instead
/// of dequantizing the whole history every step.
pub enum KvView {
    Float(Array, Array),
    Quantized { keys: [Array; 3], values: [Array; 3], spec: crate::weights::QuantSpec },
}

/// What attention needs from a cache during one forward step of `L` tokens.
/// The model calls [`KvCache::step`] once, then [`KvCache::update`] for each
/// layer, then [`KvCache::finish_step`].
pub trait KvCache {
    /// Positions and mask for a step of `query_len` new tokens.
    fn step(&mut self, query_len: i32) -> Result<(RopeOffset, AttentionMask)>;
    /// Appends this step's keys/values `[B, kv_heads, L, head_dim]` for `layer`
    /// and returns all keys/values that the queries attend to.
    fn update(&mut self, layer: usize, keys: Array, values: Array) -> Result<(Array, Array)>;
    /// [`KvCache::update`] for attention: a cache that stores `layer`
    /// quantized may hand it back quantized.
    fn update_view(&mut self, layer: usize, keys: Array, values: Array) -> Result<KvView> {
        let (k, v) = self.update(layer, keys, values)?;
        Ok(KvView::Float(k, v))
    }
    /// Commits the step: offsets advance by `query_len`.
    fn finish_step(&mut self, query_len: i32);
    /// Tokens held per row (the longest row for a batch).
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Bytes held by the cache's buffers.
    fn nbytes(&self) -> usize;
}
