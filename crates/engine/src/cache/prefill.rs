//! The KV cache of one batched prefill pass: several sequences' next prompt
//! chunks in one forward step of `[B, L]` tokens, right-padded to the longest
//! chunk.
//!
//! Rows may already hold different numbers of tokens (a reused prefix, earlier
//! chunks). For the pass, each row's earlier keys/values are left-padded to
//! the longest row's, `P` columns, and the chunk is written after them for
//! all rows at once:
//!
//! ```text
//! row 0:  [ earlier (P)      | chunk 0 ......... ]
//! row 1:  [ pad | earlier    | chunk 1 ... | pad ]
//!                              ^ column P
//! ```
//!
//! So the mask is the decode batch's left-padding mask (key column `j` is
//! visible to query `i` of row `b` when `j >= P - offset_b` and `j <= P + i`):
//! right padding needs nothing more, as a real query never sees a later key.
//! After the pass, [`PrefillBatchCache::split`] gives each row back exactly its
//! real tokens (`P - offset_b .. P + n_b`), one contiguous column range.
//!
//! RoPE positions are per row (`offset_b + i`), independent of the columns.
use mlx_rs::{ops, ops::indexing::IndexOp, Array};

use super::{AttentionMask, KvCache, RopeOffset, SimpleKvCache};
use crate::error::Result;

pub struct PrefillBatchCache {
    /// Per layer, the rows' earlier keys and values left-padded to `prefix`
    /// columns, `[B, kv_heads, prefix, head_dim]`; `None` when no row has any.
    earlier: Vec<Option<(Array, Array)>>,
    /// Per layer, after the layer ran: earlier columns then the chunk columns.
    written: Vec<Option<(Array, Array)>>,
    /// Tokens each row held before this pass (its first RoPE position).
    offsets: Vec<i32>,
    /// The longest row's earlier tokens: where the chunk columns start.
    prefix: i32,
    /// The pass's query length, once it ran.
    query_len: i32,
}

impl PrefillBatchCache {
    /// Gathers the rows' own caches (fresh or partly filled) into one batch.
    pub fn gather(rows: Vec<SimpleKvCache>, num_layers: usize) -> Result<Self> {
        let offsets: Vec<i32> = rows.iter().map(SimpleKvCache::offset).collect();
        let prefix = offsets.iter().copied().max().unwrap_or(0);
        let mut earlier: Vec<Option<(Array, Array)>> = vec![None; num_layers];
        if prefix > 0 {
            // Per row, per layer: its earlier keys and values (rows with none have no buffers).
            let row_layers: Vec<Option<Vec<(Array, Array)>>> =
                rows.into_iter().map(|c| (c.offset() > 0).then(|| c.into_layers())).collect();
            for (layer, slot) in earlier.iter_mut().enumerate() {
                let like = row_layers.iter().flatten().next().expect("prefix > 0: a row has layers");
                let (k0, v0) = &like[layer];
                let mut keys = Vec::with_capacity(offsets.len());
                let mut values = Vec::with_capacity(offsets.len());
                for (row, &offset) in row_layers.iter().zip(&offsets) {
                    let pad = prefix - offset;
                    match row {
                        Some(layers) => {
                            keys.push(pad_left(layers[layer].0.clone(), pad)?);
                            values.push(pad_left(layers[layer].1.clone(), pad)?);
                        }
                        None => {
                            keys.push(zero_columns(k0, pad)?);
                            values.push(zero_columns(v0, pad)?);
                        }
                    }
                }
                *slot = Some((stack_rows(keys)?, stack_rows(values)?));
            }
        }
        Ok(Self { earlier, written: vec![None; num_layers], offsets, prefix, query_len: 0 })
    }

    pub fn rows(&self) -> usize {
        self.offsets.len()
    }

    /// Each row's cache after the pass, holding its earlier tokens and the
    /// first `chunk[b]` tokens of its chunk (the rest was padding). The
    /// buffers are views into the batch's: the next pass (or joining the
    /// decode batch) copies them.
    pub fn split(self, chunk: &[i32]) -> Result<Vec<SimpleKvCache>> {
        assert_eq!(chunk.len(), self.rows(), "one chunk length per row");
        let written: Vec<(Array, Array)> =
            self.written.into_iter().map(|l| l.expect("every layer ran in the pass")).collect();
        let mut out = Vec::with_capacity(chunk.len());
        for (b, (&offset, &n)) in self.offsets.iter().zip(chunk).enumerate() {
            assert!(n >= 1 && n <= self.query_len, "row {b}: chunk {n} outside the pass of {}", self.query_len);
            let (row, start, end) = (b as i32, self.prefix - offset, self.prefix + n);
            let layers = written
                .iter()
                .map(|(k, v)| {
                    (k.index((row..row + 1, .., start..end, ..)), v.index((row..row + 1, .., start..end, ..)))
                })
                .collect();
            out.push(SimpleKvCache::from_layers(layers, offset + n));
        }
        Ok(out)
    }

    fn mask(&self, query_len: i32) -> Result<AttentionMask> {
        if self.offsets.iter().all(|&o| o == self.prefix) {
            // No left padding: the plain causal mask (what a lone sequence
            // uses) already hides right padding from every real query.
            return Ok(if query_len > 1 { AttentionMask::Causal } else { AttentionMask::None });
        }
        let total = self.prefix + query_len;
        let pads: Vec<i32> = self.offsets.iter().map(|o| self.prefix - o).collect();
        let cols = ops::arange::<_, i32>(None, total, None)?.reshape(&[1, 1, 1, total])?;
        let pads = Array::from_slice(&pads, &[self.rows() as i32, 1, 1, 1]);
        let queries = ops::arange::<_, i32>(self.prefix, total, None)?.reshape(&[1, 1, query_len, 1])?;
        let visible = ops::logical_and(cols.ge(&pads)?, cols.le(&queries)?)?;
        Ok(AttentionMask::Array(visible))
    }
}

impl KvCache for PrefillBatchCache {
    fn step(&mut self, query_len: i32) -> Result<(RopeOffset, AttentionMask)> {
        let offset = if self.offsets.iter().all(|&o| o == self.prefix) {
            // The fast RoPE kernel with a scalar offset, as a lone sequence gets.
            RopeOffset::Shared(self.prefix)
        } else {
            RopeOffset::PerRow(Array::from_slice(&self.offsets, &[self.rows() as i32]))
        };
        Ok((offset, self.mask(query_len)?))
    }

    fn update(&mut self, layer: usize, keys: Array, values: Array) -> Result<(Array, Array)> {
        let (k, v) = match &self.earlier[layer] {
            None => (keys, values),
            Some((ek, ev)) => (ops::concatenate(&[ek, &keys], 2)?, ops::concatenate(&[ev, &values], 2)?),
        };
        self.written[layer] = Some((k.clone(), v.clone()));
        Ok((k, v))
    }

    fn finish_step(&mut self, query_len: i32) {
        self.query_len = query_len;
    }

    fn len(&self) -> usize {
        (self.prefix + self.query_len) as usize
    }

    fn nbytes(&self) -> usize {
        let pair = |l: &Option<(Array, Array)>| l.as_ref().map_or(0, |(k, v)| k.nbytes() + v.nbytes());
        self.earlier.iter().map(pair).sum::<usize>() + self.written.iter().map(pair).sum::<usize>()
    }
}

/// `[1, H, columns, D]` zeros shaped and typed like `like`.
fn zero_columns(like: &Array, columns: i32) -> Result<Array> {
    let s = like.shape();
    Ok(ops::zeros_dtype(&[1, s[1], columns, s[3]], like.dtype())?)
}

/// `pad` zero columns before `x` `[1, H, T, D]`.
fn pad_left(x: Array, pad: i32) -> Result<Array> {
    if pad == 0 {
        return Ok(x);
    }
    Ok(ops::concatenate(&[&zero_columns(&x, pad)?, &x], 2)?)
}

fn stack_rows(rows: Vec<Array>) -> Result<Array> {
    if rows.len() == 1 {
        return Ok(rows.into_iter().next().expect("one row"));
    }
    Ok(ops::concatenate(&rows, 0)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(len: i32, fill: f32) -> Array {
        ops::full::<f32>(&[1, 1, len, 2], Array::from_f32(fill)).unwrap()
    }

    fn cache_with(len: i32, fill: f32) -> SimpleKvCache {
        SimpleKvCache::from_layers(vec![(keys(len, fill), keys(len, fill))], len)
    }

    /// Rows with 3, 0 and 1 earlier tokens and chunks of 2, 4 and 1 (padded to
    /// 4): each row gets back exactly its earlier tokens then its real chunk
    /// tokens, and the mask shows each query only its own row's real past.
    #[test]
    fn rows_keep_exactly_their_real_tokens() {
        let rows = vec![cache_with(3, 1.0), SimpleKvCache::new(1), cache_with(1, 2.0)];
        let mut batch = PrefillBatchCache::gather(rows, 1).unwrap();
        let (offset, mask) = batch.step(4).unwrap();
        match offset {
            RopeOffset::PerRow(o) => assert_eq!(o.as_slice::<i32>(), &[3, 0, 1]),
            _ => panic!("rows at different offsets need per-row RoPE"),
        }
        // Chunk values: row r, column i holds 10 * (r + 1) + i.
        let chunk: Vec<f32> =
            (0..3).flat_map(|r| (0..4).flat_map(move |i| [10.0 * (r + 1) as f32 + i as f32; 2])).collect();
        let chunk = Array::from_slice(&chunk, &[3, 1, 4, 2]);
        let (k, _) = batch.update(0, chunk.clone(), chunk).unwrap();
        assert_eq!(k.shape(), &[3, 1, 7, 2]);
        batch.finish_step(4);

        let AttentionMask::Array(mask) = mask else { panic!("left padding needs an explicit mask") };
        let mask = mask.as_dtype(mlx_rs::Dtype::Int32).unwrap();
        let m = mask.as_slice::<i32>(); // [3, 1, 4, 7]
        let at = |b: usize, i: usize, j: usize| m[(b * 4 + i) * 7 + j];
        // Row 1 (no earlier tokens, 3 padding columns): query 0 sees column 3 only.
        assert_eq!((0..7).map(|j| at(1, 0, j)).collect::<Vec<_>>(), vec![0, 0, 0, 1, 0, 0, 0]);
        // Row 2 (1 earlier token): query 0 sees column 2 (earlier) and 3 (itself).
        assert_eq!((0..7).map(|j| at(2, 0, j)).collect::<Vec<_>>(), vec![0, 0, 1, 1, 0, 0, 0]);
        // Row 0, query 1: all earlier columns and chunk columns 3, 4.
        assert_eq!((0..7).map(|j| at(0, 1, j)).collect::<Vec<_>>(), vec![1, 1, 1, 1, 1, 0, 0]);

        let split = batch.split(&[2, 4, 1]).unwrap();
        let lens: Vec<i32> = split.iter().map(SimpleKvCache::offset).collect();
        assert_eq!(lens, vec![5, 4, 2]);
        let firsts: Vec<Vec<f32>> = split
            .into_iter()
            .map(|c| {
                let (k, _) = c.into_layers().remove(0);
                // A strided view: copy it out before reading.
                let k = k.reshape(&[-1, 2]).unwrap().index((.., 0)).contiguous().unwrap();
                k.eval().unwrap();
                k.as_slice::<f32>().to_vec()
            })
            .collect();
        assert_eq!(firsts[0], vec![1.0, 1.0, 1.0, 10.0, 11.0]);
        assert_eq!(firsts[1], vec![20.0, 21.0, 22.0, 23.0]);
        assert_eq!(firsts[2], vec![2.0, 30.0]);
    }

    /// Fresh rows (nothing earlier) need no gather and a plain causal mask.
    #[test]
    fn fresh_rows_are_plain_causal() {
        let mut batch = PrefillBatchCache::gather(vec![SimpleKvCache::new(2), SimpleKvCache::new(2)], 2).unwrap();
        let (offset, mask) = batch.step(3).unwrap();
        assert!(matches!(offset, RopeOffset::Shared(0)));
        assert!(matches!(mask, AttentionMask::Causal));
        assert_eq!(batch.nbytes(), 0);
    }
}
