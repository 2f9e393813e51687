//! Caches. A model's forward pass writes to and reads from a [`BatchCache`]:
//! one type for a single sequence, the decoding batch, a batched prefill pass
//! and the prefix cache's kept rows, holding each layer's own cache kind
//! ([`CacheLayout`]: full, sliding window, recurrent state, shared).
pub mod attention_group;
pub mod batch;
pub mod kv_quantization;
pub mod layout;
pub mod lru;
pub mod mirror;
pub mod prefix;
pub mod prefix_disk;
pub mod recurrent;
pub mod row_contents;
pub mod store;

use mlx_rs::Array;

pub use batch::BatchCache;
pub use kv_quantization::KvQuantization;
pub use layout::{CacheLayout, LayerCache};
pub use prefix::{image_slot_key, text_key, KeyToken, PrefixCache, PrefixCacheStats};

/// The attention mask of one step, for the layers of one attention pattern.
#[derive(Clone)]
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
#[derive(Clone)]
pub enum KvView {
    Float(Array, Array),
    Quantized { keys: [Array; 3], values: [Array; 3], spec: crate::weights::QuantSpec },
}
