//! Position overrides for one forward step, for vision-language sequences.
//!
//! Decode: per-row RoPE shifts. A vision-language sequence's
//! positions run ahead of (or behind) its cache length by its M-RoPE delta
//! (an image of h×w patches takes h·w tokens but only max(h, w)/2 positions),
//! so during decode each row's position is its cache length plus its own delta.
//! The delta belongs to the sequence, so this wrapper adds it for one step
//! without the batch cache or the model knowing.
//!
//! Prefill: a prompt with images has explicit M-RoPE positions `[3, L]`
//! (image patches sit on a 2-D grid), given for each chunk.
use mlx_rs::Array;

use super::{AttentionMask, KvCache, KvView, RopeOffset};
use crate::error::Result;

pub struct RopeShifted<'a> {
    inner: &'a mut dyn KvCache,
    positions: Override,
}

enum Override {
    /// `[B]` int32, one delta per row, added to the cache's offsets.
    Deltas(Array),
    /// `[3, B, L]` int32, used as they are.
    Explicit(Array),
}

impl<'a> RopeShifted<'a> {
    /// Each row's positions run `deltas[row]` ahead of its cache length.
    pub fn by_deltas(inner: &'a mut dyn KvCache, deltas: &[i32]) -> Self {
        Self { inner, positions: Override::Deltas(Array::from_slice(deltas, &[deltas.len() as i32])) }
    }

    /// This step's M-RoPE positions `[3, B, L]`.
    pub fn explicit(inner: &'a mut dyn KvCache, positions: Array) -> Self {
        Self { inner, positions: Override::Explicit(positions) }
    }
}

impl KvCache for RopeShifted<'_> {
    fn step(&mut self, query_len: i32) -> Result<(RopeOffset, AttentionMask)> {
        let (offset, mask) = self.inner.step(query_len)?;
        let shifted = match (&self.positions, offset) {
            (Override::Explicit(p), _) => RopeOffset::Explicit(p.clone()),
            (Override::Deltas(d), RopeOffset::Shared(o)) => RopeOffset::PerRow(d.add(Array::from_int(o))?),
            (Override::Deltas(d), RopeOffset::PerRow(o)) => RopeOffset::PerRow(o.add(d)?),
            (Override::Deltas(_), explicit @ RopeOffset::Explicit(_)) => explicit,
        };
        Ok((shifted, mask))
    }

    fn update(&mut self, layer: usize, keys: Array, values: Array) -> Result<(Array, Array)> {
        self.inner.update(layer, keys, values)
    }

    fn update_view(&mut self, layer: usize, keys: Array, values: Array) -> Result<KvView> {
        self.inner.update_view(layer, keys, values)
    }

    fn finish_step(&mut self, query_len: i32) {
        self.inner.finish_step(query_len)
    }

    fn len(&self) -> usize {
        self.inner.len()
    }

    fn nbytes(&self) -> usize {
        self.inner.nbytes()
    }
}
