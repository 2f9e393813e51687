//! Caches. A model's forward pass writes to and reads from a [`BatchCache`]:
//! one type for a single sequence, the decoding batch, a batched prefill pass
//! and the prefix cache's kept rows, holding each layer's own cache kind
//! ([`CacheLayout`]: full, sliding window, recurrent state, shared).
pub mod attention_group;
pub(crate) mod batch;
pub(crate) mod kv_quantization;
pub(crate) mod layer_queue;
pub(crate) mod layout;
pub(crate) mod lru;
pub mod mirror;
pub(crate) mod prefix;
pub mod prefix_disk;
pub(crate) mod recurrent;
pub mod row_contents;
pub(crate) mod store;

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

impl AttentionMask {
    /// The mask of one query per row where this mask was made for a step of
    /// `query_len` queries: row `b` keeps the row of its query `at[b]`
    /// (`[B]` int32), over the same `keys` columns. For a layer that runs
    /// only the positions a caller reads ([`BatchCache::set_read_positions`]).
    pub fn one_query_per_row(
        &self,
        at: &Array,
        query_len: i32,
        keys: i32,
    ) -> crate::error::Result<AttentionMask> {
        use mlx_rs::ops;
        let rows = at.dim(0);
        let at = at.reshape(&[rows, 1, 1, 1])?;
        Ok(match self {
            AttentionMask::None => AttentionMask::None,
            AttentionMask::Causal => {
                // query i of the step's last `query_len` columns sees keys up to keys - query_len + i
                let cols = ops::arange::<_, i32>(None, keys, None)?.reshape(&[1, 1, 1, keys])?;
                let last = at.add(Array::from_int(keys - query_len))?;
                AttentionMask::Array(cols.le(&last)?)
            }
            AttentionMask::Array(mask) => {
                let mut shape = vec![1; 4usize.saturating_sub(mask.ndim())];
                shape.extend_from_slice(mask.shape());
                let mask = mask.reshape(&shape)?;
                let (heads, columns) = (mask.dim(1), mask.dim(3));
                let mask = ops::broadcast_to(&mask, &[rows, heads, query_len, columns])?;
                let at = ops::broadcast_to(&at, &[rows, heads, 1, columns])?;
                AttentionMask::Array(mask.take_along_axis(&at, 2)?)
            }
        })
    }
}

/// The keys and values a step attends to: float, or still MLX-quantized
/// (packed, scales, biases) so attention can use quantized matmuls instead
/// of dequantizing the whole history every step.
#[derive(Clone)]
pub enum KvView {
    Float(Array, Array),
    Quantized { keys: [Array; 3], values: [Array; 3], spec: crate::weights::QuantSpec },
}

impl KvView {
    /// How many key columns the view holds.
    pub fn columns(&self) -> i32 {
        match self {
            KvView::Float(keys, _) => keys.dim(2),
            KvView::Quantized { keys, .. } => keys[0].dim(2),
        }
    }
}
