//! Admission: requests enter the scheduler (prepared off the engine thread,
//! see `batch/prepare.rs`), wait in line, are cancelled, and hear their place
//! in the queue.
use std::collections::VecDeque;
use std::time::Instant;

use tokio::sync::mpsc::UnboundedSender;

use super::Scheduler;
use crate::batch::images::ImageWork;
use crate::batch::logprobs::{TokenNames, MAX_TOP_LOGPROBS};
use crate::batch::prepare::PreparedRequest;
use crate::batch::request::{Event, FinishReason, Request, RequestId};
use crate::batch::sequence::{Sequence, SequenceParts};
use crate::batch::speculation::mtp::TargetHidden;
use crate::batch::speculation::SpeculationConfig;
use crate::constraint::{ConstrainedDecoder, LogitsMasker};
use crate::error::{Error, Result};
use crate::sample::Sampler;

/// Cancels remembered for requests the engine has not seen yet.
const MAX_EARLY_CANCELS: usize = 1024;

impl Scheduler {
    /// Prepares a request on the engine thread and queues it (for callers
    /// that step the scheduler themselves; [`crate::handle::EngineHandle`]
    /// prepares on the caller's side and calls [`Self::admit`]).
    pub fn submit(&mut self, id: RequestId, request: Request, events: UnboundedSender<Event>) {
        let prepared = self.preparer.prepare(request, Instant::now());
        self.admit(id, prepared, events);
    }

    /// Queues a prepared request, or sends its preparation error. Errors go
    /// to the request's own stream; the engine carries on.
    pub fn admit(
        &mut self,
        id: RequestId,
        prepared: Result<PreparedRequest>,
        events: UnboundedSender<Event>,
    ) {
        if let Some(i) = self.early_cancels.iter().position(|&c| c == id) {
            self.early_cancels.remove(i);
            let _ = events.send(Event::Finished {
                reason: FinishReason::Cancelled,
                stats: Default::default(),
            });
            return;
        }
        match prepared.and_then(|p| self.sequence_for(id, p, events.clone())) {
            Ok(seq) => {
                let _ = events.send(Event::Accepted);
                self.waiting.push_back(seq);
            }
            Err(e) => {
                let _ = events.send(Event::Error((&e).into()));
                let _ = events.send(Event::Finished {
                    reason: FinishReason::Error,
                    stats: Default::default(),
                });
            }
        }
    }

    /// What a prepared request needs from the engine thread: its grammar's
    /// mask, log-probability names and sampler (MLX objects).
    pub(super) fn sequence_for(
        &mut self,
        id: RequestId,
        p: PreparedRequest,
        events: UnboundedSender<Event>,
    ) -> Result<Sequence> {
        let constraint = match p.grammar {
            Some(grammar) => Some(ConstrainedDecoder::new(grammar, self.logits_masker()?)),
            None => None,
        };
        let req = &p.request;
        let speculate = req.speculate;
        let mut names = |asked: Option<usize>| match asked {
            Some(top) if top > MAX_TOP_LOGPROBS => Err(Error::InvalidRequest(format!(
                "top_logprobs must be at most {MAX_TOP_LOGPROBS}, got {top}"
            ))),
            Some(top) => Ok(Some((top, self.token_names()))),
            None => Ok(None),
        };
        let logprobs = names(req.logprobs)?;
        let prompt_logprobs = names(req.prompt_logprobs)?;
        let parts = SequenceParts {
            logprobs,
            prompt_logprobs,
            one_tool_call: p.offers_tools && !req.parallel_tool_calls,
            constraint,
            vision: p.images.map(ImageWork::new),
            interactive: req.interactive,
            sampler: Sampler::new(req.sampling.clone())?,
            max_tokens: p.max_tokens,
            matcher: p.matcher,
            thinking_budget: req.thinking_budget,
            close_thinking: p.close_thinking,
            events,
            submitted: p.submitted,
        };
        let mut seq = Sequence::new(id, p.prompt, parts);
        // A request that turned speculation off never drafts (its row is
        // filled up with its last token in a verify pass, as a row without a draft is).
        seq.draft_length =
            self.speculation.as_ref().filter(|_| speculate).map(SpeculationConfig::draft_length);
        seq.target_hidden = self.mtp.as_ref().map(|_| TargetHidden::default());
        Ok(seq)
    }

    /// Every token's bytes, built on the first request for log-probabilities.
    pub(super) fn token_names(&mut self) -> std::sync::Arc<TokenNames> {
        let tokenizer = &self.loaded.tokenizer;
        self.token_names
            .get_or_insert_with(|| std::sync::Arc::new(TokenNames::new(tokenizer)))
            .clone()
    }

    /// Turns grammar bitmasks into logits masks; built on the first
    /// constrained request, over the vocabulary the preparer compiled against.
    /// An `Rc`: it holds MLX arrays, so it and the sequences sharing it stay
    /// on the engine thread.
    pub(super) fn logits_masker(&mut self) -> Result<std::rc::Rc<LogitsMasker>> {
        if self.logits_masker.is_none() {
            let width = self.loaded.model.shape().vocab_size as usize;
            let vocabulary = self.preparer.grammar_vocabulary()?;
            self.logits_masker = Some(std::rc::Rc::new(LogitsMasker::new(vocabulary, width)));
        }
        Ok(self.logits_masker.clone().expect("just built"))
    }

    pub fn cancel(&mut self, id: RequestId) {
        self.cancelled.push(id);
    }

    pub(super) fn drop_cancelled(&mut self) -> Result<()> {
        let cancelled = std::mem::take(&mut self.cancelled);
        for &id in &cancelled {
            let known = self.waiting.iter().chain(&self.running).any(|s| s.id == id);
            if !known {
                // Still being prepared (or already finished): drop it on arrival.
                self.early_cancels.push_back(id);
                if self.early_cancels.len() > MAX_EARLY_CANCELS {
                    self.early_cancels.pop_front();
                }
            }
        }
        let gone = |s: &Sequence| cancelled.contains(&s.id) || s.is_abandoned();
        let tokenizer = &self.loaded.tokenizer;
        let mut still_waiting = VecDeque::new();
        for seq in self.waiting.drain(..) {
            if gone(&seq) {
                seq.finish(FinishReason::Cancelled, tokenizer);
            } else {
                still_waiting.push_back(seq);
            }
        }
        self.waiting = still_waiting;
        let leaving: Vec<usize> =
            (0..self.running.len()).filter(|&i| gone(&self.running[i])).collect();
        self.remove_rows(&leaving, FinishReason::Cancelled)
    }

    /// Sends each waiting request its place in line while the batch is full.
    pub(super) fn report_queue_positions(&mut self) {
        let full = self.running.len() >= self.config.max_running;
        for (i, seq) in self.waiting.iter_mut().enumerate() {
            seq.note_queue_position(full.then_some(i + 1));
        }
    }
}
