//! The cache of a batch of sequences: every layer's own cache kind (see
//! [`CacheLayout`]), for any number of rows. One type serves every place a
//! cache lives:
//! - a single sequence (one row; `generate.rs`, a waiting prompt's own cache);
//! - the decoding batch (left-padded rows; rows join with
//!   [`BatchCache::extend`] and leave with [`BatchCache::filter`]);
//! - a batched prefill pass: the waiting rows' caches gathered with `extend`
//!   (left-padded so each row's earlier tokens end at the same column), one
//!   right-padded chunk written for all, then [`BatchCache::split`] back into
//!   rows holding exactly their real tokens;
//! - the prefix cache's kept rows ([`BatchCache::row_snapshot`],
//!   [`BatchCache::truncate`]).
//!
//! Layers of the same attention pattern (all full layers; the sliding layers
//! of one window) form an [`AttentionGroup`] with one column layout and one
//! mask per step. Recurrent layers keep per-row states; shared layers keep
//! nothing and attend to what their source layer wrote this step.
//!
//! A model runs a step as: [`BatchCache::begin_step`], then per layer
//! [`BatchCache::update`] (or [`BatchCache::shared`], or the recurrent state
//! accessors), then [`BatchCache::finish_step`]. Positions are not the
//! cache's business: the caller passes them to the model.
use std::collections::BTreeMap;

use mlx_rs::{ops, Array};

use super::attention_group::AttentionGroup;
use super::layer_queue;
use super::mirror::Mirror;
use super::recurrent::{RecurrentSnapshot, RecurrentStates};
use super::row_contents::{GroupContents, RowContents};
use super::{AttentionMask, CacheLayout, KvQuantization, KvView, LayerCache};
use crate::error::{Error, Result};

/// Per row, the ranges of a step's tokens that attend to each other both
/// ways (an image's tokens in Gemma 3 / Gemma 4).
pub type BidirectionalSpans = Vec<Vec<(i32, i32)>>;

#[derive(Clone, Copy)]
enum Slot {
    Attention { group: usize, member: usize },
    Recurrent { index: usize },
    Shared { source: usize },
}

/// What a step needs until it finishes.
#[derive(Clone, Default)]
struct StepState {
    query_len: i32,
    /// Real tokens per row of a right-padded pass (`None`: all are real).
    real: Option<Vec<i32>>,
    /// This step's keys and values of layers that shared layers read.
    shared_views: BTreeMap<usize, KvView>,
    /// Per row, ranges of this step's tokens that attend to each other both
    /// ways (an image's tokens in Gemma 3 / Gemma 4).
    bidirectional: Option<BidirectionalSpans>,
    /// Whether recurrent layers keep their states after each token of this
    /// step, so that [`BatchCache::rewind_rows`] can undo some of them.
    record_steps: bool,
    /// The one position per row whose hidden state the caller reads
    /// ([`BatchCache::set_read_positions`]).
    read_at: Option<Vec<i32>>,
}

#[derive(Clone)]
pub struct BatchCache {
    layout: CacheLayout,
    slots: Vec<Slot>,
    groups: Vec<AttentionGroup>,
    recurrent: RecurrentStates,
    /// Tokens each row holds: its next position (before any rope delta).
    offsets: Vec<i32>,
    /// Layers that some shared layer reads.
    shared_sources: Vec<bool>,
    step: Option<StepState>,
    /// After a right-padded pass: its length and real tokens per row, for [`Self::split`].
    last_pass: Option<(i32, Vec<i32>)>,
    /// Tokens per row of the last finished step (what a recorded recurrent
    /// step can be cut back within).
    last_step_len: i32,
    /// Set on rank 0 of a model split across processes: this cache's
    /// changes are recorded for the other ranks' copies (see [`Mirror`]).
    mirror: Option<Mirror>,
}

impl BatchCache {
    /// An empty cache for `rows` rows (0 for a decode batch that rows join).
    pub fn new(layout: &CacheLayout, rows: usize, quantization: Option<KvQuantization>) -> Self {
        let mut group_of: Vec<(Option<usize>, Vec<bool>)> = Vec::new();
        let mut slots = Vec::with_capacity(layout.len());
        let mut recurrent = 0;
        let mut shared_sources = vec![false; layout.len()];
        for (layer, kind) in layout.kinds().iter().enumerate() {
            let slot = match *kind {
                LayerCache::Full | LayerCache::Sliding { .. } => {
                    let window = match *kind {
                        LayerCache::Sliding { window } => Some(window),
                        _ => None,
                    };
                    let group = match group_of.iter().position(|(w, _)| *w == window) {
                        Some(g) => g,
                        None => {
                            group_of.push((window, Vec::new()));
                            group_of.len() - 1
                        }
                    };
                    let members = &mut group_of[group].1;
                    members
                        .push(quantization.is_some() && KvQuantization::applies_to(layout, layer));
                    Slot::Attention { group, member: members.len() - 1 }
                }
                LayerCache::Recurrent => {
                    recurrent += 1;
                    Slot::Recurrent { index: recurrent - 1 }
                }
                LayerCache::Shared { source } => {
                    shared_sources[source] = true;
                    Slot::Shared { source }
                }
            };
            slots.push(slot);
        }
        let groups = group_of
            .into_iter()
            .map(|(window, quantizable)| {
                AttentionGroup::new(window, quantizable, quantization, rows)
            })
            .collect();
        Self {
            layout: layout.clone(),
            slots,
            groups,
            recurrent: RecurrentStates::new(recurrent, rows),
            offsets: vec![0; rows],
            shared_sources,
            step: None,
            last_pass: None,
            last_step_len: 0,
            mirror: None,
        }
    }

    /// This cache, its changes from now on recorded in `mirror`'s log (a
    /// fresh cache: the followers create theirs from the mirror's event).
    pub fn mirrored(mut self, mirror: Mirror) -> Self {
        self.mirror = Some(mirror);
        self
    }

    /// The id other ranks know this cache by, when it is mirrored.
    pub fn mirror(&self) -> Option<&Mirror> {
        self.mirror.as_ref()
    }

    /// What was declared for the coming step: the real tokens per row (a
    /// right-padded pass) and the spans of image tokens that attend both
    /// ways, if any (for the other ranks' copies of this cache).
    pub fn declared_step(&self) -> (Option<Vec<i32>>, Option<BidirectionalSpans>) {
        match &self.step {
            Some(s) => (s.real.clone(), s.bidirectional.clone()),
            None => (None, None),
        }
    }

    pub fn layout(&self) -> &CacheLayout {
        &self.layout
    }

    pub fn rows(&self) -> usize {
        self.offsets.len()
    }

    /// Tokens each row holds.
    pub fn offsets(&self) -> &[i32] {
        &self.offsets
    }

    /// Tokens of the longest row.
    pub fn len(&self) -> usize {
        self.offsets.iter().copied().max().unwrap_or(0) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Starts a step of `query_len` tokens per row.
    pub fn begin_step(&mut self, query_len: i32) -> Result<()> {
        let (real, bidirectional, record_steps, read_at) = self
            .step
            .take()
            .map(|s| (s.real, s.bidirectional, s.record_steps, s.read_at))
            .unwrap_or_default();
        for g in &mut self.groups {
            g.begin_step(query_len, bidirectional.as_deref())?;
        }
        self.recurrent.begin_step(record_steps);
        self.step = Some(StepState {
            query_len,
            real,
            shared_views: BTreeMap::new(),
            bidirectional,
            record_steps,
            read_at,
        });
        Ok(())
    }

    /// Declares, before a speculative verify pass, that the step may be
    /// partly undone: recurrent layers keep their state after each of its
    /// tokens until the next step (see [`Self::rewind_rows`]).
    pub fn record_next_step(&mut self) {
        self.step.get_or_insert_with(Default::default).record_steps = true;
    }

    /// Declares, before a prefill pass (after [`Self::set_real_tokens`]), the
    /// ranges of each row's tokens in the pass that attend to each other both
    /// ways: whole images, which never straddle two passes.
    pub fn set_bidirectional_spans(&mut self, spans: BidirectionalSpans) {
        assert_eq!(spans.len(), self.rows(), "spans per row");
        self.step.get_or_insert_with(Default::default).bidirectional = Some(spans);
    }

    /// Declares, before a prefill pass (after [`Self::set_real_tokens`]),
    /// that its caller reads each row's hidden state at one position only
    /// (`at[b]`, an index into the pass): the last real token, whose logits
    /// pick the next one. A model may then run the layers that write no
    /// cache (Gemma 4's KV-shared layers) on those positions alone and
    /// return `[B, 1, D]`, as the reference's prefill, which evaluates only
    /// the caches, never runs them on the others.
    pub fn set_read_positions(&mut self, at: Vec<i32>) {
        assert_eq!(at.len(), self.rows(), "one position per row");
        self.step.get_or_insert_with(Default::default).read_at = Some(at);
    }

    /// This step's read positions (see [`Self::set_read_positions`]), `[B]` int32.
    pub fn read_positions(&self) -> Option<Array> {
        let at = self.step.as_ref()?.read_at.as_ref()?;
        Some(Array::from_slice(at, &[at.len() as i32]))
    }

    /// Declares, before a right-padded prefill pass, how many of its tokens
    /// are real in each row (the rest is padding).
    pub fn set_real_tokens(&mut self, real: Vec<i32>) {
        assert_eq!(real.len(), self.rows(), "one length per row");
        self.step = Some(StepState { real: Some(real), ..Default::default() });
    }

    /// This step's real tokens per row as a `[B, L]` boolean mask, when the
    /// pass is right-padded (what a recurrent layer must not absorb).
    pub fn real_tokens(&self) -> Result<Option<Array>> {
        let step = self.step.as_ref().expect("begin_step ran");
        let Some(real) = &step.real else { return Ok(None) };
        let l = step.query_len;
        if real.iter().all(|&r| r == l) {
            // no row is padded: nothing to hide, and a recurrent layer's
            // masked path costs a third more per token (a lone prompt's pass)
            return Ok(None);
        }
        let cols = ops::arange::<_, i32>(None, l, None)?.reshape(&[1, l])?;
        let real = Array::from_slice(real, &[real.len() as i32, 1]);
        Ok(Some(cols.lt(&real)?))
    }

    fn step(&self) -> &StepState {
        self.step.as_ref().expect("begin_step ran before the layers")
    }

    /// Appends layer `layer`'s keys and values of this step
    /// (`[B, kv_heads, L, head_dim]`) and returns what the step's queries
    /// attend to, with the mask of the layer's kind.
    pub fn update(
        &mut self,
        layer: usize,
        keys: &Array,
        values: &Array,
    ) -> Result<(KvView, AttentionMask)> {
        let Slot::Attention { group, member } = self.slots[layer] else {
            return Err(Error::Mlx(format!("layer {layer} keeps no keys and values of its own")));
        };
        let view = self.groups[group].write(member, keys, values)?;
        if self.step().query_len == 1 {
            layer_queue::queue_view(&view)?;
        }
        if self.shared_sources[layer] {
            self.step.as_mut().expect("begin_step ran").shared_views.insert(layer, view.clone());
        }
        Ok((view, self.groups[group].step_mask()))
    }

    /// For a shared layer: the keys and values its source layer wrote this
    /// step, with the source's mask.
    pub fn shared(&self, layer: usize) -> Result<(KvView, AttentionMask)> {
        let Slot::Shared { source } = self.slots[layer] else {
            return Err(Error::Mlx(format!("layer {layer} is not a shared layer")));
        };
        let Slot::Attention { group, .. } = self.slots[source] else {
            unreachable!("checked by CacheLayout")
        };
        let view = self.step().shared_views.get(&source).cloned().ok_or_else(|| {
            Error::Mlx(format!(
                "layer {layer} reads layer {source}, which has not run in this step"
            ))
        })?;
        Ok((view, self.groups[group].step_mask()))
    }

    /// [`Self::shared`] for a layer that runs only the read positions
    /// `at` (`[B]`, from [`Self::read_positions`]): the same keys and
    /// values, the mask of those queries alone.
    pub fn shared_at(&self, layer: usize, at: &Array) -> Result<(KvView, AttentionMask)> {
        let (view, mask) = self.shared(layer)?;
        let mask = mask.one_query_per_row(at, self.step().query_len, view.columns())?;
        Ok((view, mask))
    }

    /// What one query at each row's next position would attend to in
    /// `layer` (a shared layer: its source), outside any step and with
    /// nothing written: its keys and values and the layer kind's mask. For
    /// a drafter that reads the target's cache (Gemma 4's assistant).
    pub fn peek(&self, layer: usize) -> Result<(KvView, AttentionMask)> {
        let layer = match self.slots[layer] {
            Slot::Shared { source } => source,
            _ => layer,
        };
        let Slot::Attention { group, member } = self.slots[layer] else {
            return Err(Error::Mlx(format!("layer {layer} keeps no keys and values")));
        };
        self.groups[group]
            .peek(member)?
            .ok_or_else(|| Error::Mlx(format!("layer {layer} holds nothing yet")))
    }

    fn recurrent_index(&self, layer: usize) -> Result<usize> {
        match self.slots[layer] {
            Slot::Recurrent { index } => Ok(index),
            _ => Err(Error::Mlx(format!("layer {layer} is not a recurrent layer"))),
        }
    }

    /// A recurrent layer's state (`None` before its first step: start from zeros).
    pub fn recurrent_state(&self, layer: usize) -> Result<Option<&[Array]>> {
        Ok(self.recurrent.get(self.recurrent_index(layer)?))
    }

    pub fn set_recurrent_state(&mut self, layer: usize, state: Vec<Array>) -> Result<()> {
        let index = self.recurrent_index(layer)?;
        if self.step.as_ref().is_some_and(|s| s.query_len == 1) {
            layer_queue::queue(&state)?;
        }
        self.recurrent.set(index, state);
        Ok(())
    }

    /// Whether this step records its recurrent states per token
    /// ([`Self::record_next_step`]): a recurrent layer then also hands
    /// [`Self::set_recurrent_steps`] its states after each token.
    pub fn records_recurrent_steps(&self) -> bool {
        self.recurrent.recording()
    }

    /// A recurrent layer's states after each token of this step, each state
    /// array with the step's tokens on axis 1 (`[B, L, …]`).
    pub fn set_recurrent_steps(&mut self, layer: usize, steps: Vec<Array>) -> Result<()> {
        let index = self.recurrent_index(layer)?;
        self.recurrent.set_steps(index, steps);
        Ok(())
    }

    /// Commits the step: rows advance by their real tokens.
    pub fn finish_step(&mut self) -> Result<()> {
        let step = self.step.take().expect("begin_step ran");
        let l = step.query_len;
        match &step.real {
            Some(real) => {
                for (o, r) in self.offsets.iter_mut().zip(real) {
                    *o += r;
                }
            }
            None => self.offsets.iter_mut().for_each(|o| *o += l),
        }
        for g in &mut self.groups {
            g.finish_step(l, step.real.is_none())?;
        }
        self.last_pass = step.real.map(|real| (l, real));
        self.last_step_len = l;
        Ok(())
    }

    /// Keeps only the rows at `keep`, in that order.
    pub fn filter(&mut self, keep: &[usize]) -> Result<()> {
        if keep.len() == self.rows() && keep.iter().enumerate().all(|(i, &k)| i == k) {
            return Ok(());
        }
        for g in &mut self.groups {
            g.filter(keep)?;
        }
        self.recurrent.filter(keep)?;
        self.offsets = keep.iter().map(|&k| self.offsets[k]).collect();
        if let Some(m) = &self.mirror {
            m.filter(keep);
        }
        Ok(())
    }

    /// Appends `other`'s rows (same layout) after this batch's rows.
    pub fn extend(&mut self, mut other: BatchCache) -> Result<()> {
        if self.layout != other.layout {
            return Err(Error::Mlx("joining caches of different models".into()));
        }
        match (&self.mirror, other.mirror.take()) {
            (Some(mine), Some(theirs)) => mine.join(theirs),
            (None, None) => {}
            _ => {
                return Err(Error::Distributed(
                    "joining a mirrored cache and one that is not".into(),
                ))
            }
        }
        for (mine, theirs) in self.groups.iter_mut().zip(other.groups) {
            mine.extend(theirs)?;
        }
        self.recurrent.extend(other.recurrent)?;
        self.offsets.extend(other.offsets);
        Ok(())
    }

    /// Rows' caches gathered into one batch (for a prefill pass).
    pub fn gather(rows: Vec<BatchCache>) -> Result<BatchCache> {
        let mut rows = rows.into_iter();
        let mut batch = rows.next().ok_or_else(|| Error::Mlx("a batch needs a row".into()))?;
        for row in rows {
            batch.extend(row)?;
        }
        Ok(batch)
    }

    /// One cache per row holding exactly its real tokens (after a
    /// right-padded pass, its padding is left out). The buffers are views:
    /// the next pass, or joining the decode batch, copies them.
    pub fn split(mut self) -> Result<Vec<BatchCache>> {
        let (l, real) = match &self.last_pass {
            Some((l, real)) => (*l, real.clone()),
            None => (0, vec![0; self.rows()]),
        };
        let rows: Vec<BatchCache> =
            (0..self.rows()).map(|b| self.row(b, l - real[b], false)).collect::<Result<_>>()?;
        match self.mirror.take() {
            Some(m) => {
                Ok(rows.into_iter().zip(m.split(self.rows())).map(|(r, m)| r.mirrored(m)).collect())
            }
            None => Ok(rows),
        }
    }

    /// Row `row` alone, as a detached float copy (what the prefix cache keeps).
    pub fn row_snapshot(&self, row: usize) -> Result<BatchCache> {
        let copy = self.row(row, 0, true)?;
        let arrays: Vec<Array> = copy
            .groups
            .iter()
            .flat_map(AttentionGroup::arrays)
            .chain(copy.recurrent.arrays())
            .collect();
        mlx_rs::transforms::eval(&arrays)?;
        match &self.mirror {
            Some(m) => Ok(copy.mirrored(m.snapshot(row))),
            None => Ok(copy),
        }
    }

    /// Row `row` without its last `right_padding` columns.
    fn row(&self, row: usize, right_padding: i32, copy: bool) -> Result<BatchCache> {
        let groups = self
            .groups
            .iter()
            .map(|g| g.split_row(row, g.columns() - right_padding, copy))
            .collect::<Result<Vec<_>>>()?;
        Ok(BatchCache {
            layout: self.layout.clone(),
            slots: self.slots.clone(),
            groups,
            recurrent: self.recurrent.row(row, copy)?,
            offsets: vec![self.offsets[row]],
            shared_sources: self.shared_sources.clone(),
            step: None,
            last_pass: None,
            last_step_len: 0,
            mirror: None,
        })
    }

    /// A one-row cache's contents (float, exactly its tokens), e.g. to save it.
    pub fn row_contents(&self) -> Result<RowContents> {
        if self.rows() != 1 {
            return Err(Error::Mlx("row_contents is for a one-row cache".into()));
        }
        let groups = self
            .groups
            .iter()
            .map(|g| {
                Ok(GroupContents {
                    window: g.window(),
                    columns: g.columns(),
                    layers: g.row_layers()?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let recurrent = (0..self.recurrent.len())
            .map(|i| self.recurrent.get(i).map(<[Array]>::to_vec))
            .collect();
        Ok(RowContents { tokens: self.offsets[0], groups, recurrent })
    }

    /// A one-row cache of `layout` holding `contents` (saved by
    /// [`Self::row_contents`], possibly by an earlier run): refused unless
    /// it matches the layout's groups, windows and recurrent layers.
    pub fn from_row_contents(layout: &CacheLayout, contents: RowContents) -> Result<BatchCache> {
        let mut cache = BatchCache::new(layout, 1, None);
        if contents.groups.len() != cache.groups.len()
            || contents.recurrent.len() != cache.recurrent.len()
        {
            return Err(Error::Mlx(format!(
                "saved {} attention groups and {} recurrent layers; the model has {} and {}",
                contents.groups.len(),
                contents.recurrent.len(),
                cache.groups.len(),
                cache.recurrent.len()
            )));
        }
        if contents.tokens < 0 {
            return Err(Error::Mlx("a negative token count".into()));
        }
        for (group, saved) in cache.groups.iter_mut().zip(contents.groups) {
            if group.window() != saved.window {
                return Err(Error::Mlx(format!(
                    "saved window {:?}, the model's is {:?}",
                    saved.window,
                    group.window()
                )));
            }
            let full = group.window().is_none();
            if (full && saved.columns != contents.tokens) || saved.columns > contents.tokens {
                return Err(Error::Mlx(format!(
                    "{} columns saved for {} tokens",
                    saved.columns, contents.tokens
                )));
            }
            group.restore_row(saved.columns, saved.layers)?;
        }
        for (i, state) in contents.recurrent.into_iter().enumerate() {
            if let Some(state) = state {
                if state.iter().any(|a| a.ndim() == 0 || a.dim(0) != 1) {
                    return Err(Error::Mlx("a saved recurrent state is not one row".into()));
                }
                cache.recurrent.set(i, state);
            }
        }
        cache.offsets = vec![contents.tokens];
        Ok(cache)
    }

    /// Whether [`Self::rewind_rows`] can undo tokens of the last step when
    /// that step was recorded ([`Self::record_next_step`]): not in a cache
    /// whose changes other ranks copy.
    fn can_rewind_last_step(&self) -> bool {
        self.mirror.is_none()
    }

    /// Whether [`Self::rewind_rows`] can undo tokens written over several
    /// steps: keys and values can be cut back anywhere; a recurrent state
    /// only within the recorded step.
    pub fn can_rewind(&self) -> bool {
        self.recurrent.is_empty() && self.can_rewind_last_step()
    }

    /// Drops each row's newest `drops[b]` tokens: the draft tokens a
    /// speculative step fed and verification rejected. With recurrent
    /// layers, only tokens of the last step, which must have been recorded,
    /// and never all of them.
    pub fn rewind_rows(&mut self, drops: &[i32]) -> Result<()> {
        assert_eq!(drops.len(), self.rows(), "one count per row");
        if !self.can_rewind_last_step() {
            return Err(Error::Mlx("this cache cannot drop tokens once written".into()));
        }
        if drops.iter().any(|&d| d < 0) || drops.iter().zip(&self.offsets).any(|(d, o)| d > o) {
            return Err(Error::Mlx(format!("cannot drop {drops:?} of {:?} tokens", self.offsets)));
        }
        if !self.recurrent.is_empty() && drops.iter().any(|&d| d > 0) {
            let step = self.last_step_len;
            let keep: Vec<i32> = drops.iter().map(|d| step - d).collect();
            self.recurrent.rewind(&keep)?;
        }
        self.rewind_keys(drops)
    }

    /// Whether some layer keeps a recurrent state.
    pub fn has_recurrent_layers(&self) -> bool {
        !self.recurrent.is_empty()
    }

    /// Every recurrent layer's states now (see [`RecurrentStates::snapshot`]).
    pub fn recurrent_snapshot(&self) -> RecurrentSnapshot {
        self.recurrent.snapshot()
    }

    /// The recurrent states after token `token` of the last step, which
    /// must have been recorded ([`Self::record_next_step`]).
    pub fn recorded_recurrent_snapshot(&self, token: usize) -> Result<RecurrentSnapshot> {
        self.recurrent.recorded(token)
    }

    /// [`Self::rewind_rows`] with the recurrent states given: row `b` drops
    /// its newest `drops[b]` keys and values and takes its recurrent states
    /// from `states[pick[b]]`, which the caller kept from when the row had
    /// those tokens (a draft model's own passes, several steps of them).
    pub fn rewind_rows_to(
        &mut self,
        drops: &[i32],
        states: &[RecurrentSnapshot],
        pick: &[usize],
    ) -> Result<()> {
        assert_eq!(drops.len(), self.rows(), "one count per row");
        if !self.can_rewind_last_step() {
            return Err(Error::Mlx("this cache cannot drop tokens once written".into()));
        }
        if drops.iter().any(|&d| d < 0) || drops.iter().zip(&self.offsets).any(|(d, o)| d > o) {
            return Err(Error::Mlx(format!("cannot drop {drops:?} of {:?} tokens", self.offsets)));
        }
        self.recurrent.restore_rows(states, pick)?;
        self.rewind_keys(drops)
    }

    /// The keys, values and offsets part of [`Self::rewind_rows`] (checked there).
    fn rewind_keys(&mut self, drops: &[i32]) -> Result<()> {
        for g in &mut self.groups {
            g.rewind_rows(drops)?;
        }
        for (o, d) in self.offsets.iter_mut().zip(drops) {
            *o -= d;
        }
        Ok(())
    }

    /// Whether [`Self::truncate`] to `len` would succeed.
    pub fn can_truncate(&self, len: usize) -> bool {
        assert_eq!(self.rows(), 1, "truncate is for one row");
        let total = self.offsets[0];
        let drop = total - len as i32;
        drop == 0
            || (drop > 0
                && self.recurrent.is_empty()
                && self.groups.iter().all(|g| g.can_drop_newest(drop, total)))
    }

    /// For a one-row cache: keeps only its first `len` tokens, if every layer
    /// can (a full layer can always; a sliding layer if it still holds the
    /// window before `len`; a recurrent state only at its own length).
    /// Returns whether it did.
    pub fn truncate(&mut self, len: usize) -> bool {
        if !self.can_truncate(len) {
            return false;
        }
        let drop = self.offsets[0] - len as i32;
        if drop == 0 {
            return true;
        }
        for g in &mut self.groups {
            g.drop_newest(drop);
        }
        self.offsets[0] = len as i32;
        if let Some(m) = &self.mirror {
            m.truncate(len);
        }
        true
    }

    /// Row `row`'s keys and values in layer `layer` (float, without
    /// padding); `None` for a layer without keys or before it ran.
    pub fn row_keys_values(&self, row: usize, layer: usize) -> Result<Option<(Array, Array)>> {
        match self.slots[layer] {
            Slot::Attention { group, member } => self.groups[group].row_keys_values(row, member),
            _ => Ok(None),
        }
    }

    /// Bytes held by every layer's buffers.
    pub fn nbytes(&self) -> usize {
        self.groups.iter().map(AttentionGroup::nbytes).sum::<usize>() + self.recurrent.nbytes()
    }

    /// Bytes row `row`'s own tokens and states take (no padding, no spare capacity).
    pub fn row_nbytes(&self, row: usize) -> usize {
        self.groups.iter().map(|g| g.row_nbytes(row)).sum::<usize>() + self.recurrent.row_nbytes()
    }

    /// Layers stored quantized right now.
    pub fn quantized_layers(&self) -> usize {
        self.groups.iter().map(AttentionGroup::quantized_layers).sum()
    }
}

#[cfg(test)]
mod tests {
    //! A test double of a model over every cache kind — full, recurrent,
    //! shared and sliding layers — with one scalar per token, so that what
    //! each query sees can be computed by hand: an attention layer's output
    //! at a query is the sum of the values it may see; the recurrent layer's
    //! state is the sum of the real tokens so far. Batched (left-padded
    //! decode, right-padded prefill, rows joining and leaving) must equal
    //! each row alone.
    use mlx_rs::{ops, Array};

    use super::*;

    const WINDOW: usize = 4;

    fn layout() -> CacheLayout {
        CacheLayout::new(vec![
            LayerCache::Full,
            LayerCache::Recurrent,
            LayerCache::Shared { source: 0 },
            LayerCache::Sliding { window: WINDOW },
        ])
        .unwrap()
    }

    /// The mask as booleans `[B, 1, L, T]`.
    fn visible(mask: &AttentionMask, b: i32, l: i32, t: i32) -> Array {
        match mask {
            AttentionMask::None => ops::ones::<bool>(&[b, 1, l, t]).unwrap(),
            AttentionMask::Causal => {
                let q =
                    ops::arange::<_, i32>(t - l, t, None).unwrap().reshape(&[1, 1, l, 1]).unwrap();
                let k =
                    ops::arange::<_, i32>(None, t, None).unwrap().reshape(&[1, 1, 1, t]).unwrap();
                ops::broadcast_to(k.le(&q).unwrap(), &[b, 1, l, t]).unwrap()
            }
            AttentionMask::Array(m) => ops::broadcast_to(m, &[b, 1, l, t]).unwrap(),
        }
    }

    /// Sum of the visible values for each query: `[B, L]`.
    fn attend_sum(view: KvView, mask: &AttentionMask, l: i32) -> Array {
        let KvView::Float(_, values) = view else { panic!("float cache") };
        let (b, t) = (values.dim(0), values.dim(2));
        let seen = visible(mask, b, l, t).as_dtype(mlx_rs::Dtype::Float32).unwrap();
        // values [B, 1, T, 1] → [B, 1, 1, T]
        let v = values.reshape(&[b, 1, 1, t]).unwrap();
        seen.multiply(&v).unwrap().sum_axis(-1, false).unwrap().reshape(&[b, l]).unwrap()
    }

    /// One step of the double over `x` `[B, L]`; returns each layer's output `[B, L]`.
    fn step(cache: &mut BatchCache, x: &Array) -> Vec<Array> {
        let (b, l) = (x.dim(0), x.dim(1));
        cache.begin_step(l).unwrap();
        let kv = x.reshape(&[b, 1, l, 1]).unwrap();
        let (view, mask) = cache.update(0, &kv, &kv).unwrap();
        let full = attend_sum(view, &mask, l);
        let real = match cache.real_tokens().unwrap() {
            Some(m) => m.as_dtype(mlx_rs::Dtype::Float32).unwrap(),
            None => ops::ones::<f32>(&[b, l]).unwrap(),
        };
        let before = match cache.recurrent_state(1).unwrap() {
            Some(s) => s[0].clone(),
            None => ops::zeros::<f32>(&[b, 1]).unwrap(),
        };
        // Running sum over real tokens only: padding must never reach the state.
        let running =
            x.multiply(&real).unwrap().cumsum(1, None, None).unwrap().add(&before).unwrap();
        let after = before.add(x.multiply(&real).unwrap().sum_axis(1, true).unwrap()).unwrap();
        if cache.records_recurrent_steps() {
            // the state after each token: the running sum, `[B, L, 1]`
            cache.set_recurrent_steps(1, vec![running.expand_dims(-1).unwrap()]).unwrap();
        }
        cache.set_recurrent_state(1, vec![after]).unwrap();
        let (view, mask) = cache.shared(2).unwrap();
        let shared = attend_sum(view, &mask, l);
        let (view, mask) = cache.update(3, &kv, &kv).unwrap();
        let sliding = attend_sum(view, &mask, l);
        cache.finish_step().unwrap();
        vec![full, running, shared, sliding]
    }

    fn values(a: &Array) -> Vec<f32> {
        let a = a.as_dtype(mlx_rs::Dtype::Float32).unwrap();
        a.eval().unwrap();
        a.as_slice::<f32>().to_vec()
    }

    /// Row outputs of a step, row `r`'s first `n` positions.
    fn row(out: &[Array], r: i32, n: i32) -> Vec<Vec<f32>> {
        out.iter().map(|a| values(&a.index((r..r + 1, 0..n)))).collect()
    }

    use mlx_rs::ops::indexing::IndexOp;

    fn tokens(seed: f32, n: usize) -> Vec<f32> {
        (0..n).map(|i| seed + i as f32).collect()
    }

    /// A lone row fed `prompt` at once, then `decode` one token at a time:
    /// each step's outputs at its last position.
    fn alone(prompt: &[f32], decode: &[f32]) -> Vec<Vec<Vec<f32>>> {
        let mut c = BatchCache::new(&layout(), 1, None);
        let n = prompt.len() as i32;
        let mut out = vec![row(&step(&mut c, &Array::from_slice(prompt, &[1, n])), 0, n)];
        for &t in decode {
            out.push(row(&step(&mut c, &Array::from_slice(&[t], &[1, 1])), 0, 1));
        }
        out
    }

    #[test]
    fn every_cache_kind_batched_equals_each_row_alone() {
        let (a, b) = (tokens(1.0, 7), tokens(100.0, 2));
        let decode_a = tokens(20.0, 5);
        let decode_b = tokens(200.0, 5);
        let want_a = alone(&a, &decode_a);
        let want_b = alone(&b, &decode_b);

        // A right-padded prefill pass of both rows (7 and 2 real tokens).
        let rows = vec![BatchCache::new(&layout(), 1, None), BatchCache::new(&layout(), 1, None)];
        let mut pass = BatchCache::gather(rows).unwrap();
        pass.set_real_tokens(vec![7, 2]);
        let mut x = a.clone();
        x.extend(b.iter().copied().chain(std::iter::repeat_n(-1000.0, 5)));
        let out = step(&mut pass, &Array::from_slice(&x, &[2, 7]));
        assert_eq!(row(&out, 0, 7), want_a[0]);
        assert_eq!(row(&out, 1, 2), want_b[0], "padding leaked into a short row");
        let mut split = pass.split().unwrap();
        assert_eq!(split[1].offsets(), [2]);

        // Row b decodes alone for two tokens, then a joins (left padding).
        let mut batch = BatchCache::new(&layout(), 0, None);
        batch.extend(split.remove(1)).unwrap();
        for &t in &decode_b[..2] {
            step(&mut batch, &Array::from_slice(&[t], &[1, 1]));
        }
        batch.extend(split.remove(0)).unwrap();
        assert_eq!(batch.offsets(), [4, 7]);
        for i in 0..3 {
            let out =
                step(&mut batch, &Array::from_slice(&[decode_b[i + 2], decode_a[i]], &[2, 1]));
            assert_eq!(row(&out, 0, 1), want_b[i + 3], "row b, step {i}");
            assert_eq!(row(&out, 1, 1), want_a[i + 1], "row a, step {i}");
        }
        // b leaves; a goes on alone, its left padding dropped.
        batch.filter(&[1]).unwrap();
        for i in 3..5 {
            let out = step(&mut batch, &Array::from_slice(&[decode_a[i]], &[1, 1]));
            assert_eq!(row(&out, 0, 1), want_a[i + 1], "row a after b left, step {i}");
        }
    }

    /// A row fed `tokens` one at a time: each step's outputs.
    fn fed_one_at_a_time(tokens: &[f32]) -> Vec<Vec<Vec<f32>>> {
        let mut c = BatchCache::new(&layout(), 1, None);
        tokens
            .iter()
            .map(|&t| row(&step(&mut c, &Array::from_slice(&[t], &[1, 1])), 0, 1))
            .collect()
    }

    /// A speculative step writes three tokens per row; the rows keep one,
    /// two and all three. What they see afterwards — the attention layers'
    /// columns and the recurrent state — must be what they would see had
    /// they been fed only the kept tokens, one at a time.
    #[test]
    fn rows_rewound_by_different_counts_equal_rows_fed_only_what_they_kept() {
        let prompts = [tokens(1.0, 9), tokens(100.0, 3), tokens(50.0, 6)];
        let drafts = [[7.5, -1.0, -2.0], [8.5, 9.5, -3.0], [4.0, 5.0, 6.0]];
        let kept = [1, 2, 3];
        let after = [tokens(300.0, 6), tokens(400.0, 6), tokens(500.0, 6)];

        let mut batch = BatchCache::new(&layout(), 0, None);
        for p in &prompts {
            let mut row = BatchCache::new(&layout(), 1, None);
            step(&mut row, &Array::from_slice(p, &[1, p.len() as i32]));
            batch.extend(row).unwrap();
        }
        let flat: Vec<f32> = drafts.iter().flatten().copied().collect();
        batch.record_next_step();
        step(&mut batch, &Array::from_slice(&flat, &[3, 3]));
        batch.rewind_rows(&[2, 1, 0]).unwrap();
        assert_eq!(batch.offsets(), [10, 5, 9]);
        let mut got = vec![Vec::new(); 3];
        for i in 0..6 {
            let x: Vec<f32> = after.iter().map(|a| a[i]).collect();
            let out = step(&mut batch, &Array::from_slice(&x, &[3, 1]));
            for (r, g) in got.iter_mut().enumerate() {
                g.push(row(&out, r as i32, 1));
            }
        }
        for r in 0..3 {
            let mut fed = prompts[r].clone();
            fed.extend(&drafts[r][..kept[r]]);
            let n = fed.len();
            fed.extend(&after[r]);
            let want = fed_one_at_a_time(&fed);
            assert_eq!(got[r], want[n..], "row {r}, which kept {}", kept[r]);
        }
    }

    /// A recurrent state keeps no history: it goes back only within the
    /// step that recorded its per-token states, and not past its start.
    #[test]
    fn a_recurrent_state_goes_back_only_within_a_recorded_step() {
        let mut c = BatchCache::new(&layout(), 1, None);
        step(&mut c, &Array::from_slice(&tokens(1.0, 3), &[1, 3]));
        assert!(!c.can_rewind());
        assert!(c.rewind_rows(&[1]).is_err(), "an unrecorded step");
        c.record_next_step();
        step(&mut c, &Array::from_slice(&tokens(10.0, 3), &[1, 3]));
        assert!(c.rewind_rows(&[3]).is_err(), "the whole step");
        c.rewind_rows(&[2]).unwrap();
        assert!(c.rewind_rows(&[1]).is_err(), "the records are used up");
    }

    #[test]
    fn a_shared_layer_needs_its_source_to_have_run() {
        let mut c = BatchCache::new(&layout(), 1, None);
        c.begin_step(1).unwrap();
        assert!(c.shared(2).is_err());
        assert!(c
            .update(
                1,
                &ops::zeros::<f32>(&[1, 1, 1, 1]).unwrap(),
                &ops::zeros::<f32>(&[1, 1, 1, 1]).unwrap()
            )
            .is_err());
    }

    #[test]
    fn sliding_layers_keep_a_bounded_window_and_truncation_respects_it() {
        let sliding =
            CacheLayout::new(vec![LayerCache::Sliding { window: WINDOW }, LayerCache::Full])
                .unwrap();
        let mut c = BatchCache::new(&sliding, 1, None);
        for t in 0..600 {
            let x = Array::from_slice(&[t as f32], &[1, 1, 1, 1]);
            c.begin_step(1).unwrap();
            let (_, mask) = c.update(0, &x, &x).unwrap();
            let (view, _) = c.update(1, &x, &x).unwrap();
            let KvView::Float(keys, _) = view else { panic!() };
            assert_eq!(keys.dim(2), t + 1, "the full layer keeps everything");
            c.finish_step().unwrap();
            if let AttentionMask::Array(m) = mask {
                let seen = values(&m.as_dtype(mlx_rs::Dtype::Float32).unwrap()).iter().sum::<f32>();
                assert_eq!(seen, WINDOW as f32, "a query sees exactly the window");
            }
        }
        let kept = c.groups[0].columns();
        assert!(
            kept < (WINDOW as i32 - 1) + attention_group_slack() + STEP_COLUMNS,
            "the window is bounded: {kept}"
        );
        // 600 tokens; the sliding layer can step back only within its slack.
        assert!(c.can_truncate(600 - 10));
        assert!(!c.can_truncate(300));
        let full_only = CacheLayout::full(1);
        let mut f = BatchCache::new(&full_only, 1, None);
        let x = ops::ones::<f32>(&[1, 1, 50, 1]).unwrap();
        f.begin_step(50).unwrap();
        f.update(0, &x, &x).unwrap();
        f.finish_step().unwrap();
        assert!(f.can_truncate(5));
        assert!(f.truncate(20));
        assert_eq!(f.offsets(), [20]);
    }

    #[test]
    fn a_recurrent_state_is_reusable_only_at_its_own_length() {
        let mut c = BatchCache::new(&layout(), 1, None);
        step(&mut c, &Array::from_slice(&tokens(1.0, 6), &[1, 6]));
        assert!(c.can_truncate(6));
        assert!(!c.can_truncate(5));
    }

    fn attention_group_slack() -> i32 {
        super::super::attention_group::SLIDING_SLACK
    }

    const STEP_COLUMNS: i32 = super::super::attention_group::STEP;
}
