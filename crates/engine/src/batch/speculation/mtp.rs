//! Drafting with the target's own multi-token-prediction head
//! ([`crate::model::DraftHead`], a checkpoint's `mtp.*` layers).
//!
//! The head's entry `i` pairs the target's hidden state at position `i` with
//! the token at `i + 1`; its output guesses the token at `i + 2`. So the
//! target's passes hand each row their hidden states
//! ([`TargetHidden`], kept on the sequence), and the head reads them once
//! the next token is known: the prompt's when the row joins, then at each
//! draft the positions the target has fed since. Its last real entry gives
//! the first draft (right after a join, the prompt's last entry: the row
//! drafts in its first step, as mlx-vlm's MTP rounds do); each further draft
//! feeds the previous draft with the head's own output in place of the
//! target's hidden state. Those guessed entries are dropped right after
//! drafting: the next round reads the target's real hidden states for
//! whatever it kept (mlx-vlm keeps the guessed entries of kept drafts;
//! vLLM and SGLang read the target's, as here).
//!
//! The head is the model's own ([`LanguageModel::draft_head`]) or one
//! loaded beside it from a drafter folder ([`MtpDrafter::with_head`]); either
//! way it reads the target's embeddings and drafts through its logits.
//!
//! A drafter that reads the target's cache instead of keeping one
//! ([`KvDrafter`], an assistant drafter; [`MtpDrafter::reading`]) drafts
//! from each row's last token and the target's hidden state before it
//! alone: it keeps no entries, and the other waiting states are dropped.
//!
//! The head's cache has a row per running row, like a draft model's (see
//! [`super::draft_model`]). A row's entries start where the target's hidden
//! states do (after a prefix-cache hit, the cached part has none): RoPE
//! sees only distances, so the head counts its positions from there.
use mlx_rs::{ops, ops::indexing::IndexOp, Array};

use crate::cache::BatchCache;
use crate::error::{Error, Result};
use crate::generate::PREFILL_CHUNK;
use crate::model::{DraftHead, KvDrafter, LanguageModel, Positions};

/// Most positions a row keeps waiting for the head while it does not draft
/// (a large batch steps speculation aside): beyond it the oldest go, and the
/// head starts that row afresh when it drafts again.
const MAX_WAITING: usize = 512;

/// The target's final hidden states of one row that the head has not read
/// yet: contiguous positions from `from`.
#[derive(Default)]
pub struct TargetHidden {
    from: usize,
    /// `[n, D]` each, in order.
    chunks: Vec<Array>,
    len: usize,
}

impl TargetHidden {
    /// Appends the hidden states `[n, D]` of positions `at..at + n`.
    pub fn push(&mut self, at: usize, hidden: Array) {
        if self.chunks.is_empty() || at != self.from + self.len {
            // A gap (nothing kept before): start from here.
            *self = TargetHidden { from: at, chunks: Vec::new(), len: 0 };
        }
        self.len += hidden.dim(0) as usize;
        self.chunks.push(hidden);
        while self.len > MAX_WAITING && self.chunks.len() > 1 {
            let first = self.chunks.remove(0);
            self.from += first.dim(0) as usize;
            self.len -= first.dim(0) as usize;
        }
    }

    /// Takes everything but keeps only the last state: its position and `[1, D]`.
    fn take_last(&mut self) -> Option<(usize, Array)> {
        let last = self.chunks.pop()?;
        let at = self.from + self.len - 1;
        *self = TargetHidden::default();
        let n = last.dim(0);
        Some((at, last.index(n - 1..n)))
    }

    /// Takes everything: the first position and `[n, D]`.
    fn take(&mut self) -> Result<Option<(usize, Array)>> {
        if self.len == 0 {
            return Ok(None);
        }
        let chunks = std::mem::take(&mut self.chunks);
        let from = self.from;
        self.from += self.len;
        self.len = 0;
        Ok(Some((from, ops::concatenate(&chunks, 0)?)))
    }
}

/// What [`MtpDrafter::propose`] needs of one running row.
pub struct MtpRow<'a> {
    /// The row's tokens so far (the last not fed to the target yet).
    pub tokens: &'a [u32],
    /// The target's hidden states the head has not read.
    pub hidden: &'a mut TargetHidden,
    /// Tokens to draft (0: the row does not speculate this step).
    pub wanted: usize,
}

pub struct MtpDrafter {
    /// A head loaded from a drafter folder; `None`: the model's own.
    external: Option<Box<dyn DraftHead>>,
    /// A drafter reading the target's cache, in place of a head.
    reader: Option<Box<dyn KvDrafter>>,
    /// Row `b`: the head's entries for running row `b`.
    cache: BatchCache,
    /// Per row, the target position of its first entry.
    base: Vec<usize>,
    /// Per row that just joined, its last prompt entry's output `[1, 1, D]`:
    /// the first draft, in the step right after the join (nothing waits yet).
    seeds: Vec<Option<Array>>,
    layout: crate::cache::CacheLayout,
}

impl MtpDrafter {
    /// Refused for a model without a draft head, naming it.
    pub fn new(model: &dyn LanguageModel, name: &str) -> Result<Self> {
        let head = model.draft_head().ok_or_else(|| {
            Error::InvalidRequest(format!(
                "{name} has no multi-token-prediction head (no mtp.* tensors in its checkpoint): \
                 choose prompt lookup or a draft model, or give a head split from it \
                 (mlx-vlm's split_mtp folder) as the draft model"
            ))
        })?;
        let layout = head.cache_layout();
        Ok(Self {
            external: None,
            reader: None,
            cache: BatchCache::new(&layout, 0, None),
            base: Vec::new(),
            seeds: Vec::new(),
            layout,
        })
    }

    /// Drafting with `head`, loaded from a drafter folder for the target
    /// ([`crate::model::load_draft_head`]), not the model's own.
    pub fn with_head(head: Box<dyn DraftHead>) -> Self {
        let layout = head.cache_layout();
        Self {
            external: Some(head),
            reader: None,
            cache: BatchCache::new(&layout, 0, None),
            base: Vec::new(),
            seeds: Vec::new(),
            layout,
        }
    }

    /// Drafting with `reader`, which reads the target's cache
    /// ([`crate::model::load_assistant`]).
    pub fn reading(reader: Box<dyn KvDrafter>) -> Self {
        let layout = crate::cache::CacheLayout::full(0);
        Self {
            external: None,
            reader: Some(reader),
            cache: BatchCache::new(&layout, 0, None),
            base: Vec::new(),
            seeds: Vec::new(),
            layout,
        }
    }

    /// A row joined the target's batch with its first token sampled: the
    /// head reads the prompt's hidden states (paired with the next tokens).
    pub fn join(
        &mut self,
        model: &dyn LanguageModel,
        tokens: &[u32],
        hidden: &mut TargetHidden,
    ) -> Result<()> {
        if self.reader.is_some() {
            // It reads the last state when it drafts.
            self.base.push(0);
            self.seeds.push(None);
            return Ok(());
        }
        let mut row = BatchCache::new(&self.layout, 1, None);
        let mut seed = None;
        let base = match hidden.take()? {
            Some((from, states)) => {
                let n = states.dim(0) as usize;
                let mut start = 0;
                while start < n {
                    let end = (start + PREFILL_CHUNK).min(n);
                    let next = &tokens[from + start + 1..from + end + 1];
                    let h = states.index(start as i32..end as i32).expand_dims(0)?;
                    let out = read(model, head(&self.external, model)?, &mut row, next, &h)?;
                    out.eval()?;
                    let l = out.dim(1);
                    seed = Some(out.index((.., l - 1..l, ..)));
                    start = end;
                }
                from
            }
            None => tokens.len() - 1,
        };
        self.cache.extend(row)?;
        self.base.push(base);
        self.seeds.push(seed);
        Ok(())
    }

    /// Keeps the rows at `keep`, as the target's batch did.
    pub fn filter(&mut self, keep: &[usize]) -> Result<()> {
        if self.reader.is_none() {
            self.cache.filter(keep)?;
        }
        self.base = keep.iter().map(|&k| self.base[k]).collect();
        self.seeds = keep.iter().map(|&k| self.seeds[k].clone()).collect();
        Ok(())
    }

    /// Drops every row (the target's batch failed and starts over).
    pub fn clear(&mut self) {
        self.cache = BatchCache::new(&self.layout, 0, None);
        self.base.clear();
        self.seeds.clear();
    }

    /// Each drafting row's guesses: one pass over the hidden states the
    /// head has not read (each row's last one gives its first guess), then
    /// one pass per further guess, after which those guessed entries go.
    /// `target` is the target's cache and `starts` each row's next position
    /// (what a drafter that reads the target's cache needs).
    pub fn propose(
        &mut self,
        model: &dyn LanguageModel,
        target: &BatchCache,
        starts: &[i32],
        rows: &mut [MtpRow],
    ) -> Result<Vec<Vec<u32>>> {
        if let Some(reader) = &self.reader {
            return propose_reading(reader.as_ref(), model, target, starts, rows);
        }
        assert_eq!(rows.len(), self.cache.rows(), "one head row per running row");
        // A row whose waiting states do not follow its entries starts afresh.
        let mut waiting = Vec::with_capacity(rows.len());
        // A row with nothing waiting since it joined drafts from its seed.
        let mut seeded: Vec<Option<Array>> = vec![None; rows.len()];
        let mut restart = vec![0; rows.len()];
        for (i, r) in rows.iter_mut().enumerate() {
            // A seed serves only the step right after the join.
            let seed = self.seeds[i].take();
            if r.wanted == 0 {
                waiting.push(None);
                continue;
            }
            let held = self.base[i] + self.cache.offsets()[i] as usize;
            let taken = r.hidden.take()?;
            match &taken {
                Some((from, _)) if *from != held => {
                    restart[i] = self.cache.offsets()[i];
                    self.base[i] = *from;
                }
                Some(_) => {}
                None => seeded[i] = seed,
            }
            waiting.push(taken);
        }
        if restart.iter().any(|&d| d > 0) {
            self.cache.rewind_rows(&restart)?;
        }
        let drafting: Vec<bool> =
            waiting.iter().zip(&seeded).map(|(w, s)| w.is_some() || s.is_some()).collect();
        let k = rows
            .iter()
            .zip(&drafting)
            .map(|(r, &d)| if d { r.wanted } else { 0 })
            .max()
            .unwrap_or(0);
        if k == 0 {
            return Ok(vec![Vec::new(); rows.len()]);
        }
        let head = head(&self.external, model)?;
        let b = rows.len() as i32;
        let d = waiting
            .iter()
            .flatten()
            .map(|(_, h)| h.dim(1))
            .chain(seeded.iter().flatten().map(|s| s.dim(-1)))
            .next()
            .expect("a drafting row");
        let dtype = waiting
            .iter()
            .flatten()
            .map(|(_, h)| h.dtype())
            .chain(seeded.iter().flatten().map(|s| s.dtype()))
            .next()
            .expect("a drafting row");
        // The reading pass, right-padded; the padding's entries go after it.
        let read_out = if waiting.iter().any(Option::is_some) {
            let width = waiting.iter().flatten().map(|(_, h)| h.dim(0)).max().unwrap_or(1);
            let mut ids = Vec::with_capacity((b * width) as usize);
            let mut states = Vec::with_capacity(rows.len());
            let mut last = Vec::with_capacity(rows.len());
            for (r, w) in rows.iter().zip(&waiting) {
                let filler = *r.tokens.last().expect("a row has tokens") as i32;
                let (n, h) = match w {
                    Some((from, h)) => {
                        let n = h.dim(0);
                        let next = &r.tokens[from + 1..from + 1 + n as usize];
                        ids.extend(next.iter().map(|&t| t as i32));
                        (n, h.clone())
                    }
                    None => (0, ops::zeros_dtype(&[0, d], dtype)?),
                };
                ids.extend(std::iter::repeat_n(filler, (width - n) as usize));
                let pad = ops::zeros_dtype(&[width - n, d], h.dtype())?;
                states.push(ops::concatenate(&[h, pad], 0)?.expand_dims(0)?);
                last.push((n - 1).max(0));
            }
            let input = Array::from_slice(&ids, &[b, width]);
            let offsets = self.cache.offsets().to_vec();
            let out = head.forward(
                &model.embed(&input)?,
                &ops::concatenate(&states, 0)?,
                &Positions::rows(&offsets),
                &mut self.cache,
            )?;
            let at = Array::from_slice(&last, &[b, 1, 1]);
            let drops: Vec<i32> =
                waiting.iter().map(|w| width - w.as_ref().map_or(0, |(_, h)| h.dim(0))).collect();
            self.cache.rewind_rows(&drops)?;
            Some(out.take_along_axis(&at, 1)?)
        } else {
            None
        };
        // Each row's last real entry's output: read now, or its seed.
        let mut hidden = match (&read_out, seeded.iter().any(Option::is_some)) {
            (Some(out), false) => out.clone(),
            (out, _) => {
                let zero = ops::zeros_dtype(&[1, 1, d], dtype)?;
                let parts: Vec<Array> = (0..rows.len())
                    .map(|i| match (&seeded[i], out) {
                        (Some(seed), _) => seed.clone(),
                        (None, Some(out)) => out.index(i as i32..i as i32 + 1),
                        (None, None) => zero.clone(),
                    })
                    .collect();
                ops::concatenate(&parts, 0)?
            }
        };
        let mut token = greedy(model, &hidden)?;
        let mut drafted = vec![token.clone()];
        for _ in 1..k {
            let starts = self.cache.offsets().to_vec();
            hidden = head.forward(
                &model.embed(&token)?,
                &hidden,
                &Positions::rows(&starts),
                &mut self.cache,
            )?;
            token = greedy(model, &hidden)?;
            drafted.push(token.clone());
        }
        let drafted = ops::concatenate(&drafted, 1)?.as_dtype(mlx_rs::Dtype::Int32)?;
        drafted.eval()?;
        // The guessed entries go: the next round reads the target's own states.
        self.cache.rewind_rows(&vec![k as i32 - 1; rows.len()])?;
        let flat = drafted.as_slice::<i32>();
        Ok(rows
            .iter()
            .zip(&drafting)
            .enumerate()
            .map(|(i, (r, &d))| {
                let n = if d { r.wanted } else { 0 };
                flat[i * k..i * k + n].iter().map(|&t| t as u32).collect()
            })
            .collect())
    }
}

/// Drafts by a drafter that reads the target's cache: each drafting row's
/// last token and the target's hidden state before it (at the position
/// right before `starts`), every row in one pass per draft.
fn propose_reading(
    reader: &dyn KvDrafter,
    model: &dyn LanguageModel,
    target: &BatchCache,
    starts: &[i32],
    rows: &mut [MtpRow],
) -> Result<Vec<Vec<u32>>> {
    let offsets = target.offsets();
    let mut states = Vec::with_capacity(rows.len());
    for (i, r) in rows.iter_mut().enumerate() {
        let last = r.hidden.take_last();
        // The state of the last token the target's cache holds, or none.
        let state = last.filter(|(at, _)| r.wanted > 0 && at + 1 == offsets[i] as usize);
        states.push(state.map(|(_, h)| h));
    }
    let k = rows.iter().zip(&states).map(|(r, s)| if s.is_some() { r.wanted } else { 0 }).max();
    let (Some(k), Some(like)) = (k.filter(|&k| k > 0), states.iter().flatten().next()) else {
        return Ok(vec![Vec::new(); rows.len()]);
    };
    let zeros = ops::zeros_like(like)?;
    let hidden: Vec<Array> =
        states.iter().map(|s| s.clone().unwrap_or_else(|| zeros.clone())).collect();
    let hidden = ops::stack(&hidden, 0)?;
    let last: Vec<i32> =
        rows.iter().map(|r| *r.tokens.last().expect("a row has tokens") as i32).collect();
    let tokens = Array::from_slice(&last, &[rows.len() as i32, 1]);
    let positions: Vec<i32> = starts.iter().map(|&s| s - 1).collect();
    let drafted = reader.draft(model, target, &tokens, &hidden, &positions, k)?;
    let drafted = drafted.as_dtype(mlx_rs::Dtype::Int32)?;
    drafted.eval()?;
    let flat = drafted.as_slice::<i32>();
    Ok(rows
        .iter()
        .zip(&states)
        .enumerate()
        .map(|(i, (r, s))| {
            let n = if s.is_some() { r.wanted } else { 0 };
            flat[i * k..i * k + n].iter().map(|&t| t as u32).collect()
        })
        .collect())
}

/// The head loaded beside the model, else the model's own.
fn head<'a>(
    external: &'a Option<Box<dyn DraftHead>>,
    model: &'a dyn LanguageModel,
) -> Result<&'a dyn DraftHead> {
    match external {
        Some(head) => Ok(head.as_ref()),
        None => model
            .draft_head()
            .ok_or_else(|| Error::InvalidRequest("the model has no draft head".into())),
    }
}

/// The head reads `hidden` `[1, n, D]` paired with `next` (the tokens one
/// position later) into `row`; returns its output.
fn read(
    model: &dyn LanguageModel,
    head: &dyn DraftHead,
    row: &mut BatchCache,
    next: &[u32],
    hidden: &Array,
) -> Result<Array> {
    let ids: Vec<i32> = next.iter().map(|&t| t as i32).collect();
    let input = Array::from_slice(&ids, &[1, ids.len() as i32]);
    let start = row.offsets()[0];
    head.forward(&model.embed(&input)?, hidden, &Positions::rows(&[start]), row)
}

/// The head's guess: the target's argmax over its output `[B, 1, D]` → `[B, 1]`.
fn greedy(model: &dyn LanguageModel, hidden: &Array) -> Result<Array> {
    let logits = model.logits(hidden)?;
    let b = hidden.dim(0);
    Ok(ops::indexing::argmax_axis(&logits, -1, false)?.reshape(&[b, 1])?)
}
