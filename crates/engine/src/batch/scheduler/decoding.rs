//! Decode: one forward pass for every running row, sampling, reading the
//! tokens back while the next step computes, and rows leaving the batch.
use std::time::Instant;

use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::{ops, Array};

use super::Scheduler;
use crate::batch::logprobs::PendingLogprobs;
use crate::batch::request::FinishReason;
use crate::batch::sequence::Sequence;
use crate::error::Result;
use crate::sample::{greedy_rows, keep_allowed};

impl Scheduler {
    pub(super) fn decode_step(&mut self) -> Result<()> {
        if let Some(drafts) = self.drafts()? {
            return self.verify_step(drafts);
        }
        if self.running.is_empty() {
            // Reading back the step in flight for drafts finished every row.
            return Ok(());
        }
        let mut previous = self.in_flight.take();
        // A forced token (closing a thinking block) must be fed as the next
        // input, and a grammar's next mask depends on the last token, so such
        // rows need their previous token read first.
        let mut masks = Vec::new();
        if self.running.iter().any(|s| !s.forced.is_empty() || s.constraint.is_some()) {
            if let Some((tokens, rows)) = previous.take() {
                self.accept_tokens(&tokens, rows)?;
            }
            masks = self.next_token_masks()?;
            if self.running.is_empty() {
                return Ok(());
            }
        }
        let b = self.running.len();
        let input = match &previous {
            Some((tokens, rows)) if *rows == b => tokens.clone(),
            Some((tokens, rows)) => {
                let joined: Vec<i32> =
                    self.running[*rows..].iter().map(|s| s.last_token() as i32).collect();
                let joined = Array::from_slice(&joined, &[(b - rows) as i32]);
                ops::concatenate(&[tokens, &joined], 0)?
            }
            None => {
                let last: Vec<i32> = self.running.iter().map(|s| s.last_token() as i32).collect();
                Array::from_slice(&last, &[b as i32])
            }
        };
        let model = self.loaded.model.as_ref();
        let input = input.reshape(&[b as i32, 1])?;
        let starts = self.row_starts();
        let hidden = model.forward_inputs(model.token_inputs(&input, &starts)?, &mut self.cache)?;
        let logits = model.logits(&hidden)?.reshape(&[b as i32, -1])?;
        self.keep_target_hidden(&hidden, |_| 1);
        let input = input.reshape(&[b as i32])?;
        let pending = previous.as_ref().map(|_| &input);
        let sampled = self.sample_rows(&logits, pending, &masks)?;
        // log-probabilities asked for, evaluated with the tokens
        let extra = self.queue_logprobs(&logits, &sampled)?;
        // (On MLX's CPU backend `async_eval` itself may run most of the step.)
        self.decode_queued = Some(Instant::now());
        mlx_rs::transforms::async_eval(std::iter::once(&sampled).chain(&extra))?;
        self.decode_steps += 1;
        self.in_flight = Some((sampled, b));
        // While this step computes, read back and stream the previous one.
        if let Some((tokens, rows)) = previous {
            self.accept_tokens(&tokens, rows)?;
        }
        Ok(())
    }

    /// For the draft head: each running row's hidden states of the `kept(b)`
    /// tokens it keeps from the pass just run (`hidden[b, ..kept(b)]`; its
    /// cache now ends right after them). Nothing without a head.
    pub(super) fn keep_target_hidden(&mut self, hidden: &Array, kept: impl Fn(usize) -> usize) {
        if self.mtp.is_none() {
            return;
        }
        let offsets = self.cache.offsets();
        for (row, seq) in self.running.iter_mut().enumerate() {
            if let Some(waiting) = seq.target_hidden.as_mut() {
                let n = kept(row);
                let from = offsets[row] as usize - n;
                waiting.push(from, hidden.index((row as i32, 0..n as i32, ..)));
            }
        }
    }

    /// Each running row's next position: its tokens so far, shifted by its
    /// own rope delta.
    pub(super) fn row_starts(&self) -> Vec<i32> {
        self.cache.offsets().iter().zip(&self.running).map(|(o, s)| o + s.rope_delta()).collect()
    }

    /// The log-probabilities of `sampled` `[B]` under `logits` `[B, vocab]`
    /// for the rows that asked, queued on each row for when its token is
    /// accepted; returns the arrays to evaluate with the tokens.
    pub(super) fn queue_logprobs(&mut self, logits: &Array, sampled: &Array) -> Result<Vec<Array>> {
        self.queue_logprobs_except(logits, sampled, &[])
    }

    /// [`Self::queue_logprobs`] but for the rows marked in `except` (rows
    /// that drafted: theirs come from their verified positions).
    pub(super) fn queue_logprobs_except(
        &mut self,
        logits: &Array,
        sampled: &Array,
        except: &[bool],
    ) -> Result<Vec<Array>> {
        let mut extra = Vec::new();
        for (i, seq) in self.running.iter_mut().enumerate() {
            if except.get(i).copied().unwrap_or(false) {
                continue;
            }
            if let Some(top) = seq.top_logprobs() {
                let row = i as i32..i as i32 + 1;
                let logprobs = PendingLogprobs::compute(
                    &logits.index((row.clone(), ..)),
                    &sampled.index(row),
                    top,
                )?;
                extra.extend(logprobs.arrays().into_iter().cloned());
                seq.push_logprobs(logprobs);
            }
        }
        Ok(extra)
    }

    /// Each running row's mask of allowed tokens (`None`: unconstrained). A
    /// row whose grammar cannot go on ends here with its error.
    pub(super) fn next_token_masks(&mut self) -> Result<Vec<Option<Array>>> {
        let mut masks = Vec::with_capacity(self.running.len());
        let mut failed = Vec::new();
        for (row, seq) in self.running.iter_mut().enumerate() {
            match seq.allowed_tokens() {
                Ok(mask) => masks.push(mask),
                Err(e) => {
                    seq.send_error(&e);
                    failed.push((row, FinishReason::Error));
                }
            }
        }
        // Failed rows pushed no mask, so `masks` already lines up with the rows that stay.
        self.remove_rows_with(failed)?;
        Ok(masks)
    }

    /// Reads back sampled tokens for the first `rows` running rows (the one
    /// read-back of a step), streams them, and removes finished rows.
    pub(super) fn accept_tokens(&mut self, tokens: &Array, rows: usize) -> Result<()> {
        tokens.eval()?;
        let tokens: Vec<u32> = tokens.as_slice::<i32>().iter().map(|&t| t as u32).collect();
        let mut finished = Vec::new();
        for (row, (seq, &token)) in self.running.iter_mut().zip(&tokens).take(rows).enumerate() {
            if let Some(reason) = seq.accept(token, &self.loaded.tokenizer) {
                finished.push((row, reason));
            }
        }
        self.remove_rows_with(finished)
    }

    /// One token per row, `[B]` int32. Greedy rows without a repetition
    /// penalty or a grammar share one argmax (each after its own logit
    /// bias); the others sample from their own logits row.
    /// `pending`: this step's input tokens `[B]` when they have not been read
    /// back yet (they count as history for repetition penalties).
    /// `masks`: per row, the tokens its grammar allows (empty: no row has one).
    pub(super) fn sample_rows(
        &mut self,
        logits: &Array,
        pending: Option<&Array>,
        masks: &[Option<Array>],
    ) -> Result<Array> {
        let shared: Vec<bool> = (self.running.iter().enumerate())
            .map(|(i, s)| {
                let p = s.sampler.params();
                p.is_greedy()
                    && p.repetition_penalty == 1.0
                    && !matches!(masks.get(i), Some(Some(_)))
            })
            .collect();
        let greedy = if shared.iter().any(|&s| s) {
            let biases: Vec<_> = (self.running.iter().zip(&shared))
                .map(|(s, &shared)| if shared { s.sampler.logit_bias() } else { None })
                .collect();
            Some(greedy_rows(logits, &biases)?)
        } else {
            None
        };
        if let (Some(greedy), true) = (&greedy, shared.iter().all(|&s| s)) {
            return Ok(greedy.clone());
        }
        let mut rows = Vec::with_capacity(self.running.len());
        for (i, seq) in self.running.iter_mut().enumerate() {
            let at = i as i32..i as i32 + 1;
            if let (Some(greedy), true) = (&greedy, shared[i]) {
                rows.push(greedy.index(at));
                continue;
            }
            let mut row = logits.index((at, ..));
            if let Some(Some(allowed)) = masks.get(i) {
                row = keep_allowed(&row, allowed)?;
            }
            let pending_token = pending.map(|p| p.index(i as i32..i as i32 + 1));
            rows.push(
                seq.sampler.sample(&row, &seq.tokens, pending_token.as_ref())?.reshape(&[1])?,
            );
        }
        Ok(ops::concatenate(&rows, 0)?)
    }

    /// Removes rows from the batch (and its cache) and finishes them.
    pub(super) fn remove_rows(&mut self, rows: &[usize], reason: FinishReason) -> Result<()> {
        self.remove_rows_with(rows.iter().map(|&r| (r, reason)).collect())
    }

    pub(super) fn remove_rows_with(&mut self, finished: Vec<(usize, FinishReason)>) -> Result<()> {
        if finished.is_empty() {
            return Ok(());
        }
        for &(row, reason) in &finished {
            if matches!(reason, FinishReason::Stop | FinishReason::Length) {
                // The row's cache covers the tokens fed so far.
                let fed = self.cache.offsets()[row] as usize;
                let key = self.running[row].prefix_key(fed);
                self.prefix_cache.insert(key, &self.cache, row)?;
            }
        }
        let kv_bytes: Vec<usize> =
            finished.iter().map(|&(row, _)| self.cache.row_nbytes(row)).collect();
        let keep: Vec<usize> =
            (0..self.running.len()).filter(|i| !finished.iter().any(|(r, _)| r == i)).collect();
        self.cache.filter(&keep)?;
        if let Some(draft) = &mut self.draft {
            draft.filter(&keep)?;
        }
        if let Some(mtp) = &mut self.mtp {
            mtp.filter(&keep)?;
        }
        if let Some((tokens, rows)) = self.in_flight.take() {
            // Kept rows stay in order, so the in-flight ones remain a prefix.
            let kept: Vec<i32> = keep.iter().filter(|&&k| k < rows).map(|&k| k as i32).collect();
            if kept.is_empty() {
                // Nobody reads these tokens, but MLX is still computing them
                // on its own thread: wait, so no computation outlives the
                // scheduler (one still running at process exit crashed in BLAS).
                tokens.eval()?;
            } else {
                let n = kept.len();
                self.in_flight =
                    Some((tokens.take_axis(Array::from_slice(&kept, &[n as i32]), 0)?, n));
            }
        }
        let mut rows: Vec<Option<Sequence>> = self.running.drain(..).map(Some).collect();
        for ((row, reason), kv_bytes) in finished.into_iter().zip(kv_bytes) {
            if let Some(mut seq) = rows[row].take() {
                seq.kv_cache_bytes = kv_bytes;
                seq.finish(reason, &self.loaded.tokenizer);
            }
        }
        self.running = rows.into_iter().flatten().collect();
        Ok(())
    }
}
