//! Prompt log-probabilities (`Request::prompt_logprobs`: each prompt token
//! after the first scored under the model given the tokens before it, what
//! `echo` + `logprobs` on /v1/completions reports and evaluation harnesses
//! rank answers with):
//! - against the reference: Python mlx-lm 0.32.2's figures on tiny seeded
//!   folders (`tests/goldens/prompt_logprobs_mlx_lm.json`, written by
//!   `scripts/make-prompt-logprobs-golden.sh`), the prompt prefilled in
//!   chunks of 7 (full attention, a sliding window the prompt crosses, and
//!   recurrent layers);
//! - against our own decoding: a greedy reply scored as part of the prompt
//!   gets the figures decoding reported for it;
//! - a prefix-cache hit changes nothing (a scoring row prefills in full);
//! - a scoring row beside decoding rows — joining mid-decode and sharing a
//!   prefill pass, with and without speculative decoding — leaves their
//!   replies as they are alone, and gets its own figures as alone.
use std::path::Path;

use engine::batch::speculation::SpeculationConfig;
use engine::batch::{FinishReason, PromptLogprobs, Request, SchedulerConfig};
use engine::handle::Completion;
use engine::model::load;
use fixtures::{write_speculative_pair, TinyFamily};
use serde_json::Value;

use crate::common::{family_checkpoint, greedy_request, salted_prompt, Driver, LOAD};

/// The seed of the tiny folders the golden was recorded on (write_tiny_model's).
const SEED: u64 = 11;

/// A request that scores `ids` with `top` alternatives and then generates
/// `max_tokens` (0: the prompt alone), greedy, never stopping at EOS.
fn scoring(ids: &[u32], top: usize, max_tokens: usize) -> Request {
    let mut r = greedy_request(ids, max_tokens);
    r.prompt_logprobs = Some(top);
    r
}

/// The scores of a finished scoring request, checked against its prompt.
fn scores_of<'a>(c: &'a Completion, prompt: &[u32]) -> &'a PromptLogprobs {
    assert!(c.error.is_none(), "{:?}", c.error);
    let p = c.prompt_logprobs.as_ref().expect("the prompt scored");
    assert_eq!(p.first.id, prompt[0]);
    let ids: Vec<u32> = p.scored.iter().map(|t| t.token.id).collect();
    assert_eq!(ids, prompt[1..], "every prompt token after the first, in order");
    p
}

/// Runs `request` alone on a fresh scheduler over `dir`.
fn alone(dir: &Path, config: SchedulerConfig, request: Request) -> Completion {
    let mut driver = Driver::new(dir, config);
    let i = driver.submit(request);
    driver.run_to_end();
    driver.completion(i).clone()
}

/// Prefill in chunks of 7 tokens: a prompt takes several passes.
fn chunked() -> SchedulerConfig {
    SchedulerConfig { prefill_budget: 7, ..Default::default() }
}

fn max_diff(a: &PromptLogprobs, b: &PromptLogprobs) -> f32 {
    a.scored.iter().zip(&b.scored).map(|(x, y)| (x.logprob - y.logprob).abs()).fold(0.0, f32::max)
}

/// Float32 on both sides over the same libmlx; the order of a few
/// operations differs (fused norms, attention), as in parity_mlx_lm.rs.
/// Measured: see the assertion message (printed with --nocapture). A real
/// mistake — a position off by one, a chunk's scores taken from the wrong
/// rows, a stale cache — moves log-probabilities of this tiny vocabulary
/// (ln 300 ≈ 5.7 for a flat guess) by 1e-2 and more.
const SAME_COMPUTATION_TOL: f32 = 1e-4;
/// Gemma 3's tiny folder: float16 residual rounding (parity_mlx_lm.rs's
/// FLOAT16_RESIDUAL_TOL for its logits).
const FLOAT16_RESIDUAL_TOL: f32 = 3e-3;

#[test]
fn prompt_log_probabilities_match_mlx_lm() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens/prompt_logprobs_mlx_lm.json");
    let text = std::fs::read_to_string(&path)
        .expect("the golden (scripts/make-prompt-logprobs-golden.sh)");
    let golden: Value = serde_json::from_str(&text).unwrap();
    let ids = |v: &Value| -> Vec<u32> {
        v.as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect()
    };
    let floats = |v: &Value| -> Vec<f32> {
        v.as_array().unwrap().iter().map(|t| t.as_f64().unwrap() as f32).collect()
    };
    let prompt = ids(&golden["prompt_ids"]);
    let top = golden["top"].as_u64().unwrap() as usize;
    for (family, tol) in [
        (TinyFamily::Qwen3, SAME_COMPUTATION_TOL),
        (TinyFamily::Gemma3, FLOAT16_RESIDUAL_TOL),
        (TinyFamily::Qwen35, SAME_COMPUTATION_TOL),
    ] {
        let name = family.name();
        let record = &golden["families"][name];
        let dir = family_checkpoint(family, SEED);
        let c = alone(dir.path(), chunked(), scoring(&prompt, top, 0));
        assert_eq!(c.finish_reason, Some(FinishReason::Length), "{name}");
        assert_eq!((c.stats.generated_tokens, c.content.as_str()), (0, ""), "{name}: no tokens");
        let ours = scores_of(&c, &prompt);
        let expected = floats(&record["logprobs"]);
        let mut worst = 0f32;
        for (i, (t, e)) in ours.scored.iter().zip(&expected).enumerate() {
            worst = worst.max((t.logprob - e).abs());
            // the alternatives: the same values, most likely first
            let top_values = floats(&record["top_logprobs"][i]);
            let top_ids = ids(&record["top_ids"][i]);
            assert_eq!(t.top.len(), top, "{name} token {}", i + 1);
            for (k, ((id, v), (&gid, &gv))) in t
                .top
                .iter()
                .map(|(n, v)| (n.id, *v))
                .zip(top_ids.iter().zip(&top_values))
                .enumerate()
            {
                worst = worst.max((v - gv).abs());
                // ids may swap only where mlx-lm's own values are within the tolerance
                let tie =
                    top_values.iter().enumerate().any(|(j, &o)| j != k && (o - gv).abs() < tol);
                assert!(
                    id == gid || tie,
                    "{name} token {}: alternative {k} is {id}, mlx-lm's {gid}",
                    i + 1
                );
            }
        }
        println!("{name}: max |ours - mlx-lm| = {worst:.2e} over {} tokens", expected.len());
        assert!(worst < tol, "{name}: max |ours - mlx-lm| = {worst:.2e}, tolerance {tol:.0e}");
    }
}

#[test]
fn a_greedy_reply_scored_in_the_prompt_gets_the_figures_decoding_reported() {
    let dir = family_checkpoint(TinyFamily::Qwen3, SEED);
    let prompt = salted_prompt(20, 1);
    let mut decode = greedy_request(&prompt, 10);
    decode.logprobs = Some(2);
    let decoded = alone(dir.path(), chunked(), decode);
    let reply: Vec<u32> = decoded.logprobs.iter().map(|t| t.token.id).collect();
    assert_eq!(reply.len(), 10);

    let whole: Vec<u32> = prompt.iter().chain(&reply).copied().collect();
    let scored = alone(dir.path(), chunked(), scoring(&whole, 2, 0));
    let scores = scores_of(&scored, &whole);
    let mut worst = 0f32;
    for (k, d) in decoded.logprobs.iter().enumerate() {
        // reply token k is prompt token prompt.len() + k: scored entry prompt.len() + k - 1
        let s = &scores.scored[prompt.len() + k - 1];
        assert_eq!(s.token.id, d.token.id);
        worst = worst.max((s.logprob - d.logprob).abs());
        let ids =
            |t: &engine::batch::TokenLogprob| t.top.iter().map(|(n, _)| n.id).collect::<Vec<_>>();
        // (the reply bans EOS, so the most likely token may not be the reply's)
        assert_eq!(ids(s), ids(d), "reply token {k}: the same alternatives");
        for ((_, a), (_, b)) in s.top.iter().zip(&d.top) {
            worst = worst.max((a - b).abs());
        }
    }
    // One prefill pass against one decode step per token: the same
    // computation but for how the rows are batched.
    println!("scored vs decoded: max diff {worst:.2e}");
    assert!(worst < SAME_COMPUTATION_TOL, "scored vs decoded: max diff {worst:.2e}");
}

#[test]
fn a_prefix_cache_hit_changes_nothing() {
    let dir = family_checkpoint(TinyFamily::Qwen3, SEED);
    let prompt = salted_prompt(40, 2);
    let mut driver = Driver::new(dir.path(), chunked());
    let first = driver.submit(scoring(&prompt, 2, 3));
    driver.run_to_end();
    // the same prompt again, as a plain request (it reuses what the first kept)
    // and scored again
    let plain = driver.submit(greedy_request(&prompt, 3));
    driver.run_to_end();
    let again = driver.submit(scoring(&prompt, 2, 3));
    driver.run_to_end();
    assert!(
        driver.completion(plain).stats.cached_prompt_tokens > 0,
        "the prompt was in the prefix cache"
    );
    let (a, b) = (driver.completion(first), driver.completion(again));
    assert_eq!(b.stats.cached_prompt_tokens, 0, "a scoring row prefills its prompt in full");
    assert_eq!(scores_of(a, &prompt), scores_of(b, &prompt), "the same figures, bit for bit");
    assert_eq!(a.content, driver.completion(plain).content);
    assert_eq!(a.content, b.content);
}

/// A scoring row beside decoding rows on `target` (with `speculation`, and
/// the draft model it names): the decoding rows' replies equal theirs alone,
/// and the scoring row's figures and reply equal its own alone.
fn beside_decoding_rows(
    target: &Path,
    draft: Option<&Path>,
    speculation: Option<SpeculationConfig>,
) {
    // 32 tokens a step: the scored prompt takes two passes, and its second
    // chunk (8 tokens) shares a pass with the other new row's 16 (3/4 real).
    let config = SchedulerConfig { speculation, prefill_budget: 32, ..Default::default() };
    let driver = || {
        let mut scheduler =
            engine::batch::Scheduler::new(load(target, &LOAD).unwrap(), config.clone());
        if let Some(draft) = draft {
            scheduler = scheduler.with_draft_model(load(draft, &LOAD).unwrap()).unwrap();
        }
        Driver::of_scheduler(scheduler)
    };
    let run_alone = |request: Request| {
        let mut d = driver();
        let i = d.submit(request);
        d.run_to_end();
        d.completion(i).clone()
    };
    // Repetitive prompts, so prompt lookup finds drafts.
    let decoding: Vec<u32> = salted_prompt(6, 3).repeat(3);
    let sharing = salted_prompt(16, 4);
    let scored: Vec<u32> = salted_prompt(10, 5).repeat(4);
    let decoding_alone = run_alone(greedy_request(&decoding, 24));
    let sharing_alone = run_alone(greedy_request(&sharing, 12));
    let scored_alone = run_alone(scoring(&scored, 3, 6));

    let mut d = driver();
    let a = d.submit(greedy_request(&decoding, 24));
    d.step();
    assert_eq!(d.scheduler.stats().running, 1, "the first row decodes");
    // joins mid-decode, and shares its prefill passes with another new row
    let s = d.submit(scoring(&scored, 3, 6));
    let b = d.submit(greedy_request(&sharing, 12));
    d.run_to_end();
    assert!(
        d.scheduler.stats().prefill_chunks > d.scheduler.stats().prefill_passes,
        "a shared pass"
    );
    assert_eq!(d.completion(a).content, decoding_alone.content, "the decoding row's reply");
    assert_eq!(d.completion(b).content, sharing_alone.content, "the row that shared a pass");
    let (batched, by_itself) = (d.completion(s), &scored_alone);
    assert_eq!(batched.content, by_itself.content, "the scoring row's own reply");
    let diff = max_diff(scores_of(batched, &scored), scores_of(by_itself, &scored));
    assert!(diff < SAME_COMPUTATION_TOL, "the scoring row's figures batched and alone: {diff:.2e}");
}

#[test]
fn a_scoring_row_leaves_its_neighbours_replies_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let (target, draft) = write_speculative_pair(dir.path()).unwrap();
    beside_decoding_rows(&target, None, None);
    beside_decoding_rows(&target, None, Some(SpeculationConfig::prompt_lookup()));
    beside_decoding_rows(
        &target,
        Some(&draft),
        Some(SpeculationConfig::draft_model(draft.clone())),
    );
}
