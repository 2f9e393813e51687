//! The multi-token-prediction head against the reference: on a tiny seeded
//! Qwen3.5 with a one-layer `mtp.*` head (`fixtures::write_mtp_target`),
//! the tokens of a greedy reply and which of them came from the head's
//! drafts are what Python mlx-vlm 0.7.6's MTP rounds give
//! (`tests/goldens/speculative_mtp_mlx_vlm.json`, written by
//! `scripts/make-speculative-mtp-golden.sh`). mlx-vlm drafts with the head
//! only as its splitter writes it alone (`split_mtp`); the golden also
//! records that folder, which `fixtures::split_mtp_head` must write
//! the same, and ours drafts the same with the checkpoint's own head and
//! with the split one.
//!
//! How the rounds compare. Both sides take the first token from the
//! prefill pass; the head reads the whole prompt's hidden states (the
//! golden's prefill is unchunked, see the script); each round drafts a fixed
//! count (mlx-vlm's `draft_block_size` − 1; ours `SpeculationConfig {
//! adaptive: false }`), one target pass verifies them, the row keeps the
//! drafts the target's argmax agrees with and the target's own token.
//!
//! One difference, by design: after a round, mlx-vlm's head keeps the cache
//! entries it wrote while drafting the kept tokens — computed from its own
//! output standing in for the target's hidden state — and reads the target
//! only from the first rejected position on. Ours, as vLLM and SGLang do,
//! reads the target's real hidden state at every kept position. With one
//! draft a round the two are the same thing, and the golden's `mlx_vlm_1`
//! is compared as mlx-vlm runs it. With three, the golden's `reread_3` is
//! mlx-vlm's own code with that one step changed (the script trims those
//! entries before its `accept_verified_tokens`), and it is compared; its
//! unchanged `mlx_vlm_3` is kept for the record.
use std::path::Path;

use engine::batch::speculation::SpeculationConfig;
use engine::batch::{Scheduler, SchedulerConfig};
use engine::model::{load, load_draft_head, load_with_draft_head};
use fixtures::{split_mtp_head, write_mtp_target, write_tiny_family, TinyFamily};
use serde_json::Value;

use crate::common::{greedy_ids, LOAD};
use crate::speculative_reference::step_alone;

fn golden() -> Value {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens/speculative_mtp_mlx_vlm.json");
    let text = std::fs::read_to_string(&path)
        .expect("the golden (scripts/make-speculative-mtp-golden.sh)");
    serde_json::from_str(&text).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect()
}

fn flags(v: &Value) -> Vec<bool> {
    v.as_array().unwrap().iter().map(|f| f.as_bool().unwrap()).collect()
}

/// Where the head comes from.
#[derive(Clone, Copy)]
enum Head<'a> {
    /// The checkpoint's own `mtp.*` tensors.
    Own,
    /// A split head's folder, for the target loaded without its own.
    Folder(&'a Path),
}

fn scheduler(target: &Path, head: Head, draft: usize) -> Scheduler {
    let fixed =
        |c: SpeculationConfig| SpeculationConfig { max_draft_tokens: draft, adaptive: false, ..c };
    match head {
        Head::Own => {
            let config = SchedulerConfig {
                speculation: Some(fixed(SpeculationConfig::mtp())),
                ..Default::default()
            };
            Scheduler::new(load_with_draft_head(target, &LOAD).unwrap(), config)
        }
        Head::Folder(folder) => {
            let loaded = load(target, &LOAD).unwrap();
            assert!(loaded.model.draft_head().is_none(), "the target's own head is not read");
            let head = load_draft_head(folder, loaded.model.as_ref(), &LOAD).unwrap();
            let config = SchedulerConfig {
                speculation: Some(fixed(SpeculationConfig::mtp_folder(folder.to_path_buf()))),
                ..Default::default()
            };
            Scheduler::new(loaded, config).with_draft_head(head)
        }
    }
}

#[test]
fn the_heads_drafts_match_mlx_vlm() {
    let golden = golden();
    let dir = tempfile::tempdir().unwrap();
    let target = write_mtp_target(dir.path()).unwrap();
    let folder = dir.path().join("head");
    split_mtp_head(&target, &folder).unwrap();
    let n = golden["compared"].as_u64().unwrap() as usize;
    let max_tokens = golden["max_tokens"].as_u64().unwrap() as usize;
    let plain = load(&target, &LOAD).unwrap();
    // Drafts kept per compared round, over every case (a round ends on the target's token).
    let mut rounds = Vec::new();
    for (i, case) in golden["prompts"].as_array().unwrap().iter().enumerate() {
        let prompt = ids(&case["prompt"]);
        let greedy = ids(&case["greedy"]);
        assert_eq!(greedy_ids(&plain, &prompt, max_tokens), greedy, "prompt {i}: our greedy ids");
        let (alone, _) = step_alone(
            Scheduler::new(load(&target, &LOAD).unwrap(), Default::default()),
            &prompt,
            max_tokens,
        );
        for (key, draft, heads) in [
            ("mlx_vlm_1", 1, vec![Head::Own, Head::Folder(&folder)]),
            ("reread_3", 3, vec![Head::Own]),
        ] {
            let expected = flags(&case[key]["from_draft"]);
            for head in heads {
                let (spec, ours) = step_alone(scheduler(&target, head, draft), &prompt, max_tokens);
                let which = match head {
                    Head::Own => "own head",
                    Head::Folder(_) => "split head",
                };
                assert_eq!(
                    spec.content, alone.content,
                    "prompt {i}, {key}, {which}: the text changed"
                );
                assert_eq!(spec.stats.generated_tokens, max_tokens, "prompt {i}, {key}, {which}");
                assert_eq!(
                    ours[..n],
                    expected[..n],
                    "prompt {i}, {key}, {which}: which tokens came from the head (ours, then mlx-vlm's)"
                );
            }
            let mut run = 0;
            for &from_draft in &expected[1..n] {
                if from_draft {
                    run += 1;
                } else {
                    rounds.push((draft, run));
                    run = 0;
                }
            }
        }
    }
    // Not a vacuous comparison: some rounds kept drafts, some had one rejected.
    assert!(rounds.iter().any(|&(_, kept)| kept > 0), "the head never guessed right: {rounds:?}");
    assert!(rounds.iter().any(|&(k, kept)| kept < k), "no draft was rejected: {rounds:?}");
    assert!(rounds.iter().any(|&(k, kept)| k == 3 && kept >= 2), "no long run kept: {rounds:?}");
}

/// `split_mtp_head` writes what mlx-vlm's splitter wrote from the same
/// checkpoint: the same files, config.json, tensor names and shapes, and
/// values (sums to float32 rounding; a norm left as `w − 1` would be off by
/// its width).
#[test]
fn the_split_head_is_written_as_mlx_vlm_writes_it() {
    let golden = golden();
    let expected = &golden["split_head"];
    let dir = tempfile::tempdir().unwrap();
    let target = write_mtp_target(dir.path()).unwrap();
    let folder = dir.path().join("head");
    split_mtp_head(&target, &folder).unwrap();
    let mut files: Vec<String> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let expected_files: Vec<String> = expected["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect();
    assert_eq!(files, expected_files);
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(folder.join("config.json")).unwrap())
            .unwrap();
    assert_eq!(config, expected["config"], "config.json");
    let tensors = mlx_rs::Array::load_safetensors(folder.join("model.safetensors")).unwrap();
    let want = expected["tensors"].as_object().unwrap();
    let mut names: Vec<&String> = tensors.keys().collect();
    names.sort();
    assert_eq!(names, want.keys().collect::<Vec<_>>(), "tensor names");
    for (name, w) in want {
        let t = &tensors[name];
        let shape: Vec<i64> = t.shape().iter().map(|&d| d as i64).collect();
        let want_shape: Vec<i64> =
            w["shape"].as_array().unwrap().iter().map(|d| d.as_i64().unwrap()).collect();
        assert_eq!(shape, want_shape, "{name}");
        let sum = t.sum(None).unwrap().as_slice::<f32>()[0] as f64;
        let abs_sum = mlx_rs::ops::abs(t).unwrap().sum(None).unwrap().as_slice::<f32>()[0] as f64;
        for (got, key) in [(sum, "sum"), (abs_sum, "abs_sum")] {
            let want = w[key].as_f64().unwrap();
            // Measured: within 1e-5 of the reference's 6-digit record.
            assert!(
                (got - want).abs() <= 1e-4 * want.abs().max(1.0),
                "{name} {key}: {got} vs {want}"
            );
        }
    }
}

/// A split head that does not fit the target is refused, saying why; so is
/// a folder that holds a whole model.
#[test]
fn a_split_head_for_another_model_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let target = write_mtp_target(dir.path()).unwrap();
    let folder = dir.path().join("head");
    split_mtp_head(&target, &folder).unwrap();
    // The tiny text Qwen3.5: same hidden size, another vocabulary.
    let other = dir.path().join("other");
    write_tiny_family(&other, TinyFamily::Qwen35, None, 3).unwrap();
    let other = load(&other, &LOAD).unwrap();
    let err =
        load_draft_head(&folder, other.model.as_ref(), &LOAD).err().expect("refused").to_string();
    assert!(err.contains("vocabulary") && err.contains("split from"), "{err}");
    let loaded = load(&target, &LOAD).unwrap();
    let err =
        load_draft_head(&target, loaded.model.as_ref(), &LOAD).err().expect("refused").to_string();
    assert!(err.contains("not a multi-token-prediction head"), "{err}");
}

/// The checkpoint's own head is read only when speculation by it is asked
/// for: a plain load has none (its tensors are never read, so never take
/// memory); `load_with_draft_head` has it.
#[test]
fn the_own_head_is_read_only_when_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let target = write_mtp_target(dir.path()).unwrap();
    assert!(load(&target, &LOAD).unwrap().model.draft_head().is_none());
    assert!(load_with_draft_head(&target, &LOAD).unwrap().model.draft_head().is_some());
}
