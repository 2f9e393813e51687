//! Drafting with the target's own multi-token-prediction head
//! ([`crate::model::DraftHead`], Qwen3.5's `mtp.*` layers).
//!
//! The head's entry `i` pairs the target's hidden state at position `i` with
//! the token at `i + 1`; its output guesses the token at `i + 2`. So the
//! target's passes hand each row their hidden states
//! ([`TargetHidden`], kept on the sequence), and the head reads them once
//! the next token is known: the prompt's when the row joins, then at each
//! draft the positions the target has fed since. Its last real entry gives
//! the first draft; each further draft feeds the previous draft with the
//! head's own output in place of the target's hidden state. Those guessed
//! entries are dropped right after drafting: the next round reads the
//! target's real hidden states for whatever it kept.
//!
//! The head's cache has a row per running row, like a draft model's (see
//! [`super::draft_model`]). A row's entries start where the target's hidden
//! states do (after a prefix-cache hit, the cached part has none): RoPE
//! sees only distances, so the head counts its positions from there.
use mlx_rs::{ops, ops::indexing::IndexOp, Array};

use crate::cache::BatchCache;
use crate::error::{Error, Result};
use crate::generate::PREFILL_CHUNK;
use crate::model::{DraftHead, LanguageModel, Positions};

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
    /// Row `b`: the head's entries for running row `b`.
    cache: BatchCache,
    /// Per row, the target position of its first entry.
    base: Vec<usize>,
    layout: crate::cache::CacheLayout,
}

impl MtpDrafter {
    /// Refused for a model without a draft head, naming it.
    pub fn new(model: &dyn LanguageModel, name: &str) -> Result<Self> {
        let head = head(model).map_err(|_| {
            Error::InvalidRequest(format!(
                "{name} has no multi-token-prediction head (no mtp.* tensors in its checkpoint): \
                 choose prompt lookup or a draft model"
            ))
        })?;
        let layout = head.cache_layout();
        Ok(Self { cache: BatchCache::new(&layout, 0, None), base: Vec::new(), layout })
    }

    /// A row joined the target's batch with its first token sampled: the
    /// head reads the prompt's hidden states (paired with the next tokens).
    pub fn join(
        &mut self,
        model: &dyn LanguageModel,
        tokens: &[u32],
        hidden: &mut TargetHidden,
    ) -> Result<()> {
        let mut row = BatchCache::new(&self.layout, 1, None);
        let base = match hidden.take()? {
            Some((from, states)) => {
                let n = states.dim(0) as usize;
                let mut start = 0;
                while start < n {
                    let end = (start + PREFILL_CHUNK).min(n);
                    let next = &tokens[from + start + 1..from + end + 1];
                    let h = states.index(start as i32..end as i32).expand_dims(0)?;
                    read(model, &mut row, next, &h)?.eval()?;
                    start = end;
                }
                from
            }
            None => tokens.len() - 1,
        };
        self.cache.extend(row)?;
        self.base.push(base);
        Ok(())
    }

    /// Keeps the rows at `keep`, as the target's batch did.
    pub fn filter(&mut self, keep: &[usize]) -> Result<()> {
        self.cache.filter(keep)?;
        self.base = keep.iter().map(|&k| self.base[k]).collect();
        Ok(())
    }

    /// Drops every row (the target's batch failed and starts over).
    pub fn clear(&mut self) {
        self.cache = BatchCache::new(&self.layout, 0, None);
        self.base.clear();
    }

    /// Each drafting row's guesses: one pass over the hidden states the
    /// head has not read (each row's last one gives its first guess), then
    /// one pass per further guess, after which those guessed entries go.
    pub fn propose(
        &mut self,
        model: &dyn LanguageModel,
        rows: &mut [MtpRow],
    ) -> Result<Vec<Vec<u32>>> {
        assert_eq!(rows.len(), self.cache.rows(), "one head row per running row");
        // A row whose waiting states do not follow its entries starts afresh.
        let mut waiting = Vec::with_capacity(rows.len());
        let mut restart = vec![0; rows.len()];
        for (i, r) in rows.iter_mut().enumerate() {
            if r.wanted == 0 {
                waiting.push(None);
                continue;
            }
            let held = self.base[i] + self.cache.offsets()[i] as usize;
            let taken = r.hidden.take()?;
            if let Some((from, _)) = &taken {
                if *from != held {
                    restart[i] = self.cache.offsets()[i];
                    self.base[i] = *from;
                }
            }
            waiting.push(taken);
        }
        if restart.iter().any(|&d| d > 0) {
            self.cache.rewind_rows(&restart)?;
        }
        let k = rows
            .iter()
            .zip(&waiting)
            .map(|(r, w)| if w.is_some() { r.wanted } else { 0 })
            .max()
            .unwrap_or(0);
        if k == 0 {
            return Ok(vec![Vec::new(); rows.len()]);
        }
        let head = head(model)?;
        let b = rows.len() as i32;
        // The reading pass, right-padded; the padding's entries go after it.
        let width = waiting.iter().flatten().map(|(_, h)| h.dim(0)).max().unwrap_or(1);
        let d = waiting.iter().flatten().map(|(_, h)| h.dim(1)).next().expect("a drafting row");
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
                None => (0, ops::zeros_dtype(&[0, d], dtype_of(&waiting))?),
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
        let mut hidden = out.take_along_axis(&at, 1)?;
        let drops: Vec<i32> =
            waiting.iter().map(|w| width - w.as_ref().map_or(0, |(_, h)| h.dim(0))).collect();
        self.cache.rewind_rows(&drops)?;
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
            .zip(&waiting)
            .enumerate()
            .map(|(i, (r, w))| {
                let n = if w.is_some() { r.wanted } else { 0 };
                flat[i * k..i * k + n].iter().map(|&t| t as u32).collect()
            })
            .collect())
    }
}

fn head(model: &dyn LanguageModel) -> Result<&dyn DraftHead> {
    model.draft_head().ok_or_else(|| Error::InvalidRequest("the model has no draft head".into()))
}

/// The head reads `hidden` `[1, n, D]` paired with `next` (the tokens one
/// position later) into `row`; returns its output.
fn read(
    model: &dyn LanguageModel,
    row: &mut BatchCache,
    next: &[u32],
    hidden: &Array,
) -> Result<Array> {
    let ids: Vec<i32> = next.iter().map(|&t| t as i32).collect();
    let input = Array::from_slice(&ids, &[1, ids.len() as i32]);
    let start = row.offsets()[0];
    head(model)?.forward(&model.embed(&input)?, hidden, &Positions::rows(&[start]), row)
}

/// The head's guess: the target's argmax over its output `[B, 1, D]` → `[B, 1]`.
fn greedy(model: &dyn LanguageModel, hidden: &Array) -> Result<Array> {
    let logits = model.logits(hidden)?;
    let b = hidden.dim(0);
    Ok(ops::indexing::argmax_axis(&logits, -1, false)?.reshape(&[b, 1])?)
}

fn dtype_of(waiting: &[Option<(usize, Array)>]) -> mlx_rs::Dtype {
    waiting.iter().flatten().map(|(_, h)| h.dtype()).next().unwrap_or(mlx_rs::Dtype::Float32)
}
