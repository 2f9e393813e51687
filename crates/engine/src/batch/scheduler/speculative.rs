//! The speculative decode step (see [`crate::batch::speculation`]): drafts
//! for the rows that can take them, one target pass over every row's last
//! token and its draft, each row keeping what the target agrees with, and
//! the batch cache cut back per row to what was kept.
use mlx_rs::{ops, ops::indexing::IndexOp, Array};

use super::Scheduler;
use crate::batch::logprobs::PendingLogprobs;
use crate::batch::sequence::Sequence;
use crate::batch::speculation::draft_model::DraftRow;
use crate::batch::speculation::mtp::MtpRow;
use crate::batch::speculation::round_cost::RoundCost;
use crate::batch::speculation::{acceptance, lookup, DraftKind};
use crate::error::Result;

/// A step's drafts, one per running row (empty: the row does not
/// speculate), and the rows' grammar masks for their first token.
pub(super) struct Drafts {
    tokens: Vec<Vec<u32>>,
    masks: Vec<Option<Array>>,
    /// Per row, the draft tokens the draft model fed to its own cache (0
    /// without a draft model): what it drops again beyond those kept.
    draft_model_fed: Vec<usize>,
    /// Per drafting row with a grammar in force, its masks at the last
    /// token and after each draft token, `[1 + draft, vocab]`.
    verify_masks: Vec<Option<Array>>,
    /// The round's CPU so far (the drafting), for its debug line.
    cost: RoundCost,
}

impl Scheduler {
    /// This step's drafts, when speculation is on, the batch is small enough
    /// and some row has one. Reads back the step in flight first: a draft
    /// continues the row's latest tokens.
    pub(super) fn drafts(&mut self) -> Result<Option<Drafts>> {
        let Some(config) = self.speculation.clone() else { return Ok(None) };
        if self.running.len() > config.max_batch
            || !self.running.iter().any(Sequence::can_speculate)
        {
            return Ok(None);
        }
        if let Some((tokens, rows)) = self.in_flight.take() {
            self.accept_tokens(&tokens, rows)?;
        }
        let mut cost = RoundCost::start();
        let masks = if self.running.iter().any(|s| !s.forced.is_empty() || s.constraint.is_some()) {
            self.next_token_masks()?
        } else {
            Vec::new()
        };
        // Per row, the tokens it may draft: its own count, never past max_tokens
        // (the target's own token comes after the drafts).
        let wanted: Vec<usize> = self
            .running
            .iter_mut()
            .map(|seq| {
                if !seq.can_speculate() {
                    return 0;
                }
                let n = seq.draft_length.as_mut().map_or(0, |d| d.for_this_step());
                n.min(seq.max_tokens.saturating_sub(seq.generated + 1))
            })
            .collect();
        let mut draft_model_fed = vec![0; wanted.len()];
        let tokens: Vec<Vec<u32>> = match &config.kind {
            DraftKind::PromptLookup => self
                .running
                .iter()
                .zip(&wanted)
                .map(|(seq, &n)| lookup::propose(&seq.tokens, n))
                .collect(),
            DraftKind::DraftModel(_) => {
                let Some(draft) = self.draft.as_mut() else { return Ok(None) };
                let rows: Vec<DraftRow> = self
                    .running
                    .iter()
                    .zip(&wanted)
                    .map(|(seq, &wanted)| DraftRow { tokens: &seq.tokens, wanted })
                    .collect();
                let proposed = draft.propose(&rows)?;
                // The draft model fed back every draft but the last of its passes.
                for (f, &w) in draft_model_fed.iter_mut().zip(&wanted) {
                    *f = if w > 0 { draft.fed() } else { 0 };
                }
                proposed
            }
            DraftKind::Mtp | DraftKind::MtpFolder(_) | DraftKind::Assistant(_) => {
                let starts = self.row_starts();
                let Some(mtp) = self.mtp.as_mut() else { return Ok(None) };
                let mut rows: Vec<MtpRow> = self
                    .running
                    .iter_mut()
                    .zip(&wanted)
                    .filter_map(|(seq, &wanted)| {
                        let hidden = seq.target_hidden.as_mut()?;
                        Some(MtpRow { tokens: &seq.tokens, hidden, wanted })
                    })
                    .collect();
                mtp.propose(self.loaded.model.as_ref(), &self.cache, &starts, &mut rows)?
            }
        };
        cost.mark("draft");
        let mut tokens = tokens;
        // A grammar keeps only the draft it allows, and masks each position.
        let mut verify_masks = vec![None; tokens.len()];
        for (row, (seq, draft)) in self.running.iter_mut().zip(tokens.iter_mut()).enumerate() {
            let Some(first) = masks.get(row).cloned().flatten() else { continue };
            if draft.is_empty() {
                continue;
            }
            if let Some((allowed, later)) = seq.draft_masks(draft)? {
                draft.truncate(allowed);
                if !draft.is_empty() {
                    let all: Vec<Array> = std::iter::once(first).chain(later).collect();
                    verify_masks[row] = Some(ops::concatenate(&all, 0)?);
                }
            }
        }
        if tokens.iter().all(Vec::is_empty) {
            // Nothing to verify; a plain step follows (the masks are made again there).
            return Ok(None);
        }
        Ok(Some(Drafts { tokens, masks, draft_model_fed, verify_masks, cost }))
    }

    /// One target pass over every row's last token and its draft (rows
    /// with a shorter draft, or none, are filled up with their last token,
    /// whose columns are then dropped). A row without a draft samples its
    /// token as a plain step would; a drafting row keeps the drafts the
    /// target's argmax agrees with plus the target's next token.
    pub(super) fn verify_step(&mut self, drafts: Drafts) -> Result<()> {
        let Drafts { tokens: drafts, masks, draft_model_fed, verify_masks, mut cost } = drafts;
        let b = self.running.len();
        let width = 1 + drafts.iter().map(Vec::len).max().unwrap_or(0);
        let mut ids = Vec::with_capacity(b * width);
        for (seq, draft) in self.running.iter().zip(&drafts) {
            let last = seq.last_token() as i32;
            ids.push(last);
            ids.extend(draft.iter().map(|&t| t as i32));
            ids.extend(std::iter::repeat_n(last, width - 1 - draft.len()));
        }
        let input = Array::from_slice(&ids, &[b as i32, width as i32]);
        let starts = self.row_starts();
        // Recurrent layers keep each token's state: a row goes back to its last kept one.
        self.cache.record_next_step();
        let model = self.loaded.model.as_ref();
        let hidden = model.forward_inputs(model.token_inputs(&input, &starts)?, &mut self.cache)?;
        let logits = model.logits(&hidden)?;
        let first = logits.index((.., 0, ..));
        let sampled = self.sample_rows(&first, None, &masks)?;
        let argmax =
            ops::indexing::argmax_axis(&logits, -1, false)?.as_dtype(mlx_rs::Dtype::Int32)?;
        // What each drafting row's verification reads back.
        let mut verdicts = Vec::new();
        for (i, (seq, draft)) in self.running.iter_mut().zip(&drafts).enumerate() {
            if draft.is_empty() {
                continue;
            }
            let (row, n) = (i as i32, draft.len() as i32 + 1);
            // `[n, vocab]`: this row's positions, under its grammar's masks if it has one.
            let at = match &verify_masks[i] {
                Some(allowed) => {
                    crate::sample::keep_allowed(&logits.index((row, 0..n, ..)), allowed)?
                }
                None => logits.index((row, 0..n, ..)),
            };
            let p = seq.sampler.params();
            let verdict = if !p.is_greedy() {
                let (kept, replacements, bonus) =
                    seq.sampler.verify_drafts(&at, &seq.tokens, draft)?;
                vec![kept, replacements, bonus]
            } else if p.repetition_penalty == 1.0 && p.logit_bias.is_empty() {
                if verify_masks[i].is_some() {
                    vec![ops::indexing::argmax_axis(&at, -1, false)?
                        .as_dtype(mlx_rs::Dtype::Int32)?]
                } else {
                    vec![argmax.index((row, 0..n))]
                }
            } else {
                // A penalty or bias changes the argmax: the row's own (greedy)
                // sampler picks at each position, its history growing by the drafts.
                let mut history = seq.tokens.clone();
                let mut picks = Vec::with_capacity(n as usize);
                for j in 0..n {
                    let at = at.index(j..j + 1);
                    picks.push(seq.sampler.sample(&at, &history, None)?.reshape(&[1])?);
                    if let Some(&t) = draft.get(j as usize) {
                        history.push(t);
                    }
                }
                vec![ops::concatenate(&picks, 0)?]
            };
            verdicts.push(verdict);
        }
        let drafting: Vec<bool> = drafts.iter().map(|d| !d.is_empty()).collect();
        let extra = self.queue_logprobs_except(&first, &sampled, &drafting)?;
        mlx_rs::transforms::eval(
            std::iter::once(&sampled).chain(verdicts.iter().flatten()).chain(&extra),
        )?;
        cost.mark("verify");
        self.decode_steps += 1;
        self.speculation_stats.verify_passes += 1;
        let sampled: Vec<u32> = sampled.as_slice::<i32>().iter().map(|&t| t as u32).collect();
        let mut verdicts = verdicts.into_iter();

        let (mut drafted, mut kept_drafts) = (0, 0);
        let mut drops = Vec::with_capacity(b);
        let mut draft_drops = Vec::with_capacity(b);
        let mut finished = Vec::new();
        let tokenizer = &self.loaded.tokenizer;
        for (row, (seq, draft)) in self.running.iter_mut().zip(&drafts).enumerate() {
            let emit = if draft.is_empty() {
                vec![sampled[row]]
            } else {
                let verdict = verdicts.next().expect("one per drafting row");
                let emit = match &verdict[..] {
                    [choices] => acceptance::greedy(draft, &tokens(choices)),
                    [kept, replacements, bonus] => acceptance::sampled(
                        draft,
                        kept.as_slice::<bool>(),
                        &tokens(replacements),
                        tokens(bonus)[0],
                    ),
                    _ => unreachable!("a greedy or a sampling verdict"),
                };
                let kept = emit.len() - 1;
                drafted += draft.len();
                kept_drafts += kept;
                if let Some(d) = seq.draft_length.as_mut() {
                    d.record(draft.len(), kept);
                }
                let stats = &mut self.speculation_stats;
                stats.drafted_tokens += draft.len() as u64;
                stats.accepted_tokens += kept as u64;
                stats.speculating_rows += 1;
                stats.produced_tokens += emit.len() as u64;
                emit
            };
            // All but the last emitted token are drafts the target agreed with.
            let from_draft = if draft.is_empty() { 0 } else { emit.len() - 1 };
            // A drafting row's log-probabilities: the target's, at each position it keeps.
            let mut logprobs = match seq.top_logprobs() {
                Some(top) if !draft.is_empty() => {
                    verified_logprobs(&logits, row as i32, &emit, top)?.into_iter()
                }
                _ => Vec::new().into_iter(),
            };
            let mut emitted = 0;
            for &token in &emit {
                if let Some(pending) = logprobs.next() {
                    seq.push_logprobs(pending);
                }
                emitted += 1;
                if emitted <= from_draft {
                    seq.draft_tokens += 1;
                }
                if let Some(reason) = seq.accept(token, tokenizer) {
                    finished.push((row, reason));
                    break;
                }
                // A token forced next (thinking closed by its budget) replaces what follows.
                if !seq.forced.is_empty() {
                    break;
                }
            }
            // The cache keeps the tokens fed before the last one emitted, as after a plain step.
            drops.push((width - emitted) as i32);
            // So does the draft model's: its fed drafts beyond those kept go.
            let fed = draft_model_fed[row];
            draft_drops.push(fed.saturating_sub(emitted - 1) as i32);
        }
        self.cache.rewind_rows(&drops)?;
        // The draft head reads the hidden states of the tokens each row kept.
        self.keep_target_hidden(&hidden, |row| width - drops[row] as usize);
        if let Some(draft) = self.draft.as_mut() {
            draft.rewind(&draft_drops)?;
        }
        let removed = self.remove_rows_with(finished);
        cost.mark("after");
        cost.log(drafted, kept_drafts);
        removed
    }
}

/// The log-probabilities of `emit[j]` under `logits[row, j]`, for each
/// position a drafting row keeps, evaluated together.
fn verified_logprobs(
    logits: &Array,
    row: i32,
    emit: &[u32],
    top: usize,
) -> Result<Vec<PendingLogprobs>> {
    let pending = emit
        .iter()
        .enumerate()
        .map(|(j, &t)| {
            let at = logits.index((row..row + 1, j as i32, ..));
            PendingLogprobs::compute(&at, &Array::from_slice(&[t as i32], &[1]), top)
        })
        .collect::<Result<Vec<_>>>()?;
    mlx_rs::transforms::eval(pending.iter().flat_map(|p| p.arrays()))?;
    Ok(pending)
}

/// An int32 array read back as token ids.
fn tokens(a: &Array) -> Vec<u32> {
    a.as_slice::<i32>().iter().map(|&t| t as u32).collect()
}
