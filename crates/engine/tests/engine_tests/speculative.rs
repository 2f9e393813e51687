//! Speculative decoding inside the continuous batch (prompt lookup, a
//! draft model and Qwen3.5's own multi-token-prediction head), on tiny seeded checkpoints stepped by hand: greedy output with speculation must
//! equal greedy output without it, token for token — alone, in a batch
//! whose rows accept different counts with a row joining mid-decode, across
//! sliding and shared layers (Gemma 3 / Gemma 4), with KV quantization,
//! with a repetition penalty (the app's default), through the prefix cache
//! and with a stop string. The stats prove drafts were proposed, kept and
//! rejected (a test that never speculated would prove nothing).
use std::path::Path;

use engine::batch::speculation::{SpeculationConfig, SpeculationStats};
use engine::batch::{Prompt, Request, Scheduler, SchedulerConfig};
use engine::cache::KvQuantization;
use engine::constraint::Constraint;
use engine::handle::Completion;
use engine::sample::SamplingParams;
use engine::tokenizer::{ChatMessage, TemplateOptions};
use fixtures::{write_draft_of, write_family, write_tiny_llama, Dims, TinyFamily, TinyLlama};
use serde_json::json;

use crate::common;

use common::{family_checkpoint, greedy_no_eos, Driver, LOAD};

/// A prompt that repeats itself, as an edit request repeats its text: the
/// last tokens are found earlier, so lookup has drafts to offer.
fn repeating_prompt(salt: u32) -> Vec<u32> {
    let phrase: Vec<u32> = (0..9u32).map(|i| 3 + (salt * 37 + i * 11 + i * i) % 250).collect();
    let mut ids = Vec::new();
    for k in 0..3 {
        ids.extend(&phrase);
        ids.push(3 + (salt * 5 + k) % 250);
    }
    ids.extend(&phrase[..4]);
    ids
}

fn request(ids: &[u32], max_tokens: usize, sampling: &SamplingParams) -> Request {
    Request::new(Prompt::Tokens(ids.to_vec()))
        .with_max_tokens(max_tokens)
        .with_sampling(sampling.clone())
}

/// How a test speculates: prompt lookup, or a draft model from this folder.
#[derive(Clone, Copy)]
enum Proposer<'a> {
    Lookup,
    Draft(&'a Path),
    /// The checkpoint's own multi-token-prediction head.
    Mtp,
    /// A Gemma 4 assistant drafter from this folder.
    Assistant(&'a Path),
}

fn driver(dir: &Path, config: SchedulerConfig, proposer: Option<Proposer>) -> Driver {
    // The checkpoint's own head is read only for speculation by it.
    let loaded = match proposer {
        Some(Proposer::Mtp) => engine::model::load_with_draft_head(dir, &LOAD).unwrap(),
        _ => engine::model::load(dir, &LOAD).unwrap(),
    };
    let speculation = match proposer {
        None => None,
        Some(Proposer::Lookup) => Some(SpeculationConfig::prompt_lookup()),
        Some(Proposer::Draft(d)) => Some(SpeculationConfig::draft_model(d.to_path_buf())),
        Some(Proposer::Mtp) => Some(SpeculationConfig::mtp()),
        Some(Proposer::Assistant(a)) => Some(SpeculationConfig::assistant(a.to_path_buf())),
    };
    let scheduler = Scheduler::new(loaded, SchedulerConfig { speculation, ..config });
    let scheduler = match proposer {
        Some(Proposer::Draft(d)) => {
            scheduler.with_draft_model(engine::model::load(d, &LOAD).unwrap()).unwrap()
        }
        Some(Proposer::Assistant(a)) => {
            let target = scheduler.loaded().model.as_ref();
            let assistant = engine::model::load_assistant(a, target, &LOAD).unwrap();
            scheduler.with_assistant(assistant)
        }
        _ => scheduler,
    };
    Driver::of_scheduler(scheduler)
}

/// Runs `requests` (the last ones joining after `join_after` steps) and
/// returns their completions and the driver.
fn run(
    dir: &Path,
    config: SchedulerConfig,
    proposer: Option<Proposer>,
    requests: &[Request],
    first: usize,
    join_after: usize,
) -> (Vec<Completion>, Driver) {
    let mut driver = driver(dir, config, proposer);
    let completions = driver.run_joining(requests, first, join_after);
    (completions, driver)
}

/// Prompt lookup on and off give the same completions; returns the
/// speculating driver's stats for the caller's checks.
fn lossless(
    dir: &Path,
    base: SchedulerConfig,
    requests: &[Request],
    first: usize,
    join_after: usize,
) -> SpeculationStats {
    lossless_with(dir, Proposer::Lookup, base, requests, first, join_after)
}

fn lossless_with(
    dir: &Path,
    proposer: Proposer,
    base: SchedulerConfig,
    requests: &[Request],
    first: usize,
    join_after: usize,
) -> SpeculationStats {
    let (plain, plain_driver) = run(dir, base.clone(), None, requests, first, join_after);
    let (spec, driver) = run(dir, base, Some(proposer), requests, first, join_after);
    for (i, (p, s)) in plain.iter().zip(&spec).enumerate() {
        assert!(p.error.is_none() && s.error.is_none(), "{:?} {:?}", p.error, s.error);
        assert_eq!(s.content, p.content, "request {i}: speculation changed the text");
        assert_eq!(s.finish_reason, p.finish_reason, "request {i}");
        assert_eq!(s.stats.generated_tokens, p.stats.generated_tokens, "request {i}");
    }
    let stats = driver.scheduler.stats();
    assert!(
        stats.decode_steps <= plain_driver.scheduler.stats().decode_steps,
        "speculation took more target passes ({} vs {})",
        stats.decode_steps,
        plain_driver.scheduler.stats().decode_steps
    );
    stats.speculation
}

fn tiny_llama() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlama::default()).unwrap();
    dir
}

fn assert_speculated(stats: &SpeculationStats) {
    assert!(stats.verify_passes > 0, "no verify pass ran: {stats:?}");
    assert!(stats.accepted_tokens > 0, "no draft was kept: {stats:?}");
    assert!(stats.tokens_per_pass() > 1.0, "{stats:?}");
}

#[test]
fn one_row_alone_gives_the_same_tokens_in_fewer_passes() {
    let dir = tiny_llama();
    for sampling in [SamplingParams::greedy(), greedy_no_eos()] {
        let reqs = [request(&repeating_prompt(1), 48, &sampling)];
        let stats = lossless(dir.path(), SchedulerConfig::default(), &reqs, 1, 0);
        assert_speculated(&stats);
        assert_eq!(stats.status, "prompt lookup");
    }
}

/// Four rows with different prompts (so they draft and keep different
/// counts, and some draft nothing), the fourth joining mid-decode.
#[test]
fn a_batch_whose_rows_keep_different_counts_with_a_join_mid_decode() {
    let dir = tiny_llama();
    let sampling = greedy_no_eos();
    let plain_prompt: Vec<u32> = (0..20u32).map(|i| 3 + (i * 53 + 7) % 250).collect();
    let reqs = [
        request(&repeating_prompt(1), 40, &sampling),
        request(&plain_prompt, 30, &sampling),
        request(&repeating_prompt(2), 35, &sampling),
        request(&repeating_prompt(3), 44, &sampling),
    ];
    let stats = lossless(dir.path(), SchedulerConfig::default(), &reqs, 3, 6);
    assert_speculated(&stats);
    assert!(stats.accepted_tokens < stats.drafted_tokens, "some drafts were rejected: {stats:?}");
}

/// The app's default sampling for its built-in model: greedy with a
/// repetition penalty, which the drafts must count as history.
#[test]
fn a_repetition_penalty_sees_the_drafts_as_history() {
    let dir = tiny_llama();
    let sampling = SamplingParams { repetition_penalty: 1.1, ..greedy_no_eos() };
    let reqs = [
        request(&repeating_prompt(4), 40, &sampling),
        request(&repeating_prompt(5), 40, &sampling),
    ];
    let stats = lossless(dir.path(), SchedulerConfig::default(), &reqs, 2, 0);
    assert!(stats.verify_passes > 0, "{stats:?}");
}

#[test]
fn sliding_and_shared_layers_rewind_per_row() {
    for family in [TinyFamily::Gemma3, TinyFamily::Qwen3] {
        let dir = family_checkpoint(family, 11);
        let sampling = greedy_no_eos();
        let reqs = [
            request(&repeating_prompt(6), 40, &sampling),
            request(&repeating_prompt(7), 33, &sampling),
            request(&repeating_prompt(8), 37, &sampling),
        ];
        // Small prefill chunks: prompts cross Gemma's window of 8 in pieces.
        let base = SchedulerConfig { prefill_budget: 6, ..Default::default() };
        let stats = lossless(dir.path(), base, &reqs, 2, 5);
        assert!(stats.verify_passes > 0, "{family:?}: {stats:?}");
    }
}

/// Gemma 4's KV-shared layers read what their source wrote in the same
/// pass, drafts included. Its tiny model's replies never repeat, so lookup
/// finds nothing: a draft model drafts instead, itself (every draft lands)
/// and one with other weights (some land).
#[test]
fn gemma4_shared_layers_rewind_with_a_draft_model() {
    let target = family_checkpoint(TinyFamily::Gemma4, 11);
    let other = family_checkpoint(TinyFamily::Gemma4, 12);
    let reqs = [
        request(&repeating_prompt(20), 30, &greedy_no_eos()),
        request(&repeating_prompt(21), 24, &greedy_no_eos()),
        request(&repeating_prompt(22), 27, &greedy_no_eos()),
    ];
    let base = SchedulerConfig { prefill_budget: 6, ..Default::default() };
    for draft in [target.path(), other.path()] {
        let stats = lossless_with(target.path(), Proposer::Draft(draft), base.clone(), &reqs, 2, 4);
        assert!(stats.verify_passes > 0 && stats.drafted_tokens > 0, "{stats:?}");
    }
}

/// Gemma 4's assistant drafter reads the target's own keys and values (its
/// last sliding and last full layer, which the KV-shared layers read too)
/// and keeps none: lossless alone and in a batch of 4 whose rows keep
/// different counts, with a join mid-decode, prompts longer than the window
/// of 8 prefilled in chunks, and with 8-bit keys and values.
#[test]
fn the_gemma4_assistant_drafts_and_the_reply_stays_the_same() {
    let target = family_checkpoint(TinyFamily::Gemma4, 11);
    let assistant = tempfile::tempdir().unwrap();
    fixtures::write_gemma4_assistant(target.path(), assistant.path(), 5).unwrap();
    let proposer = Proposer::Assistant(assistant.path());
    let sampling = greedy_no_eos();
    let reqs = [
        request(&repeating_prompt(40), 30, &sampling),
        request(&repeating_prompt(41), 24, &sampling),
        request(&repeating_prompt(42), 27, &sampling),
        request(&repeating_prompt(43), 22, &sampling),
    ];
    let base = SchedulerConfig { prefill_budget: 6, ..Default::default() };
    let alone = lossless_with(target.path(), proposer, base.clone(), &reqs[..1], 1, 0);
    assert!(alone.verify_passes > 0 && alone.drafted_tokens > 0, "alone: {alone:?}");
    assert!(alone.status.contains("assistant"), "{}", alone.status);
    let batch = lossless_with(target.path(), proposer, base.clone(), &reqs, 3, 4);
    assert!(batch.verify_passes > 0 && batch.drafted_tokens > 0, "batch: {batch:?}");
    let quantized = SchedulerConfig {
        kv_quantization: Some(KvQuantization { bits: 8, group_size: 32, start: 0 }),
        ..base
    };
    let stats = lossless_with(target.path(), proposer, quantized, &reqs[..2], 1, 3);
    assert!(stats.verify_passes > 0, "quantized: {stats:?}");
    eprintln!(
        "assistant on the tiny Gemma 4: {:.2} tokens per target pass alone, {:.2} in the batch \
         ({} of {} drafts kept)",
        alone.tokens_per_pass(),
        batch.tokens_per_pass(),
        batch.accepted_tokens,
        batch.drafted_tokens
    );
}

/// The E2B / E4B assistants' centroid-routed head (each draft the best of
/// the routed clusters' tokens; `write_gemma4_centroid_assistant`) drafts
/// for every row of a batch of 4 at once, rows keeping different counts,
/// one joining mid-decode: the replies stay plain greedy decoding's. Its
/// drafts against mlx-vlm's: speculative_assistant_reference.rs.
#[test]
fn the_gemma4_centroid_assistant_drafts_and_the_reply_stays_the_same() {
    let target = family_checkpoint(TinyFamily::Gemma4, 11);
    let assistant = tempfile::tempdir().unwrap();
    fixtures::write_gemma4_centroid_assistant(target.path(), assistant.path(), 5).unwrap();
    let proposer = Proposer::Assistant(assistant.path());
    let sampling = greedy_no_eos();
    let reqs = [
        request(&repeating_prompt(44), 30, &sampling),
        request(&repeating_prompt(45), 24, &sampling),
        request(&repeating_prompt(46), 27, &sampling),
        request(&repeating_prompt(47), 22, &sampling),
    ];
    let base = SchedulerConfig { prefill_budget: 6, ..Default::default() };
    let batch = lossless_with(target.path(), proposer, base, &reqs, 3, 4);
    assert!(batch.verify_passes > 0 && batch.drafted_tokens > 0, "batch: {batch:?}");
    eprintln!(
        "centroid-routed assistant on the tiny Gemma 4: {:.2} tokens per target pass in the \
         batch ({} of {} drafts kept)",
        batch.tokens_per_pass(),
        batch.accepted_tokens,
        batch.drafted_tokens
    );
}

/// A centroid-routed head whose clusters do not cut the vocabulary evenly
/// is refused at load, saying so (mlx-vlm would cut it short silently).
#[test]
fn a_centroid_head_that_does_not_divide_the_vocabulary_is_refused() {
    let target = family_checkpoint(TinyFamily::Gemma4, 11);
    let assistant = tempfile::tempdir().unwrap();
    fixtures::write_gemma4_centroid_assistant(target.path(), assistant.path(), 5).unwrap();
    let path = assistant.path().join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let vocab = config["text_config"]["vocab_size"].as_i64().unwrap();
    let clusters = (2..vocab).find(|c| vocab % c != 0).unwrap();
    config["num_centroids"] = json!(clusters);
    std::fs::write(&path, config.to_string()).unwrap();
    let loaded = engine::model::load(target.path(), &LOAD).unwrap();
    let err = engine::model::load_assistant(assistant.path(), loaded.model.as_ref(), &LOAD)
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains(&format!("num_centroids {clusters} does not divide")), "{err}");
}

/// An assistant made for another model is refused at load, naming both sizes.
#[test]
fn an_assistant_for_another_model_is_refused() {
    let target = family_checkpoint(TinyFamily::Gemma4, 11);
    let assistant = tempfile::tempdir().unwrap();
    fixtures::write_gemma4_assistant(target.path(), assistant.path(), 5).unwrap();
    // A wider Gemma 4 (hidden size 96).
    let other = tempfile::tempdir().unwrap();
    let dims = Dims { hidden: 96, ..Dims::tiny(TinyFamily::Gemma4) };
    fixtures::write_family(other.path(), TinyFamily::Gemma4, dims, None, 11).unwrap();
    let other = engine::model::load(other.path(), &LOAD).unwrap();
    let err = engine::model::load_assistant(assistant.path(), other.model.as_ref(), &LOAD)
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("assistant") && err.contains("hidden size"), "{err}");
    let loaded = engine::model::load(target.path(), &LOAD).unwrap();
    let err = engine::model::load_assistant(target.path(), loaded.model.as_ref(), &LOAD)
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("not a Gemma 4 assistant"), "{err}");
}

#[test]
fn quantized_keys_and_values_rewind_too() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlama { heads: 2, kv_heads: 1, ..TinyLlama::default() })
        .unwrap(); // head_dim 32
    let base = SchedulerConfig {
        kv_quantization: Some(KvQuantization { bits: 8, group_size: 32, start: 0 }),
        ..Default::default()
    };
    let sampling = greedy_no_eos();
    let reqs = [
        request(&repeating_prompt(9), 40, &sampling),
        request(&repeating_prompt(10), 30, &sampling),
    ];
    let stats = lossless(dir.path(), base, &reqs, 1, 4);
    assert!(stats.verify_passes > 0, "{stats:?}");
}

/// The same prompt twice, then twice at once: every reply equal to plain
/// decoding's, the later ones served from the prefix cache (a cache stored
/// one entry short of its key would shift them).
#[test]
fn the_prefix_cache_keeps_what_speculating_rows_fed() {
    let dir = tiny_llama();
    let sampling = greedy_no_eos();
    let ids = repeating_prompt(11);
    let reqs: Vec<Request> = (0..4).map(|_| request(&ids, 30, &sampling)).collect();
    let (plain, _) = run(dir.path(), SchedulerConfig::default(), None, &reqs[..1], 1, 0);
    let mut driver = driver(dir.path(), SchedulerConfig::default(), Some(Proposer::Lookup));
    let first = driver.submit(reqs[0].clone());
    driver.run_to_end();
    let second = driver.submit(reqs[1].clone());
    driver.run_to_end();
    let both: Vec<usize> = reqs[2..].iter().map(|r| driver.submit(r.clone())).collect();
    driver.run_to_end();
    for row in [first, second].into_iter().chain(both) {
        let c = driver.completion(row);
        assert_eq!(c.content, plain[0].content, "request {row}");
    }
    assert!(driver.completion(second).stats.cached_prompt_tokens > 0, "a prefix-cache hit");
    assert_speculated(&driver.scheduler.stats().speculation);
}

/// A stop string that plain decoding meets in the middle of its reply: with
/// speculation it may sit inside an accepted block; the reply ends at the
/// same place.
#[test]
fn a_stop_string_inside_an_accepted_block_ends_the_reply_there() {
    let dir = tiny_llama();
    let sampling = greedy_no_eos();
    let ids = repeating_prompt(12);
    let (plain, _) =
        run(dir.path(), SchedulerConfig::default(), None, &[request(&ids, 40, &sampling)], 1, 0);
    let text: Vec<char> = plain[0].content.chars().collect();
    assert!(text.len() > 12, "a long enough reply: {:?}", plain[0].content);
    let stop: String = text[text.len() / 2..text.len() / 2 + 3].iter().collect();
    let mut with_stop = request(&ids, 40, &sampling);
    with_stop.stop = vec![stop.clone()];
    lossless(dir.path(), SchedulerConfig::default(), &[with_stop], 1, 0);
}

/// Qwen3.5's Gated DeltaNet layers keep a state, not columns: a verify
/// pass records each token's state and a row goes back to the state after
/// its last kept token. Lossless in a batch whose rows keep different
/// counts, with a join mid-decode, by lookup and by a draft model (a tiny
/// Qwen3 of the same vocabulary, whose drafts the target often rejects).
#[test]
fn recurrent_layers_go_back_to_the_state_after_the_last_kept_token() {
    let target = family_checkpoint(TinyFamily::Qwen35, 11);
    let draft = family_checkpoint(TinyFamily::Qwen3, 12);
    let sampling = greedy_no_eos();
    let reqs = [
        request(&repeating_prompt(13), 30, &sampling),
        request(&repeating_prompt(14), 24, &sampling),
        request(&repeating_prompt(15), 27, &sampling),
    ];
    let base = SchedulerConfig { prefill_budget: 6, ..Default::default() };
    lossless(target.path(), base.clone(), &reqs, 2, 4);
    let stats = lossless_with(target.path(), Proposer::Draft(draft.path()), base, &reqs, 2, 4);
    assert!(stats.verify_passes > 0, "{stats:?}");
    assert!(
        stats.accepted_tokens < stats.drafted_tokens,
        "some drafts are rejected, so some rows went back: {stats:?}"
    );
}

/// A tiny Qwen3.5 (Hugging Face's layout) with a one-layer
/// multi-token-prediction head.
fn qwen35_with_mtp(seed: u64) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut dims = Dims::tiny(TinyFamily::Qwen35);
    dims.qwen35.mtp_layers = 1;
    write_family(dir.path(), TinyFamily::Qwen35, dims, None, seed).unwrap();
    dir
}

/// The head drafts from the target's hidden states: lossless alone and in a
/// batch whose rows keep different counts, with a join mid-decode, chunked
/// prompts (the head reads the prompt's hidden states chunk by chunk) and
/// the recurrent layers going back per row.
#[test]
fn the_models_own_head_drafts_and_the_reply_stays_the_same() {
    let dir = qwen35_with_mtp(21);
    let sampling = greedy_no_eos();
    let reqs = [
        request(&repeating_prompt(23), 30, &sampling),
        request(&repeating_prompt(24), 24, &sampling),
        request(&repeating_prompt(25), 27, &sampling),
    ];
    let base = SchedulerConfig { prefill_budget: 6, ..Default::default() };
    let stats = lossless_with(dir.path(), Proposer::Mtp, base.clone(), &reqs, 2, 4);
    assert!(stats.verify_passes > 0 && stats.drafted_tokens > 0, "{stats:?}");
    assert!(stats.status.contains("multi-token"), "{}", stats.status);
    let stats = lossless_with(dir.path(), Proposer::Mtp, base, &reqs[..1], 1, 0);
    assert!(stats.verify_passes > 0, "alone: {stats:?}");
}

/// A chat's next turn starts with the previous prompt, served from the
/// prefix cache: the head has no hidden states for the cached part and
/// starts after it; the replies are the same.
#[test]
fn the_head_starts_after_a_prefix_cache_hit() {
    let dir = qwen35_with_mtp(22);
    let sampling = greedy_no_eos();
    let first_turn = repeating_prompt(26);
    let mut next_turn = first_turn.clone();
    next_turn.extend(repeating_prompt(28));
    let reqs = [request(&first_turn, 24, &sampling), request(&next_turn, 24, &sampling)];
    let plain: Vec<String> = reqs
        .iter()
        .map(|r| {
            run(dir.path(), SchedulerConfig::default(), None, std::slice::from_ref(r), 1, 0).0[0]
                .content
                .clone()
        })
        .collect();
    let mut driver = driver(dir.path(), SchedulerConfig::default(), Some(Proposer::Mtp));
    let first = driver.submit(reqs[0].clone());
    driver.run_to_end();
    let second = driver.submit(reqs[1].clone());
    driver.run_to_end();
    assert_eq!(driver.completion(first).content, plain[0], "first turn");
    assert_eq!(driver.completion(second).content, plain[1], "next turn");
    assert!(driver.completion(second).stats.cached_prompt_tokens > 0, "a prefix-cache hit");
    assert!(driver.scheduler.stats().speculation.verify_passes > 0);
}

/// Asked of a checkpoint without `mtp.*` tensors, the head is not there:
/// the engine says so and decodes as before.
#[test]
fn a_model_without_a_head_says_mtp_is_not_applied() {
    let dir = family_checkpoint(TinyFamily::Qwen35, 11);
    let reqs = [request(&repeating_prompt(27), 12, &greedy_no_eos())];
    let stats = lossless_with(dir.path(), Proposer::Mtp, SchedulerConfig::default(), &reqs, 1, 0);
    assert_eq!(stats.verify_passes, 0);
    assert!(
        stats.status.starts_with("not applied")
            && stats.status.contains("no multi-token-prediction head"),
        "{}",
        stats.status
    );
}

/// Structured output drafts too: the grammar keeps only the part of a draft
/// it allows and masks each verified position, so a token it forbids is
/// never kept. An extraction answer repeats its input, so lookup drafts;
/// with the default model the JSON equals plain decoding's and holds every
/// key.
#[test]
fn a_grammar_masks_verification_and_the_json_is_the_same() {
    let model =
        hub::default_model::locate().expect("run scripts/setup.sh to install the default model");
    let text = "Order 4471 was placed by Maria Gonzalez from Lisbon on 2026-03-14 for three blue ceramic mugs.";
    let keys = ["id", "customer", "city", "date", "item"];
    let schema = json!({
        "type": "object",
        "properties": keys.iter().map(|k| (k.to_string(), json!({"type": "string"}))).collect::<serde_json::Map<_, _>>(),
        "required": keys,
        "additionalProperties": false,
    });
    let question = format!("Extract the order as JSON with keys {}.\n\n{text}", keys.join(", "));
    let messages = vec![ChatMessage::user(question)];
    let reqs = [Request::new(Prompt::Chat { messages, options: TemplateOptions::default() })
        .with_max_tokens(80)
        .with_sampling(greedy_no_eos())
        .with_constraint(Constraint::JsonSchema(schema))];
    let (plain, _) = run(&model, SchedulerConfig::default(), None, &reqs, 1, 0);
    let (spec, driver) =
        run(&model, SchedulerConfig::default(), Some(Proposer::Lookup), &reqs, 1, 0);
    assert!(spec[0].error.is_none(), "{:?}", spec[0].error);
    assert_eq!(spec[0].content, plain[0].content, "speculation changed the reply");
    let answer: serde_json::Value = serde_json::from_str(&spec[0].content)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", spec[0].content));
    for k in keys {
        assert!(answer[k].is_string(), "{k} missing: {answer}");
    }
    let stats = driver.scheduler.stats().speculation;
    assert!(stats.accepted_tokens > 0, "{stats:?}");
}

/// A row that asks for log-probabilities drafts too: each kept token's
/// figures are the target's at its verified position, equal to plain
/// decoding's (one per generated token, same tokens, same values).
#[test]
fn log_probabilities_of_drafted_tokens_are_the_targets() {
    let dir = tiny_llama();
    let mut with_logprobs = request(&repeating_prompt(29), 30, &greedy_no_eos());
    with_logprobs.logprobs = Some(3);
    let reqs = [with_logprobs, request(&repeating_prompt(30), 30, &greedy_no_eos())];
    let (plain, _) = run(dir.path(), SchedulerConfig::default(), None, &reqs, 2, 0);
    let (spec, driver) =
        run(dir.path(), SchedulerConfig::default(), Some(Proposer::Lookup), &reqs, 2, 0);
    assert_eq!(spec[0].content, plain[0].content);
    assert_eq!(spec[0].logprobs.len(), spec[0].stats.generated_tokens, "one per generated token");
    assert_eq!(spec[0].logprobs.len(), plain[0].logprobs.len());
    for (s, p) in spec[0].logprobs.iter().zip(&plain[0].logprobs) {
        assert_eq!(s.token, p.token);
        assert!((s.logprob - p.logprob).abs() < 1e-4, "{} vs {}", s.logprob, p.logprob);
        let ids =
            |lp: &engine::batch::TokenLogprob| lp.top.iter().map(|(t, _)| t.id).collect::<Vec<_>>();
        assert_eq!(ids(s), ids(p), "the same alternatives");
    }
    assert!(spec[0].stats.draft_tokens > 0, "the row with log-probabilities kept drafts");
    assert_speculated(&driver.scheduler.stats().speculation);
}

fn tiny_llama_seeded(seed: u64, layers: i32) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlama { seed, layers, ..TinyLlama::default() }).unwrap();
    dir
}

/// The target as its own draft: every draft lands, so a drafting row gets
/// its whole draft plus the target's token from each pass.
#[test]
fn a_draft_model_that_agrees_with_the_target_gives_whole_drafts() {
    let dir = tiny_llama();
    let sampling = SamplingParams::greedy();
    let plain_prompt: Vec<u32> = (0..20u32).map(|i| 3 + (i * 53 + 7) % 250).collect();
    let reqs =
        [request(&plain_prompt, 30, &sampling), request(&repeating_prompt(14), 30, &sampling)];
    let stats = lossless_with(
        dir.path(),
        Proposer::Draft(dir.path()),
        SchedulerConfig::default(),
        &reqs,
        1,
        3,
    );
    assert_speculated(&stats);
    assert_eq!(
        stats.accepted_tokens, stats.drafted_tokens,
        "the same model agrees with itself: {stats:?}"
    );
    assert!(stats.tokens_per_pass() > 3.0, "{stats:?}");
    assert!(stats.status.starts_with("draft model"), "{}", stats.status);
}

/// A smaller draft with other weights (the same tokenizer): rows keep
/// different counts, one joins mid-decode, another uses a repetition penalty.
#[test]
fn a_different_draft_model_in_a_batch_keeps_the_targets_tokens() {
    let target = tiny_llama();
    let draft = tiny_llama_seeded(99, 1);
    let sampling = greedy_no_eos();
    let penalized = SamplingParams { repetition_penalty: 1.1, ..greedy_no_eos() };
    let reqs = [
        request(&repeating_prompt(15), 36, &sampling),
        request(&repeating_prompt(16), 28, &penalized),
        request(&(0..25u32).map(|i| 3 + (i * 29 + 5) % 250).collect::<Vec<_>>(), 32, &sampling),
        request(&repeating_prompt(17), 30, &sampling),
    ];
    let stats = lossless_with(
        target.path(),
        Proposer::Draft(draft.path()),
        SchedulerConfig::default(),
        &reqs,
        3,
        5,
    );
    assert!(stats.verify_passes > 0 && stats.drafted_tokens > 0, "{stats:?}");
    assert!(
        stats.accepted_tokens < stats.drafted_tokens,
        "another model disagrees sometimes: {stats:?}"
    );
}

#[test]
fn a_draft_model_over_sliding_layers() {
    let target = family_checkpoint(TinyFamily::Gemma3, 11);
    let draft = family_checkpoint(TinyFamily::Gemma3, 12);
    let reqs = [
        request(&repeating_prompt(18), 30, &greedy_no_eos()),
        request(&repeating_prompt(19), 26, &greedy_no_eos()),
    ];
    let base = SchedulerConfig { prefill_budget: 6, ..Default::default() };
    let stats = lossless_with(target.path(), Proposer::Draft(draft.path()), base, &reqs, 1, 4);
    assert!(stats.verify_passes > 0, "{stats:?}");
}

/// A draft that cannot serve: another vocabulary (recurrent layers are
/// fine: see `a_recurrent_draft_model_goes_back_to_the_state_after_its_last_kept_draft`).
#[test]
fn an_unsuitable_draft_model_is_refused_naming_both() {
    let target = tiny_llama();
    let loaded = || engine::model::load(target.path(), &LOAD).unwrap();
    // Another vocabulary: the tiny llama's tokenizer with one token more.
    let other = tiny_llama_seeded(5, 1);
    let config = SchedulerConfig {
        speculation: Some(SpeculationConfig::draft_model(other.path().to_path_buf())),
        ..Default::default()
    };
    let path = other.path().join("tokenizer.json");
    let mut tokenizer: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let added: Vec<u64> = tokenizer["added_tokens"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["id"].as_u64())
        .collect();
    let vocab = tokenizer["model"]["vocab"].as_object_mut().expect("a vocab map");
    let next = vocab.values().filter_map(|v| v.as_u64()).chain(added).max().unwrap() + 1;
    vocab.insert("an-extra-token".into(), serde_json::json!(next));
    std::fs::write(&path, tokenizer.to_string()).unwrap();
    let draft = engine::model::load(other.path(), &LOAD).unwrap();
    let err = match Scheduler::new(loaded(), config).with_draft_model(draft) {
        Ok(_) => panic!("a draft with another vocabulary was taken"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("vocabulary"), "{err}");
    let (t, d) = (target.path().file_name().unwrap(), other.path().file_name().unwrap());
    assert!(
        err.contains(&*t.to_string_lossy()) && err.contains(&*d.to_string_lossy()),
        "names both: {err}"
    );
}

/// Sampling rows speculate too (the rejection rule, tested for its
/// distribution in `sample.rs`): with the target drafting for itself at a
/// low temperature drafts land, and a seeded request gives the same reply
/// each time it runs.
#[test]
fn sampling_rows_speculate_and_a_seed_still_fixes_the_reply() {
    let dir = tiny_llama();
    let sampling = SamplingParams {
        // The tiny random model's distribution is nearly flat: a low
        // temperature gives its argmax (what the draft proposes) most of the mass.
        temperature: 0.05,
        top_p: 0.9,
        seed: Some(42),
        ..greedy_no_eos()
    };
    let reqs = [
        request(&repeating_prompt(23), 40, &sampling),
        request(&repeating_prompt(24), 40, &sampling),
    ];
    let draft = Some(Proposer::Draft(dir.path()));
    let (first, driver) = run(dir.path(), SchedulerConfig::default(), draft, &reqs, 2, 0);
    let (again, _) = run(dir.path(), SchedulerConfig::default(), draft, &reqs, 2, 0);
    for (a, b) in first.iter().zip(&again) {
        assert!(a.error.is_none(), "{:?}", a.error);
        assert_eq!(a.stats.generated_tokens, 40);
        assert_eq!(a.content, b.content, "the same seed, the same reply");
    }
    assert_speculated(&driver.scheduler.stats().speculation);
}

/// LFM2's short convolutions keep each row's last inputs as a state: a
/// verify pass records the state after each of its tokens and a row whose
/// drafts were rejected goes back to the one after its last kept token.
/// Prompt lookup on and off give the same replies in a batch whose rows
/// keep different counts, with a join mid-decode and chunked prompts.
#[test]
fn lfm2_convolution_states_go_back_to_the_last_kept_token() {
    let dir = family_checkpoint(TinyFamily::Lfm2, 11);
    let sampling = greedy_no_eos();
    let reqs = [
        request(&repeating_prompt(30), 30, &sampling),
        request(&repeating_prompt(31), 24, &sampling),
        request(&repeating_prompt(32), 27, &sampling),
    ];
    let base = SchedulerConfig { prefill_budget: 6, ..Default::default() };
    let stats = lossless(dir.path(), base, &reqs, 2, 4);
    assert!(stats.verify_passes > 0 && stats.drafted_tokens > 0, "{stats:?}");
    assert!(
        stats.accepted_tokens < stats.drafted_tokens,
        "some drafts are rejected, so some rows went back: {stats:?}"
    );
}

/// gpt-oss: sliding layers of 8 and full layers, both with attention sinks,
/// experts in every layer. Its tiny model's replies never repeat, so a draft
/// model drafts: the same weights (every draft lands) and other weights
/// (some are rejected, and each row's windows are cut back to its own last
/// kept token); the replies equal plain decoding's, with chunked prompts
/// and a join mid-decode.
#[test]
fn gpt_oss_sliding_layers_with_sinks_rewind_per_row() {
    let target = family_checkpoint(TinyFamily::GptOss, 11);
    let reqs = [
        request(&repeating_prompt(40), 30, &greedy_no_eos()),
        request(&repeating_prompt(41), 24, &greedy_no_eos()),
        request(&repeating_prompt(42), 27, &greedy_no_eos()),
    ];
    let base = SchedulerConfig { prefill_budget: 6, ..Default::default() };
    let same =
        lossless_with(target.path(), Proposer::Draft(target.path()), base.clone(), &reqs, 2, 4);
    assert!(same.verify_passes > 0 && same.accepted_tokens == same.drafted_tokens, "{same:?}");
    let other = family_checkpoint(TinyFamily::GptOss, 12);
    let stats = lossless_with(target.path(), Proposer::Draft(other.path()), base, &reqs, 2, 4);
    assert!(stats.accepted_tokens < stats.drafted_tokens, "some drafts are rejected: {stats:?}");
}

/// A tiny `family` model and a draft for it: the same model with every
/// weight moved by seeded noise, so that some drafts land and some do not.
fn with_noisy_draft(family: TinyFamily, seed: u64) -> (tempfile::TempDir, tempfile::TempDir) {
    let target = family_checkpoint(family, seed);
    let draft = tempfile::tempdir().unwrap();
    let layers = Dims::tiny(family).layers;
    write_draft_of(target.path(), draft.path(), layers, 0.2, seed + 100).unwrap();
    (target, draft)
}

fn assert_kept_and_rejected(stats: &SpeculationStats, what: &str) {
    assert!(stats.verify_passes > 0 && stats.accepted_tokens > 0, "{what}: none kept: {stats:?}");
    assert!(stats.accepted_tokens < stats.drafted_tokens, "{what}: none rejected: {stats:?}");
}

/// A draft model with recurrent layers (Qwen3.5's Gated DeltaNet, LFM2's
/// short convolutions) keeps the states it passed through while drafting;
/// after verification each row takes the one after its last kept draft.
/// Greedy replies equal plain decoding's, alone and in a batch of 3 with a
/// join mid-decode and chunked prompts, with drafts kept and rejected; the
/// draft's rows also catch up after steps without speculation (a batch
/// larger than `max_batch`), more tokens than one recorded catch-up pass reads.
#[test]
fn a_recurrent_draft_model_goes_back_to_the_state_after_its_last_kept_draft() {
    let sampling = greedy_no_eos();
    let reqs = [
        request(&repeating_prompt(50), 30, &sampling),
        request(&repeating_prompt(51), 24, &sampling),
        request(&repeating_prompt(52), 27, &sampling),
    ];
    let base = SchedulerConfig { prefill_budget: 6, ..Default::default() };
    // LFM2's seed: the first from 11 up whose noisy draft has a draft kept
    // when the row is alone (on the recorded tiny LFM2, 11's six are all
    // rejected; 12's 18 too once a draft model drafts 3 steadily).
    for (family, seed) in [(TinyFamily::Qwen35, 11), (TinyFamily::Lfm2, 13)] {
        let (target, draft) = with_noisy_draft(family, seed);
        let proposer = Proposer::Draft(draft.path());
        let alone = lossless_with(target.path(), proposer, base.clone(), &reqs[..1], 1, 0);
        assert_kept_and_rejected(&alone, &format!("{family:?} alone"));
        let batch = lossless_with(target.path(), proposer, base.clone(), &reqs, 2, 4);
        assert_kept_and_rejected(&batch, &format!("{family:?} in a batch"));
    }
    // Five rows: beyond the draft model's `max_batch` of 4 nobody speculates;
    // once the short one ends, the others' draft rows read the 10 or so
    // tokens they missed in more than one recorded pass.
    let (target, draft) = with_noisy_draft(TinyFamily::Qwen35, 12);
    let mut five: Vec<Request> =
        (53..57).map(|salt| request(&repeating_prompt(salt), 30, &sampling)).collect();
    five.insert(0, request(&repeating_prompt(57), 11, &sampling));
    let stats = lossless_with(target.path(), Proposer::Draft(draft.path()), base, &five, 5, 0);
    assert_kept_and_rejected(&stats, "after lagging");
}

/// A chat's next turn starts with the previous prompt, served from the
/// target's prefix cache: the recurrent draft model's row reads that prompt
/// from the draft's own prefix cache (the engine's stats show one hit that
/// reused the whole first prompt, none before it) and drafts from there,
/// beside a row without a hit; every reply equals plain decoding's.
#[test]
fn a_recurrent_draft_model_starts_after_a_prefix_cache_hit() {
    let (target, draft) = with_noisy_draft(TinyFamily::Qwen35, 13);
    let sampling = greedy_no_eos();
    let first_turn = repeating_prompt(58);
    let mut next_turn = first_turn.clone();
    next_turn.extend(repeating_prompt(59));
    let reqs = [
        request(&first_turn, 24, &sampling),
        request(&next_turn, 24, &sampling),
        request(&repeating_prompt(60), 20, &sampling),
    ];
    let plain: Vec<String> = reqs
        .iter()
        .map(|r| {
            let base = SchedulerConfig::default();
            run(target.path(), base, None, std::slice::from_ref(r), 1, 0).0[0].content.clone()
        })
        .collect();
    let proposer = Some(Proposer::Draft(draft.path()));
    let mut driver = driver(target.path(), SchedulerConfig::default(), proposer);
    let draft_cache = |driver: &Driver| {
        let stats = driver.scheduler.stats().speculation;
        let cache = stats.draft_prefix_cache.clone();
        cache.unwrap_or_else(|| panic!("a draft model's cache: {stats:?}"))
    };
    let first = driver.submit(reqs[0].clone());
    driver.run_to_end();
    let after_first = draft_cache(&driver);
    assert_eq!((after_first.hits, after_first.misses, after_first.entries), (0, 1, 1));
    assert!(after_first.bytes > 0, "{after_first:?}");
    let rows = [first, driver.submit(reqs[1].clone()), driver.submit(reqs[2].clone())];
    driver.run_to_end();
    for (i, &row) in rows.iter().enumerate() {
        let c = driver.completion(row);
        assert!(c.error.is_none(), "{:?}", c.error);
        assert_eq!(c.content, plain[i], "request {i}");
    }
    assert!(driver.completion(rows[1]).stats.cached_prompt_tokens > 0, "a prefix-cache hit");
    assert_kept_and_rejected(&driver.scheduler.stats().speculation, "through the prefix cache");
    // The next turn read the first prompt from the draft's cache; the other row missed.
    let after_next = draft_cache(&driver);
    let reused = (after_next.hits, after_next.misses, after_next.reused_tokens);
    assert_eq!(reused, (1, 2, first_turn.len() as u64), "{after_next:?}");
    assert!(after_next.entries > 1 && after_next.bytes > after_first.bytes, "{after_next:?}");
    // Prompt lookup has no draft model, and no draft cache to report.
    let lookup = self::driver(target.path(), SchedulerConfig::default(), Some(Proposer::Lookup));
    assert!(lookup.scheduler.stats().speculation.draft_prefix_cache.is_none());
}

/// The draft model itself, stepped by hand: three rows draft different
/// counts (one none for a dozen steps, so it lags further than one
/// recorded catch-up pass reads), keep a different number of drafts each
/// step plus a token of their own, and the draft goes back per row. Each
/// step's drafts equal those of a fresh draft model that read the row's
/// tokens from scratch: each row's recurrent states are exactly the ones
/// after its kept tokens (the replies' equality cannot show this: a draft
/// in a wrong state only drafts worse).
#[test]
fn a_recurrent_draft_model_drafts_after_going_back_as_a_fresh_one_would() {
    use engine::batch::speculation::draft_model::{DraftModel, DraftRow};
    for family in [TinyFamily::Qwen35, TinyFamily::Lfm2] {
        let (target, draft) = with_noisy_draft(family, 14);
        let target = engine::model::load(target.path(), &LOAD).unwrap();
        let load_draft = || engine::model::load(draft.path(), &LOAD).unwrap();
        let mut batched = DraftModel::new(load_draft(), &target).unwrap();
        let mut fresh = DraftModel::new(load_draft(), &target).unwrap();
        let mut rows: Vec<Vec<u32>> = (61..64).map(repeating_prompt).collect();
        for row in &mut rows {
            row.push(7);
            batched.join(&row[..row.len() - 1]).unwrap();
        }
        let (mut rewound, mut lagged) = (0, false);
        for step in 0..16usize {
            let wanted: Vec<usize> =
                vec![3, if step < 12 { 0 } else { 2 }, if step % 3 == 0 { 1 } else { 4 }];
            let list: Vec<DraftRow> = rows
                .iter()
                .zip(&wanted)
                .map(|(tokens, &wanted)| DraftRow { tokens, wanted })
                .collect();
            let drafts = batched.propose(&list).unwrap();
            let fed = wanted.iter().max().unwrap() - 1;
            let mut drops = Vec::new();
            for (b, row) in rows.iter_mut().enumerate() {
                assert_eq!(drafts[b].len(), wanted[b]);
                if wanted[b] > 0 {
                    fresh.clear();
                    fresh.join(&row[..row.len() - 1]).unwrap();
                    let alone = fresh.propose(&[DraftRow { tokens: row, wanted: wanted[b] }]);
                    assert_eq!(drafts[b], alone.unwrap()[0], "{family:?} step {step} row {b}");
                    lagged |= b == 1;
                }
                // Verification's stand-in: keep some drafts, then a token of our own.
                let kept = (step + b) % (wanted[b] + 1);
                row.extend(&drafts[b][..kept]);
                row.push(3 + ((step * 7 + b * 13) % 250) as u32);
                let drop = if wanted[b] > 0 { fed.saturating_sub(kept) } else { 0 };
                rewound += drop;
                drops.push(drop as i32);
            }
            batched.rewind(&drops).unwrap();
        }
        assert!(lagged && rewound > 0, "{family:?}: a lagging row drafted and rows went back");
    }
}

/// The draft model keeps each prompt it read: a chat's next turn, which
/// starts with the previous prompt, is read by the draft from there (as the
/// target reads it from its own prefix cache), with a recurrent draft
/// (Qwen3.5: the checkpoint at the prompt's end) and one with keys and
/// values (Qwen3); its drafts equal those of a fresh draft that read the
/// whole prompt. Without a budget it keeps nothing.
#[test]
fn the_draft_model_reads_a_next_turn_from_its_own_prefix_cache() {
    use engine::batch::speculation::draft_model::{DraftModel, DraftRow};
    for family in [TinyFamily::Qwen35, TinyFamily::Qwen3] {
        let (target, draft) = with_noisy_draft(family, 15);
        let target = engine::model::load(target.path(), &LOAD).unwrap();
        let load_draft = || engine::model::load(draft.path(), &LOAD).unwrap();
        let mut cached =
            DraftModel::new(load_draft(), &target).unwrap().with_prefix_cache(64 << 20);
        let mut fresh = DraftModel::new(load_draft(), &target).unwrap();
        let first_turn = repeating_prompt(65);
        let mut next_turn = first_turn.clone();
        next_turn.extend(repeating_prompt(66));
        next_turn.push(9); // the first token the target gave
        cached.join(&first_turn).unwrap();
        cached.filter(&[]).unwrap(); // the first turn ends
        cached.join(&next_turn[..next_turn.len() - 1]).unwrap();
        let stats = cached.prefix_cache_stats();
        assert_eq!((stats.hits, stats.reused_tokens), (1, first_turn.len() as u64), "{family:?}");
        fresh.join(&next_turn[..next_turn.len() - 1]).unwrap();
        assert_eq!(fresh.prefix_cache_stats().entries, 0, "no budget, nothing kept");
        let row = [DraftRow { tokens: &next_turn, wanted: 4 }];
        assert_eq!(cached.propose(&row).unwrap(), fresh.propose(&row).unwrap(), "{family:?}");
    }
}
