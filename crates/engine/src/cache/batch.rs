//! The KV cache of a decoding batch. Rows are left-padded: every row's newest
//! token sits in the same column, so one decode step appends one column for
//! all rows. Each row has its own offset (its RoPE position) and padding;
//! rows join with [`BatchKvCache::extend`] and leave with
//! [`BatchKvCache::filter`].
use mlx_rs::{
    ops::{self, indexing::{IndexOp, TryIndexMutOp}},
    Array,
};

use super::{AttentionMask, KvCache, RopeOffset};
use crate::error::Result;

/// Buffers grow by this many columns at a time.
const STEP: i32 = 256;

#[derive(Clone)]
struct Layer {
    /// `[B, kv_heads, capacity, head_dim]`; columns `..idx` are in use.
    keys: Array,
    values: Array,
}

#[derive(Default)]
pub struct BatchKvCache {
    layers: Vec<Option<Layer>>,
    /// Padding columns at the left of each row.
    left_padding: Vec<i32>,
    /// Columns in use (the same for every row and layer).
    idx: i32,
}

impl BatchKvCache {
    pub fn new(num_layers: usize) -> Self {
        Self { layers: vec![None; num_layers], left_padding: Vec::new(), idx: 0 }
    }

    /// A one-row batch cache from a prefilled single-sequence cache's layers
    /// (each `[1, kv_heads, len, head_dim]`).
    pub fn from_prefilled(layers: Vec<(Array, Array)>, len: i32) -> Self {
        let layers = layers.into_iter().map(|(keys, values)| Some(Layer { keys, values })).collect();
        Self { layers, left_padding: vec![0], idx: len }
    }

    pub fn rows(&self) -> usize {
        self.left_padding.len()
    }

    /// Tokens held by each row (its next RoPE position).
    pub fn row_lengths(&self) -> Vec<i32> {
        self.left_padding.iter().map(|p| self.idx - p).collect()
    }

    /// Row `row`'s keys and values without padding, `[1, kv_heads, len, head_dim]` per layer.
    pub fn row_layers(&self, row: usize) -> Vec<(Array, Array)> {
        let (r, pad, idx) = (row as i32, self.left_padding[row], self.idx);
        self.layers
            .iter()
            .flatten()
            .map(|l| {
                (
                    l.keys.index((r..r + 1, .., pad..idx, ..)),
                    l.values.index((r..r + 1, .., pad..idx, ..)),
                )
            })
            .collect()
    }

    /// Keeps only the rows at `keep` (in that order), then drops padding
    /// columns that no remaining row needs.
    pub fn filter(&mut self, keep: &[usize]) -> Result<()> {
        if keep.is_empty() {
            *self = Self::new(self.layers.len());
            return Ok(());
        }
        if keep.len() == self.rows() && keep.iter().enumerate().all(|(i, &k)| i == k) {
            return Ok(());
        }
        let rows: Vec<i32> = keep.iter().map(|&k| k as i32).collect();
        let rows = Array::from_slice(&rows, &[rows.len() as i32]);
        self.left_padding = keep.iter().map(|&k| self.left_padding[k]).collect();
        let trim = *self.left_padding.iter().min().expect("keep is not empty");
        let idx = self.idx;
        for layer in self.layers.iter_mut().flatten() {
            layer.keys = layer.keys.take_axis(&rows, 0)?.index((.., .., trim..idx, ..));
            layer.values = layer.values.take_axis(&rows, 0)?.index((.., .., trim..idx, ..));
        }
        self.idx -= trim;
        for p in &mut self.left_padding {
            *p -= trim;
        }
        Ok(())
    }

    /// Appends `other`'s rows after this batch's rows, left-padding whichever
    /// side is shorter so the newest columns line up.
    pub fn extend(&mut self, mut other: BatchKvCache) -> Result<()> {
        if self.rows() == 0 {
            *self = other;
            return Ok(());
        }
        let width = self.idx.max(other.idx);
        self.pad_left_to(width)?;
        other.pad_left_to(width)?;
        for (mine, theirs) in self.layers.iter_mut().zip(other.layers) {
            match (mine.as_mut(), theirs) {
                (Some(a), Some(b)) => {
                    a.keys = ops::concatenate(&[a.keys.index((.., .., ..width, ..)), b.keys], 0)?;
                    a.values = ops::concatenate(&[a.values.index((.., .., ..width, ..)), b.values], 0)?;
                }
                _ => unreachable!("both caches have run every layer"),
            }
        }
        self.left_padding.extend(other.left_padding);
        Ok(())
    }

    /// Prepends zero columns so that `idx == width`; buffers end exactly at `idx`.
    fn pad_left_to(&mut self, width: i32) -> Result<()> {
        let extra = width - self.idx;
        let idx = self.idx;
        for layer in self.layers.iter_mut().flatten() {
            let used_k = layer.keys.index((.., .., ..idx, ..));
            let used_v = layer.values.index((.., .., ..idx, ..));
            if extra == 0 {
                layer.keys = used_k;
                layer.values = used_v;
                continue;
            }
            let s = used_k.shape().to_vec();
            let pad = ops::zeros_dtype(&[s[0], s[1], extra, s[3]], used_k.dtype())?;
            layer.keys = ops::concatenate(&[&pad, &used_k], 2)?;
            layer.values = ops::concatenate(&[&pad, &used_v], 2)?;
        }
        self.idx = width;
        for p in &mut self.left_padding {
            *p += extra;
        }
        Ok(())
    }

    fn grow(layer: &mut Layer, needed: i32) -> Result<()> {
        let cap = layer.keys.dim(2);
        if needed <= cap {
            return Ok(());
        }
        let extra = (needed - cap + STEP - 1) / STEP * STEP;
        let s = layer.keys.shape().to_vec();
        let zeros = ops::zeros_dtype(&[s[0], s[1], extra, s[3]], layer.keys.dtype())?;
        layer.keys = ops::concatenate(&[&layer.keys, &zeros], 2)?;
        layer.values = ops::concatenate(&[&layer.values, &zeros], 2)?;
        Ok(())
    }

    fn mask(&self, query_len: i32) -> Result<AttentionMask> {
        let padded = self.left_padding.iter().any(|&p| p > 0);
        if !padded {
            return Ok(if query_len > 1 { AttentionMask::Causal } else { AttentionMask::None });
        }
        // Key column j is visible to query i of row b when it is not padding
        // (j >= left_padding[b]) and not in the future (j <= idx + i).
        let total = self.idx + query_len;
        let cols = ops::arange::<_, i32>(None, total, None)?.reshape(&[1, 1, 1, total])?;
        let pads = Array::from_slice(&self.left_padding, &[self.rows() as i32, 1, 1, 1]);
        let rows = ops::arange::<_, i32>(self.idx, total, None)?.reshape(&[1, 1, query_len, 1])?;
        let visible = ops::logical_and(cols.ge(&pads)?, cols.le(&rows)?)?;
        Ok(AttentionMask::Array(visible))
    }
}

impl KvCache for BatchKvCache {
    fn step(&mut self, query_len: i32) -> Result<(RopeOffset, AttentionMask)> {
        let offsets: Vec<i32> = self.row_lengths();
        let offset = RopeOffset::PerRow(Array::from_slice(&offsets, &[offsets.len() as i32]));
        Ok((offset, self.mask(query_len)?))
    }

    fn update(&mut self, layer: usize, keys: Array, values: Array) -> Result<(Array, Array)> {
        let len = keys.dim(2);
        let end = self.idx + len;
        let slot = &mut self.layers[layer];
        let buffers = match slot {
            Some(b) => {
                Self::grow(b, end)?;
                b
            }
            None => {
                let s = keys.shape().to_vec();
                let cap = (end + STEP - 1) / STEP * STEP;
                slot.insert(Layer {
                    keys: ops::zeros_dtype(&[s[0], s[1], cap, s[3]], keys.dtype())?,
                    values: ops::zeros_dtype(&[s[0], s[1], cap, s[3]], values.dtype())?,
                })
            }
        };
        let cols = self.idx..end;
        buffers.keys.try_index_mut((.., .., cols.clone(), ..), &keys)?;
        buffers.values.try_index_mut((.., .., cols, ..), &values)?;
        Ok((buffers.keys.index((.., .., ..end, ..)), buffers.values.index((.., .., ..end, ..))))
    }

    fn finish_step(&mut self, query_len: i32) {
        self.idx += query_len;
    }

    fn len(&self) -> usize {
        self.idx as usize
    }

    fn nbytes(&self) -> usize {
        self.layers.iter().flatten().map(|l| l.keys.nbytes() + l.values.nbytes()).sum()
    }
}
