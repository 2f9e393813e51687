//! Gemma 4's assistant drafter against the reference: on the tiny Gemma 4
//! of the parity tests, with two assistants — one that mostly drafts the
//! last token again (`fixtures::write_gemma4_echo_assistant`, so that
//! the target's repeated tokens are drafts it keeps: the accept path) and
//! the random one of the lossless tests (`write_gemma4_assistant`: its
//! drafts are rejected, but their ids come from every part of the
//! assistant, its layers over the target's keys and values, sliding and
//! full, and `post_projection` feeding the next draft) — each round's drafted ids,
//! the tokens of a greedy reply and which of them came from the drafts are
//! what Python mlx-vlm 0.7.6's `gemma4_assistant` drafter gives in its
//! round loop (`tests/goldens/speculative_assistant_mlx_vlm.json`, written by
//! `scripts/make-speculative-assistant-golden.sh`).
//!
//! How the rounds compare, as for the MTP head: both sides take the first
//! token from the prefill pass (the golden's prefill is unchunked); each
//! round drafts a fixed count (mlx-vlm's `draft_block_size` − 1; ours
//! `SpeculationConfig { adaptive: false }`) from the target's embedding of
//! the round's last token and the target's final-normed hidden state that
//! predicted it, every draft's query at that last position over the
//! target's keys and values; one target pass verifies them, the row keeps
//! the drafts the target's argmax agrees with and the target's own token.
//! The assistant keeps no cache, so there is nothing for the two sides to
//! undo differently.
//!
//! One difference, in mlx-vlm's first round only: which keys of the
//! target's sliding-window layer the drafts read. Ours read the last
//! `window − 1` keys in every round (what a query at the row's next
//! position may read: `BatchCache::peek`). mlx-vlm masks a sliding layer
//! bidirectionally around the query's index in the keys it is handed,
//! capped at their count: after a verify pass it is handed the target's
//! rotating cache, the query lands one past the last key, and it reads the
//! last `window − 1` as ours does; in the first round it is handed the
//! whole prompt's keys from the prefill pass, the query lands on the last
//! key, and it reads `window`. The compared runs (`*_window_*`) are
//! mlx-vlm's own code with its first-round query moved one past the last
//! key (the script patches its `make_drafter_masks`); the unchanged runs
//! (`*_mlx_vlm_*`) are kept, and for the random assistant (every round
//! rejected on both sides, so the rounds line up) every round but the
//! first is checked equal to ours.
//!
//! A third assistant drafts through the centroid-routed head of the E2B /
//! E4B assistants (`use_ordered_embeddings`:
//! `fixtures::write_gemma4_centroid_assistant`): its drafts are the
//! best of the routed clusters' tokens only, and match those of mlx-vlm's
//! own `MaskedEmbedder` (its greedy `argmax`) round for round; the golden
//! says that the routing decided some of them (the whole table's best was
//! left out), so a head that ignored the routing would not pass.
use std::path::Path;
use std::sync::{Arc, Mutex};

use engine::batch::speculation::SpeculationConfig;
use engine::batch::{Scheduler, SchedulerConfig};
use engine::cache::BatchCache;
use engine::handle::Completion;
use engine::model::{load, load_assistant, KvDrafter, LanguageModel};
use fixtures::{
    write_gemma4_assistant, write_gemma4_centroid_assistant, write_gemma4_echo_assistant,
    write_tiny_family, TinyFamily,
};
use mlx_rs::Array;
use serde_json::Value;

use crate::common::{greedy_ids, LOAD};
use crate::speculative_reference::step_alone;

/// What `write_tiny_model --gemma4-assistant` writes. The target's seed is
/// the first from 11 up whose greedy replies pass the golden script's own
/// checks on the recorded Gemma 4 (11 ends a reply with EOS).
const TARGET_SEED: u64 = 12;
const ASSISTANT_SEED: u64 = 5;

fn golden() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/goldens/speculative_assistant_mlx_vlm.json");
    let text = std::fs::read_to_string(&path)
        .expect("the golden (scripts/make-speculative-assistant-golden.sh)");
    serde_json::from_str(&text).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect()
}

fn flags(v: &Value) -> Vec<bool> {
    v.as_array().unwrap().iter().map(|f| f.as_bool().unwrap()).collect()
}

/// The assistant, recording each round's drafted ids (one row).
struct Recording {
    inner: Box<dyn KvDrafter>,
    rounds: Arc<Mutex<Vec<Vec<u32>>>>,
}

impl KvDrafter for Recording {
    fn draft(
        &self,
        target: &dyn LanguageModel,
        cache: &BatchCache,
        tokens: &Array,
        hidden: &Array,
        positions: &[i32],
        count: usize,
    ) -> engine::error::Result<Array> {
        let drafted = self.inner.draft(target, cache, tokens, hidden, positions, count)?;
        assert_eq!(drafted.dim(0), 1, "one row");
        let row = drafted.as_dtype(mlx_rs::Dtype::Int32).unwrap();
        let row: Vec<u32> = row.as_slice::<i32>().iter().map(|&t| t as u32).collect();
        self.rounds.lock().unwrap().push(row);
        Ok(drafted)
    }
}

/// The assistant in `assistant` drafting `draft` tokens a round (a fixed
/// count) for the target in `target`, one greedy request alone: its
/// completion, which tokens came from the drafts, and each round's drafts.
fn speculate(
    target: &Path,
    assistant: &Path,
    prompt: &[u32],
    draft: usize,
    max_tokens: usize,
) -> (Completion, Vec<bool>, Vec<Vec<u32>>) {
    let rounds = Arc::new(Mutex::new(Vec::new()));
    let loaded = load(target, &LOAD).unwrap();
    let recording = Recording {
        inner: load_assistant(assistant, loaded.model.as_ref(), &LOAD).unwrap(),
        rounds: rounds.clone(),
    };
    let speculation = SpeculationConfig {
        max_draft_tokens: draft,
        adaptive: false,
        ..SpeculationConfig::assistant(assistant.to_path_buf())
    };
    let config = SchedulerConfig { speculation: Some(speculation), ..Default::default() };
    let scheduler = Scheduler::new(loaded, config).with_assistant(Box::new(recording));
    let (completion, flags) = step_alone(scheduler, prompt, max_tokens);
    let rounds = rounds.lock().unwrap().clone();
    (completion, flags, rounds)
}

/// The golden's rounds that start within its first `n` tokens, which
/// `flags` (its `from_draft`) tell apart: how many drafts each kept.
fn compared_rounds(expected: &[bool], rounds: usize, n: usize) -> Vec<usize> {
    let mut kept = Vec::new();
    let mut start = 1;
    while start < n && kept.len() < rounds {
        let run = expected[start..].iter().take_while(|&&f| f).count();
        kept.push(run);
        start += run + 1;
    }
    kept
}

#[test]
fn the_assistants_drafts_match_mlx_vlm() {
    let golden = golden();
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("target");
    write_tiny_family(&target, TinyFamily::Gemma4, None, TARGET_SEED).unwrap();
    let echo = dir.path().join("assistant");
    write_gemma4_echo_assistant(&target, &echo, ASSISTANT_SEED).unwrap();
    let random = dir.path().join("random_assistant");
    write_gemma4_assistant(&target, &random, ASSISTANT_SEED).unwrap();
    let n = golden["compared"].as_u64().unwrap() as usize;
    let max_tokens = golden["max_tokens"].as_u64().unwrap() as usize;
    let plain = load(&target, &LOAD).unwrap();
    let (mut kept_total, mut drafted_total, mut compared) = (0, 0, 0);
    let mut first_rounds_apart = 0;
    // Drafts kept per compared round, over every case.
    let mut kept_per_round = Vec::new();
    for (i, case) in golden["prompts"].as_array().unwrap().iter().enumerate() {
        let prompt = ids(&case["prompt"]);
        let greedy = ids(&case["greedy"]);
        assert_eq!(greedy_ids(&plain, &prompt, max_tokens), greedy, "prompt {i}: our greedy ids");
        let (alone, _) = step_alone(
            Scheduler::new(load(&target, &LOAD).unwrap(), Default::default()),
            &prompt,
            max_tokens,
        );
        let cases = golden["draft_counts"].as_array().unwrap().iter().flat_map(|k| {
            let k = k.as_u64().unwrap() as usize;
            [("echo", &echo, k), ("random", &random, k)]
        });
        for (name, assistant, draft) in cases {
            let key = format!("{name}_window_{draft}");
            let expected = flags(&case[&key]["from_draft"]);
            let expected_rounds: Vec<Vec<u32>> =
                case[&key]["drafts"].as_array().unwrap().iter().map(ids).collect();
            let (spec, ours, ours_rounds) =
                speculate(&target, assistant, &prompt, draft, max_tokens);
            assert_eq!(spec.content, alone.content, "prompt {i}, {key}: the text changed");
            assert_eq!(spec.stats.generated_tokens, max_tokens, "prompt {i}, {key}");
            assert_eq!(
                ours[..n],
                expected[..n],
                "prompt {i}, {key}: which tokens came from the assistant (ours, then mlx-vlm's)"
            );
            // The rounds that start within the compared tokens: the same drafts.
            let kept = compared_rounds(&expected, expected_rounds.len(), n);
            let here = kept.len();
            for (r, (want, &run)) in expected_rounds.iter().zip(&kept).enumerate() {
                assert_eq!(ours_rounds.get(r), Some(want), "prompt {i}, {key}: round {r}'s drafts");
                if name == "echo" {
                    kept_per_round.push((draft, run));
                    (kept_total, drafted_total) = (kept_total + run, drafted_total + draft);
                }
            }
            compared += here;
            if name == "random" {
                // mlx-vlm as it runs: the random assistant's drafts are all
                // rejected there too, so the rounds line up, and only the
                // first round may differ (which sliding-window keys it reads).
                let as_is = &case[&format!("random_mlx_vlm_{draft}")];
                assert_eq!(flags(&as_is["from_draft"])[..n], expected[..n], "prompt {i}, {key}");
                let as_is: Vec<Vec<u32>> =
                    as_is["drafts"].as_array().unwrap().iter().map(ids).collect();
                assert_eq!(
                    as_is[1..here],
                    ours_rounds[1..here],
                    "prompt {i}, {key}: mlx-vlm's rounds after the first"
                );
                first_rounds_apart += usize::from(as_is[0] != ours_rounds[0]);
            }
        }
    }
    // The difference documented above shows on this golden.
    assert!(first_rounds_apart > 0, "mlx-vlm's first rounds all read as ours");
    eprintln!(
        "assistant vs mlx-vlm: {compared} rounds' drafts compared; the echoing \
         assistant's {} rounds kept {kept_total} of {drafted_total} drafts; {first_rounds_apart} \
         first rounds of mlx-vlm as it runs drafted otherwise",
        kept_per_round.len()
    );
    // Not a vacuous comparison: the echoing assistant's rounds kept drafts,
    // some had one rejected.
    assert!(
        kept_per_round.iter().any(|&(_, kept)| kept > 0),
        "the assistant never guessed right: {kept_per_round:?}"
    );
    assert!(
        kept_per_round.iter().any(|&(k, kept)| kept < k),
        "no draft was rejected: {kept_per_round:?}"
    );
}

/// The centroid-routed head against mlx-vlm's (see the module's doc): the
/// same drafts in every compared round (the `*_window_*` runs, as above),
/// which tokens came from them, and a reply equal to plain greedy decoding's.
#[test]
fn the_centroid_heads_drafts_match_mlx_vlm() {
    let golden = golden();
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("target");
    write_tiny_family(&target, TinyFamily::Gemma4, None, TARGET_SEED).unwrap();
    let assistant = dir.path().join("centroid_assistant");
    write_gemma4_centroid_assistant(&target, &assistant, ASSISTANT_SEED).unwrap();
    let n = golden["compared"].as_u64().unwrap() as usize;
    let max_tokens = golden["max_tokens"].as_u64().unwrap() as usize;
    let plain = load(&target, &LOAD).unwrap();
    let (mut rounds_compared, mut kept_total, mut routed_same, mut routed_apart) = (0, 0, 0, 0);
    for (i, case) in golden["prompts"].as_array().unwrap().iter().enumerate() {
        let prompt = ids(&case["prompt"]);
        let greedy = ids(&case["greedy"]);
        assert_eq!(greedy_ids(&plain, &prompt, max_tokens), greedy, "prompt {i}: our greedy ids");
        let (alone, _) = step_alone(
            Scheduler::new(load(&target, &LOAD).unwrap(), Default::default()),
            &prompt,
            max_tokens,
        );
        for draft in golden["draft_counts"].as_array().unwrap() {
            let draft = draft.as_u64().unwrap() as usize;
            let key = format!("centroid_window_{draft}");
            let record = &case[&key];
            let expected = flags(&record["from_draft"]);
            let expected_rounds: Vec<Vec<u32>> =
                record["drafts"].as_array().unwrap().iter().map(ids).collect();
            let (spec, ours, ours_rounds) =
                speculate(&target, &assistant, &prompt, draft, max_tokens);
            assert_eq!(spec.content, alone.content, "prompt {i}, {key}: the text changed");
            assert_eq!(spec.stats.generated_tokens, max_tokens, "prompt {i}, {key}");
            assert_eq!(
                ours[..n],
                expected[..n],
                "prompt {i}, {key}: which tokens came from the assistant (ours, then mlx-vlm's)"
            );
            let kept = compared_rounds(&expected, expected_rounds.len(), n);
            for (r, want) in expected_rounds.iter().take(kept.len()).enumerate() {
                assert_eq!(ours_rounds.get(r), Some(want), "prompt {i}, {key}: round {r}'s drafts");
            }
            rounds_compared += kept.len();
            kept_total += kept.iter().sum::<usize>();
            routed_same += record["routed_same"].as_u64().unwrap();
            routed_apart += record["routed_apart"].as_u64().unwrap();
        }
    }
    eprintln!(
        "centroid head vs mlx-vlm: {rounds_compared} rounds' drafts compared, {kept_total} drafts \
         kept; mlx-vlm's routing gave the whole table's best {routed_same} times, another token \
         {routed_apart} times"
    );
    // Not a vacuous comparison: the routing left the best token out of some
    // drafts (a tied head would have drafted otherwise) and not of others.
    assert!(routed_apart > 0 && routed_same > 0, "{routed_apart} apart, {routed_same} the same");
}
