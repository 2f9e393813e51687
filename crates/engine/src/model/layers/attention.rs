//! Scaled dot-product attention over a KV cache, shared by all families.
use mlx_rs::{fast, fast::ScaledDotProductAttentionMask, ops, ops::indexing::IndexOp, Array};

use crate::cache::{AttentionMask, BatchCache, KvView};
use crate::error::Result;
use crate::model::layers::rope::{Positions, Rotation};
use crate::model::layers::rows_at;

/// Queries at one position per row, where the caller reads only those
/// ([`crate::cache::BatchCache::read_positions`]): a layer whose other
/// outputs reach no cache and no reader runs its queries (and everything
/// after them) on these alone, `[B, 1, D]`, while it still writes the keys
/// and values of every position. As the reference's prefill, which
/// evaluates only the caches, never computes the rest.
pub struct ReadQueries<'a> {
    /// `[B]` int32: which of the step's positions each row's query is.
    pub at: &'a Array,
    /// Their rotary angles.
    pub rotation: &'a Rotation<'a>,
}

impl ReadQueries<'_> {
    /// `x` `[B, L, …]` at the read positions.
    pub fn rows(&self, x: &Array) -> Result<Array> {
        rows_at(x, self.at)
    }

    /// A layer's `mask` for its step of `query_len` queries over `kv`,
    /// narrowed to the read queries.
    pub fn mask(&self, mask: &AttentionMask, query_len: i32, kv: &KvView) -> Result<AttentionMask> {
        mask.one_query_per_row(self.at, query_len, kv.columns())
    }
}

/// This step's read positions ([`crate::cache::BatchCache::read_positions`])
/// for a model that runs its last layers on them alone.
pub struct ReadPositions {
    /// `[B]` int32: which of the step's positions each row reads.
    pub at: Array,
    /// Their positions, for their rotary angles.
    pub positions: Positions,
}

impl ReadPositions {
    /// `None` when the caller reads every position, for a step of one
    /// token, and in a split model (`whole` false), whose other ranks run
    /// the whole pass.
    pub fn of_step(
        cache: &BatchCache,
        positions: &Positions,
        query_len: i32,
        whole: bool,
    ) -> Result<Option<Self>> {
        let Some(at) = cache.read_positions().filter(|_| query_len > 1 && whole) else {
            return Ok(None);
        };
        let positions = positions.at(&at)?;
        Ok(Some(ReadPositions { at, positions }))
    }
}

pub fn sdpa(q: &Array, k: &Array, v: &Array, scale: f32, mask: &AttentionMask) -> Result<Array> {
    sdpa_with_sinks(q, k, v, scale, mask, None)
}

/// [`sdpa`] with learned attention sinks (gpt-oss): `sinks` `[heads]` is one
/// extra logit per query head that takes part in the softmax but has no
/// value, so a head can attend to nothing.
fn sdpa_with_sinks(
    q: &Array,
    k: &Array,
    v: &Array,
    scale: f32,
    mask: &AttentionMask,
    sinks: Option<&Array>,
) -> Result<Array> {
    let mask = match mask {
        AttentionMask::None => None,
        AttentionMask::Causal => Some(ScaledDotProductAttentionMask::Causal),
        AttentionMask::Array(m) => Some(ScaledDotProductAttentionMask::Array(m)),
    };
    Ok(fast::scaled_dot_product_attention(q, k, v, scale, mask, sinks)?)
}

/// Attention over what the cache handed back. Quantized keys/values are
/// attended with quantized matmuls (scores = q·Kᵀ and out = p·V straight from
/// the packed storage): on MLX's CPU backend that is 1.3–2.8× faster than
/// dequantizing the history first (scripts/bench/quantized_attention.py).
pub fn attend(q: &Array, kv: KvView, scale: f32, mask: &AttentionMask) -> Result<Array> {
    attend_with_sinks(q, kv, scale, mask, None)
}

/// [`attend`] with learned attention sinks `[heads]` (see [`sdpa`]'s twin):
/// over quantized keys the sink is one more column of scores before the
/// softmax, dropped after it (mlx-lm refuses sinks with a quantized cache).
pub fn attend_with_sinks(
    q: &Array,
    kv: KvView,
    scale: f32,
    mask: &AttentionMask,
    sinks: Option<&Array>,
) -> Result<Array> {
    let (keys, values, spec) = match kv {
        KvView::Float(k, v) => return sdpa_with_sinks(q, &k, &v, scale, mask, sinks),
        KvView::Quantized { keys, values, spec } => (keys, values, spec),
    };
    // Grouped-query attention: each KV head serves `repeats` query heads.
    let (b, heads, l, d) = (q.dim(0), q.dim(1), q.dim(2), q.dim(3));
    let kv_heads = keys[0].dim(1);
    let repeats = heads / kv_heads;
    let q = q.multiply(Array::from_f32(scale))?.reshape(&[b, kv_heads, repeats, l, d])?;
    let grouped = |parts: [Array; 3]| -> Result<[Array; 3]> {
        let [w, s, z] = parts;
        Ok([w.expand_dims(2)?, s.expand_dims(2)?, z.expand_dims(2)?])
    };
    let [kw, ks, kb] = grouped(keys)?;
    let [vw, vs, vb] = grouped(values)?;
    let scores = ops::quantized_matmul(&q, &kw, &ks, &kb, true, spec.group_size, spec.bits)?;
    let t = scores.dim(-1);
    let scores = match mask {
        AttentionMask::None => scores,
        AttentionMask::Causal => {
            // Query i (of the last l positions) sees keys up to t - l + i.
            let rows = ops::arange::<_, i32>(t - l, t, None)?.reshape(&[l, 1])?;
            let cols = ops::arange::<_, i32>(None, t, None)?.reshape(&[1, t])?;
            masked(&scores, &rows.ge(&cols)?)?
        }
        AttentionMask::Array(m) => {
            // [B, 1, L, T] (or broadcastable) → one more axis for the repeats.
            let m = if m.ndim() == 4 { m.expand_dims(2)? } else { m.clone() };
            if m.dtype() == mlx_rs::Dtype::Bool {
                masked(&scores, &m)?
            } else {
                scores.add(&m)?
            }
        }
    };
    let p = match sinks {
        None => ops::softmax_axis(&scores, -1, true)?,
        Some(sinks) => {
            // [heads] → [B, kv_heads, repeats, L, 1], one more score per query.
            let sink = sinks.as_dtype(scores.dtype())?.reshape(&[1, kv_heads, repeats, 1, 1])?;
            let sink = ops::broadcast_to(&sink, &[b, kv_heads, repeats, l, 1])?;
            let p = ops::softmax_axis(&ops::concatenate(&[sink, scores], -1)?, -1, true)?;
            p.index((.., .., .., .., 1..))
        }
    };
    let out = ops::quantized_matmul(&p, &vw, &vs, &vb, false, spec.group_size, spec.bits)?;
    Ok(out.reshape(&[b, heads, l, d])?)
}

/// Hidden positions get the lowest float, so softmax gives them no weight.
fn masked(scores: &Array, visible: &Array) -> Result<Array> {
    let lowest = Array::from_f32(f32::MIN).as_dtype(scores.dtype())?;
    Ok(ops::select(visible, scores, &lowest)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::weights::QuantSpec;

    fn max_abs_diff(a: &Array, b: &Array) -> f32 {
        a.subtract(b).unwrap().abs().unwrap().max(None).unwrap().item_cast::<f32>()
    }

    /// Quantized-matmul attention equals dequantize-then-sdpa over the same
    /// stored keys/values, for every kind of mask.
    #[test]
    fn quantized_attention_equals_attention_over_the_dequantized_cache() {
        let (b, heads, kv_heads, t, d) = (2, 6, 2, 40, 64);
        let normal = |shape: &[i32], seed: u64| {
            mlx_rs::random::normal::<f32>(shape, None, None, &mlx_rs::random::key(seed).unwrap())
                .unwrap()
        };
        let k = normal(&[b, kv_heads, t, d], 1);
        let v = normal(&[b, kv_heads, t, d], 2);
        for bits in [8, 4] {
            let spec = QuantSpec { group_size: 64, bits };
            let (kw, ks, kb) = ops::quantize(&k, spec.group_size, bits).unwrap();
            let (vw, vs, vb) = ops::quantize(&v, spec.group_size, bits).unwrap();
            let kd = ops::dequantize(&kw, &ks, &kb, spec.group_size, bits).unwrap();
            let vd = ops::dequantize(&vw, &vs, &vb, spec.group_size, bits).unwrap();
            // Row 1 is left-padded by 5 columns.
            let cols =
                ops::arange::<_, i32>(None, t, None).unwrap().reshape(&[1, 1, 1, t]).unwrap();
            let pads = Array::from_slice(&[0, 5], &[2, 1, 1, 1]);
            for (l, mask) in [
                (1, AttentionMask::None),
                (3, AttentionMask::Causal),
                (1, AttentionMask::Array(cols.ge(&pads).unwrap())),
            ] {
                let q = normal(&[b, heads, l, d], 3);
                let want = sdpa(&q, &kd, &vd, 0.125, &mask).unwrap();
                let view = KvView::Quantized {
                    keys: [kw.clone(), ks.clone(), kb.clone()],
                    values: [vw.clone(), vs.clone(), vb.clone()],
                    spec,
                };
                let got = attend(&q, view, 0.125, &mask).unwrap();
                assert_eq!(got.shape(), want.shape());
                let diff = max_abs_diff(&got, &want);
                assert!(diff < 1e-4, "{bits}-bit, L={l}: max |diff| {diff}");
            }
        }
    }

    /// Sinks over quantized keys (one more softmax column, dropped) equal
    /// MLX's fused attention with sinks over the dequantized cache; and
    /// sinks change the output (a large sink takes most of the weight).
    #[test]
    fn attention_sinks_agree_over_quantized_and_float_caches() {
        let (b, heads, kv_heads, t, d) = (2, 4, 2, 12, 32);
        let normal = |shape: &[i32], seed: u64| {
            mlx_rs::random::normal::<f32>(shape, None, None, &mlx_rs::random::key(seed).unwrap())
                .unwrap()
        };
        let k = normal(&[b, kv_heads, t, d], 1);
        let v = normal(&[b, kv_heads, t, d], 2);
        let sinks = Array::from_slice(&[0.5f32, -1.0, 3.0, 0.0], &[heads]);
        let spec = QuantSpec { group_size: 32, bits: 8 };
        let (kw, ks, kb) = ops::quantize(&k, spec.group_size, spec.bits).unwrap();
        let (vw, vs, vb) = ops::quantize(&v, spec.group_size, spec.bits).unwrap();
        let kd = ops::dequantize(&kw, &ks, &kb, spec.group_size, spec.bits).unwrap();
        let vd = ops::dequantize(&vw, &vs, &vb, spec.group_size, spec.bits).unwrap();
        for (l, mask) in [(1, AttentionMask::None), (3, AttentionMask::Causal)] {
            let q = normal(&[b, heads, l, d], 3);
            let want = sdpa_with_sinks(&q, &kd, &vd, 0.2, &mask, Some(&sinks)).unwrap();
            let view = KvView::Quantized {
                keys: [kw.clone(), ks.clone(), kb.clone()],
                values: [vw.clone(), vs.clone(), vb.clone()],
                spec,
            };
            let got = attend_with_sinks(&q, view, 0.2, &mask, Some(&sinks)).unwrap();
            let diff = max_abs_diff(&got, &want);
            assert!(diff < 1e-4, "L={l}: max |diff| {diff}");
            let without = sdpa(&q, &kd, &vd, 0.2, &mask).unwrap();
            assert!(max_abs_diff(&without, &want) > 1e-2, "the sinks change nothing");
        }
    }
}
