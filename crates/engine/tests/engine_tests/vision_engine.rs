//! Images through the whole engine on tiny seeded Qwen2-VL / Qwen2.5-VL
//! folders: batched greedy output equals each request decoded alone (image
//! and text requests mixed, two images of different sizes in one request, an
//! image request joining a batch that is already decoding); the vision-feature
//! cache hits on a repeated image and misses on a changed byte; the prefix
//! cache never reuses a prefix across different images; bad images fail only
//! their own request.
use crate::common;

use std::path::{Path, PathBuf};

use engine::batch::{FinishReason, ImageInput, Prompt, Request, SchedulerConfig};
use engine::handle::{Completion, EngineConfig, EngineHandle};
use engine::model::{LoadOptions, WeightFormat};
use engine::sample::SamplingParams;
use engine::tokenizer::{ChatMessage, ContentPart, MessageContent, TemplateOptions, Tokenizer};
use fixtures::{write_tiny_qwen2_vl, QwenVlVariant, TinyQwenVl};

fn fixture(name: &str) -> ImageInput {
    let path: PathBuf =
        [env!("CARGO_MANIFEST_DIR"), "tests", "fixtures", "images", name].iter().collect();
    ImageInput::from_bytes(std::fs::read(&path).unwrap())
}

fn tiny(variant: QwenVlVariant) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_qwen2_vl(dir.path(), &TinyQwenVl::new(variant)).unwrap();
    dir
}

fn start(dir: &Path, scheduler: SchedulerConfig) -> EngineHandle {
    let config = EngineConfig { load: LoadOptions { format: WeightFormat::AsStored }, scheduler };
    EngineHandle::start(dir, config).unwrap()
}

/// A user turn with `images` first, then `text`.
fn ask(text: &str, images: &[ImageInput], max_tokens: usize, engine: &EngineHandle) -> Request {
    ask_in_order(text, images, false, max_tokens, engine)
}

fn ask_in_order(
    text: &str,
    images: &[ImageInput],
    text_first: bool,
    max_tokens: usize,
    engine: &EngineHandle,
) -> Request {
    let mut parts: Vec<ContentPart> =
        images.iter().map(|i| ContentPart::Image { image: Some(i.sha256.clone()) }).collect();
    if text_first {
        parts.insert(0, ContentPart::text(text));
    } else {
        parts.push(ContentPart::text(text));
    }
    let message = ChatMessage { content: MessageContent::Parts(parts), ..ChatMessage::user("") };
    let prompt = Prompt::Chat { messages: vec![message], options: TemplateOptions::default() };
    // Random weights may pick EOS at once; banning it makes every run full length.
    let ban_eos =
        engine.model_info().eos_token_ids.iter().map(|&t| (t, f32::NEG_INFINITY)).collect();
    let mut request = Request::new(prompt)
        .with_max_tokens(max_tokens)
        .with_sampling(SamplingParams { logit_bias: ban_eos, ..Default::default() });
    request.images = images.to_vec();
    request
}

fn finished(c: Completion) -> Completion {
    assert!(c.error.is_none(), "{:?}", c.error);
    assert_eq!(c.finish_reason, Some(FinishReason::Length));
    c
}

/// The requests of the mixed-batch tests: text only, one image, two images of different sizes.
fn mixed_requests(engine: &EngineHandle) -> Vec<Request> {
    let small = fixture("qwen_parity_182x126.png");
    let large = fixture("qwen_parity_320x240.png");
    vec![
        ask("describe nothing in particular", &[], 12, engine),
        ask("what is in this picture?", std::slice::from_ref(&small), 12, engine),
        ask("compare these two", &[large, small], 12, engine),
    ]
}

#[test]
fn image_and_text_requests_batched_equal_each_alone() {
    for variant in [QwenVlVariant::Qwen2Vl, QwenVlVariant::Qwen25Vl] {
        let dir = tiny(variant);
        // Alone: one at a time, no caches to help.
        let alone_engine = start(
            dir.path(),
            SchedulerConfig {
                max_running: 1,
                prefix_cache_bytes: 0,
                vision_cache_bytes: 0,
                ..Default::default()
            },
        );
        let alone: Vec<Completion> = mixed_requests(&alone_engine)
            .into_iter()
            .map(|r| finished(alone_engine.submit(r).collect_blocking()))
            .collect();
        alone_engine.shutdown();

        let engine = start(dir.path(), SchedulerConfig::default());
        let streams: Vec<_> =
            mixed_requests(&engine).into_iter().map(|r| engine.submit(r)).collect();
        for (stream, want) in streams.into_iter().zip(&alone) {
            let got = finished(stream.collect_blocking());
            assert_eq!(got.content, want.content, "{variant:?}");
            assert_eq!(got.stats.prompt_tokens, want.stats.prompt_tokens);
        }
        // Image slots were expanded: one image makes the prompt longer than text alone.
        assert!(alone[1].stats.prompt_tokens > alone[0].stats.prompt_tokens + 4);
        assert!(alone[2].stats.prompt_tokens > alone[1].stats.prompt_tokens);
        engine.shutdown();
    }
}

#[test]
fn an_image_request_joining_mid_decode_equals_it_alone() {
    // Qwen2-VL: the tiny Qwen2.5-VL's greedy answer is one repeated token, too
    // weak a witness (its logits are checked against mlx-vlm in parity_mlx_vlm.rs).
    let dir = tiny(QwenVlVariant::Qwen2Vl);
    let image = fixture("qwen_parity_320x240.png");
    let engine = start(
        dir.path(),
        SchedulerConfig { vision_cache_bytes: 0, prefix_cache_bytes: 0, ..Default::default() },
    );
    let want = finished(
        engine
            .submit(ask("what is this?", std::slice::from_ref(&image), 10, &engine))
            .collect_blocking(),
    );

    let mut long = engine.submit(ask("a long text-only answer please", &[], 60, &engine));
    common::wait_until_decoding(&mut long, 3);
    let joined = engine.submit(ask("what is this?", &[image], 10, &engine));
    let got = finished(joined.collect_blocking());
    finished(long.collect_blocking());
    assert_eq!(got.content, want.content);
    engine.shutdown();
}

#[test]
fn a_repeated_image_hits_the_vision_cache_and_a_changed_byte_misses() {
    let dir = tiny(QwenVlVariant::Qwen2Vl);
    // No prefix cache: the second request must run its image through prefill again.
    let engine = start(dir.path(), SchedulerConfig { prefix_cache_bytes: 0, ..Default::default() });
    let image = fixture("qwen_parity_182x126.png");
    let first = finished(
        engine
            .submit(ask("what is this?", std::slice::from_ref(&image), 8, &engine))
            .collect_blocking(),
    );
    let after_first = engine.stats().unwrap().vision_cache;
    assert_eq!((after_first.hits, after_first.misses, after_first.entries), (0, 1, 1));
    assert!(after_first.bytes > 0);

    let second = finished(
        engine
            .submit(ask("what is this?", std::slice::from_ref(&image), 8, &engine))
            .collect_blocking(),
    );
    assert_eq!(second.content, first.content, "cached features must give the same answer");
    assert_eq!(engine.stats().unwrap().vision_cache.hits, 1);

    // One byte changed inside the PNG's metadata-free tail still names another file.
    let mut bytes = image.bytes.to_vec();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    let changed = ImageInput::from_bytes(bytes);
    assert_ne!(changed.sha256, image.sha256);
    let _ = engine.submit(ask("what is this?", &[changed], 8, &engine)).collect_blocking();
    let stats = engine.stats().unwrap().vision_cache;
    assert_eq!((stats.hits, stats.misses), (1, 2));
    engine.shutdown();
}

#[test]
fn the_prefix_cache_never_reuses_a_prefix_across_different_images() {
    let dir = tiny(QwenVlVariant::Qwen2Vl);
    let engine = start(dir.path(), SchedulerConfig::default());
    let a = fixture("qwen_parity_182x126.png");
    let b = fixture("qwen_parity_320x240.png");
    let first = finished(
        engine
            .submit(ask("what is this?", std::slice::from_ref(&a), 6, &engine))
            .collect_blocking(),
    );
    // Same image, same text: everything but the last prompt token is reused.
    let again = finished(engine.submit(ask("what is this?", &[a], 6, &engine)).collect_blocking());
    assert_eq!(again.stats.cached_prompt_tokens, again.stats.prompt_tokens - 1);
    assert_eq!(again.content, first.content);
    // Another image at the same place: only the text before it may be reused.
    let other = finished(
        engine
            .submit(ask("what is this?", std::slice::from_ref(&b), 6, &engine))
            .collect_blocking(),
    );
    let fresh = start(dir.path(), SchedulerConfig { prefix_cache_bytes: 0, ..Default::default() });
    let want = finished(fresh.submit(ask("what is this?", &[b], 6, &fresh)).collect_blocking());
    fresh.shutdown();
    // The prompt up to the image's first slot, as the engine tokenizes it.
    let tokenizer = Tokenizer::from_folder(dir.path()).unwrap();
    let Prompt::Chat { messages, options } = ask("what is this?", &[], 1, &engine).prompt else {
        unreachable!()
    };
    let mut with_image = messages.clone();
    with_image[0].content =
        MessageContent::Parts(vec![ContentPart::image(), ContentPart::text("what is this?")]);
    let ids = tokenizer
        .encode(&tokenizer.apply_chat_template(&with_image, &options).unwrap(), false)
        .unwrap();
    let image_pad = tokenizer.token_to_id("<|image_pad|>").unwrap();
    let before_image = ids.iter().position(|&t| t == image_pad).unwrap();
    assert!(
        other.stats.cached_prompt_tokens <= before_image,
        "reused {} tokens across different images; the image starts at {before_image}",
        other.stats.cached_prompt_tokens
    );
    assert!(other.stats.cached_prompt_tokens > 0, "the shared text before the image is reusable");
    assert_eq!(other.content, want.content);
    assert_ne!(other.content, first.content, "the image should change the answer");
    engine.shutdown();
}

#[test]
fn bad_images_fail_their_own_request_and_the_engine_keeps_serving() {
    let dir = tiny(QwenVlVariant::Qwen2Vl);
    let engine = start(dir.path(), SchedulerConfig::default());
    let good = fixture("qwen_parity_182x126.png");
    let running = engine.submit(ask("keep going", std::slice::from_ref(&good), 40, &engine));
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("text", b"this is not an image at all".to_vec()),
        ("truncated", good.bytes[..good.bytes.len() / 2].to_vec()),
    ];
    for (name, bytes) in cases {
        let c = engine
            .submit(ask("what is this?", &[ImageInput::from_bytes(bytes)], 8, &engine))
            .collect_blocking();
        let e = c.error.unwrap_or_else(|| panic!("{name}: no error"));
        assert_eq!(e.code, "INVALID_IMAGE", "{name}: {}", e.message);
        assert!(
            e.message.contains("#1"),
            "{name}: the message should name the image: {}",
            e.message
        );
    }
    // More images than placeholders: a clear error, not a shape error.
    let mut mismatched = ask("what is this?", std::slice::from_ref(&good), 8, &engine);
    mismatched.images.push(good.clone());
    let e = engine.submit(mismatched).collect_blocking().error.expect("mismatch refused");
    assert_eq!(e.code, "INVALID_REQUEST");
    assert!(
        e.message.contains("1 image placeholders") && e.message.contains("2 images"),
        "{}",
        e.message
    );

    finished(running.collect_blocking());
    finished(engine.submit(ask("still here?", &[good], 4, &engine)).collect_blocking());
    engine.shutdown();
}

#[test]
fn more_image_tokens_than_the_context_is_a_clean_context_error() {
    let dir = tiny(QwenVlVariant::Qwen2Vl);
    let engine = start(dir.path(), SchedulerConfig { max_context: 40, ..Default::default() });
    let image = fixture("qwen_parity_320x240.png");
    let c =
        engine.submit(ask("what is this?", &[image.clone(), image], 4, &engine)).collect_blocking();
    let e = c.error.expect("refused");
    assert_eq!(e.code, "CONTEXT_LENGTH_EXCEEDED", "{}", e.message);
    assert!(e.message.contains("40"), "{}", e.message);
    engine.shutdown();
}
/// The engine's answer for the golden prompts equals Python mlx-vlm's greedy
/// tokens (crates/engine/tests/goldens, scripts/make-vision-goldens.sh), with
/// the golden requests decoding in one batch beside an unrelated one.
#[test]
fn engine_answers_equal_mlx_vlm_greedy_tokens() {
    let goldens: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            [env!("CARGO_MANIFEST_DIR"), "tests", "goldens", "qwen_vl_mlx_vlm.json"]
                .iter()
                .collect::<PathBuf>(),
        )
        .unwrap(),
    )
    .unwrap();
    let dir = tiny(QwenVlVariant::Qwen2Vl);
    let tokenizer = Tokenizer::from_folder(dir.path()).unwrap();
    let engine = start(dir.path(), SchedulerConfig::default());
    let model = &goldens["models"]["qwen2_vl/float"];
    let mut checked = 0;
    let other = engine.submit(ask("an unrelated request decoding alongside", &[], 30, &engine));
    let mut streams = Vec::new();
    for (case, files) in goldens["cases"].as_object().unwrap() {
        let images: Vec<ImageInput> =
            files.as_array().unwrap().iter().map(|f| fixture(f.as_str().unwrap())).collect();
        let want: Vec<u32> = model[case]["greedy_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        // mlx-vlm writes Qwen2-VL's images after the text (vlm-reference-notes.md, note 5).
        let mut request =
            ask_in_order(goldens["text"].as_str().unwrap(), &images, true, want.len(), &engine);
        // Plain greedy, as the reference decoded: EOS allowed (the answer then ends there).
        request.sampling = SamplingParams::default();
        streams.push((
            case.clone(),
            want,
            model[case]["prompt_ids"].as_array().unwrap().len(),
            engine.submit(request),
        ));
    }
    let eos = engine.model_info().eos_token_ids.clone();
    for (case, want, prompt_len, stream) in streams {
        let got = stream.collect_blocking();
        assert!(got.error.is_none(), "{case}: {:?}", got.error);
        assert_eq!(
            got.stats.prompt_tokens, prompt_len,
            "{case}: prompt length after placeholder expansion"
        );
        let (answer, reason) = match want.iter().position(|t| eos.contains(t)) {
            Some(end) => (&want[..end], FinishReason::Stop),
            None => (&want[..], FinishReason::Length),
        };
        assert_eq!(got.content, tokenizer.decode(answer, true).unwrap(), "{case}");
        assert_eq!(got.finish_reason, Some(reason), "{case}");
        checked += 1;
    }
    finished(other.collect_blocking());
    assert!(checked >= 3, "the goldens should hold text, one-image and two-image cases");
    engine.shutdown();
}

/// The last handle going away stops the engine: requests in flight (one
/// decoding, one whose image is still being prepared or encoded) end with
/// `Finished`, and the drop returns once the engine thread has stopped; a
/// clone kept elsewhere keeps it serving until then.
#[test]
fn dropping_the_last_handle_stops_the_engine_and_ends_requests_in_flight() {
    let dir = tiny(QwenVlVariant::Qwen2Vl);
    let engine = start(dir.path(), SchedulerConfig::default());
    let clone = engine.clone();
    let mut text = engine.submit(ask("keep going", &[], 3000, &engine));
    let image =
        engine.submit(ask("what is this?", &[fixture("qwen_parity_320x240.png")], 3000, &engine));
    let mut seen = Completion::default();
    while seen.logprobs.is_empty() && seen.content.is_empty() {
        let event = text.recv_blocking().expect("the engine is running");
        assert!(!seen.absorb(event), "finished before the handle was dropped");
    }
    drop(engine);
    // the clone still holds the engine: the request goes on
    let event = text.recv_blocking().expect("still running with a clone left");
    assert!(!seen.absorb(event));
    drop(clone);
    for (name, c) in [("text", text.collect_blocking()), ("image", image.collect_blocking())] {
        match c.finish_reason {
            Some(FinishReason::Error) => {
                assert_eq!(c.error.map(|e| e.code).as_deref(), Some("ENGINE_STOPPED"), "{name}")
            }
            Some(other) => panic!("{name}: finished with {other:?} while the engine was stopping"),
            None => panic!("{name}: the stream ended without Finished"),
        }
    }
}
