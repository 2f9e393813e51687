//! The keys and values of the layers of a batch that share one attention
//! pattern: all full-attention layers, or all sliding-window layers of one
//! window. They share a column layout, so one mask serves them all.
//!
//! Rows are left-padded: every row's newest token sits in the same column, so
//! a step of `L` tokens writes columns `columns..columns + L` for all rows at
//! once. Row `b`'s tokens start at column `left_padding[b]`.
//!
//! A sliding group keeps only what its window needs: once it holds
//! [`STEP`] columns more than `window - 1 + SLIDING_SLACK`, the oldest are
//! dropped (one copy per `STEP` tokens). The slack lets a prefix-cache hit end
//! a few tokens before the kept sequence did (a chat's next turn often
//! re-renders the last token of the previous reply).
use mlx_rs::{ops, Array};

use super::store::KvStore;
use super::{AttentionMask, KvQuantization, KvView};
use crate::error::Result;
use crate::weights::QuantSpec;

/// Buffers grow by this many columns at a time (and sliding groups trim
/// this many at a time).
pub const STEP: i32 = 256;

/// Tokens a sliding group keeps beyond `window - 1`.
pub const SLIDING_SLACK: i32 = 64;

/// One layer's keys and values, `[B, kv_heads, capacity, head_dim]` each.
#[derive(Clone)]
struct LayerKv {
    keys: KvStore,
    values: KvStore,
}

impl LayerKv {
    fn map(&self, f: impl Fn(&KvStore) -> Result<KvStore>) -> Result<Self> {
        Ok(Self { keys: f(&self.keys)?, values: f(&self.values)? })
    }
}

#[derive(Clone)]
pub struct AttentionGroup {
    /// `None` for full attention, else the window in tokens.
    window: Option<i32>,
    /// Storage of each member layer, `None` until it first runs.
    layers: Vec<Option<LayerKv>>,
    /// Whether each member layer is stored quantized once the batch is long
    /// enough (full-attention layers other than the model's last).
    quantizable: Vec<bool>,
    quantization: Option<KvQuantization>,
    /// Columns in use, the same for every row and member layer.
    columns: i32,
    /// Per row, the first column that holds one of its tokens.
    left_padding: Vec<i32>,
    /// This step's mask, made once for every member layer.
    step_mask: Option<AttentionMask>,
}

impl AttentionGroup {
    pub fn new(
        window: Option<usize>,
        quantizable: Vec<bool>,
        quantization: Option<KvQuantization>,
        rows: usize,
    ) -> Self {
        Self {
            window: window.map(|w| w as i32),
            layers: vec![None; quantizable.len()],
            quantizable,
            quantization,
            columns: 0,
            left_padding: vec![0; rows],
            step_mask: None,
        }
    }

    pub fn rows(&self) -> usize {
        self.left_padding.len()
    }

    pub fn window(&self) -> Option<i32> {
        self.window
    }

    /// Columns in use.
    pub fn columns(&self) -> i32 {
        self.columns
    }

    /// Every buffer (cheap handle clones), e.g. to evaluate a snapshot at once.
    pub fn arrays(&self) -> Vec<Array> {
        self.layers
            .iter()
            .flatten()
            .flat_map(|l| l.keys.parts().iter().chain(l.values.parts()).cloned())
            .collect()
    }

    /// Columns row `row`'s tokens take (all its tokens for a full group).
    pub fn row_columns(&self, row: usize) -> i32 {
        self.columns - self.left_padding[row]
    }

    /// The storage member layer `member` should use at the current length.
    fn target_quant(&self, member: usize) -> Option<QuantSpec> {
        let q = self.quantization?;
        (self.quantizable[member] && self.columns as usize >= q.start).then(|| q.spec())
    }

    /// Member layers stored quantized right now.
    pub fn quantized_layers(&self) -> usize {
        self.layers.iter().flatten().filter(|l| l.keys.quant().is_some()).count()
    }

    pub fn nbytes(&self) -> usize {
        self.layers.iter().flatten().map(|l| l.keys.nbytes() + l.values.nbytes()).sum()
    }

    /// Bytes row `row`'s own tokens take in every member layer.
    pub fn row_nbytes(&self, row: usize) -> usize {
        let per_column: usize = self
            .layers
            .iter()
            .flatten()
            .map(|l| l.keys.bytes_per_row_column() + l.values.bytes_per_row_column())
            .sum();
        per_column * self.row_columns(row) as usize
    }

    /// Row `row`'s keys and values in member layer `member` (float, its own
    /// columns only).
    pub fn row_keys_values(&self, row: usize, member: usize) -> Result<Option<(Array, Array)>> {
        let Some(layer) = &self.layers[member] else { return Ok(None) };
        let (r, start, end) = (row as i32, self.left_padding[row], self.columns);
        let read = |s: &KvStore| s.row(r).columns_range(start, end).read(end - start);
        Ok(Some((read(&layer.keys)?, read(&layer.values)?)))
    }

    /// Starts a step of `query_len` tokens; `spans` (per row, ranges of the
    /// step's queries) are images whose tokens see each other both ways.
    pub fn begin_step(&mut self, query_len: i32, spans: Option<&[Vec<(i32, i32)>]>) -> Result<()> {
        let mask = self.mask(query_len)?;
        self.step_mask = Some(match spans.filter(|s| s.iter().any(|row| !row.is_empty())) {
            Some(spans) => self.with_bidirectional_spans(mask, query_len, spans)?,
            None => mask,
        });
        Ok(())
    }

    /// `mask` opened so that every query in a span sees every key of the
    /// same span, later ones included (Gemma's images attend to themselves
    /// bidirectionally inside the causal mask).
    fn with_bidirectional_spans(
        &self,
        mask: AttentionMask,
        query_len: i32,
        spans: &[Vec<(i32, i32)>],
    ) -> Result<AttentionMask> {
        let (rows, total) = (self.rows() as i32, self.columns + query_len);
        // Each query and key column gets its span's number (or none: -1 / -2).
        let mut query_span = vec![-1i32; (rows * query_len) as usize];
        let mut key_span = vec![-2i32; (rows * total) as usize];
        for (b, row) in spans.iter().enumerate() {
            for (k, &(s, e)) in row.iter().enumerate() {
                for i in s..e {
                    query_span[b * query_len as usize + i as usize] = k as i32;
                    key_span[b * total as usize + (self.columns + i) as usize] = k as i32;
                }
            }
        }
        let q = Array::from_slice(&query_span, &[rows, 1, query_len, 1]);
        let k = Array::from_slice(&key_span, &[rows, 1, 1, total]);
        let same_image = q.eq(&k)?;
        let causal = match mask {
            AttentionMask::Array(m) => m,
            AttentionMask::Causal | AttentionMask::None => {
                let cols = ops::arange::<_, i32>(None, total, None)?.reshape(&[1, 1, 1, total])?;
                let queries = ops::arange::<_, i32>(self.columns, total, None)?
                    .reshape(&[1, 1, query_len, 1])?;
                cols.le(&queries)?
            }
        };
        Ok(AttentionMask::Array(ops::logical_or(&causal, &same_image)?))
    }

    /// This step's mask (after [`Self::begin_step`]).
    pub fn step_mask(&self) -> AttentionMask {
        self.step_mask.clone().expect("begin_step ran")
    }

    /// Query `i` of row `b` sits at column `columns + i`; key column `j` is
    /// visible when it holds a token of row `b` (`j >= left_padding[b]`), is
    /// not in the future (`j <= columns + i`) and, for a sliding group, is
    /// inside the window (`j > columns + i - window`). Columns line up with
    /// positions within a row, so this is the reference's windowed causal mask.
    fn mask(&self, query_len: i32) -> Result<AttentionMask> {
        let padded = self.left_padding.iter().any(|&p| p > 0);
        let windowed = self.window.is_some_and(|w| self.columns + query_len > w);
        if !padded && !windowed {
            return Ok(if query_len > 1 { AttentionMask::Causal } else { AttentionMask::None });
        }
        let total = self.columns + query_len;
        let cols = ops::arange::<_, i32>(None, total, None)?.reshape(&[1, 1, 1, total])?;
        let queries =
            ops::arange::<_, i32>(self.columns, total, None)?.reshape(&[1, 1, query_len, 1])?;
        let mut visible = cols.le(&queries)?;
        if padded {
            let pads = Array::from_slice(&self.left_padding, &[self.rows() as i32, 1, 1, 1]);
            visible = ops::logical_and(&visible, cols.ge(&pads)?)?;
        }
        if let Some(w) = self.window.filter(|_| windowed) {
            let oldest = queries.subtract(Array::from_int(w))?;
            visible = ops::logical_and(&visible, cols.gt(&oldest)?)?;
        }
        Ok(AttentionMask::Array(visible))
    }

    /// What one query at the next column would attend to in member
    /// `member`, with nothing written: the keys and values in use (still
    /// quantized where stored so) and [`Self::mask`]'s mask for that query
    /// over them (`None` before the layer first ran).
    pub fn peek(&self, member: usize) -> Result<Option<(KvView, AttentionMask)>> {
        let Some(layer) = &self.layers[member] else { return Ok(None) };
        let end = self.columns;
        let view = match (layer.keys.read_quantized(end), layer.values.read_quantized(end)) {
            (Some((keys, spec)), Some((values, _))) => KvView::Quantized { keys, values, spec },
            _ => KvView::Float(layer.keys.read(end)?, layer.values.read(end)?),
        };
        let padded = self.left_padding.iter().any(|&p| p > 0);
        let windowed = self.window.is_some_and(|w| end + 1 > w);
        if !padded && !windowed {
            return Ok(Some((view, AttentionMask::None)));
        }
        // The query at column `end`: every key is in its past.
        let cols = ops::arange::<_, i32>(None, end, None)?.reshape(&[1, 1, 1, end])?;
        let mut visible = cols.ge(Array::from_int(0))?;
        if padded {
            let pads = Array::from_slice(&self.left_padding, &[self.rows() as i32, 1, 1, 1]);
            visible = ops::logical_and(&visible, cols.ge(&pads)?)?;
        }
        if let Some(w) = self.window.filter(|_| windowed) {
            visible = ops::logical_and(&visible, cols.gt(Array::from_int(end - w))?)?;
        }
        Ok(Some((view, AttentionMask::Array(visible))))
    }

    /// Writes this step's keys and values `[B, kv_heads, L, head_dim]` of
    /// member `member` after the columns in use and returns everything the
    /// step's queries may attend to (still quantized where stored so).
    pub fn write(&mut self, member: usize, keys: &Array, values: &Array) -> Result<KvView> {
        let end = self.columns + keys.dim(2);
        let target = self.target_quant(member);
        let slot = &mut self.layers[member];
        let layer = match slot {
            Some(l) => {
                if end > l.keys.columns() {
                    let extra = (end - l.keys.columns() + STEP - 1) / STEP * STEP;
                    *l = l.map(|s| s.pad_columns(extra, false))?;
                }
                l
            }
            None => {
                let cap = (end + STEP - 1) / STEP * STEP;
                slot.insert(LayerKv {
                    keys: KvStore::zeros_like(keys, cap, target)?,
                    values: KvStore::zeros_like(values, cap, target)?,
                })
            }
        };
        layer.keys.write(self.columns, keys)?;
        layer.values.write(self.columns, values)?;
        // Keys and values switch storage together; were they ever to differ,
        // attention would still get the right floats.
        Ok(match (layer.keys.read_quantized(end), layer.values.read_quantized(end)) {
            (Some((keys, spec)), Some((values, _))) => KvView::Quantized { keys, values, spec },
            _ => KvView::Float(layer.keys.read(end)?, layer.values.read(end)?),
        })
    }

    /// Commits a step of `query_len` columns. `trim`: a sliding group may drop
    /// what its window no longer needs (not after a right-padded pass, whose
    /// short rows end before the last column; splitting them trims instead).
    pub fn finish_step(&mut self, query_len: i32, trim: bool) -> Result<()> {
        self.columns += query_len;
        self.step_mask = None;
        if trim {
            self.trim_window()?;
        }
        self.apply_quantization()
    }

    /// The columns a sliding group keeps: what the next query's window needs,
    /// plus the slack.
    fn kept_columns(&self) -> Option<i32> {
        self.window.map(|w| w - 1 + SLIDING_SLACK)
    }

    fn trim_window(&mut self) -> Result<()> {
        let Some(keep) = self.kept_columns() else { return Ok(()) };
        if self.columns < keep + STEP {
            return Ok(());
        }
        self.drop_left(self.columns - keep)
    }

    /// Drops the `n` oldest columns of every row.
    fn drop_left(&mut self, n: i32) -> Result<()> {
        let columns = self.columns;
        for layer in self.layers.iter_mut().flatten() {
            // A copy, so the dropped columns' memory goes.
            *layer = layer.map(|s| s.columns_range(n, columns).copied())?;
        }
        self.columns -= n;
        for p in &mut self.left_padding {
            *p = (*p - n).max(0);
        }
        Ok(())
    }

    /// Converts member layers whose storage no longer matches the setting
    /// (the batch just crossed `start`, or float rows joined).
    fn apply_quantization(&mut self) -> Result<()> {
        for m in 0..self.layers.len() {
            let target = self.target_quant(m);
            if let Some(layer) = self.layers[m].as_mut() {
                if layer.keys.quant() != target {
                    *layer = layer.map(|s| s.clone().quantized(target))?;
                }
            }
        }
        Ok(())
    }

    /// Keeps only the rows at `keep` (in that order), then drops padding
    /// columns that no remaining row needs.
    pub fn filter(&mut self, keep: &[usize]) -> Result<()> {
        if keep.is_empty() {
            *self = Self::new(
                self.window.map(|w| w as usize),
                self.quantizable.clone(),
                self.quantization,
                0,
            );
            return Ok(());
        }
        let rows: Vec<i32> = keep.iter().map(|&k| k as i32).collect();
        let rows = Array::from_slice(&rows, &[rows.len() as i32]);
        self.left_padding = keep.iter().map(|&k| self.left_padding[k]).collect();
        let trim = *self.left_padding.iter().min().expect("keep is not empty");
        let columns = self.columns;
        for layer in self.layers.iter_mut().flatten() {
            *layer = layer.map(|s| Ok(s.take_rows(&rows)?.columns_range(trim, columns)))?;
        }
        self.columns -= trim;
        for p in &mut self.left_padding {
            *p -= trim;
        }
        Ok(())
    }

    /// Appends `other`'s rows after this group's, left-padding whichever side
    /// holds fewer columns so the newest columns line up.
    pub fn extend(&mut self, mut other: AttentionGroup) -> Result<()> {
        if self.rows() == 0 {
            // The batch's settings stay; the rows bring their tokens.
            other.quantization = self.quantization;
            other.quantizable = std::mem::take(&mut self.quantizable);
            *self = other;
            return self.apply_quantization();
        }
        let width = self.columns.max(other.columns);
        self.pad_left_to(width)?;
        other.pad_left_to(width)?;
        let (mine_rows, their_rows) = (self.rows() as i32, other.rows() as i32);
        for (mine, theirs) in self.layers.iter_mut().zip(other.layers) {
            *mine = match (mine.take(), theirs) {
                (None, None) => None,
                // A side that never ran (rows with no tokens yet) holds zeros.
                (Some(a), None) => Some(concat_rows(&a, &zero_rows(&a, their_rows, width)?)?),
                (None, Some(b)) => {
                    let b = b.map(|s| Ok(s.columns_range(0, width)))?;
                    Some(concat_rows(&zero_rows(&b, mine_rows, width)?, &b)?)
                }
                (Some(a), Some(b)) => Some(concat_rows(&a, &b)?),
            };
        }
        self.left_padding.extend(other.left_padding);
        self.apply_quantization()
    }

    /// Prepends zero columns so that `columns == width`; buffers then end
    /// exactly at `columns`.
    fn pad_left_to(&mut self, width: i32) -> Result<()> {
        let extra = width - self.columns;
        let columns = self.columns;
        for layer in self.layers.iter_mut().flatten() {
            *layer = layer.map(|s| s.columns_range(0, columns).pad_columns(extra, true))?;
        }
        self.columns = width;
        for p in &mut self.left_padding {
            *p += extra;
        }
        Ok(())
    }

    /// Row `row` alone, holding its tokens up to column `end` (exclusive; the
    /// columns after it were right padding), trimmed to the window. The
    /// buffers are views into this group's unless `copy`.
    pub fn split_row(&self, row: usize, end: i32, copy: bool) -> Result<AttentionGroup> {
        let start = self.left_padding[row];
        let start = match self.kept_columns() {
            Some(keep) => start.max(end - keep),
            None => start,
        };
        let r = row as i32;
        let layers = self
            .layers
            .iter()
            .map(|l| {
                l.as_ref()
                    .map(|l| {
                        l.map(|s| {
                            let s = s.row(r).columns_range(start, end);
                            if copy {
                                s.as_float()
                            } else {
                                Ok(s)
                            }
                        })
                    })
                    .transpose()
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(AttentionGroup {
            window: self.window,
            layers,
            quantizable: self.quantizable.clone(),
            quantization: self.quantization,
            columns: end - start,
            left_padding: vec![0],
            step_mask: None,
        })
    }

    /// Drops each row's newest `drops[b]` columns (draft tokens a
    /// speculative step wrote and verification rejected). Every row's newest
    /// token must still sit in the last column, so the rows that drop more
    /// than the fewest are moved right by the difference (one copy of those
    /// rows), their left padding growing to match.
    pub fn rewind_rows(&mut self, drops: &[i32]) -> Result<()> {
        assert_eq!(drops.len(), self.rows(), "one count per row");
        let Some(&fewest) = drops.iter().min() else { return Ok(()) };
        // The buffers keep their capacity: the next step writes over these columns.
        self.columns -= fewest;
        let columns = self.columns;
        for (row, &drop) in drops.iter().enumerate() {
            let shift = drop - fewest;
            if shift == 0 {
                continue;
            }
            let r = row as i32;
            for layer in self.layers.iter_mut().flatten() {
                for store in [&mut layer.keys, &mut layer.values] {
                    let moved =
                        store.row(r).columns_range(0, columns - shift).pad_columns(shift, true)?;
                    store.write_row(r, &moved)?;
                }
            }
            self.left_padding[row] = (self.left_padding[row] + shift).min(columns);
        }
        Ok(())
    }

    /// For a one-row group holding the last `columns` of `total` tokens: can
    /// it drop its newest `drop` tokens and still serve the next query? A
    /// full group always can; a sliding group needs the `window - 1` tokens
    /// before the new end (or all of them, from the first).
    pub fn can_drop_newest(&self, drop: i32, total: i32) -> bool {
        let Some(w) = self.window else { return true };
        let first_kept = total - self.columns;
        let new_end = total - drop;
        drop <= self.columns && first_kept <= (new_end - (w - 1)).max(0)
    }

    /// Drops the newest `drop` tokens of a one-row group (see [`Self::can_drop_newest`]).
    pub fn drop_newest(&mut self, drop: i32) {
        let end = self.columns - drop;
        for layer in self.layers.iter_mut().flatten() {
            layer.keys = layer.keys.columns_range(0, end);
            layer.values = layer.values.columns_range(0, end);
        }
        self.columns = end;
    }
}

impl AttentionGroup {
    /// A one-row group's layers as float keys and values holding exactly its
    /// columns (`None`: a layer that never ran), e.g. to save it.
    pub fn row_layers(&self) -> Result<Vec<Option<(Array, Array)>>> {
        assert_eq!(self.rows(), 1, "row_layers is for one row");
        self.layers
            .iter()
            .map(|l| {
                l.as_ref()
                    .map(|l| Ok((l.keys.read(self.columns)?, l.values.read(self.columns)?)))
                    .transpose()
            })
            .collect()
    }

    /// Fills an empty one-row group with `layers` (float `[1, kv_heads,
    /// columns, head_dim]`, as [`Self::row_layers`] gave them). Shapes are
    /// checked: the arrays may come from a file.
    pub fn restore_row(&mut self, columns: i32, layers: Vec<Option<(Array, Array)>>) -> Result<()> {
        use crate::error::Error;
        if self.rows() != 1 || self.columns != 0 {
            return Err(Error::Mlx("restoring into a group that is not one empty row".into()));
        }
        if layers.len() != self.layers.len() {
            return Err(Error::Mlx(format!(
                "{} layers saved, the model has {}",
                layers.len(),
                self.layers.len()
            )));
        }
        if let Some(w) = self.window {
            if columns > w - 1 + SLIDING_SLACK {
                return Err(Error::Mlx(format!("{columns} columns saved for a window of {w}")));
            }
        }
        for (slot, layer) in self.layers.iter_mut().zip(layers) {
            *slot = match layer {
                None => None,
                Some((k, v)) => {
                    let ok = |a: &Array| a.ndim() == 4 && a.dim(0) == 1 && a.dim(2) == columns;
                    if !ok(&k) || !ok(&v) || k.dim(1) != v.dim(1) {
                        return Err(Error::Mlx(format!(
                            "saved keys {:?} / values {:?} do not hold {columns} columns of one row",
                            k.shape(),
                            v.shape()
                        )));
                    }
                    Some(LayerKv { keys: KvStore::float(k), values: KvStore::float(v) })
                }
            };
        }
        self.columns = columns;
        Ok(())
    }
}

fn concat_rows(a: &LayerKv, b: &LayerKv) -> Result<LayerKv> {
    // Joining rows take the batch's storage.
    let quant = a.keys.quant();
    Ok(LayerKv {
        keys: a.keys.concat_rows(&b.keys.clone().quantized(quant)?)?,
        values: a.values.concat_rows(&b.values.clone().quantized(quant)?)?,
    })
}

/// `rows` rows of zeros shaped like `like` with `columns` columns.
fn zero_rows(like: &LayerKv, rows: i32, columns: i32) -> Result<LayerKv> {
    like.map(|s| s.zero_rows(rows, columns))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn visible(mask: &AttentionMask) -> Vec<bool> {
        let AttentionMask::Array(m) = mask else { panic!("an array mask") };
        m.eval().unwrap();
        m.as_slice::<bool>().to_vec()
    }

    /// A 5-token step whose tokens 1..4 are one image: those see each other
    /// both ways; the others stay causal.
    #[test]
    fn an_image_span_sees_itself_both_ways() {
        let mut group = AttentionGroup::new(None, vec![false], None, 1);
        group.begin_step(5, Some(&[vec![(1, 4)]])).unwrap();
        let v = visible(&group.step_mask());
        let at = |q: usize, k: usize| v[q * 5 + k];
        assert!(at(1, 3) && at(2, 3) && at(3, 1), "inside the image: both ways");
        assert!(!at(0, 1), "text before the image does not see it");
        assert!(!at(3, 4), "the image does not see the text after it");
        assert!(at(4, 0) && at(4, 2), "text after sees everything before it");
    }
}
