//! Batched prefill: the chunks of several waiting prompts run in one
//! right-padded forward pass. On tiny seeded models, through the scheduler
//! itself (stepped by hand, so which prompts share a pass is deterministic),
//! greedy output must equal each prompt alone: prompts of different lengths,
//! a row resuming from a prefix-cache hit, a chunked long prompt beside short
//! ones, image and text rows mixed, and a row cancelled mid-prefill. Each test
//! also checks from the engine's counters that prompts really shared passes.
use std::path::{Path, PathBuf};

use engine::batch::{FinishReason, ImageInput, Prompt, Request, SchedulerConfig};
use engine::generate::{generate, GenerateParams};
use engine::handle::{Completion, EngineConfig, EngineHandle};
use engine::model::{self, LoadOptions};
use engine::sample::SamplingParams;
use engine::tokenizer::{ChatMessage, ContentPart, MessageContent, TemplateOptions};
use fixtures::{write_tiny_llama, write_tiny_qwen2_vl, QwenVlVariant, TinyLlama, TinyQwenVl};

use crate::common;

use common::{Driver, LOAD};

fn tiny_llama() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlama::default()).unwrap();
    dir
}

/// Ordinary token ids (no specials), different for each `salt`.
fn prompt(len: usize, salt: u32) -> Vec<u32> {
    (0..len as u32).map(|i| 3 + (i * 31 + salt * 17) % 250).collect()
}

fn no_eos() -> SamplingParams {
    // Random weights may pick EOS early; banning it makes every run full length.
    SamplingParams {
        logit_bias: [(2, f32::NEG_INFINITY)].into_iter().collect(),
        ..Default::default()
    }
}

fn request(ids: &[u32], max_tokens: usize, sampling: &SamplingParams) -> Request {
    Request::new(Prompt::Tokens(ids.to_vec()))
        .with_max_tokens(max_tokens)
        .with_sampling(sampling.clone())
}

/// The reference: the single-stream path, alone.
fn single(dir: &Path, ids: &[u32], max_tokens: usize, sampling: &SamplingParams) -> String {
    let m = model::load(dir, &LOAD).unwrap();
    let mut text = String::new();
    let params = GenerateParams { max_tokens, sampling: sampling.clone() };
    generate(m.model.as_ref(), &m.tokenizer, ids, &params, |t| {
        text.push_str(t.text);
        true
    })
    .unwrap();
    text
}

fn assert_finished(c: &Completion) {
    assert!(c.error.is_none(), "{:?}", c.error);
    assert!(
        matches!(c.finish_reason, Some(FinishReason::Stop | FinishReason::Length)),
        "{:?}",
        c.finish_reason
    );
}

#[test]
fn prompts_of_different_lengths_share_passes_and_equal_each_alone() {
    let dir = tiny_llama();
    let cases: Vec<(Vec<u32>, usize)> = vec![
        (prompt(30, 2), 20),
        (prompt(40, 3), 9),
        (prompt(36, 4), 25),
        (prompt(24, 5), 14),
        (prompt(100, 6), 12),
    ];
    let seeded = SamplingParams { temperature: 0.8, top_p: 0.95, seed: Some(1234), ..no_eos() };
    for sampling in [SamplingParams::greedy(), no_eos(), seeded] {
        let expected: Vec<String> =
            cases.iter().map(|(p, n)| single(dir.path(), p, *n, &sampling)).collect();
        let mut d = Driver::new(dir.path(), SchedulerConfig::default());
        let ids: Vec<usize> =
            cases.iter().map(|(p, n)| d.submit(request(p, *n, &sampling))).collect();
        d.step();
        // The four short ones share a pass 40 wide (130 of 160 tokens real);
        // the 100-token one would leave it under 3/4 real and gets its own.
        let stats = d.scheduler.stats();
        assert_eq!((stats.prefill_passes, stats.prefill_chunks), (2, 5), "{sampling:?}");
        assert_eq!(stats.prefill_padding_tokens, 4 * 40 - (30 + 40 + 36 + 24));
        // Every row is in after the pass: decoding, or ended at its first
        // token (EOS, where it is not banned; the reference runs say so below).
        let ended = ids.iter().filter(|&&i| d.completion(i).finish_reason.is_some()).count();
        assert_eq!(stats.running + ended, 5, "{sampling:?}");
        if !sampling.logit_bias.is_empty() {
            assert_eq!(ended, 0, "{sampling:?}");
        }
        d.run_to_end();
        for (i, want) in ids.into_iter().zip(&expected) {
            let c = d.completion(i);
            assert_finished(c);
            assert_eq!(&c.content, want, "request {i}, {sampling:?}");
            assert_eq!(c.stats.prompt_tokens, cases[i].0.len());
        }
    }
}

#[test]
fn a_row_resuming_from_a_prefix_hit_shares_a_pass_with_fresh_rows() {
    let dir = tiny_llama();
    let first = prompt(30, 9);
    let mut resumed = first.clone();
    resumed.extend(prompt(11, 10));
    let others = [prompt(12, 11), prompt(14, 12)];
    let mut d = Driver::new(dir.path(), SchedulerConfig::default());
    let warm = d.submit(request(&first, 6, &no_eos()));
    d.run_to_end();
    assert_finished(d.completion(warm));
    let passes_before = d.scheduler.stats().prefill_passes;

    let r = d.submit(request(&resumed, 16, &no_eos()));
    let o: Vec<usize> = others.iter().map(|p| d.submit(request(p, 16, &no_eos()))).collect();
    d.step();
    let stats = d.scheduler.stats();
    // One pass for the three, with rows starting at different offsets.
    assert_eq!(stats.prefill_passes - passes_before, 1);
    assert_eq!(stats.running, 3);
    d.run_to_end();
    let c = d.completion(r);
    assert_finished(c);
    assert!(
        c.stats.cached_prompt_tokens >= first.len(),
        "the first prompt was reused: {:?}",
        c.stats
    );
    assert!(c.stats.cached_prompt_tokens < resumed.len());
    assert_eq!(c.content, single(dir.path(), &resumed, 16, &no_eos()));
    for (i, p) in o.into_iter().zip(&others) {
        assert_finished(d.completion(i));
        assert_eq!(d.completion(i).content, single(dir.path(), p, 16, &no_eos()), "fresh row {i}");
    }
}

#[test]
fn a_chunked_long_prompt_shares_passes_with_short_ones_arriving_later() {
    let dir = tiny_llama();
    let long = prompt(1100, 20);
    // "Short": under one chunk, and close enough to it to share a pass.
    let early = [prompt(400, 21), prompt(450, 22)];
    let late = [prompt(380, 23), prompt(500, 24)];
    // Room for three 512-token rows a step: the long prompt's chunks leave room for short rows.
    let mut d =
        Driver::new(dir.path(), SchedulerConfig { prefill_budget: 1536, ..Default::default() });
    let l = d.submit(request(&long, 10, &no_eos()));
    let e: Vec<usize> = early.iter().map(|p| d.submit(request(p, 30, &no_eos()))).collect();
    d.step();
    let stats = d.scheduler.stats();
    // Chunk 1 of the long prompt (512) and both early prompts in one pass.
    assert_eq!((stats.prefill_passes, stats.prefill_chunks), (1, 3));
    assert_eq!((stats.running, stats.waiting), (2, 1));
    // Two more arrive while the early ones decode: they share the long
    // prompt's second chunk (its rows start at offsets 512, 0 and 0).
    let la: Vec<usize> = late.iter().map(|p| d.submit(request(p, 30, &no_eos()))).collect();
    d.step();
    let stats = d.scheduler.stats();
    assert_eq!((stats.prefill_passes, stats.prefill_chunks), (2, 6));
    assert_eq!((stats.running, stats.waiting), (4, 1), "the long prompt still has a chunk to go");
    d.run_to_end();
    // The last 76 tokens of the long prompt, alone.
    assert_eq!((d.scheduler.stats().prefill_passes, d.scheduler.stats().prefill_chunks), (3, 7));
    assert_eq!(d.completion(l).content, single(dir.path(), &long, 10, &no_eos()));
    for (i, p) in e.into_iter().chain(la).zip(early.iter().chain(&late)) {
        assert_finished(d.completion(i));
        assert_eq!(d.completion(i).content, single(dir.path(), p, 30, &no_eos()), "short row {i}");
    }
}

#[test]
fn a_row_cancelled_mid_prefill_leaves_the_others_as_they_would_be_alone() {
    let dir = tiny_llama();
    let short = [prompt(60, 30), prompt(70, 31)];
    let long = prompt(600, 32);
    // A small budget: the long prompt takes a trimmed chunk beside the short
    // ones (3 rows × 85 ≤ 256), then would need several more steps.
    let mut d =
        Driver::new(dir.path(), SchedulerConfig { prefill_budget: 256, ..Default::default() });
    let s: Vec<usize> = short.iter().map(|p| d.submit(request(p, 20, &no_eos()))).collect();
    let l = d.submit(request(&long, 20, &no_eos()));
    d.step();
    let stats = d.scheduler.stats();
    assert_eq!((stats.prefill_passes, stats.prefill_chunks), (1, 3));
    assert_eq!((stats.running, stats.waiting), (2, 1));
    assert!(stats.kv_cache_bytes > 0);
    d.cancel(l);
    d.run_to_end();
    let c = d.completion(l);
    assert_eq!(c.finish_reason, Some(FinishReason::Cancelled));
    assert!(c.error.is_none());
    assert_eq!(c.stats.generated_tokens, 0);
    for (i, p) in s.into_iter().zip(&short) {
        assert_finished(d.completion(i));
        assert_eq!(d.completion(i).content, single(dir.path(), p, 20, &no_eos()));
    }
    let stats = d.scheduler.stats();
    // The cancelled prompt ran no more passes after its first, and nothing is left behind.
    assert_eq!(stats.prefill_passes, 1);
    assert_eq!((stats.running, stats.waiting, stats.kv_cache_bytes), (0, 0, 0));
}

fn fixture(name: &str) -> ImageInput {
    let path: PathBuf =
        [env!("CARGO_MANIFEST_DIR"), "tests", "fixtures", "images", name].iter().collect();
    ImageInput::from_bytes(std::fs::read(&path).unwrap())
}

/// A user turn with `images` first, then `text`; EOS banned.
fn ask(text: &str, images: &[ImageInput], max_tokens: usize, eos: &[u32]) -> Request {
    let mut parts: Vec<ContentPart> =
        images.iter().map(|i| ContentPart::Image { image: Some(i.sha256.clone()) }).collect();
    parts.push(ContentPart::text(text));
    let message = ChatMessage { content: MessageContent::Parts(parts), ..ChatMessage::user("") };
    let prompt = Prompt::Chat { messages: vec![message], options: TemplateOptions::default() };
    let ban_eos = eos.iter().map(|&t| (t, f32::NEG_INFINITY)).collect();
    let mut request = Request::new(prompt)
        .with_max_tokens(max_tokens)
        .with_sampling(SamplingParams { logit_bias: ban_eos, ..Default::default() });
    request.images = images.to_vec();
    request
}

fn mixed_requests(eos: &[u32]) -> Vec<Request> {
    let small = fixture("qwen_parity_182x126.png");
    let large = fixture("qwen_parity_320x240.png");
    vec![
        ask("describe nothing in particular", &[], 12, eos),
        ask("what is in this picture?", std::slice::from_ref(&small), 12, eos),
        ask("a different text-only question, longer than the first one", &[], 12, eos),
        ask("compare these two", &[large, small], 12, eos),
    ]
}

#[test]
fn image_and_text_rows_in_one_pass_equal_each_alone() {
    // Qwen2-VL: the tiny Qwen2.5-VL's greedy answer is one repeated token, too weak a witness.
    let dir = tempfile::tempdir().unwrap();
    write_tiny_qwen2_vl(dir.path(), &TinyQwenVl::new(QwenVlVariant::Qwen2Vl)).unwrap();
    // Alone: one request at a time, no caches to help.
    let alone_engine = EngineHandle::start(
        dir.path(),
        EngineConfig {
            load: LOAD,
            scheduler: SchedulerConfig {
                max_running: 1,
                prefix_cache_bytes: 0,
                vision_cache_bytes: 0,
                ..Default::default()
            },
        },
    )
    .unwrap();
    let eos = alone_engine.model_info().eos_token_ids.clone();
    let alone: Vec<Completion> = mixed_requests(&eos)
        .into_iter()
        .map(|r| alone_engine.submit(r).collect_blocking())
        .collect();
    alone_engine.shutdown();
    for c in &alone {
        assert!(c.error.is_none(), "{:?}", c.error);
        assert_eq!(c.finish_reason, Some(FinishReason::Length));
    }
    // Image slots were expanded: these prompts differ in length.
    assert!(alone[1].stats.prompt_tokens > alone[0].stats.prompt_tokens + 4);
    assert!(alone[3].stats.prompt_tokens > alone[1].stats.prompt_tokens);

    let longest = alone.iter().map(|c| c.stats.prompt_tokens).max().unwrap();
    // room for the images' vision-tower work too: it comes out of the same step budget
    let budget = 4 * longest + 1024;
    let mut d =
        Driver::new(dir.path(), SchedulerConfig { prefill_budget: budget, ..Default::default() });
    let ids: Vec<usize> = mixed_requests(&eos).into_iter().map(|r| d.submit(r)).collect();
    d.step();
    let stats = d.scheduler.stats();
    assert_eq!(
        (stats.prefill_passes, stats.prefill_chunks),
        (1, 4),
        "text and image rows share one pass"
    );
    d.run_to_end();
    for (i, want) in ids.into_iter().zip(&alone) {
        let got = d.completion(i);
        assert!(got.error.is_none(), "{:?}", got.error);
        assert_eq!(got.content, want.content, "request {i}");
        assert_eq!(got.stats.prompt_tokens, want.stats.prompt_tokens);
    }
}

/// The default model (SmolLM2-135M, real weights): four chat questions of
/// different lengths prefilled in one pass answer exactly as each alone.
#[test]
fn default_model_questions_prefilled_together_answer_as_each_alone() {
    let path = hub::default_model::locate().expect("run scripts/setup.sh");
    let questions = [
        "What is the capital of France?",
        "Name three colors.",
        "Write one sentence about the sea.",
        "Why is the sky blue?",
    ];
    let chat = |q: &str| {
        let prompt = Prompt::Chat {
            messages: vec![ChatMessage::user(q)],
            options: TemplateOptions::default(),
        };
        Request::new(prompt).with_max_tokens(32)
    };
    let loaded = model::load(&path, &LoadOptions::default()).unwrap();
    let mut d = Driver::of(loaded, SchedulerConfig::default());
    let ids: Vec<usize> = questions.iter().map(|q| d.submit(chat(q))).collect();
    d.step();
    assert_eq!((d.scheduler.stats().prefill_passes, d.scheduler.stats().prefill_chunks), (1, 4));
    d.run_to_end();

    // Alone: one at a time, and no prefix cache (the questions share the template's system prompt).
    let loaded = model::load(&path, &LoadOptions::default()).unwrap();
    let config = SchedulerConfig { prefix_cache_bytes: 0, ..Default::default() };
    let mut alone = Driver::of(loaded, config);
    for (i, q) in ids.into_iter().zip(questions) {
        let j = alone.submit(chat(q));
        alone.run_to_end();
        let (got, want) = (d.completion(i), alone.completion(j));
        assert_finished(got);
        assert_eq!(got.content, want.content, "{q}");
    }
    assert!(d.completion(0).content.contains("Paris"), "{:?}", d.completion(0).content);
}
