//! Images never stall the batch: a request's images are prepared before the
//! engine sees it and encoded by the scheduler a piece at a time inside each
//! step's budget, while the running streams keep decoding. The scheduler is
//! stepped by hand (no timing): 4 text streams decode while 8 image requests
//! arrive.
use crate::common;

use std::io::Cursor;

use common::Driver;
use engine::batch::{ImageInput, Prompt, Request, SchedulerConfig};
use engine::sample::SamplingParams;
use engine::tokenizer::{ChatMessage, ContentPart, MessageContent, TemplateOptions};
use fixtures::{write_tiny_qwen2_vl, QwenVlVariant, TinyQwenVl, VlDims};

const BUDGET: usize = 40;
const VISION_BLOCKS: i32 = 4;

/// A tiny Qwen2-VL whose tower has 4 blocks: an image of up to 128 patches
/// costs up to 32 budget units per block, so it takes several steps.
fn tiny_model() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let spec = TinyQwenVl {
        dims: VlDims { vision_depth: Some(VISION_BLOCKS), ..VlDims::default() },
        ..TinyQwenVl::new(QwenVlVariant::Qwen2Vl)
    };
    write_tiny_qwen2_vl(dir.path(), &spec).unwrap();
    dir
}

/// A PNG of `w × h` pixels in a pattern seeded by `seed` (every image differs,
/// so none is a vision-cache hit).
fn png(w: u32, h: u32, seed: u32) -> ImageInput {
    let img = image::RgbImage::from_fn(w, h, |x, y| {
        let v = x.wrapping_mul(7 + seed).wrapping_add(y.wrapping_mul(13 + 3 * seed));
        image::Rgb([(v % 251) as u8, (v / 3 % 241) as u8, (seed * 37 % 256) as u8])
    });
    let mut bytes = Vec::new();
    img.write_to(&mut Cursor::new(&mut bytes), image::ImageFormat::Png).unwrap();
    ImageInput::from_bytes(bytes)
}

/// `eos`: token ids banned (random weights may pick EOS at once; banning it
/// makes every reply full length).
fn request(text: &str, images: &[ImageInput], max_tokens: usize, eos: &[u32]) -> Request {
    let mut parts: Vec<ContentPart> =
        images.iter().map(|i| ContentPart::Image { image: Some(i.sha256.clone()) }).collect();
    parts.push(ContentPart::text(text));
    let message = ChatMessage { content: MessageContent::Parts(parts), ..ChatMessage::user("") };
    let prompt = Prompt::Chat { messages: vec![message], options: TemplateOptions::default() };
    let ban_eos = eos.iter().map(|&t| (t, f32::NEG_INFINITY)).collect();
    let mut r = Request::new(prompt)
        .with_max_tokens(max_tokens)
        .with_sampling(SamplingParams { logit_bias: ban_eos, ..Default::default() });
    r.images = images.to_vec();
    // one log-probability event per generated token: counts tokens per step
    r.logprobs = Some(0);
    r
}

fn images() -> Vec<ImageInput> {
    (0..8u32).map(|i| png(56 + 28 * (i % 4), 84 + 28 * (i / 4), i)).collect()
}

fn config(max_running: usize, prefill_budget: usize) -> SchedulerConfig {
    SchedulerConfig { max_running, prefill_budget, ..SchedulerConfig::default() }
}

#[test]
fn images_are_encoded_in_pieces_within_the_step_budget_while_streams_decode() {
    let dir = tiny_model();
    let mut d = Driver::new(dir.path(), config(6, BUDGET));
    let eos = d.scheduler.loaded().info.eos_token_ids.clone();
    let texts: Vec<usize> =
        (0..4).map(|i| d.submit(request(&format!("story number {i}"), &[], 60, &eos))).collect();
    while d.scheduler.last_step().decoded_rows < 4 {
        d.step();
    }

    let images = images();
    let image_requests: Vec<usize> = images
        .iter()
        .map(|img| {
            d.submit(request("what is in this picture?", std::slice::from_ref(img), 6, &eos))
        })
        .collect();
    // Admission did no vision work: every image still waits for the tower.
    let stats = d.scheduler.stats();
    assert_eq!(stats.images_to_encode, 8);
    assert_eq!(stats.vision_cache.misses + stats.vision_cache.hits, 0);

    let mut tokens_per_step: Vec<Vec<usize>> = Vec::new();
    let mut vision_steps = 0;
    let mut vision_total = 0;
    let mut seen: Vec<usize> = texts.iter().map(|&t| d.completion(t).logprobs.len()).collect();
    while d.scheduler.has_work() {
        d.step();
        let report = d.scheduler.last_step();
        assert!(
            report.vision_cost + report.prefill_tokens <= BUDGET,
            "a step ran {} units of vision and {} of prefill, over the budget of {BUDGET}",
            report.vision_cost,
            report.prefill_tokens
        );
        if report.running_before > 0 {
            assert!(
                report.decoded_rows > 0,
                "a step with running streams decoded nothing: {report:?}"
            );
        }
        if report.vision_cost > 0 {
            vision_steps += 1;
            vision_total += report.vision_cost;
        }
        let now: Vec<usize> = texts.iter().map(|&t| d.completion(t).logprobs.len()).collect();
        tokens_per_step.push(now.iter().zip(&seen).map(|(n, s)| n - s).collect());
        seen = now;
    }
    d.drain();

    // Pieces: the images needed more budget than one step has, and got it
    // over several steps.
    assert!(
        vision_total > BUDGET,
        "the test images must need more than one step ({vision_total} units)"
    );
    assert!(
        vision_steps >= vision_total.div_ceil(BUDGET),
        "{vision_steps} steps for {vision_total} units"
    );
    // Every text stream got one token in every step from its first to its last.
    for (k, &t) in texts.iter().enumerate() {
        let c = d.completion(t);
        assert!(c.error.is_none(), "{:?}", c.error);
        assert_eq!(c.logprobs.len(), 60);
        let got: Vec<usize> = tokens_per_step.iter().map(|s| s[k]).collect();
        let first = got.iter().position(|&n| n > 0).unwrap_or(got.len());
        let last = got.iter().rposition(|&n| n > 0).unwrap_or(0);
        assert!(got[first..=last].iter().all(|&n| n == 1), "stream {k} missed a step: {got:?}");
    }

    // Encoding in pieces gives the same answers as encoding each image whole
    // (a budget larger than any image) and alone.
    for (img, &r) in images.iter().zip(&image_requests) {
        let mut alone = Driver::new(dir.path(), config(6, 4096));
        let i =
            alone.submit(request("what is in this picture?", std::slice::from_ref(img), 6, &eos));
        alone.run_to_end();
        let (batched, alone) = (d.completion(r), alone.completion(i));
        assert!(
            batched.error.is_none() && alone.error.is_none(),
            "{:?} {:?}",
            batched.error,
            alone.error
        );
        let ids = |c: &engine::handle::Completion| {
            c.logprobs.iter().map(|l| l.token.id).collect::<Vec<_>>()
        };
        assert_eq!(ids(batched), ids(alone));
        assert_eq!(ids(batched).len(), 6);
    }
}

#[test]
fn waiting_requests_are_told_their_place_in_line_and_accepted_first() {
    let dir = tiny_model();
    let mut d = Driver::new(dir.path(), config(2, 512));
    let eos = d.scheduler.loaded().info.eos_token_ids.clone();
    let running: Vec<usize> =
        (0..2).map(|i| d.submit(request(&format!("story {i}"), &[], 12, &eos))).collect();
    let queued: Vec<usize> =
        (0..3).map(|i| d.submit(request(&format!("question {i}"), &[], 4, &eos))).collect();
    d.run_to_end();
    for &r in &running {
        let c = d.completion(r);
        assert!(c.accepted);
        assert!(
            c.queue_positions.is_empty(),
            "a request that found a free slot waited: {:?}",
            c.queue_positions
        );
    }
    for (k, &q) in queued.iter().enumerate() {
        let c = d.completion(q);
        assert!(c.accepted && c.error.is_none());
        // first told its place behind the ones before it, then moved up one at a time
        assert_eq!(c.queue_positions.first(), Some(&(k + 1)), "{:?}", c.queue_positions);
        assert!(c.queue_positions.windows(2).all(|w| w[1] < w[0]), "{:?}", c.queue_positions);
        assert_eq!(c.logprobs.len(), 4);
    }
}

#[test]
fn a_cancelled_image_request_frees_its_place_before_its_images_are_encoded() {
    let dir = tiny_model();
    let mut d = Driver::new(dir.path(), config(4, BUDGET));
    let eos = d.scheduler.loaded().info.eos_token_ids.clone();
    let imgs = images();
    let first = d.submit(request("first", &imgs[..4], 4, &eos));
    let second = d.submit(request("second", &imgs[4..5], 4, &eos));
    d.step();
    d.cancel(first);
    d.run_to_end();
    assert_eq!(d.completion(first).finish_reason, Some(engine::batch::FinishReason::Cancelled));
    let c = d.completion(second);
    assert!(c.error.is_none());
    assert_eq!(c.logprobs.len(), 4);
    // the cancelled request's other images were never encoded
    let stats = d.scheduler.stats();
    assert!(stats.vision_cache.misses < 5, "{:?}", stats.vision_cache);
    assert_eq!(stats.images_to_encode, 0);
}

/// Pacing (on in the apps) holds a step's new work to about one decode
/// step's time only while someone watches a stream: with the running rows
/// marked not interactive (a bulk job), a long prompt gets the whole step
/// budget at once; with interactive rows it is prefilled a piece at a time.
#[test]
fn pacing_applies_only_around_interactive_streams() {
    let dir = tiny_model();
    for interactive in [false, true] {
        let config = SchedulerConfig {
            max_running: 4,
            prefill_budget: 2048,
            pace_to_decode: true,
            ..SchedulerConfig::default()
        };
        let mut d = Driver::new(dir.path(), config);
        let eos = d.scheduler.loaded().info.eos_token_ids.clone();
        for i in 0..2 {
            let mut r = request(&format!("story {i}"), &[], 200, &eos);
            r.interactive = interactive;
            d.submit(r);
        }
        // decode-only steps: the engine measures a decode step
        for _ in 0..6 {
            d.step();
        }
        assert_eq!(d.scheduler.last_step().decoded_rows, 2);
        let long = request(&"a longer prompt ".repeat(100), &[], 4, &eos);
        d.submit(long);
        d.step();
        let prefilled = d.scheduler.last_step().prefill_tokens;
        if interactive {
            assert!(
                prefilled < 1000,
                "paced around watched streams, yet {prefilled} tokens in one step"
            );
        } else {
            assert!(
                prefilled >= 1500,
                "nobody watches the running rows, yet only {prefilled} tokens in one step"
            );
        }
    }
}
