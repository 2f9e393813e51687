//! Single-stream generation: one prompt, chunked prefill, then decoding with
//! the next step queued before the current token is read back (so the CPU
//! work of detokenizing and streaming overlaps the model's compute).
use std::time::{Duration, Instant};

use mlx_rs::{transforms::async_eval, Array};

pub use crate::batch::FinishReason;
use crate::cache::BatchCache;
use crate::error::{Error, Result};
use crate::model::{layers::last_position, LanguageModel, Positions};
use crate::sample::{Sampler, SamplingParams};
use crate::tokenizer::{StreamDetokenizer, Tokenizer};

/// Prompt tokens processed per forward pass during prefill.
pub const PREFILL_CHUNK: usize = 512;

#[derive(Debug, Clone)]
pub struct GenerateParams {
    pub max_tokens: usize,
    pub sampling: SamplingParams,
}

impl Default for GenerateParams {
    fn default() -> Self {
        Self { max_tokens: 256, sampling: SamplingParams::default() }
    }
}

#[derive(Debug, Clone)]
pub struct GenerationStats {
    pub prompt_tokens: usize,
    /// Time to process the prompt and sample the first token.
    pub prompt_time: Duration,
    pub generated_tokens: usize,
    /// Time from the first token to the last.
    pub generation_time: Duration,
    pub peak_memory_bytes: usize,
    pub finish_reason: FinishReason,
}

impl GenerationStats {
    pub fn prompt_tps(&self) -> f64 {
        self.prompt_tokens as f64 / self.prompt_time.as_secs_f64().max(1e-9)
    }

    /// Decode speed: tokens after the first, over the time they took.
    pub fn generation_tps(&self) -> f64 {
        self.generated_tokens.saturating_sub(1) as f64
            / self.generation_time.as_secs_f64().max(1e-9)
    }
}

/// One generated token as the callback sees it.
pub struct TokenOut<'a> {
    /// `None` for text flushed by the detokenizer at the end.
    pub id: Option<u32>,
    /// The text this token completed (may be empty mid-character).
    pub text: &'a str,
}

/// Runs the prompt through the model in chunks of [`PREFILL_CHUNK`] tokens and
/// returns the logits of its last position, `[1, vocab]`.
pub fn prefill(model: &dyn LanguageModel, cache: &mut BatchCache, prompt: &[u32]) -> Result<Array> {
    if prompt.is_empty() {
        return Err(Error::InvalidRequest("the prompt is empty".into()));
    }
    let mut last_hidden = None;
    for chunk in prompt.chunks(PREFILL_CHUNK) {
        let last = prefill_chunk(model, cache, chunk)?;
        // Evaluate chunk by chunk: a lazy graph over the whole prompt would
        // hold every chunk's activations at once.
        last.eval()?;
        last_hidden = Some(last);
    }
    let logits = model.logits(&last_hidden.expect("prompt is not empty"))?;
    Ok(logits.reshape(&[1, -1])?)
}

/// Runs one chunk of a single sequence's prompt through the model, appending
/// to `cache` (one row); returns the (lazy) hidden state of its last
/// position, `[1, 1, D]`.
pub fn prefill_chunk(
    model: &dyn LanguageModel,
    cache: &mut BatchCache,
    chunk: &[u32],
) -> Result<Array> {
    let ids: Vec<i32> = chunk.iter().map(|&t| t as i32).collect();
    let tokens = Array::from_slice(&ids, &[1, ids.len() as i32]);
    let positions = Positions::Start(cache.offsets()[0]);
    // Only the last position is read (a model may then return it alone).
    cache.set_read_positions(vec![ids.len() as i32 - 1]);
    let hidden = model.forward_embeddings(model.embed(&tokens)?, &tokens, &positions, cache)?;
    last_position(&hidden)
}

/// One decode step of a single sequence: `token` `[1, 1]` → logits `[1, vocab]`.
pub fn decode_step(
    model: &dyn LanguageModel,
    cache: &mut BatchCache,
    token: &Array,
) -> Result<Array> {
    let positions = Positions::Start(cache.offsets()[0]);
    Ok(model.forward(token, &positions, cache)?.reshape(&[1, -1])?)
}

/// Checks that the prompt leaves room in the model's context for at least one token.
pub fn check_context(model: &dyn LanguageModel, prompt_len: usize) -> Result<()> {
    let max_context = model.shape().max_context;
    if prompt_len >= max_context {
        return Err(Error::ContextLengthExceeded { prompt_tokens: prompt_len, max_context });
    }
    Ok(())
}

/// Generates from `prompt` until EOS, `max_tokens`, or `on_token` returns false.
pub fn generate(
    model: &dyn LanguageModel,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    params: &GenerateParams,
    mut on_token: impl FnMut(TokenOut) -> bool,
) -> Result<GenerationStats> {
    if params.max_tokens == 0 {
        return Err(Error::InvalidRequest("max_tokens must be at least 1".into()));
    }
    params.sampling.validate(model.shape().vocab_size)?;
    check_context(model, prompt.len())?;
    let max_tokens = params.max_tokens.min(model.shape().max_context - prompt.len());

    let _ = mlx_rs::memory::reset_peak_memory();
    let started = Instant::now();
    let mut cache = model.new_cache(1);
    let mut sampler = Sampler::new(params.sampling.clone())?;
    let mut history: Vec<u32> = prompt.to_vec();
    let mut detok = StreamDetokenizer::new(true);

    let logits = prefill(model, &mut cache, prompt)?;
    let mut next = sampler.sample(&logits, &history, None)?;
    async_eval([&next])?;
    let mut first_token_at = None;
    let mut generated = 0usize;
    let finish_reason = loop {
        // Queue the step after `next` before reading `next` back.
        let queued = if generated + 1 < max_tokens {
            let logits = decode_step(model, &mut cache, &next.reshape(&[1, 1])?)?;
            let after = sampler.sample(&logits, &history, Some(&next))?;
            async_eval([&after])?;
            Some(after)
        } else {
            None
        };
        next.eval()?;
        let id = next.as_slice::<i32>()[0] as u32;
        first_token_at.get_or_insert_with(Instant::now);
        generated += 1;
        history.push(id);
        if tokenizer.is_eos(id) {
            break FinishReason::Stop;
        }
        let text = detok.push(tokenizer, id)?;
        if !on_token(TokenOut { id: Some(id), text: &text }) {
            break FinishReason::Cancelled;
        }
        match queued {
            Some(q) => next = q,
            None => break FinishReason::Length,
        }
    };
    let tail = detok.finish(tokenizer)?;
    if !tail.is_empty() {
        on_token(TokenOut { id: None, text: &tail });
    }
    let first = first_token_at.unwrap_or_else(Instant::now);
    Ok(GenerationStats {
        prompt_tokens: prompt.len(),
        prompt_time: first - started,
        generated_tokens: generated,
        generation_time: first.elapsed(),
        peak_memory_bytes: mlx_rs::memory::peak_memory().unwrap_or(0),
        finish_reason,
    })
}
