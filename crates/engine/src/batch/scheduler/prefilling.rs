//! Prefill: a step's vision-tower work and prompt chunks within its budget,
//! prefix-cache reuse, and a finished prompt's first token joining the batch.
use std::time::Instant;

use super::Scheduler;
use crate::batch::images::EncodeContext;
use crate::batch::prefill::{self, PassRow};
use crate::batch::request::FinishReason;
use crate::batch::sequence::Sequence;
use crate::error::Result;

impl Scheduler {
    /// Runs the vision tower on waiting requests' images, oldest first, within
    /// `budget` (a piece of an image at a time: see [`ImageWork::advance`]).
    /// Requests whose images are all encoded become ready for prefill; one
    /// whose encoding fails ends with its error. Returns the budget spent.
    pub(super) fn encode_images(&mut self, budget: usize) -> Result<usize> {
        let Some(vision) = self.loaded.model.vision() else { return Ok(0) };
        if self.waiting.iter().all(Sequence::ready_for_prefill) {
            return Ok(0);
        }
        let mut ctx = EncodeContext::new(vision, &mut self.vision_cache, budget);
        let mut failed = Vec::new();
        for (i, seq) in self.waiting.iter_mut().enumerate() {
            let Some(work) = seq.vision.as_mut() else { continue };
            let outcome =
                work.advance(&mut ctx).and_then(|()| match seq.vision.take_if(|w| w.is_done()) {
                    Some(done) => done
                        .finish(vision, &seq.tokens[..seq.prompt_len])
                        .map(|images| seq.images = Some(images)),
                    None => Ok(()),
                });
            if let Err(e) = outcome {
                failed.push((i, e));
            }
        }
        // Run the queued pieces now, before this step's prefill and decode
        // (not at the end of the whole encode). Pacing times them: wait.
        match &mut self.pacing {
            Some(p) if !ctx.to_eval.is_empty() => {
                let started = Instant::now();
                mlx_rs::transforms::eval(ctx.to_eval.iter())?;
                p.record_vision(ctx.spent, started.elapsed().as_secs_f64());
            }
            _ => mlx_rs::transforms::async_eval(ctx.to_eval.iter())?,
        }
        self.last_step.vision_cost = ctx.spent;
        self.last_step.images_encoded = ctx.finished;
        for (i, e) in failed.into_iter().rev() {
            if let Some(seq) = self.waiting.remove(i) {
                seq.send_error(&e);
                seq.finish(FinishReason::Error, &self.loaded.tokenizer);
            }
        }
        Ok(self.last_step.vision_cost)
    }

    /// Prefills waiting prompts, a pass at a time, until the step's budget
    /// (padded tokens) is spent or the batch is full. Each pass takes, oldest
    /// first, as many waiting sequences as fit (see [`prefill::chunk_for`]),
    /// so prompts that arrive together share forward passes.
    /// `budget`: what the step's vision work (and pacing) left.
    pub(super) fn prefill_within_budget(&mut self, mut budget: usize) -> Result<()> {
        let mut passes = 0;
        while budget > 0 && self.running.len() < self.config.max_running {
            let Some(next) = self.waiting.iter().find(|s| s.ready_for_prefill()) else { break };
            // A pass has a fixed cost; a few leftover tokens of budget are not
            // worth one unless they finish a prompt. The next step has a full budget.
            if passes > 0 && budget < prefill::MIN_LATER_PASS.min(next.prompt_remaining()) {
                break;
            }
            passes += 1;
            let rows = self.take_pass_rows(budget, self.config.max_running - self.running.len());
            let width = rows.iter().map(|r| r.n).max().unwrap_or(0);
            let padded = rows.len() * width;
            budget = budget.saturating_sub(padded);
            self.last_step.prefill_tokens += padded;
            self.prefill_passes += 1;
            self.prefill_rows += rows.len() as u64;
            self.prefill_padding += (padded - rows.iter().map(|r| r.n).sum::<usize>()) as u64;
            let started = Instant::now();
            self.run_prefill_pass(rows)?;
            // the pass read its first tokens back: its work is done
            if let Some(p) = &mut self.pacing {
                p.record_prefill(padded, started.elapsed().as_secs_f64());
            }
        }
        Ok(())
    }

    /// Takes the waiting sequences of the next pass, with their chunk sizes:
    /// the oldest, then in order every other that fits (see
    /// [`prefill::chunk_for`]); those that do not fit keep their places.
    pub(super) fn take_pass_rows(&mut self, budget: usize, slots: usize) -> Vec<PassRow> {
        let mut rows: Vec<PassRow> = Vec::new();
        let (mut width, mut real) = (0, 0);
        let mut skipped = Vec::new();
        while rows.len() < slots {
            let Some(mut seq) = self.waiting.pop_front() else { break };
            if !seq.ready_for_prefill() {
                skipped.push(seq);
                continue;
            }
            if seq.prefill_cache.is_none() {
                self.reuse_prefix(&mut seq);
            }
            let chunk = prefill::chunk_for(seq.prompt_remaining(), rows.len(), width, real, budget)
                .and_then(|n| {
                    // A chunk never cuts an image that attends to itself both ways;
                    // growing to the image's end takes a pass of its own.
                    let aligned = seq.chunk_end(n);
                    (aligned <= n || rows.is_empty()).then_some(aligned)
                });
            match chunk {
                Some(n) => {
                    seq.mark_prefill_started();
                    width = width.max(n);
                    real += n;
                    rows.push(PassRow { seq, n });
                }
                None => skipped.push(seq),
            }
        }
        for seq in skipped.into_iter().rev() {
            self.waiting.push_front(seq);
        }
        rows
    }

    /// Runs one pass; complete rows join the decoding batch, the others go
    /// back to the front of the queue in their order. An MLX error fails
    /// every row of the pass (their caches went into it), and only them.
    pub(super) fn run_prefill_pass(&mut self, mut rows: Vec<PassRow>) -> Result<()> {
        match prefill::run_pass(self.loaded.model.as_ref(), &mut rows) {
            Ok(firsts) => {
                let mut unfinished = Vec::new();
                for (row, first) in rows.into_iter().zip(firsts) {
                    match first {
                        Some(token) => self.join_batch(row.seq, token)?,
                        None => unfinished.push(row.seq),
                    }
                }
                for seq in unfinished.into_iter().rev() {
                    self.waiting.push_front(seq);
                }
            }
            Err(e) => {
                for row in rows {
                    row.seq.send_error(&e);
                    row.seq.finish(FinishReason::Error, &self.loaded.tokenizer);
                }
            }
        }
        Ok(())
    }

    /// Starts `seq` from the longest kept prefix of its prompt, if any. On a
    /// miss it gets an empty cache, so it is looked up once, not at every
    /// pass it waits for. A row that scores its prompt starts empty: a kept
    /// prefix holds keys and values, not the logits its tokens are scored by
    /// (its prompt is prefilled in full; what it leaves is kept as usual).
    pub(super) fn reuse_prefix(&mut self, seq: &mut Sequence) {
        if seq.prompt_top_logprobs().is_some() {
            seq.prefill_cache = Some(self.loaded.model.new_cache(1));
            return;
        }
        match self.prefix_cache.lookup(&seq.prefix_key(seq.prompt_len)) {
            Some(hit) => {
                seq.prefill_cache = Some(hit.cache);
                seq.prefilled = hit.len;
                seq.cached_prompt_tokens = hit.len;
                seq.cached_from_disk_tokens = if hit.from_disk { hit.len } else { 0 };
            }
            None => seq.prefill_cache = Some(self.loaded.model.new_cache(1)),
        }
    }

    /// Streams the first token and moves the sequence's cache into the batch.
    pub(super) fn join_batch(&mut self, mut seq: Sequence, first: u32) -> Result<()> {
        let cache = seq.prefill_cache.take().expect("a prefilled sequence has its cache");
        seq.send_prompt_logprobs();
        // Only a request that scores its prompt may ask for no tokens: it is
        // done with its prompt, and the token sampled for it is not its.
        let done = if seq.max_tokens == 0 {
            Some(FinishReason::Length)
        } else {
            seq.accept(first, &self.loaded.tokenizer)
        };
        if let Some(reason) = done {
            // Done at its first token: it never joined the batch.
            seq.kv_cache_bytes = cache.row_nbytes(0);
            let len = cache.offsets()[0] as usize;
            self.prefix_cache.insert(seq.prefix_key(len), &cache, 0)?;
            seq.finish(reason, &self.loaded.tokenizer);
            return Ok(());
        }
        if self.cache.layout().has_recurrent() {
            // A prompt checkpoint: a recurrent state cannot be cut back to a
            // shorter prefix, and the finished sequence's state covers its
            // reply too, while the chat's next turn starts with this prompt
            // (its template may render the reply differently).
            let len = cache.offsets()[0] as usize;
            self.prefix_cache.insert(seq.prefix_key(len), &cache, 0)?;
        }
        self.cache.extend(cache)?;
        if let Some(draft) = &mut self.draft {
            // The draft reads what the target has: the prompt, not the first token yet.
            draft.join(&seq.tokens[..seq.tokens.len() - 1])?;
        }
        if let (Some(mtp), Some(hidden)) = (&mut self.mtp, seq.target_hidden.as_mut()) {
            // The head reads the prompt's hidden states, the first token now known.
            mtp.join(self.loaded.model.as_ref(), &seq.tokens, hidden)?;
        }
        self.running.push(seq);
        Ok(())
    }
}
