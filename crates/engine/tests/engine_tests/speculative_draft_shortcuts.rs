//! A draft model that does less a round, still lossless: it guesses among
//! the frequent tokens only (its head cut to the vocabulary's first ids and
//! its added ones, `SpeculationConfig::draft_vocabulary`), and it ends a
//! row's draft at a guess it is unsure of (`SpeculationConfig::stop_below`).
//! On the tiny speculative pair (a 4-layer Qwen2 and a noisy copy of it),
//! greedy replies equal plain decoding's alone and in a batch of 4 with a
//! join mid-decode. The draft stepped by hand: its guesses are the argmax
//! of its full logits over the kept tokens, and each row's draft ends
//! exactly at its first guess below the threshold (probabilities computed
//! here from the draft's logits), rows of one batch at different lengths.
use std::path::Path;

use engine::batch::speculation::draft_model::{DraftModel, DraftRow};
use engine::batch::speculation::{SpeculationConfig, SpeculationStats};
use engine::batch::{Prompt, Request, Scheduler, SchedulerConfig};
use engine::handle::Completion;
use engine::model::LoadedModel;
use fixtures::write_speculative_pair;

use crate::common::{forward_fresh, greedy_no_eos, rows, salted_prompt, tokens, Driver, LOAD};

/// The vocabulary cut of these tests: the tiny byte-level vocabulary's
/// first 200 ids (of about 260) and its added tokens.
const CUT: usize = 200;

fn pair() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (target, draft) = write_speculative_pair(dir.path()).unwrap();
    (dir, target, draft)
}

fn load(path: &Path) -> LoadedModel {
    engine::model::load(path, &LOAD).unwrap()
}

/// The requests' prompt salts and lengths.
const REQUESTS: [(u32, usize); 4] = [(21, 30), (22, 26), (23, 33), (24, 28)];

fn requests() -> Vec<Request> {
    REQUESTS
        .iter()
        .map(|&(salt, n)| {
            Request::new(Prompt::Tokens(salted_prompt(18, salt)))
                .with_max_tokens(n)
                .with_sampling(greedy_no_eos())
        })
        .collect()
}

/// `requests` on `target` (the last ones joining after `join_after`
/// steps), speculating as `speculation` says with the draft in `draft`.
fn run(
    target: &Path,
    draft: &Path,
    speculation: Option<SpeculationConfig>,
    requests: &[Request],
    first: usize,
    join_after: usize,
) -> (Vec<Completion>, SpeculationStats) {
    let speculating = speculation.is_some();
    let config = SchedulerConfig { speculation, ..Default::default() };
    let mut scheduler = Scheduler::new(load(target), config);
    if speculating {
        scheduler = scheduler.with_draft_model(load(draft)).unwrap();
    }
    let mut driver = Driver::of_scheduler(scheduler);
    let completions = driver.run_joining(requests, first, join_after);
    (completions, driver.scheduler.stats().speculation)
}

/// Speculating as `config` says gives plain decoding's replies, alone and
/// in a batch of 4 with a join mid-decode; returns the batch's stats.
fn lossless(
    target: &Path,
    draft: &Path,
    config: &SpeculationConfig,
    what: &str,
) -> SpeculationStats {
    let reqs = requests();
    let mut last = SpeculationStats::default();
    for (n, first, join_after) in [(1, 1, 0), (4, 3, 5)] {
        let (plain, _) = run(target, draft, None, &reqs[..n], first, join_after);
        let (spec, stats) = run(target, draft, Some(config.clone()), &reqs[..n], first, join_after);
        for (i, (p, s)) in plain.iter().zip(&spec).enumerate() {
            assert!(p.error.is_none() && s.error.is_none(), "{what}: {:?} {:?}", p.error, s.error);
            assert_eq!(s.content, p.content, "{what}, {n} rows, request {i}: the text changed");
            assert_eq!(s.stats.generated_tokens, p.stats.generated_tokens, "{what} request {i}");
        }
        assert!(
            stats.verify_passes > 0 && stats.accepted_tokens > 0,
            "{what}, {n} rows: drafts kept: {stats:?}"
        );
        last = stats;
    }
    last
}

/// The draft's probability of its greedy guess after each prefix of
/// `ids[..len + j]` for j in 0..k, and those guesses: its own tokens fed
/// back, from a fresh cache each time (nothing batched).
fn guesses_alone(draft: &LoadedModel, ids: &[u32], k: usize) -> Vec<(u32, f32)> {
    let mut ids = ids.to_vec();
    let mut out = Vec::new();
    for _ in 0..k {
        let logits = rows(&forward_fresh(draft.model.as_ref(), &tokens(&ids)));
        let last = logits.last().unwrap();
        let max = last.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = last.iter().map(|&l| ((l - max) as f64).exp()).sum();
        let best = crate::common::argmax(last);
        out.push((best, (1.0 / sum) as f32));
        ids.push(best);
    }
    out
}

/// Lossless with the head cut to the frequent tokens, with the early stop,
/// and with both, alone and in a batch of 4.
#[test]
fn a_cut_vocabulary_and_an_early_stop_keep_the_replies() {
    let (_dir, target, draft) = pair();
    let base = SpeculationConfig::draft_model(draft.clone());
    // A fixed length: adapting, a row alone pauses after its first misses.
    let cut = SpeculationConfig { draft_vocabulary: CUT, adaptive: false, ..base.clone() };
    lossless(&target, &draft, &cut, "the cut vocabulary");
    // Nothing is that sure: every draft is one token.
    let always = SpeculationConfig { stop_below: 1.0, adaptive: false, ..base.clone() };
    let stats = lossless(&target, &draft, &always, "stopping at every guess");
    assert_eq!(stats.drafted_tokens, stats.speculating_rows, "one draft a round: {stats:?}");
    // The median of the draft's first-guess probabilities: some drafts end early, some do not.
    let loaded = load(&draft);
    let mut first: Vec<f32> = REQUESTS
        .iter()
        .map(|&(salt, _)| guesses_alone(&loaded, &salted_prompt(18, salt), 1)[0].1)
        .collect();
    first.sort_by(f32::total_cmp);
    let median = (first[1] + first[2]) / 2.0;
    let both =
        SpeculationConfig { stop_below: median, adaptive: false, draft_vocabulary: CUT, ..base };
    let stats = lossless(&target, &draft, &both, "both");
    assert!(
        stats.speculating_rows < stats.drafted_tokens
            && stats.drafted_tokens < 3 * stats.speculating_rows,
        "some drafts ended early, not all: {stats:?} (threshold {median})"
    );
}

/// By hand, three rows: with a threshold between the probabilities seen,
/// each row's draft ends at its first guess below it (that guess included),
/// the rows of one batch at different lengths; the guesses are the draft's
/// own, and the passes fed back are the longest draft's less one.
#[test]
fn a_row_s_draft_ends_at_its_first_unsure_guess() {
    let (_dir, target, draft_path) = pair();
    let target = load(&target);
    let alone = load(&draft_path);
    let prompts: Vec<Vec<u32>> = (31..34).map(|salt| salted_prompt(16, salt)).collect();
    let k = 3;
    let guesses: Vec<Vec<(u32, f32)>> =
        prompts.iter().map(|p| guesses_alone(&alone, p, k)).collect();
    // Thresholds halfway between the probabilities of the guesses that are read (all but the last).
    let mut seen: Vec<f32> =
        guesses.iter().flat_map(|g| g[..k - 1].iter().map(|&(_, p)| p)).collect();
    seen.sort_by(f32::total_cmp);
    let mut thresholds: Vec<f32> =
        seen.windows(2).filter(|w| w[1] - w[0] > 1e-3).map(|w| (w[0] + w[1]) / 2.0).collect();
    thresholds.extend([0.0, seen[0] / 2.0, 1.0]);
    let mut lengths_seen = std::collections::BTreeSet::new();
    for &t in &thresholds {
        let mut draft = DraftModel::new(load(&draft_path), &target).unwrap().with_stop_below(t);
        for p in &prompts {
            draft.join(&p[..p.len() - 1]).unwrap();
        }
        let list: Vec<DraftRow> =
            prompts.iter().map(|p| DraftRow { tokens: p, wanted: k }).collect();
        let drafts = draft.propose(&list).unwrap();
        let mut longest = 0;
        for (row, g) in guesses.iter().enumerate() {
            // The first guess below t ends the draft (the last one is never read).
            let expected = g[..k - 1].iter().position(|&(_, p)| p < t).map_or(k, |j| j + 1);
            let want: Vec<u32> = g[..expected].iter().map(|&(tok, _)| tok).collect();
            assert_eq!(drafts[row], want, "threshold {t}, row {row}: guesses {g:?}");
            longest = longest.max(expected);
            lengths_seen.insert(expected);
        }
        assert_eq!(draft.fed(), longest - 1, "threshold {t}");
    }
    assert!(
        lengths_seen.len() >= 2,
        "the thresholds gave drafts of different lengths: {lengths_seen:?}"
    );
}

/// By hand: the draft with its head cut to the frequent tokens guesses
/// only among them (or its added tokens), the argmax of its full logits
/// over those; cut to more tokens than it has, it guesses as before.
#[test]
fn a_cut_head_guesses_the_best_kept_token() {
    let (_dir, target, draft_path) = pair();
    let target = load(&target);
    let alone = load(&draft_path);
    let vocab = alone.model.shape().vocab_size as usize;
    let added: Vec<u32> =
        alone.tokenizer.inner().get_added_tokens_decoder().keys().copied().collect();
    let kept = |t: u32| (t as usize) < CUT || added.contains(&t);
    let mut cut =
        DraftModel::new(load(&draft_path), &target).unwrap().with_vocabulary(CUT).unwrap();
    let mut whole =
        DraftModel::new(load(&draft_path), &target).unwrap().with_vocabulary(vocab).unwrap();
    assert_eq!(whole.vocabulary_len(), vocab);
    assert_eq!(cut.vocabulary_len(), CUT + added.iter().filter(|&&t| t as usize >= CUT).count());
    let mut outside = 0;
    for salt in 41..47 {
        let ids = salted_prompt(16, salt);
        cut.join(&ids[..ids.len() - 1]).unwrap();
        whole.join(&ids[..ids.len() - 1]).unwrap();
        let row = [DraftRow { tokens: &ids, wanted: 1 }];
        let guess = cut.propose(&row).unwrap()[0][0];
        let full = whole.propose(&row).unwrap()[0][0];
        let logits = rows(&forward_fresh(alone.model.as_ref(), &tokens(&ids)));
        let last = logits.last().unwrap();
        let best_kept = (0..vocab as u32)
            .filter(|&t| kept(t))
            .max_by(|&a, &b| last[a as usize].total_cmp(&last[b as usize]))
            .unwrap();
        assert_eq!(guess, best_kept, "salt {salt}");
        assert_eq!(full, crate::common::argmax(last), "salt {salt}: the whole vocabulary");
        outside += usize::from(!kept(full));
        cut.filter(&[]).unwrap();
        whole.filter(&[]).unwrap();
    }
    assert!(outside > 0, "some best guesses were outside the cut: it changed something");
}
