//! Speed measurements printed by `vlm bench` (never asserted in tests).
use serde::Serialize;

use crate::error::Result;
use crate::generate::{generate, GenerateParams};
use crate::model::LoadedModel;
use crate::sample::SamplingParams;

#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub prompt_tokens: usize,
    pub gen_tokens: usize,
    /// Means over the measured runs.
    pub prompt_tps: f64,
    pub decode_tps: f64,
    pub peak_memory_bytes: usize,
}

/// A fixed pseudo-random prompt of `n` ordinary tokens (no special ids), so
/// runs are comparable across engines without depending on a text corpus.
pub fn synthetic_prompt(n: usize, vocab: usize, avoid: &[u32]) -> Vec<u32> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let id = ((state >> 33) % vocab as u64) as u32;
        if !avoid.contains(&id) {
            out.push(id);
        }
    }
    out
}

/// Single-stream prompt and decode speed: one warm-up run, then `runs`
/// measured ones. End-of-sequence tokens are banned so every run decodes
/// exactly `gen_tokens`.
pub fn single_stream(loaded: &LoadedModel, prompt_tokens: usize, gen_tokens: usize, runs: usize) -> Result<BenchReport> {
    let tokenizer = &loaded.tokenizer;
    let vocab = loaded.model.shape().vocab_size as usize;
    let specials: Vec<u32> = (0..vocab as u32)
        .filter(|&id| tokenizer.is_eos(id) || tokenizer.id_to_token(id).is_some_and(|t| t.starts_with("<|")))
        .collect();
    let prompt = synthetic_prompt(prompt_tokens, vocab, &specials);
    let params = GenerateParams {
        max_tokens: gen_tokens,
        sampling: SamplingParams {
            logit_bias: tokenizer.eos_ids().iter().map(|&id| (id, f32::NEG_INFINITY)).collect(),
            ..Default::default()
        },
    };
    let mut prompt_tps = 0.0;
    let mut decode_tps = 0.0;
    let mut peak = 0;
    for run in 0..=runs {
        let stats = generate(loaded.model.as_ref(), tokenizer, &prompt, &params, |_| true)?;
        if run > 0 {
            prompt_tps += stats.prompt_tps() / runs as f64;
            decode_tps += stats.generation_tps() / runs as f64;
            peak = peak.max(stats.peak_memory_bytes);
        }
    }
    Ok(BenchReport { prompt_tokens, gen_tokens, prompt_tps, decode_tps, peak_memory_bytes: peak })
}
