//! Speculative decoding against the reference: on a tiny target and draft
//! (`fixtures::write_speculative_pair`: a 4-layer Qwen2, and the same
//! with seeded noise on every weight, so drafts land often but not always),
//! which tokens of a greedy reply came from the draft is what Python
//! mlx-lm 0.32.2's `speculative_generate_step` says, with a fixed
//! number of draft tokens per round (`tests/goldens/speculative_mlx_lm.json`,
//! written by `scripts/make-speculative-golden.sh`).
//!
//! How the rounds compare. Both sides draft a fixed count per round
//! (mlx-lm's `num_draft_tokens`; ours `SpeculationConfig { adaptive: false }`,
//! which `vlm --num-draft-tokens N` sets), score the row's last token and the
//! drafts in one target pass, and keep the drafts the target's argmax agrees
//! with plus the target's own next token. Neither draft model feeds back its
//! last draft: after a fully kept draft both read it with the target's token
//! in the next round's first pass. Two things differ, so the test compares what they
//! leave comparable:
//!
//! - The first token. Ours comes from the prefill pass, and drafting starts
//!   with the second; mlx-lm's prefill stops one token short of the prompt,
//!   so its first round drafts the first token too. Run on the prompt, its
//!   rounds sit one token off ours and the flags differ (the golden keeps
//!   them as `from_draft_on_prompt`, not compared). Run on the prompt followed
//!   by the target's first token, its rounds line up with ours: the golden's
//!   `from_draft` (its first token marked as the target's), which is compared.
//! - The end. Near `max_tokens` mlx-lm drafts as many tokens as are left and
//!   emits no target token after a fully kept draft, while ours drafts one
//!   fewer and ends on the target's token. Only the first `compared` tokens
//!   are compared, where every round on both sides drafts the full count.
//!
//! What is read. Tokens: our model's greedy ids equal the golden's exactly;
//! the speculative reply has the text and the token count of our plain reply
//! (a reply's events carry text, not ids). Draft flags: the scheduler counts
//! per request the generated tokens that were accepted drafts
//! (`RequestStats::draft_tokens`) and, engine-wide, each verify pass's
//! accepted and produced tokens; one request alone, stepped by hand, gets
//! from each pass its accepted drafts and then the target's token, which
//! gives each token's flag. The per-request count must equal the flags'.
use std::path::{Path, PathBuf};

use engine::batch::speculation::SpeculationConfig;
use engine::batch::{Prompt, Request, Scheduler, SchedulerConfig};
use engine::handle::Completion;
use engine::model::load;
use engine::sample::SamplingParams;
use fixtures::write_speculative_pair;
use serde_json::Value;

use crate::common::{greedy_ids, Driver, LOAD};

struct Golden {
    num_draft_tokens: usize,
    compared: usize,
    max_tokens: usize,
    cases: Vec<Case>,
}

struct Case {
    prompt: Vec<u32>,
    tokens: Vec<u32>,
    from_draft: Vec<bool>,
}

fn golden() -> Golden {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens/speculative_mlx_lm.json");
    let text =
        std::fs::read_to_string(&path).expect("the golden (scripts/make-speculative-golden.sh)");
    let v: Value = serde_json::from_str(&text).unwrap();
    let ids = |v: &Value| -> Vec<u32> {
        v.as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect()
    };
    let count = |key: &str| v[key].as_u64().unwrap() as usize;
    let cases = v["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            prompt: ids(&c["prompt"]),
            tokens: ids(&c["tokens"]),
            from_draft: c["from_draft"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f.as_bool().unwrap())
                .collect(),
        })
        .collect();
    Golden {
        num_draft_tokens: count("num_draft_tokens"),
        compared: count("compared"),
        max_tokens: count("max_tokens"),
        cases,
    }
}

/// One greedy request alone on `target` (speculating with `draft`, a fixed
/// count per step, when given), stepped by hand. Returns its completion and,
/// per generated token, whether it was an accepted draft.
fn run_alone(
    target: &Path,
    draft: Option<(&Path, usize)>,
    prompt: &[u32],
    max_tokens: usize,
) -> (Completion, Vec<bool>) {
    let speculation = draft.map(|(path, n)| SpeculationConfig {
        max_draft_tokens: n,
        adaptive: false,
        ..SpeculationConfig::draft_model(path.to_path_buf())
    });
    let config = SchedulerConfig { speculation, ..Default::default() };
    let mut scheduler = Scheduler::new(load(target, &LOAD).unwrap(), config);
    if let Some((path, _)) = draft {
        scheduler = scheduler.with_draft_model(load(path, &LOAD).unwrap()).unwrap();
    }
    step_alone(scheduler, prompt, max_tokens)
}

/// One greedy request alone on `scheduler` (speculating as its config says,
/// with a fixed draft length), stepped by hand: its completion and, per
/// generated token, whether it was an accepted draft.
pub(crate) fn step_alone(
    scheduler: Scheduler,
    prompt: &[u32],
    max_tokens: usize,
) -> (Completion, Vec<bool>) {
    let mut driver = Driver::of_scheduler(scheduler);
    let request = Request::new(Prompt::Tokens(prompt.to_vec()))
        .with_max_tokens(max_tokens)
        .with_sampling(SamplingParams::greedy());
    let row = driver.submit(request);
    // The first token comes from the prefill pass, the target's own.
    let mut flags = vec![false];
    let mut before = driver.scheduler.stats();
    let (mut steps, mut plain_steps) = (0, 0);
    while driver.scheduler.has_work() {
        driver.step();
        steps += 1;
        assert!(steps < 1000, "the request never finished");
        let now = driver.scheduler.stats();
        let (was, is) = (&before.speculation, &now.speculation);
        let verified = is.verify_passes - was.verify_passes;
        let plain = now.decode_steps - before.decode_steps - verified;
        assert!(verified + plain <= 1, "one decode pass a step");
        if verified == 1 {
            // With a fixed draft length a row drafts every step until the
            // end is too near (max_tokens), then decodes plainly.
            assert_eq!(plain_steps, 0, "a verify pass after a plain step");
            let accepted = (is.accepted_tokens - was.accepted_tokens) as usize;
            let produced = (is.produced_tokens - was.produced_tokens) as usize;
            assert_eq!(produced, accepted + 1, "the kept drafts, then the target's token");
            flags.extend(std::iter::repeat_n(true, accepted));
            flags.push(false);
        }
        plain_steps += plain;
        before = now;
    }
    driver.run_to_end();
    let completion = driver.completion(row).clone();
    assert!(completion.error.is_none(), "{:?}", completion.error);
    // The last tokens came from plain steps (one of which may have computed
    // a token nobody read: a plain step runs ahead of the read-back).
    let generated = completion.stats.generated_tokens;
    assert!(flags.len() <= generated && generated <= flags.len() + plain_steps as usize);
    flags.resize(generated, false);
    assert_eq!(
        completion.stats.draft_tokens,
        flags.iter().filter(|&&f| f).count(),
        "the request's own count of accepted drafts"
    );
    (completion, flags)
}

fn pair() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (target, draft) = write_speculative_pair(dir.path()).unwrap();
    (dir, target, draft)
}

#[test]
fn the_tokens_that_come_from_the_draft_match_mlx_lm() {
    let golden = golden();
    let (_dir, target, draft) = pair();
    let k = golden.num_draft_tokens;
    let n = golden.compared;
    let loaded = load(&target, &LOAD).unwrap();
    // Drafts kept by each compared round (a round ends on the target's token).
    let mut rounds = Vec::new();
    for (i, case) in golden.cases.iter().enumerate() {
        assert_eq!(
            greedy_ids(&loaded, &case.prompt, golden.max_tokens),
            case.tokens,
            "prompt {i}: our target's greedy ids"
        );
        let (plain, _) = run_alone(&target, None, &case.prompt, golden.max_tokens);
        let (spec, flags) = run_alone(&target, Some((&draft, k)), &case.prompt, golden.max_tokens);
        assert_eq!(spec.stats.generated_tokens, golden.max_tokens, "prompt {i}");
        assert_eq!(plain.stats.generated_tokens, golden.max_tokens, "prompt {i}");
        assert_eq!(spec.content, plain.content, "prompt {i}: speculation changed the text");
        assert_eq!(
            flags[..n],
            case.from_draft[..n],
            "prompt {i}: which tokens came from the draft (ours, then mlx-lm's)"
        );
        let mut run = 0;
        for &from_draft in &flags[1..n] {
            if from_draft {
                run += 1;
            } else {
                rounds.push(run);
                run = 0;
            }
        }
    }
    // Not a vacuous comparison: some rounds kept their whole draft, others
    // had a draft rejected.
    assert!(rounds.contains(&k), "no round kept its whole draft: {rounds:?}");
    assert!(rounds.iter().any(|&r| r < k), "no draft was rejected: {rounds:?}");
}
