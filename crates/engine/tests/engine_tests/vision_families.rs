//! The vision families beyond Qwen2-VL through the whole engine, on tiny
//! seeded folders (the same ones `parity_mlx_vlm.rs` checks numerically):
//! - the engine's greedy answers equal mlx-vlm's (its goldens), with a text
//!   request decoding alongside;
//! - batched greedy equals each request alone (text, one image, two images
//!   of different sizes), and an image request joining a batch mid-decode;
//! - a second turn about the same image resumes from the prefix cache
//!   (Qwen3.5: a recurrent-state checkpoint) and prefills only the new turn,
//!   answering as a cold prefill does;
//! - KV quantization on with images;
//! - prefill in small chunks equals one pass (Gemma's images, which attend
//!   to themselves both ways, are never cut by a chunk);
//! - counting a request's prompt tokens (images from their headers) gives
//!   what the engine then prefills;
//! - odd images (1×1, one pixel wide, grayscale, 16-bit, alpha, an animated
//!   GIF) are answered, broken ones and too many image tokens for the context
//!   fail only their own request, and the engine keeps serving.
use crate::common;

use std::path::{Path, PathBuf};

use engine::batch::{FinishReason, ImageInput, Prompt, Request, SchedulerConfig};
use engine::cache::KvQuantization;
use engine::handle::{Completion, EngineConfig, EngineHandle};
use engine::model::{LoadOptions, WeightFormat};
use engine::sample::SamplingParams;
use engine::tokenizer::{ChatMessage, ContentPart, MessageContent, TemplateOptions, Tokenizer};
use fixtures::{
    write_tiny_gemma3_vl, write_tiny_gemma4_vl, write_tiny_lfm2_vl, write_tiny_mistral3,
    write_tiny_qwen35_vl, write_tiny_qwen3_vl, write_tiny_qwen3_vl_moe, write_tiny_smolvlm,
};

/// One family under test: how its tiny folder is written and where its
/// mlx-vlm goldens are.
struct Family {
    name: &'static str,
    write: fn(&Path),
    goldens: &'static str,
    golden_model: &'static str,
    /// mlx-vlm's message puts the images before the text (else after it).
    images_first: bool,
}

/// The seeds `write_tiny_vl_model` (and so the goldens) used.
const QWEN35_SEED: u64 = 35;
const QWEN3_VL_SEED: u64 = 30;
const GEMMA3_SEED: u64 = 3;
const GEMMA4_SEED: u64 = 4;
const SMOLVLM_SEED: u64 = 5;
const MISTRAL3_SEED: u64 = 7;
const LFM2_VL_SEED: u64 = 6;

const FAMILIES: &[Family] = &[
    Family {
        name: "Qwen3.5",
        write: |dir| {
            write_tiny_qwen35_vl(dir, None, QWEN35_SEED).unwrap();
        },
        goldens: "qwen3_5_vl_mlx_vlm.json",
        golden_model: "qwen3_5/float",
        images_first: true,
    },
    Family {
        name: "Qwen3-VL",
        write: |dir| {
            write_tiny_qwen3_vl(dir, None, QWEN3_VL_SEED).unwrap();
        },
        goldens: "qwen3_vl_mlx_vlm.json",
        golden_model: "qwen3_vl/float",
        images_first: true,
    },
    Family {
        name: "Qwen3-VL-MoE",
        write: |dir| {
            write_tiny_qwen3_vl_moe(dir, None, QWEN3_VL_SEED).unwrap();
        },
        goldens: "qwen3_vl_moe_mlx_vlm.json",
        golden_model: "qwen3_vl_moe/float",
        images_first: true,
    },
    Family {
        name: "Gemma 3",
        write: |dir| {
            write_tiny_gemma3_vl(dir, None, GEMMA3_SEED).unwrap();
        },
        goldens: "gemma3_vl_mlx_vlm.json",
        golden_model: "gemma3/float",
        images_first: false,
    },
    Family {
        name: "Gemma 4",
        write: |dir| {
            write_tiny_gemma4_vl(dir, None, GEMMA4_SEED).unwrap();
        },
        goldens: "gemma4_vl_mlx_vlm.json",
        golden_model: "gemma4/float",
        images_first: true,
    },
    Family {
        name: "SmolVLM",
        write: |dir| {
            write_tiny_smolvlm(dir, SMOLVLM_SEED).unwrap();
        },
        goldens: "smolvlm_mlx_vlm.json",
        golden_model: "smolvlm/float",
        images_first: true,
    },
    Family {
        name: "Mistral 3",
        write: |dir| {
            write_tiny_mistral3(dir, MISTRAL3_SEED).unwrap();
        },
        goldens: "mistral3_mlx_vlm.json",
        golden_model: "mistral3/float",
        images_first: true,
    },
    Family {
        name: "LFM2-VL",
        write: |dir| {
            write_tiny_lfm2_vl(dir, LFM2_VL_SEED).unwrap();
        },
        goldens: "lfm2_vl_mlx_vlm.json",
        golden_model: "lfm2_vl/float",
        images_first: true,
    },
];

fn fixture(name: &str) -> ImageInput {
    let path: PathBuf =
        [env!("CARGO_MANIFEST_DIR"), "tests", "fixtures", "images", name].iter().collect();
    ImageInput::from_bytes(std::fs::read(&path).unwrap())
}

fn folder(family: &Family) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    (family.write)(dir.path());
    dir
}

fn start(dir: &Path, scheduler: SchedulerConfig) -> EngineHandle {
    let config = EngineConfig { load: LoadOptions { format: WeightFormat::AsStored }, scheduler };
    EngineHandle::start(dir, config).unwrap()
}

fn no_caches() -> SchedulerConfig {
    SchedulerConfig {
        max_running: 1,
        prefix_cache_bytes: 0,
        vision_cache_bytes: 0,
        ..Default::default()
    }
}

/// A user message: the images, then the text.
fn user(text: &str, images: &[ImageInput]) -> ChatMessage {
    user_in_order(text, images, true)
}

fn user_in_order(text: &str, images: &[ImageInput], images_first: bool) -> ChatMessage {
    let mut parts: Vec<ContentPart> =
        images.iter().map(|i| ContentPart::Image { image: Some(i.sha256.clone()) }).collect();
    if images_first {
        parts.push(ContentPart::text(text));
    } else {
        parts.insert(0, ContentPart::text(text));
    }
    ChatMessage { content: MessageContent::Parts(parts), ..ChatMessage::user("") }
}

/// A chat request over `messages` carrying `images` (all the conversation's,
/// in order), EOS banned so every run is full length.
fn chat(
    messages: Vec<ChatMessage>,
    images: &[ImageInput],
    max_tokens: usize,
    engine: &EngineHandle,
) -> Request {
    let prompt = Prompt::Chat { messages, options: TemplateOptions::default() };
    let ban_eos =
        engine.model_info().eos_token_ids.iter().map(|&t| (t, f32::NEG_INFINITY)).collect();
    let mut request = Request::new(prompt)
        .with_max_tokens(max_tokens)
        .with_sampling(SamplingParams { logit_bias: ban_eos, ..Default::default() });
    request.images = images.to_vec();
    request
}

fn ask(text: &str, images: &[ImageInput], max_tokens: usize, engine: &EngineHandle) -> Request {
    chat(vec![user(text, images)], images, max_tokens, engine)
}

fn finished(c: Completion) -> Completion {
    assert!(c.error.is_none(), "{:?}", c.error);
    assert_eq!(c.finish_reason, Some(FinishReason::Length));
    c
}

fn mixed_requests(engine: &EngineHandle) -> Vec<Request> {
    let small = fixture("qwen_parity_182x126.png");
    let large = fixture("qwen_parity_320x240.png");
    vec![
        ask("describe nothing in particular", &[], 10, engine),
        ask("what is in this picture?", std::slice::from_ref(&small), 10, engine),
        ask("compare these two", &[large, small], 10, engine),
    ]
}

#[test]
fn engine_answers_equal_mlx_vlm_greedy_tokens() {
    for family in FAMILIES {
        let path: PathBuf =
            [env!("CARGO_MANIFEST_DIR"), "tests", "goldens", family.goldens].iter().collect();
        let goldens: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let dir = folder(family);
        let tokenizer = Tokenizer::from_folder(dir.path()).unwrap();
        let engine = start(dir.path(), SchedulerConfig::default());
        let model = &goldens["models"][family.golden_model];
        let other = engine.submit(ask("an unrelated request decoding alongside", &[], 20, &engine));
        let mut streams = Vec::new();
        for case in model.as_object().unwrap().keys() {
            let files = &goldens["cases"][case];
            let images: Vec<ImageInput> =
                files.as_array().unwrap().iter().map(|f| fixture(f.as_str().unwrap())).collect();
            let want: Vec<u32> = model[case]["greedy_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect();
            let message =
                user_in_order(goldens["text"].as_str().unwrap(), &images, family.images_first);
            let mut request = chat(vec![message], &images, want.len(), &engine);
            request.sampling = SamplingParams::default(); // plain greedy, as the reference decoded
            let prompt_len = model[case]["prompt_ids"].as_array().unwrap().len();
            streams.push((case.clone(), want, prompt_len, engine.submit(request)));
        }
        let eos = engine.model_info().eos_token_ids.clone();
        for (case, want, prompt_len, stream) in streams {
            let got = stream.collect_blocking();
            let what = format!("{} {case}", family.name);
            assert!(got.error.is_none(), "{what}: {:?}", got.error);
            assert_eq!(
                got.stats.prompt_tokens, prompt_len,
                "{what}: prompt length after placeholder expansion"
            );
            let answer = match want.iter().position(|t| eos.contains(t)) {
                Some(end) => &want[..end],
                None => &want[..],
            };
            assert_eq!(got.content, tokenizer.decode(answer, true).unwrap(), "{what}");
        }
        finished(other.collect_blocking());
        engine.shutdown();
    }
}

#[test]
fn image_and_text_requests_batched_equal_each_alone() {
    for family in FAMILIES {
        let dir = folder(family);
        let alone_engine = start(dir.path(), no_caches());
        let alone: Vec<Completion> = mixed_requests(&alone_engine)
            .into_iter()
            .map(|r| finished(alone_engine.submit(r).collect_blocking()))
            .collect();
        alone_engine.shutdown();
        // Two images' slots outweigh the shorter text of the two-image request.
        assert!(
            alone[2].stats.prompt_tokens > alone[1].stats.prompt_tokens,
            "image slots were expanded"
        );

        let engine = start(dir.path(), SchedulerConfig::default());
        let streams: Vec<_> =
            mixed_requests(&engine).into_iter().map(|r| engine.submit(r)).collect();
        for (stream, want) in streams.into_iter().zip(&alone) {
            let got = finished(stream.collect_blocking());
            assert_eq!(got.content, want.content, "{}", family.name);
        }
        // An image request joining a batch that is already decoding.
        let mut long = engine.submit(ask("a long text-only answer please", &[], 40, &engine));
        common::wait_until_decoding(&mut long, 3);
        let joined = finished(
            engine
                .submit(ask(
                    "what is in this picture?",
                    &[fixture("qwen_parity_182x126.png")],
                    10,
                    &engine,
                ))
                .collect_blocking(),
        );
        finished(long.collect_blocking());
        assert_eq!(joined.content, alone[1].content, "{}: joined mid-decode", family.name);
        engine.shutdown();
    }
}

#[test]
fn a_second_turn_about_the_same_image_resumes_from_the_prefix_cache() {
    for family in FAMILIES {
        let dir = folder(family);
        let image = fixture("qwen_parity_320x240.png");
        let engine = start(dir.path(), SchedulerConfig::default());
        let first = finished(
            engine
                .submit(ask("what is this?", std::slice::from_ref(&image), 8, &engine))
                .collect_blocking(),
        );
        let turn2 = |engine: &EngineHandle| {
            let messages = vec![
                user("what is this?", std::slice::from_ref(&image)),
                ChatMessage::assistant(first.content.as_str()),
                ChatMessage::user("and the colours?"),
            ];
            chat(messages, std::slice::from_ref(&image), 8, engine)
        };
        let second = finished(engine.submit(turn2(&engine)).collect_blocking());
        assert!(
            second.stats.cached_prompt_tokens >= first.stats.prompt_tokens,
            "{}: the second turn reused {} of the first turn's {} prompt tokens",
            family.name,
            second.stats.cached_prompt_tokens,
            first.stats.prompt_tokens
        );
        assert!(second.stats.cached_prompt_tokens < second.stats.prompt_tokens);
        engine.shutdown();

        let cold_engine = start(dir.path(), no_caches());
        let cold = finished(cold_engine.submit(turn2(&cold_engine)).collect_blocking());
        assert_eq!(cold.stats.cached_prompt_tokens, 0);
        assert_eq!(second.content, cold.content, "{}: resumed turn vs cold prefill", family.name);
        cold_engine.shutdown();
    }
}

#[test]
fn kv_quantization_with_images_batched_equals_alone() {
    for family in FAMILIES {
        let dir = folder(family);
        // From the first column, so the images' own rows are quantized too.
        let kv = Some(KvQuantization { bits: 8, group_size: 32, start: 0 });
        let alone_engine =
            start(dir.path(), SchedulerConfig { kv_quantization: kv, ..no_caches() });
        let alone: Vec<Completion> = mixed_requests(&alone_engine)
            .into_iter()
            .map(|r| finished(alone_engine.submit(r).collect_blocking()))
            .collect();
        alone_engine.shutdown();
        let engine =
            start(dir.path(), SchedulerConfig { kv_quantization: kv, ..Default::default() });
        let streams: Vec<_> =
            mixed_requests(&engine).into_iter().map(|r| engine.submit(r)).collect();
        for (stream, want) in streams.into_iter().zip(&alone) {
            assert_eq!(
                finished(stream.collect_blocking()).content,
                want.content,
                "{} with 8-bit KV",
                family.name
            );
        }
        engine.shutdown();
    }
}

#[test]
fn prefill_in_small_chunks_equals_one_pass() {
    for family in FAMILIES {
        let dir = folder(family);
        let whole_engine = start(dir.path(), no_caches());
        let whole: Vec<Completion> = mixed_requests(&whole_engine)
            .into_iter()
            .map(|r| finished(whole_engine.submit(r).collect_blocking()))
            .collect();
        whole_engine.shutdown();
        // Budgets whose chunk ends fall inside images (and, for Gemma 3, get moved).
        for budget in [7, 17, 33] {
            let engine =
                start(dir.path(), SchedulerConfig { prefill_budget: budget, ..no_caches() });
            for (request, want) in mixed_requests(&engine).into_iter().zip(&whole) {
                let got = finished(engine.submit(request).collect_blocking());
                assert_eq!(got.content, want.content, "{}: prefill budget {budget}", family.name);
            }
            engine.shutdown();
        }
    }
}

/// A `width × height` RGB PNG of one colour.
fn png(width: u32, height: u32) -> ImageInput {
    let img = image::RgbImage::from_pixel(width, height, image::Rgb([200, 30, 90]));
    let mut bytes = std::io::Cursor::new(Vec::new());
    img.write_to(&mut bytes, image::ImageFormat::Png).unwrap();
    ImageInput::from_bytes(bytes.into_inner())
}

#[test]
fn odd_images_are_answered_and_bad_ones_fail_only_their_request() {
    for family in FAMILIES {
        let dir = folder(family);
        let engine = start(dir.path(), SchedulerConfig::default());
        let running =
            engine.submit(ask("keep going", &[fixture("qwen_parity_182x126.png")], 30, &engine));
        let odd = [
            ("1×1", png(1, 1)),
            ("one pixel wide", png(1, 150)),
            ("grayscale", fixture("pre_gray_small.png")),
            ("16-bit", fixture("pre_rgb16.png")),
            ("alpha", fixture("pre_alpha.png")),
            ("animated GIF (first frame)", fixture("pre_anim.gif")),
        ];
        for (name, image) in odd {
            let c = engine.submit(ask("what is this?", &[image], 3, &engine)).collect_blocking();
            assert!(c.error.is_none(), "{} {name}: {:?}", family.name, c.error);
        }
        for (name, bytes) in [("empty", Vec::new()), ("not an image", b"plain text".to_vec())] {
            let c = engine
                .submit(ask("what is this?", &[ImageInput::from_bytes(bytes)], 3, &engine))
                .collect_blocking();
            let e = c.error.unwrap_or_else(|| panic!("{} {name}: no error", family.name));
            assert_eq!(e.code, "INVALID_IMAGE", "{} {name}: {}", family.name, e.message);
        }
        finished(running.collect_blocking());
        engine.shutdown();

        // Room for a text turn, not for eight images' tokens.
        let small = start(dir.path(), SchedulerConfig { max_context: 80, ..Default::default() });
        let images = vec![fixture("qwen_parity_320x240.png"); 8];
        let e = small
            .submit(ask("what is this?", &images, 4, &small))
            .collect_blocking()
            .error
            .expect("refused");
        assert_eq!(e.code, "CONTEXT_LENGTH_EXCEEDED", "{}: {}", family.name, e.message);
        finished(small.submit(ask("still here?", &[], 4, &small)).collect_blocking());
        small.shutdown();
    }
}

#[test]
fn counted_prompt_tokens_are_what_the_engine_prefills() {
    for family in FAMILIES {
        let dir = folder(family);
        let engine = start(dir.path(), SchedulerConfig::default());
        for request in mixed_requests(&engine) {
            let counted = engine.count_prompt_tokens(&request).unwrap();
            let done = finished(engine.submit(request).collect_blocking());
            assert_eq!(counted, done.stats.prompt_tokens, "{}", family.name);
        }
        let broken =
            ask("what is this?", &[ImageInput::from_bytes(b"plain text".to_vec())], 3, &engine);
        let e = engine.count_prompt_tokens(&broken).expect_err("a non-image has no size");
        assert!(e.to_string().contains("#1"), "{e}");
        engine.shutdown();
    }
}
