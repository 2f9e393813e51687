//! Batched prefill: the next prompt chunks of several waiting sequences in
//! one forward pass, right-padded to the longest chunk.
//!
//! The rows' own caches are gathered into one [`BatchCache`] (left-padded so
//! every row's earlier tokens end at the same column, where the chunk
//! starts); the pass declares each row's real tokens, so no padding reaches a
//! recurrent state and a real query never sees a padded key (it comes later);
//! [`BatchCache::split`] then gives each row back exactly its real tokens.
//!
//! A sequence's prefill state (its own cache, how far its prompt got) stays
//! on the [`Sequence`]; a pass borrows the caches, runs, and gives each row
//! back exactly its real tokens. One row is the same code with no padding.
//!
//! What the pass feeds the model is the model's to prepare: each row hands
//! it the chunk's tokens, where they start and the prompt's images, and gets
//! back one set of inputs for one forward
//! ([`LanguageModel::prompt_inputs`], [`crate::model::prompt_inputs`]).
use mlx_rs::{ops::indexing::IndexOp, Array};

use super::logprobs::{PendingLogprobs, PendingPromptLogprobs};
use super::sequence::Sequence;
use crate::cache::BatchCache;
use crate::error::Result;
use crate::generate::PREFILL_CHUNK;
use crate::model::{LanguageModel, PromptChunk};

/// The least budget left worth a second pass in the same scheduler step
/// (unless it completes a prompt).
pub const MIN_LATER_PASS: usize = 32;

/// The chunk a sequence with `remaining` prompt tokens gets in a pass that
/// already has `rows` rows of width `width` holding `real` real tokens (all
/// 0 for the first row), or `None` when it does not fit.
///
/// The budget counts padded tokens (`rows × width`): that is what the pass
/// computes, and the budget is there to bound how long running streams wait
/// between two decode steps. A row may take a shorter chunk than it could to
/// fit, never one that would cut the rows already in (the width cannot
/// shrink). And a pass stays at least [`MIN_FILL`] real tokens: measured on
/// the CPU backend, a batched pass is at most ~1.5× faster per token than a
/// lone one (short prompts) and barely faster at 80+ tokens, so padding that
/// is computed for nothing can cost more than batching gains.
pub fn chunk_for(
    remaining: usize,
    rows: usize,
    width: usize,
    real: usize,
    budget: usize,
) -> Option<usize> {
    let want = remaining.min(PREFILL_CHUNK);
    if want == 0 {
        return None;
    }
    if rows == 0 {
        // The first row always gets something (a budget of 0 is taken as 1).
        return Some(want.min(budget.max(1)));
    }
    let k = rows + 1;
    let n = if k * want.max(width) <= budget {
        want
    } else {
        // Trimmed so the pass stays within budget, if that keeps the width.
        let most = budget / k;
        if most < width || most == 0 {
            return None;
        }
        want.min(most)
    };
    let padded = k * width.max(n);
    ((real + n) as f64 >= MIN_FILL * padded as f64).then_some(n)
}

/// The least share of real (not padding) tokens in a pass.
pub const MIN_FILL: f64 = 0.75;

/// One row of a pass: a sequence and how many of its prompt tokens to run.
pub struct PassRow {
    pub seq: Sequence,
    pub n: usize,
}

/// Runs one pass over `rows` (each `n` ≥ 1, not past its prompt). Each row's
/// cache then holds `n` more tokens and its `prefilled` advances; a row whose
/// prompt is complete gets its first token, sampled from its last real
/// position by its own sampler. On an error the rows' caches are gone (the
/// caller fails every row of the pass).
pub fn run_pass(model: &dyn LanguageModel, rows: &mut [PassRow]) -> Result<Vec<Option<u32>>> {
    let b = rows.len() as i32;
    let width = rows.iter().map(|r| r.n).max().expect("a pass has rows") as i32;
    let caches: Vec<BatchCache> = rows
        .iter_mut()
        .map(|r| r.seq.prefill_cache.take().unwrap_or_else(|| model.new_cache(1)))
        .collect();
    let mut cache = BatchCache::gather(caches)?;
    cache.set_real_tokens(rows.iter().map(|r| r.n as i32).collect());

    let spans: Vec<Vec<(i32, i32)>> = rows
        .iter()
        .map(|r| match &r.seq.images {
            Some(images) => {
                images.bidirectional_spans(&r.seq.tokens[..r.seq.prompt_len], r.seq.prefilled, r.n)
            }
            None => Vec::new(),
        })
        .collect();
    if spans.iter().any(|s| !s.is_empty()) {
        cache.set_bidirectional_spans(spans);
    }
    // A row's next token comes from its last real position alone: unless a
    // row scores its prompt or hands the chunk's hidden states to a draft
    // head, that is all the pass reads, and a model may compute what no
    // cache needs for those positions only (`[B, 1, D]` back).
    let every_position =
        rows.iter().any(|r| r.seq.prompt_top_logprobs().is_some() || r.seq.target_hidden.is_some());
    if !every_position {
        cache.set_read_positions(rows.iter().map(|r| r.n as i32 - 1).collect());
    }
    let chunks: Vec<PromptChunk<'_>> = rows
        .iter()
        .map(|r| PromptChunk {
            tokens: &r.seq.tokens[..r.seq.prefilled + r.n],
            start: r.seq.prefilled,
            images: r.seq.images.as_ref().map(|i| &i.encoded),
        })
        .collect();
    let inputs = model.prompt_inputs(&chunks)?;
    let hidden = model.forward_inputs(inputs, &mut cache)?;

    // Each row's last real position, `[B, 1, D]` (all the model returned
    // where it computed the read positions alone).
    let last = if hidden.dim(1) == 1 {
        hidden.clone()
    } else {
        let d = hidden.dim(2);
        let last_index: Vec<i32> =
            rows.iter().enumerate().map(|(i, r)| i as i32 * width + r.n as i32 - 1).collect();
        hidden
            .reshape(&[b * width, d])?
            .take_axis(Array::from_slice(&last_index, &[b]), 0)?
            .reshape(&[b, 1, d])?
    };

    let scores = score_prompts(model, rows, &hidden)?;

    for (i, (r, c)) in rows.iter_mut().zip(cache.split()?).enumerate() {
        if let Some(waiting) = r.seq.target_hidden.as_mut() {
            // For the draft head: the hidden states of this chunk's tokens.
            waiting.push(r.seq.prefilled, hidden.index((i as i32, 0..r.n as i32, ..)));
        }
        r.seq.prefill_cache = Some(c);
        r.seq.prefilled += r.n;
    }

    // Logits row by row, as a lone sequence computes them: only complete rows need them.
    let mut sampled: Vec<Option<Array>> = Vec::with_capacity(rows.len());
    // log-probabilities asked for, evaluated with the tokens
    let mut extra: Vec<Array> = Vec::new();
    for (i, r) in rows.iter_mut().enumerate() {
        if r.seq.prompt_remaining() > 0 {
            sampled.push(None);
            continue;
        }
        let row = last.index(i as i32..i as i32 + 1);
        let mut logits = model.logits(&row)?.reshape(&[1, -1])?;
        let raw = logits.clone();
        if let Some(allowed) = r.seq.allowed_tokens()? {
            logits = crate::sample::keep_allowed(&logits, &allowed)?;
        }
        let token = r.seq.sampler.sample(&logits, &r.seq.tokens, None)?;
        if let Some(top) = r.seq.top_logprobs() {
            let pending = PendingLogprobs::compute(&raw, &token, top)?;
            extra.extend(pending.arrays().into_iter().cloned());
            r.seq.push_logprobs(pending);
        }
        sampled.push(Some(token));
    }
    // One evaluation for the whole pass (the rows' KV is part of its graph).
    let mut outputs: Vec<&Array> = sampled.iter().flatten().collect();
    outputs.push(&last);
    outputs.extend(extra.iter());
    outputs.extend(scores.iter().flat_map(|(_, s)| s.arrays()));
    mlx_rs::transforms::eval(outputs)?;
    for (i, pending) in scores {
        let seq = &mut rows[i].seq;
        let names = seq.prompt_token_names().expect("a row that scores its prompt has the names");
        seq.push_prompt_scores(pending.read(&names)?);
    }
    Ok(sampled.iter().map(|s| s.as_ref().map(|t| t.as_slice::<i32>()[0] as u32)).collect())
}

/// For the rows that score their prompt (and only them: the rest pay
/// nothing), each chunk position's log-probabilities of the prompt token that
/// follows it, from the pass's `hidden` `[B, width, D]`. Called before the
/// rows' `prefilled` advance. The last prompt position is left out: what
/// follows it is the first generated token, sampled as for any row.
fn score_prompts(
    model: &dyn LanguageModel,
    rows: &[PassRow],
    hidden: &Array,
) -> Result<Vec<(usize, PendingPromptLogprobs)>> {
    let mut scores = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let Some(top) = r.seq.prompt_top_logprobs() else { continue };
        let start = r.seq.prefilled;
        // positions start.. predict tokens start + 1..; the prompt's last predicts none of it
        let m = r.n.min(r.seq.prompt_len - 1 - start);
        if m == 0 {
            continue;
        }
        let row = i as i32;
        let at = hidden.index((row..row + 1, 0..m as i32, ..));
        let logits = model.logits(&at)?.reshape(&[m as i32, -1])?;
        let targets = &r.seq.tokens[start + 1..start + 1 + m];
        scores.push((i, PendingPromptLogprobs::compute(&logits, targets, top)?));
    }
    Ok(scores)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_row_always_gets_a_chunk() {
        assert_eq!(chunk_for(2000, 0, 0, 0, 512), Some(PREFILL_CHUNK));
        assert_eq!(chunk_for(2000, 0, 0, 0, 100), Some(100));
        assert_eq!(chunk_for(30, 0, 0, 0, 0), Some(1));
        assert_eq!(chunk_for(0, 0, 0, 0, 512), None);
    }

    #[test]
    fn later_rows_count_padding() {
        // Three rows of 100 and a fourth of 120: 4 × 120 fits 512.
        assert_eq!(chunk_for(120, 3, 100, 300, 512), Some(120));
        // A fifth of 120 does not (5 × 120); trimmed to 102 it would.
        assert_eq!(chunk_for(120, 4, 100, 400, 512), Some(102));
        // Trimming below the current width would cut the other rows: no.
        assert_eq!(chunk_for(120, 4, 110, 440, 512), None);
    }

    #[test]
    fn passes_stay_mostly_real_tokens() {
        // 100 beside 128: 228 of 256 real.
        assert_eq!(chunk_for(100, 1, 128, 128, 512), Some(100));
        // 32 beside 128: 160 of 256 real, under 3/4.
        assert_eq!(chunk_for(32, 1, 128, 128, 512), None);
        // A short prompt beside a 512-token chunk, even with budget to spare.
        assert_eq!(chunk_for(40, 1, 512, 512, 4096), None);
        // A longer row widens the pass: 128 after 32 leaves 160 of 256.
        assert_eq!(chunk_for(128, 1, 32, 32, 512), None);
    }
}
