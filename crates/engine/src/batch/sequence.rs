//! One request inside the scheduler: everything that is per-sequence lives
//! here (sampler and its random key, detokenizer, stop/thinking matcher,
//! counters, timings), never on the model or the batch.
use std::collections::VecDeque;
use std::time::Instant;

use mlx_rs::Array;
use tokio::sync::mpsc::UnboundedSender;

use super::images::{ImageWork, SequenceImages};
use super::logprobs::{PendingLogprobs, TokenNames};
use super::request::{
    Event, FinishReason, PromptLogprobs, RequestError, RequestId, RequestStats, TokenLogprob,
};
use super::speculation::draft_length::DraftLength;
use super::speculation::mtp::TargetHidden;
use crate::cache::{text_key, BatchCache, KeyToken};
use crate::constraint::ConstrainedDecoder;
use crate::sample::Sampler;
use crate::stop::{Segment, StreamMatcher};
use crate::tokenizer::{StreamDetokenizer, Tokenizer};
use crate::tools::parse_tool_calls;

pub struct Sequence {
    pub id: RequestId,
    /// Prompt tokens followed by generated tokens (the repetition penalty's history).
    pub tokens: Vec<u32>,
    pub prompt_len: usize,
    /// Prompt tokens already run through the model (or reused from the prefix cache).
    pub prefilled: usize,
    /// Prompt tokens reused from the prefix cache instead of prefilled.
    pub cached_prompt_tokens: usize,
    /// Of those, the ones read from the prefix cache's disk tier.
    pub cached_from_disk_tokens: usize,
    /// This sequence's own cache while its prompt is prefilled; it joins the
    /// batch cache once the prompt is done.
    pub prefill_cache: Option<BatchCache>,
    /// KV-cache bytes of this sequence's rows, set when it leaves the batch.
    pub kv_cache_bytes: usize,
    /// The prompt's images (encoded for the model, their prefix-cache key), if any.
    pub images: Option<SequenceImages>,
    /// The prompt's images still on their way through the vision tower; the
    /// prompt is prefilled once this is gone (it becomes `images`).
    pub vision: Option<ImageWork>,
    /// Someone watches the reply stream (see [`super::Request::interactive`]).
    pub interactive: bool,
    /// The queue position last sent (`Event::Queued`).
    queued_at: Option<usize>,
    pub sampler: Sampler,
    /// Generation ends after this many tokens (already clamped to the context).
    pub max_tokens: usize,
    pub generated: usize,
    /// Tokens to feed instead of sampled ones (closing a thinking block that
    /// ran over its budget).
    pub forced: VecDeque<u32>,
    /// The grammar the answer follows, if the request has one.
    pub constraint: Option<ConstrainedDecoder>,
    thinking_budget: Option<usize>,
    reasoning_tokens: usize,
    close_thinking: Vec<u32>,
    detok: StreamDetokenizer,
    matcher: StreamMatcher,
    tool_calls: usize,
    /// The reply ends at its first tool call (`parallel_tool_calls: false`).
    one_tool_call: bool,
    /// Log-probabilities asked for: how many alternatives, and the names.
    logprobs: Option<(usize, std::sync::Arc<TokenNames>)>,
    /// Computed for tokens sampled and not accepted yet, oldest first
    /// (decoding runs a step ahead of the read-back).
    pending_logprobs: VecDeque<PendingLogprobs>,
    /// The prompt is scored (see [`super::Request::prompt_logprobs`]): how
    /// many alternatives, and the names.
    prompt_logprobs: Option<(usize, std::sync::Arc<TokenNames>)>,
    /// The prompt tokens scored so far, chunk by chunk (sent when the prompt
    /// is done).
    prompt_scores: Vec<TokenLogprob>,
    events: UnboundedSender<Event>,
    submitted: Instant,
    prefill_started: Option<Instant>,
    first_token_at: Option<Instant>,
    /// How many tokens this row drafts next, when the engine speculates.
    pub draft_length: Option<DraftLength>,
    /// Generated tokens that were accepted drafts.
    pub draft_tokens: usize,
    /// The target's hidden states the multi-token-prediction head has not
    /// read yet, when the engine drafts with one.
    pub target_hidden: Option<TargetHidden>,
}

/// What a sequence needs besides its prompt.
pub struct SequenceParts {
    pub vision: Option<ImageWork>,
    pub interactive: bool,
    pub sampler: Sampler,
    pub max_tokens: usize,
    pub matcher: StreamMatcher,
    pub thinking_budget: Option<usize>,
    pub constraint: Option<ConstrainedDecoder>,
    /// Token ids that close a thinking block ("</think>" plus newlines).
    pub close_thinking: Vec<u32>,
    pub one_tool_call: bool,
    pub logprobs: Option<(usize, std::sync::Arc<TokenNames>)>,
    pub prompt_logprobs: Option<(usize, std::sync::Arc<TokenNames>)>,
    pub events: UnboundedSender<Event>,
    pub submitted: Instant,
}

impl Sequence {
    pub fn new(id: RequestId, prompt: Vec<u32>, parts: SequenceParts) -> Self {
        Self {
            id,
            prompt_len: prompt.len(),
            tokens: prompt,
            prefilled: 0,
            cached_prompt_tokens: 0,
            cached_from_disk_tokens: 0,
            prefill_cache: None,
            kv_cache_bytes: 0,
            images: None,
            vision: parts.vision,
            interactive: parts.interactive,
            queued_at: None,
            sampler: parts.sampler,
            max_tokens: parts.max_tokens,
            generated: 0,
            forced: VecDeque::new(),
            constraint: parts.constraint,
            thinking_budget: parts.thinking_budget,
            reasoning_tokens: 0,
            close_thinking: parts.close_thinking,
            detok: StreamDetokenizer::new(true),
            matcher: parts.matcher,
            tool_calls: 0,
            one_tool_call: parts.one_tool_call,
            logprobs: parts.logprobs,
            pending_logprobs: VecDeque::new(),
            prompt_logprobs: parts.prompt_logprobs,
            prompt_scores: Vec::new(),
            events: parts.events,
            submitted: parts.submitted,
            prefill_started: None,
            first_token_at: None,
            draft_length: None,
            draft_tokens: 0,
            target_hidden: None,
        }
    }

    /// The caller dropped its stream: treat as cancelled.
    pub fn is_abandoned(&self) -> bool {
        self.events.is_closed()
    }

    /// Its images are encoded (or it has none): its prompt may be prefilled.
    pub fn ready_for_prefill(&self) -> bool {
        self.vision.is_none()
    }

    /// Tells the caller where it waits for a free slot, when that changed.
    pub fn note_queue_position(&mut self, position: Option<usize>) {
        if position != self.queued_at {
            self.queued_at = position;
            if let Some(position) = position {
                let _ = self.events.send(Event::Queued { position });
            }
        }
    }

    pub fn prompt_remaining(&self) -> usize {
        self.prompt_len - self.prefilled
    }

    /// A prefill chunk of `n` tokens, moved so it does not cut an image
    /// (see [`super::images::SequenceImages::chunk_end`]).
    pub fn chunk_end(&self, n: usize) -> usize {
        match &self.images {
            Some(images) => images.chunk_end(&self.tokens[..self.prompt_len], self.prefilled, n),
            None => n,
        }
    }

    pub fn mark_prefill_started(&mut self) {
        self.prefill_started.get_or_insert_with(Instant::now);
    }

    /// Decode position minus cache length (non-zero only after images).
    pub fn rope_delta(&self) -> i32 {
        self.images.as_ref().map_or(0, |i| i.encoded.rope_delta())
    }

    /// The prefix-cache key of the first `len` tokens (prompt, then generated).
    pub fn prefix_key(&self, len: usize) -> Vec<KeyToken> {
        match &self.images {
            None => text_key(&self.tokens[..len]),
            Some(images) => {
                let from_prompt = len.min(self.prompt_len);
                let mut key = images.key[..from_prompt].to_vec();
                key.extend(text_key(&self.tokens[from_prompt..len]));
                key
            }
        }
    }

    /// The mask of tokens this row may sample next: `None` for free text,
    /// and while the model still thinks (the constraint is on the answer).
    pub fn allowed_tokens(&mut self) -> crate::Result<Option<Array>> {
        if !self.forced.is_empty() || self.matcher.in_reasoning() {
            return Ok(None);
        }
        match &mut self.constraint {
            Some(c) => c.allowed_tokens().map(Some),
            None => Ok(None),
        }
    }

    /// For a row whose grammar is in force: how many of `draft`'s tokens it
    /// allows in a row and the masks of the positions after each (see
    /// `ConstrainedDecoder::draft_masks`). `None` without a grammar.
    pub fn draft_masks(&mut self, draft: &[u32]) -> crate::Result<Option<(usize, Vec<Array>)>> {
        match &mut self.constraint {
            Some(c) => c.draft_masks(draft).map(Some),
            None => Ok(None),
        }
    }

    /// How many alternatives this row's log-probabilities list, if it asked.
    pub fn top_logprobs(&self) -> Option<usize> {
        self.logprobs.as_ref().map(|(top, _)| *top)
    }

    /// The log-probabilities of the token just sampled for this row, to be
    /// read when that token is accepted.
    pub fn push_logprobs(&mut self, pending: PendingLogprobs) {
        self.pending_logprobs.push_back(pending);
    }

    /// How many alternatives this row's prompt scores list, if it scores its prompt.
    pub fn prompt_top_logprobs(&self) -> Option<usize> {
        self.prompt_logprobs.as_ref().map(|(top, _)| *top)
    }

    /// The names tokens are read back with, when this row scores its prompt.
    pub fn prompt_token_names(&self) -> Option<std::sync::Arc<TokenNames>> {
        self.prompt_logprobs.as_ref().map(|(_, names)| names.clone())
    }

    /// Scores of the next prompt tokens (a prefill chunk's), in order.
    pub fn push_prompt_scores(&mut self, scores: Vec<TokenLogprob>) {
        self.prompt_scores.extend(scores);
    }

    /// Sends the prompt's scores once it is prefilled, if it asked.
    pub fn send_prompt_logprobs(&mut self) {
        let Some((_, names)) = &self.prompt_logprobs else { return };
        debug_assert_eq!(self.prompt_scores.len(), self.prompt_len - 1, "all but the first");
        let scored = PromptLogprobs {
            first: names.name(self.tokens[0]),
            scored: std::mem::take(&mut self.prompt_scores),
        };
        let _ = self.events.send(Event::PromptLogprobs(scored));
    }

    /// Whether this row's next tokens can come from a draft: nothing forced
    /// next, and a grammar only while it is in force (verification then
    /// picks under its masks; while the model thinks, a draft could cross
    /// into the grammar unmasked). Greedy and sampling rows both can (see
    /// [`super::speculation::acceptance`]), with log-probabilities too (the
    /// target's, at each kept position).
    pub fn can_speculate(&self) -> bool {
        self.draft_length.is_some()
            && self.forced.is_empty()
            && (self.constraint.is_none() || !self.matcher.in_reasoning())
    }

    /// The token the next decode step feeds for this row.
    pub fn last_token(&self) -> u32 {
        *self.tokens.last().expect("a sequence has at least its prompt")
    }

    /// Takes one token produced for this sequence (the sampled one, unless a
    /// forced token replaces it), streams its text, and says whether the
    /// sequence is done.
    pub fn accept(&mut self, sampled: u32, tokenizer: &Tokenizer) -> Option<FinishReason> {
        let forced = self.forced.pop_front();
        let id = forced.unwrap_or(sampled);
        self.first_token_at.get_or_insert_with(Instant::now);
        if let (Some(pending), Some((_, names))) =
            (self.pending_logprobs.pop_front(), &self.logprobs)
        {
            // a forced token replaced the sampled one: its figures are not this token's
            if forced.is_none() {
                match pending.read(id, names) {
                    Ok(lp) => {
                        let _ = self.events.send(Event::Logprob(lp));
                    }
                    Err(e) => {
                        self.send_error(&e);
                        return Some(FinishReason::Error);
                    }
                }
            }
        }
        let grammar_done = match self.constraint.as_mut().map(|c| c.accept(id)) {
            Some(Err(e)) => {
                self.send_error(&e);
                return Some(FinishReason::Error);
            }
            Some(Ok(done)) => done,
            None => false,
        };
        self.tokens.push(id);
        self.generated += 1;
        if tokenizer.is_eos(id) && self.forced.is_empty() {
            return Some(FinishReason::Stop);
        }
        let text = match self.detok.push(tokenizer, id) {
            Ok(t) => t,
            Err(e) => {
                self.send_error(&e);
                return Some(FinishReason::Error);
            }
        };
        let segments = self.matcher.push(&text);
        if self.deliver(segments) {
            return Some(FinishReason::Stop);
        }
        if self.matcher.in_reasoning() {
            self.reasoning_tokens += 1;
            if self.thinking_budget.is_some_and(|b| self.reasoning_tokens >= b)
                && self.forced.is_empty()
            {
                self.forced.extend(self.close_thinking.iter().copied());
                self.thinking_budget = None;
            }
        }
        if grammar_done {
            return Some(FinishReason::Stop);
        }
        if self.generated >= self.max_tokens {
            return Some(FinishReason::Length);
        }
        None
    }

    /// Sends matcher output as events; true when a stop string matched.
    fn deliver(&mut self, segments: Vec<Segment>) -> bool {
        let mut stopped = false;
        for seg in segments {
            let event = match seg {
                Segment::Content(t) => Event::Content(t),
                Segment::Reasoning(t) => Event::Reasoning(t),
                Segment::ToolCall(raw) => match parse_tool_calls(&raw) {
                    Ok(mut calls) => {
                        if self.one_tool_call {
                            calls.truncate(1);
                            stopped |= !calls.is_empty();
                        }
                        self.tool_calls += calls.len();
                        for call in calls {
                            let _ = self.events.send(Event::ToolCall(call));
                        }
                        if stopped {
                            break;
                        }
                        continue;
                    }
                    // A malformed call is still the model's text: show it, do not lose it.
                    Err(_) => Event::Content(raw),
                },
                Segment::Stop => {
                    stopped = true;
                    continue;
                }
            };
            let _ = self.events.send(event);
        }
        stopped
    }

    pub fn send_error(&self, e: &crate::Error) {
        let _ = self.events.send(Event::Error(RequestError::from(e)));
    }

    /// Flushes held-back text and sends `Finished`.
    pub fn finish(mut self, reason: FinishReason, tokenizer: &Tokenizer) {
        if reason != FinishReason::Error && reason != FinishReason::Cancelled {
            let tail = self.detok.finish(tokenizer).unwrap_or_default();
            let mut segments = self.matcher.push(&tail);
            segments.extend(self.matcher.finish());
            self.deliver(segments);
        }
        let reason = if reason == FinishReason::Stop && self.tool_calls > 0 {
            FinishReason::ToolCalls
        } else {
            reason
        };
        let stats = self.stats();
        let _ = self.events.send(Event::Finished { reason, stats });
    }

    pub fn stats(&self) -> RequestStats {
        let now = Instant::now();
        let first = self.first_token_at.unwrap_or(now);
        let prefill_start = self.prefill_started.unwrap_or(self.submitted);
        let prefill_secs = (first - prefill_start).as_secs_f64().max(1e-9);
        let decode_secs = (now - first).as_secs_f64().max(1e-9);
        RequestStats {
            prompt_tokens: self.prompt_len,
            cached_prompt_tokens: self.cached_prompt_tokens,
            cached_from_disk_tokens: self.cached_from_disk_tokens,
            generated_tokens: self.generated,
            reasoning_tokens: self.reasoning_tokens,
            draft_tokens: self.draft_tokens,
            time_to_first_token: first - self.submitted,
            prompt_tps: (self.prompt_len - self.cached_prompt_tokens) as f64 / prefill_secs,
            generation_tps: self.generated.saturating_sub(1) as f64 / decode_secs,
            // A request that never joined the batch held only its prefill cache.
            kv_cache_bytes: match &self.prefill_cache {
                Some(c) if self.kv_cache_bytes == 0 => c.row_nbytes(0),
                _ => self.kv_cache_bytes,
            },
        }
    }
}
