//! The KV cache of one sequence (or of rows that all have the same length).
//!
//! Buffers grow in steps of [`STEP`] tokens and new keys are written with a
//! slice update, as mlx-lm does: concatenating on every token would copy the
//! whole history each step.
use mlx_rs::{
    ops::{self, indexing::{IndexOp, TryIndexMutOp}},
    Array,
};

use super::{AttentionMask, KvCache, RopeOffset};
use crate::error::Result;

const STEP: i32 = 256;

struct LayerBuffers {
    keys: Array,
    values: Array,
}

pub struct SimpleKvCache {
    layers: Vec<Option<LayerBuffers>>,
    /// Tokens written so far (the same for every layer).
    offset: i32,
}

impl SimpleKvCache {
    pub fn new(num_layers: usize) -> Self {
        Self { layers: (0..num_layers).map(|_| None).collect(), offset: 0 }
    }

    /// A cache that starts with `len` tokens of existing keys/values (a
    /// reused prefix), one `[B, kv_heads, len, head_dim]` pair per layer.
    pub fn from_layers(layers: Vec<(Array, Array)>, len: i32) -> Self {
        let layers = layers.into_iter().map(|(keys, values)| Some(LayerBuffers { keys, values })).collect();
        Self { layers, offset: len }
    }

    pub fn offset(&self) -> i32 {
        self.offset
    }

    /// The used part of every layer's keys and values, `[B, kv_heads, offset, head_dim]`.
    pub fn into_layers(self) -> Vec<(Array, Array)> {
        let end = self.offset;
        self.layers
            .into_iter()
            .map(|l| {
                let l = l.expect("every layer ran");
                (l.keys.index((.., .., ..end, ..)), l.values.index((.., .., ..end, ..)))
            })
            .collect()
    }

    fn grow(&mut self, layer: usize, keys: &Array, values: &Array, needed: i32) -> Result<()> {
        let new_cap = (needed + STEP - 1) / STEP * STEP;
        let shape_of = |a: &Array, cap: i32| {
            let s = a.shape();
            [s[0], s[1], cap, s[3]]
        };
        let slot = &mut self.layers[layer];
        let grown = match slot.take() {
            None => LayerBuffers {
                keys: ops::zeros_dtype(&shape_of(keys, new_cap), keys.dtype())?,
                values: ops::zeros_dtype(&shape_of(values, new_cap), values.dtype())?,
            },
            Some(old) => {
                let extra = new_cap - old.keys.dim(2);
                let extra_k = ops::zeros_dtype(&shape_of(keys, extra), keys.dtype())?;
                let extra_v = ops::zeros_dtype(&shape_of(values, extra), values.dtype())?;
                LayerBuffers {
                    keys: ops::concatenate(&[old.keys.index((.., .., ..self.offset, ..)), extra_k], 2)?,
                    values: ops::concatenate(&[old.values.index((.., .., ..self.offset, ..)), extra_v], 2)?,
                }
            }
        };
        *slot = Some(grown);
        Ok(())
    }
}

impl KvCache for SimpleKvCache {
    fn step(&mut self, query_len: i32) -> Result<(RopeOffset, AttentionMask)> {
        let mask = if query_len > 1 { AttentionMask::Causal } else { AttentionMask::None };
        Ok((RopeOffset::Shared(self.offset), mask))
    }

    fn update(&mut self, layer: usize, keys: Array, values: Array) -> Result<(Array, Array)> {
        let len = keys.dim(2);
        let end = self.offset + len;
        let needs_growth = match &self.layers[layer] {
            None => true,
            Some(b) => end > b.keys.dim(2),
        };
        if needs_growth {
            self.grow(layer, &keys, &values, end)?;
        }
        let buffers = self.layers[layer].as_mut().expect("grown above");
        let range = self.offset..end;
        buffers.keys.try_index_mut((.., .., range.clone(), ..), &keys)?;
        buffers.values.try_index_mut((.., .., range, ..), &values)?;
        Ok((
            buffers.keys.index((.., .., ..end, ..)),
            buffers.values.index((.., .., ..end, ..)),
        ))
    }

    fn finish_step(&mut self, query_len: i32) {
        self.offset += query_len;
    }

    fn len(&self) -> usize {
        self.offset as usize
    }

    fn nbytes(&self) -> usize {
        self.layers.iter().flatten().map(|b| b.keys.nbytes() + b.values.nbytes()).sum()
    }
}
