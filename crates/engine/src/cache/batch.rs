//! The KV cache of a decoding batch. Rows are left-padded: every row's newest
//! token sits in the same column, so one decode step appends one column for
//! all rows. Each row has its own offset (its RoPE position) and padding;
//! rows join with [`BatchKvCache::extend`] and leave with
//! [`BatchKvCache::filter`].
//!
//! With [`KvQuantization`], layers other than the last store keys and values
//! MLX-quantized once the batch holds `start` columns, and attention reads
//! them dequantized.
use mlx_rs::{ops, Array};
use serde::Serialize;

use super::store::KvStore;
use super::{AttentionMask, KvCache, KvView, RopeOffset};
use crate::error::Result;
use crate::weights::QuantSpec;

/// Buffers grow by this many columns at a time.
const STEP: i32 = 256;

/// KV-cache quantization settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct KvQuantization {
    /// 4 or 8.
    pub bits: i32,
    /// 32, 64 or 128; must divide the model's head dimension.
    pub group_size: i32,
    /// Quantize only once the batch holds this many columns: short contexts
    /// lost quality upstream and gain little memory.
    pub start: usize,
}

impl KvQuantization {
    fn spec(&self) -> QuantSpec {
        QuantSpec { group_size: self.group_size, bits: self.bits }
    }

    /// Why this setting cannot apply to a model with `head_dim`, if it cannot.
    pub fn unsupported_reason(&self, head_dim: i32) -> Option<String> {
        if ![4, 8].contains(&self.bits) {
            return Some(format!("KV quantization supports 4 or 8 bits, not {}", self.bits));
        }
        if ![32, 64, 128].contains(&self.group_size) || head_dim % self.group_size != 0 {
            return Some(format!(
                "KV quantization needs a group size that divides the head dimension {head_dim}; {} does not",
                self.group_size
            ));
        }
        None
    }
}

#[derive(Clone)]
struct Layer {
    /// `[B, kv_heads, capacity, head_dim]`; columns `..idx` are in use.
    keys: KvStore,
    values: KvStore,
}

#[derive(Default)]
pub struct BatchKvCache {
    layers: Vec<Option<Layer>>,
    /// Padding columns at the left of each row.
    left_padding: Vec<i32>,
    /// Columns in use (the same for every row and layer).
    idx: i32,
    quantization: Option<KvQuantization>,
}

impl BatchKvCache {
    pub fn new(num_layers: usize) -> Self {
        Self { layers: vec![None; num_layers], left_padding: Vec::new(), idx: 0, quantization: None }
    }

    /// A cache that quantizes every layer but the last (the last layer is the
    /// most sensitive to quantization, as upstream found).
    pub fn with_quantization(num_layers: usize, quantization: Option<KvQuantization>) -> Self {
        Self { quantization, ..Self::new(num_layers) }
    }

    /// A one-row batch cache from a prefilled single-sequence cache's layers
    /// (each `[1, kv_heads, len, head_dim]`).
    pub fn from_prefilled(layers: Vec<(Array, Array)>, len: i32) -> Self {
        let layers = layers
            .into_iter()
            .map(|(k, v)| Some(Layer { keys: KvStore::float(k), values: KvStore::float(v) }))
            .collect();
        Self { layers, left_padding: vec![0], idx: len, quantization: None }
    }

    pub fn rows(&self) -> usize {
        self.left_padding.len()
    }

    /// Tokens held by each row (its next RoPE position).
    pub fn row_lengths(&self) -> Vec<i32> {
        self.left_padding.iter().map(|p| self.idx - p).collect()
    }

    /// Bytes row `row`'s own tokens take: its columns in every layer, without
    /// the left padding other rows impose or spare capacity.
    pub fn row_nbytes(&self, row: usize) -> usize {
        let len = (self.idx - self.left_padding[row]) as usize;
        let per_column: usize =
            self.layers.iter().flatten().map(|l| l.keys.bytes_per_row_column() + l.values.bytes_per_row_column()).sum();
        per_column * len
    }

    /// Layers currently stored quantized.
    pub fn quantized_layers(&self) -> usize {
        self.layers.iter().flatten().filter(|l| l.keys.quant().is_some()).count()
    }

    /// The storage `layer` should use at the current length.
    fn target_quant(&self, layer: usize) -> Option<QuantSpec> {
        let q = self.quantization?;
        let last = layer + 1 == self.layers.len();
        (!last && self.idx as usize >= q.start).then(|| q.spec())
    }

    /// Row `row`'s keys and values (float) without padding, `[1, kv_heads, len, head_dim]` per layer.
    pub fn row_layers(&self, row: usize) -> Result<Vec<(Array, Array)>> {
        let (r, pad, idx) = (row as i32, self.left_padding[row], self.idx);
        self.layers
            .iter()
            .flatten()
            .map(|l| {
                let k = l.keys.row(r).columns_range(pad, idx).read(idx - pad)?;
                let v = l.values.row(r).columns_range(pad, idx).read(idx - pad)?;
                Ok((k, v))
            })
            .collect()
    }

    /// Keeps only the rows at `keep` (in that order), then drops padding
    /// columns that no remaining row needs.
    pub fn filter(&mut self, keep: &[usize]) -> Result<()> {
        if keep.is_empty() {
            *self = Self::with_quantization(self.layers.len(), self.quantization);
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
            layer.keys = layer.keys.take_rows(&rows)?.columns_range(trim, idx);
            layer.values = layer.values.take_rows(&rows)?.columns_range(trim, idx);
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
            other.quantization = self.quantization;
            *self = other;
            return self.apply_quantization();
        }
        let width = self.idx.max(other.idx);
        self.pad_left_to(width)?;
        other.pad_left_to(width)?;
        for (mine, theirs) in self.layers.iter_mut().zip(other.layers) {
            let (Some(a), Some(b)) = (mine.as_mut(), theirs) else {
                unreachable!("both caches have run every layer")
            };
            let quant = a.keys.quant();
            a.keys = a.keys.columns_range(0, width).concat_rows(&b.keys.quantized(quant)?)?;
            a.values = a.values.columns_range(0, width).concat_rows(&b.values.quantized(quant)?)?;
        }
        self.left_padding.extend(other.left_padding);
        self.apply_quantization()
    }

    /// Prepends zero columns so that `idx == width`; buffers end exactly at `idx`.
    fn pad_left_to(&mut self, width: i32) -> Result<()> {
        let extra = width - self.idx;
        let idx = self.idx;
        for layer in self.layers.iter_mut().flatten() {
            layer.keys = layer.keys.columns_range(0, idx).pad_columns(extra, true)?;
            layer.values = layer.values.columns_range(0, idx).pad_columns(extra, true)?;
        }
        self.idx = width;
        for p in &mut self.left_padding {
            *p += extra;
        }
        Ok(())
    }

    /// Converts layers whose storage no longer matches the setting (the batch
    /// just crossed `start`, or float rows joined).
    fn apply_quantization(&mut self) -> Result<()> {
        for i in 0..self.layers.len() {
            let target = self.target_quant(i);
            if let Some(layer) = self.layers[i].as_mut() {
                if layer.keys.quant() != target {
                    layer.keys = layer.keys.clone().quantized(target)?;
                    layer.values = layer.values.clone().quantized(target)?;
                }
            }
        }
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
        match self.update_view(layer, keys, values)? {
            KvView::Float(k, v) => Ok((k, v)),
            KvView::Quantized { keys, values, spec } => {
                let deq = |[w, s, b]: [Array; 3]| ops::dequantize(&w, &s, &b, spec.group_size, spec.bits);
                Ok((deq(keys)?, deq(values)?))
            }
        }
    }

    fn update_view(&mut self, layer: usize, keys: Array, values: Array) -> Result<KvView> {
        let end = self.idx + keys.dim(2);
        let target = self.target_quant(layer);
        let slot = &mut self.layers[layer];
        let buffers = match slot {
            Some(b) => {
                if end > b.keys.columns() {
                    let extra = (end - b.keys.columns() + STEP - 1) / STEP * STEP;
                    b.keys = b.keys.pad_columns(extra, false)?;
                    b.values = b.values.pad_columns(extra, false)?;
                }
                b
            }
            None => {
                let cap = (end + STEP - 1) / STEP * STEP;
                slot.insert(Layer {
                    keys: KvStore::zeros_like(&keys, cap, target)?,
                    values: KvStore::zeros_like(&values, cap, target)?,
                })
            }
        };
        buffers.keys.write(self.idx, &keys)?;
        buffers.values.write(self.idx, &values)?;
        // Keys and values switch storage together; were they ever to differ,
        // attention would still get the right floats.
        Ok(match (buffers.keys.read_quantized(end), buffers.values.read_quantized(end)) {
            (Some((keys, spec)), Some((values, _))) => KvView::Quantized { keys, values, spec },
            _ => KvView::Float(buffers.keys.read(end)?, buffers.values.read(end)?),
        })
    }

    fn finish_step(&mut self, query_len: i32) {
        self.idx += query_len;
        if let Err(e) = self.apply_quantization() {
            // Storage stays as it was; attention is unaffected.
            tracing::warn!(error = %e, "KV cache quantization failed");
        }
    }

    fn len(&self) -> usize {
        self.idx as usize
    }

    fn nbytes(&self) -> usize {
        self.layers.iter().flatten().map(|l| l.keys.nbytes() + l.values.nbytes()).sum()
    }
}
