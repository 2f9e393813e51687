//! The continuous-batching engine against the single-stream path, on a tiny
//! seeded llama: batched greedy output must equal each request decoded alone
//! (identical, different and staggered prompts, with cancellations), and the
//! engine must survive bad requests and churn.
use std::path::Path;
use std::time::Duration;

use engine::batch::{FinishReason, Prompt, Request, SchedulerConfig};
use engine::generate::{generate, GenerateParams};
use engine::handle::{Completion, EngineConfig, EngineHandle};
use engine::model::{self, LoadOptions, WeightFormat};
use engine::sample::SamplingParams;
use fixtures::{write_tiny_llama, TinyLlama};

use crate::common;

use common::Driver;

fn tiny_model() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlama::default()).unwrap();
    dir
}

fn start(dir: &Path, max_running: usize) -> EngineHandle {
    start_with(dir, SchedulerConfig { max_running, ..Default::default() })
}

fn start_with(dir: &Path, scheduler: SchedulerConfig) -> EngineHandle {
    let config = EngineConfig { load: LoadOptions { format: WeightFormat::AsStored }, scheduler };
    EngineHandle::start(dir, config).unwrap()
}

/// Ordinary token ids (no specials), different for each `salt`.
fn prompt(len: usize, salt: u32) -> Vec<u32> {
    (0..len as u32).map(|i| 3 + (i * 31 + salt * 17) % 250).collect()
}

/// The reference: the single-stream path, alone.
fn single(dir: &Path, ids: &[u32], max_tokens: usize, sampling: &SamplingParams) -> String {
    let m = model::load(dir, &LoadOptions { format: WeightFormat::AsStored }).unwrap();
    let mut text = String::new();
    let params = GenerateParams { max_tokens, sampling: sampling.clone() };
    generate(m.model.as_ref(), &m.tokenizer, ids, &params, |t| {
        text.push_str(t.text);
        true
    })
    .unwrap();
    text
}

fn request(ids: &[u32], max_tokens: usize, sampling: &SamplingParams) -> Request {
    Request::new(Prompt::Tokens(ids.to_vec()))
        .with_max_tokens(max_tokens)
        .with_sampling(sampling.clone())
}

fn no_eos() -> SamplingParams {
    // Random weights may pick EOS early; banning it makes every run long.
    SamplingParams {
        logit_bias: [(2, f32::NEG_INFINITY)].into_iter().collect(),
        ..Default::default()
    }
}

fn assert_finished(c: &Completion) {
    assert!(c.error.is_none(), "{:?}", c.error);
    assert!(
        matches!(c.finish_reason, Some(FinishReason::Stop | FinishReason::Length)),
        "{:?}",
        c.finish_reason
    );
}

/// Stepped by hand: the four share one prefill pass (which gives each its
/// first token) and then every decode step: 23 steps for the other 23
/// tokens, plus the one the scheduler queues before it reads the last token
/// back (decoding runs a step ahead of the read-back). One after another
/// would take 4 × 24.
#[test]
fn four_identical_prompts_batched_equal_single() {
    let dir = tiny_model();
    let ids = prompt(12, 1);
    let expected = single(dir.path(), &ids, 24, &no_eos());
    let mut driver =
        Driver::new(dir.path(), SchedulerConfig { max_running: 8, ..Default::default() });
    let rows: Vec<usize> = (0..4).map(|_| driver.submit(request(&ids, 24, &no_eos()))).collect();
    driver.run_to_end();
    for row in rows {
        let c = driver.completion(row);
        assert_finished(c);
        assert_eq!(c.content, expected);
        assert_eq!(c.stats.generated_tokens, 24);
        assert_eq!(c.stats.prompt_tokens, 12);
    }
    let stats = driver.scheduler.stats();
    assert_eq!(stats.prefill_passes, 1, "one shared prefill pass");
    assert_eq!(stats.decode_steps, 24, "the four decode together");
}

#[test]
fn different_prompts_of_different_lengths_batched_equal_single() {
    let dir = tiny_model();
    let cases: Vec<(Vec<u32>, usize)> =
        vec![(prompt(3, 2), 20), (prompt(17, 3), 9), (prompt(40, 4), 25), (prompt(8, 5), 14)];
    for sampling in [SamplingParams::greedy(), no_eos()] {
        let expected: Vec<String> =
            cases.iter().map(|(p, n)| single(dir.path(), p, *n, &sampling)).collect();
        let engine = start(dir.path(), 8);
        let streams: Vec<_> =
            cases.iter().map(|(p, n)| engine.submit(request(p, *n, &sampling))).collect();
        for (s, want) in streams.into_iter().zip(&expected) {
            let c = s.collect_blocking();
            assert_finished(&c);
            assert_eq!(&c.content, want);
        }
    }
}

#[test]
fn staggered_arrivals_with_a_cancellation_equal_single() {
    let dir = tiny_model();
    let n = 120;
    let cases: Vec<Vec<u32>> = (0..5).map(|i| prompt(5 + 7 * i, 10 + i as u32)).collect();
    let expected: Vec<String> = cases.iter().map(|p| single(dir.path(), p, n, &no_eos())).collect();
    let engine = start(dir.path(), 8);
    let mut live: Vec<(usize, engine::handle::RequestStream, Completion)> = Vec::new();
    for (i, p) in cases.iter().enumerate() {
        // Each request arrives while the previous one is mid-decode: wait for
        // a few of its tokens first.
        if let Some((_, s, partial)) = live.last_mut() {
            *partial = common::wait_until_decoding(s, 3);
        }
        live.push((i, engine.submit(request(p, n, &no_eos())), Completion::default()));
    }
    // Cancel request 2 mid-way.
    let (_, s2, _) = &live[2];
    engine.cancel(s2.id);
    let mut generated = 0;
    for (i, mut s, mut c) in live {
        while let Some(e) = s.recv_blocking() {
            if c.absorb(e) {
                break;
            }
        }
        generated += c.stats.generated_tokens;
        if i == 2 {
            assert_eq!(c.finish_reason, Some(FinishReason::Cancelled));
            assert!(
                expected[2].starts_with(&c.content),
                "the cancelled text is a prefix of its full answer"
            );
            assert!(c.stats.generated_tokens < n);
        } else {
            assert_finished(&c);
            assert_eq!(c.content, expected[i], "request {i}");
        }
    }
    // The requests shared decode steps: far fewer steps than tokens.
    let steps = engine.stats().unwrap().decode_steps as usize;
    assert!(
        steps < generated * 2 / 3,
        "{steps} decode steps for {generated} tokens: requests did not batch"
    );
}

#[test]
fn seeded_sampling_is_the_same_batched_and_alone() {
    let dir = tiny_model();
    let sampling =
        SamplingParams { temperature: 0.8, top_p: 0.95, seed: Some(1234), ..Default::default() };
    let ids = prompt(9, 7);
    let expected = single(dir.path(), &ids, 20, &sampling);
    let engine = start(dir.path(), 8);
    let other = engine.submit(request(&prompt(20, 8), 20, &SamplingParams::greedy()));
    let mine = engine.submit(request(&ids, 20, &sampling));
    assert_eq!(mine.collect_blocking().content, expected);
    assert_finished(&other.collect_blocking());
}

#[test]
fn cancelling_frees_the_slot_for_the_next_request() {
    let dir = tiny_model();
    let engine = start(dir.path(), 1);
    let mut long = engine.submit(request(&prompt(6, 1), 100_000, &no_eos()));
    let _first = long.recv_blocking().unwrap();
    engine.cancel(long.id);
    let next = engine.submit(request(&prompt(6, 2), 8, &no_eos()));
    let c = next.collect_blocking();
    assert_finished(&c);
    let mut after_cancel = Completion::default();
    while let Some(e) = long.recv_blocking() {
        if after_cancel.absorb(e) {
            break;
        }
    }
    assert_eq!(after_cancel.finish_reason, Some(FinishReason::Cancelled));
    assert!(after_cancel.stats.generated_tokens < 1000, "kept generating after cancel");
    assert_eq!(engine.stats().unwrap().running, 0);
}

#[test]
fn dropping_the_stream_cancels_the_request() {
    let dir = tiny_model();
    let engine = start(dir.path(), 1);
    let mut s = engine.submit(request(&prompt(6, 1), 100_000, &no_eos()));
    let _ = s.recv_blocking();
    drop(s);
    let c = engine.submit(request(&prompt(6, 2), 4, &no_eos())).collect_blocking();
    assert_finished(&c);
}

#[test]
fn bad_requests_get_clear_errors_and_the_engine_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlama { max_context: 64, ..TinyLlama::default() }).unwrap();
    let engine = start(dir.path(), 4);
    let too_long = engine.submit(request(&prompt(80, 1), 4, &no_eos())).collect_blocking();
    let e = too_long.error.expect("over-long prompt must fail");
    assert_eq!(e.code, "CONTEXT_LENGTH_EXCEEDED");
    assert!(e.message.contains("80") && e.message.contains("64"), "{}", e.message);
    assert_eq!(too_long.finish_reason, Some(FinishReason::Error));

    let zero = engine.submit(request(&prompt(5, 1), 0, &no_eos())).collect_blocking();
    assert_eq!(zero.error.unwrap().code, "INVALID_REQUEST");
    let hot = SamplingParams { temperature: -1.0, ..Default::default() };
    assert_eq!(
        engine.submit(request(&prompt(5, 1), 4, &hot)).collect_blocking().error.unwrap().code,
        "INVALID_REQUEST"
    );
    let bad_token = engine.submit(request(&[3, 99_999], 4, &no_eos())).collect_blocking();
    assert_eq!(bad_token.error.unwrap().code, "INVALID_REQUEST");

    // Generation that would run past the context stops there, cleanly.
    let near_end = engine.submit(request(&prompt(60, 1), 50, &no_eos())).collect_blocking();
    assert_eq!(near_end.finish_reason, Some(FinishReason::Length));
    assert_eq!(near_end.stats.generated_tokens, 4);

    let ok = engine.submit(request(&prompt(5, 1), 4, &no_eos())).collect_blocking();
    assert_finished(&ok);
}

#[test]
fn two_hundred_random_requests_with_cancellations_leave_memory_at_baseline() {
    let dir = tiny_model();
    // No prefix cache: it keeps finished sequences on purpose.
    let engine =
        start_with(dir.path(), SchedulerConfig { prefix_cache_bytes: 0, ..Default::default() });
    // Warm up once so allocator caches and lazily built kernels exist.
    assert_finished(&engine.submit(request(&prompt(10, 0), 4, &no_eos())).collect_blocking());
    let baseline = engine.stats().unwrap().active_memory_bytes;

    let mut rng = 0x2545F4914F6CDD1Du64;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let mut open = Vec::new();
    for i in 0..200 {
        let len = 1 + next(60) as usize;
        let max_tokens = 1 + next(20) as usize;
        let s = engine.submit(request(&prompt(len, i), max_tokens, &no_eos()));
        match next(4) {
            0 => engine.cancel(s.id),
            1 => drop(s),
            _ => open.push(s),
        }
        if open.len() > 12 {
            assert!(open.remove(0).collect_blocking().finish_reason.is_some());
        }
    }
    for s in open {
        assert!(s.collect_blocking().finish_reason.is_some());
    }
    // Dropped streams are noticed at the next step; wait until all are gone.
    let mut stats = engine.stats().unwrap();
    for _ in 0..100 {
        if stats.running == 0 && stats.waiting == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        stats = engine.stats().unwrap();
    }
    assert_eq!((stats.running, stats.waiting), (0, 0));
    assert_eq!(stats.kv_cache_bytes, 0);
    // Tolerance: 1 MiB above the warm baseline (the tiny model's whole KV for
    // 8 rows is ~0.3 MiB; a leak of cached batches would exceed it).
    let grown = stats.active_memory_bytes.saturating_sub(baseline);
    println!(
        "active memory: baseline {baseline} B, after 200 requests {} B",
        stats.active_memory_bytes
    );
    assert!(grown < 1 << 20, "active memory grew by {grown} bytes");
    // Idle, the engine keeps no freed buffers: MLX's cache went back to the system.
    assert_eq!(stats.cached_memory_bytes, 0, "an idle engine holds MLX's buffer cache");
    assert_finished(&engine.submit(request(&prompt(10, 0), 4, &no_eos())).collect_blocking());
}
