//! Scaled dot-product attention over a KV cache, shared by all families.
use mlx_rs::{fast, fast::ScaledDotProductAttentionMask, Array};

use crate::cache::{AttentionMask, KvCache, RopeOffset};
use crate::error::Result;

/// Positions and mask of one forward step, computed once for all layers.
pub struct Step {
    pub offset: RopeOffset,
    pub mask: AttentionMask,
}

impl Step {
    pub fn begin(cache: &mut dyn KvCache, query_len: i32) -> Result<Self> {
        let (offset, mask) = cache.step(query_len)?;
        Ok(Step { offset, mask })
    }
}

pub fn sdpa(q: &Array, k: &Array, v: &Array, scale: f32, mask: &AttentionMask) -> Result<Array> {
    let mask = match mask {
        AttentionMask::None => None,
        AttentionMask::Causal => Some(ScaledDotProductAttentionMask::Causal),
        AttentionMask::Array(m) => Some(ScaledDotProductAttentionMask::Array(m)),
    };
    Ok(fast::scaled_dot_product_attention(q, k, v, scale, mask, None)?)
}
