//! Speed measurements printed by `vlm bench` (never asserted in tests).
use serde::Serialize;

use engine::generate::{generate, GenerateParams};
use engine::model::LoadedModel;
use engine::sample::SamplingParams;
use engine::Result;

#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub prompt_tokens: usize,
    pub gen_tokens: usize,
    /// Means over the measured runs.
    pub prompt_tps: f64,
    pub decode_tps: f64,
    pub peak_memory_bytes: usize,
}

/// A fixed pseudo-random prompt of `n` ordinary tokens (no special ids), so
/// runs are comparable across engines without depending on a text corpus.
pub fn synthetic_prompt(n: usize, vocab: usize, avoid: &[u32]) -> Vec<u32> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let id = ((state >> 33) % vocab as u64) as u32;
        if !avoid.contains(&id) {
            out.push(id);
        }
    }
    out
}

/// Single-stream prompt and decode speed: one warm-up run, then `runs`
/// measured ones. End-of-sequence tokens are banned so every run decodes
/// exactly `gen_tokens`.
pub fn single_stream(
    loaded: &LoadedModel,
    prompt_tokens: usize,
    gen_tokens: usize,
    runs: usize,
) -> Result<BenchReport> {
    let tokenizer = &loaded.tokenizer;
    let vocab = loaded.model.shape().vocab_size as usize;
    let specials: Vec<u32> = (0..vocab as u32)
        .filter(|&id| {
            tokenizer.is_eos(id) || tokenizer.id_to_token(id).is_some_and(|t| t.starts_with("<|"))
        })
        .collect();
    let prompt = synthetic_prompt(prompt_tokens, vocab, &specials);
    let params = GenerateParams {
        max_tokens: gen_tokens,
        sampling: SamplingParams {
            logit_bias: tokenizer.eos_ids().iter().map(|&id| (id, f32::NEG_INFINITY)).collect(),
            ..Default::default()
        },
    };
    let mut prompt_tps = 0.0;
    let mut decode_tps = 0.0;
    let mut peak = 0;
    for run in 0..=runs {
        let stats = generate(loaded.model.as_ref(), tokenizer, &prompt, &params, |_| true)?;
        if run > 0 {
            prompt_tps += stats.prompt_tps() / runs as f64;
            decode_tps += stats.generation_tps() / runs as f64;
            peak = peak.max(stats.peak_memory_bytes);
        }
    }
    Ok(BenchReport { prompt_tokens, gen_tokens, prompt_tps, decode_tps, peak_memory_bytes: peak })
}

/// Figures for N concurrent requests through the continuous-batching engine.
#[derive(Debug, Clone, Serialize)]
pub struct BatchReport {
    pub concurrency: usize,
    pub prompt_tokens: usize,
    pub gen_tokens: usize,
    /// All generated tokens (after each request's first) over the time from
    /// the last first token to the last finish.
    pub aggregate_decode_tps: f64,
    /// Mean of the requests' own decode speeds.
    pub per_request_decode_tps: f64,
    pub wall_secs: f64,
    /// Shortest prompt of the batch (`prompt_tokens` is the longest; prompts
    /// are spread evenly between the two).
    pub min_prompt_tokens: usize,
    /// Time to first token, mean over the requests and the slowest one (the
    /// last request to start streaming): what prefill scheduling changes.
    pub ttft_mean_secs: f64,
    pub ttft_max_secs: f64,
    /// Prompt plus generated tokens of all requests over the wall time.
    pub total_tps: f64,
    /// The batch's KV cache at its largest (sampled while the requests ran).
    pub peak_kv_cache_bytes: usize,
    /// Fewest prompt tokens any request reused from the prefix cache.
    pub min_cached_prompt_tokens: usize,
}

/// A prompt of `prompt_tokens` ordinary tokens (the low ids of a vocabulary
/// hold the specials); `salt` shifts the sequence so prompts differ.
fn bench_prompt(
    handle: &engine::handle::EngineHandle,
    prompt_tokens: usize,
    salt: u64,
) -> Vec<u32> {
    let vocab = handle.model_info().shape.vocab_size as usize;
    let mut prompt = synthetic_prompt(prompt_tokens + salt as usize, vocab - vocab / 8, &[]);
    prompt.drain(..salt as usize);
    prompt.into_iter().map(|t| t + (vocab / 8) as u32).collect()
}

/// Greedy, with end-of-sequence banned so every request decodes `gen_tokens`.
fn bench_request(
    handle: &engine::handle::EngineHandle,
    prompt: Vec<u32>,
    gen_tokens: usize,
) -> engine::batch::Request {
    engine::batch::Request::new(engine::batch::Prompt::Tokens(prompt))
        .with_max_tokens(gen_tokens)
        .with_sampling(SamplingParams {
            logit_bias: handle
                .model_info()
                .eos_token_ids
                .iter()
                .map(|&id| (id, f32::NEG_INFINITY))
                .collect(),
            ..Default::default()
        })
}

/// A JSON schema whose answers are always longer than a benchmark's
/// generation (at least 256 array items), so constrained requests decode
/// `gen_tokens` like free ones: structured output's cost per token.
pub fn long_answer_schema() -> engine::constraint::Constraint {
    engine::constraint::Constraint::JsonSchema(serde_json::json!({
        "type": "object",
        "properties": {"items": {"type": "array", "minItems": 256, "items": {
            "type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "score": {"type": "integer"}},
            "required": ["name", "score"], "additionalProperties": false}}},
        "required": ["items"], "additionalProperties": false,
    }))
}

/// The prompt length of request `i` of `n`, spread evenly over `min..=max`
/// (fixed, so runs before and after a change see the same prompts).
pub fn spread_prompt_len(i: usize, n: usize, min: usize, max: usize) -> usize {
    let (min, max) = (min.min(max), max.max(min));
    if n <= 1 {
        return max;
    }
    min + (max - min) * i / (n - 1)
}

/// Submits `concurrency` requests at once, with prompts of different
/// lengths from `min_prompt_tokens` to `prompt_tokens`, and waits for all of them.
pub fn engine_batch_spread(
    handle: &engine::handle::EngineHandle,
    concurrency: usize,
    min_prompt_tokens: usize,
    prompt_tokens: usize,
    gen_tokens: usize,
    constraint: Option<&engine::constraint::Constraint>,
) -> Result<BatchReport> {
    let prompts: Vec<Vec<u32>> = (0..concurrency)
        .map(|i| {
            bench_prompt(
                handle,
                spread_prompt_len(i, concurrency, min_prompt_tokens, prompt_tokens),
                i as u64,
            )
        })
        .collect();
    run_batch(handle, prompts, gen_tokens, constraint)
}

/// [`engine_batch`] at long context without `concurrency` long prefills:
/// one request prefills a `prompt_tokens` prompt first (it stays in the
/// prefix cache), then `concurrency` requests of that prompt plus one token
/// of their own reuse it, join at once and decode together. What it measures
/// is decoding over a long cache, which staggered multi-minute prefills on
/// this CPU would otherwise keep from overlapping.
pub fn engine_batch_shared_prompt(
    handle: &engine::handle::EngineHandle,
    concurrency: usize,
    prompt_tokens: usize,
    gen_tokens: usize,
) -> Result<BatchReport> {
    let shared = bench_prompt(handle, prompt_tokens, 0);
    let warm = handle.submit(bench_request(handle, shared.clone(), 1)).collect_blocking();
    if let Some(e) = warm.error {
        return Err(engine::Error::InvalidRequest(e.message));
    }
    let prompts: Vec<Vec<u32>> = (0..concurrency)
        .map(|i| {
            let mut p = shared.clone();
            p.push(bench_prompt(handle, 1, i as u64 + 1)[0]);
            p
        })
        .collect();
    let report = run_batch(handle, prompts, gen_tokens, None)?;
    if report.min_cached_prompt_tokens < prompt_tokens {
        return Err(engine::Error::InvalidRequest(format!(
            "the shared {prompt_tokens}-token prompt was not reused from the prefix cache \
             (a request had only {} cached tokens): is the prefix cache big enough?",
            report.min_cached_prompt_tokens
        )));
    }
    Ok(report)
}

/// Submits `prompts` at once and waits for all of them.
fn run_batch(
    handle: &engine::handle::EngineHandle,
    prompts: Vec<Vec<u32>>,
    gen_tokens: usize,
    constraint: Option<&engine::constraint::Constraint>,
) -> Result<BatchReport> {
    let requests = prompts
        .into_iter()
        .map(|p| {
            let mut request = bench_request(handle, p, gen_tokens);
            request.constraint = constraint.cloned();
            // Not streamed (as an API client that waits for whole answers):
            // the engine admits them with its whole step budget instead of
            // pacing their prefill between decode steps, so the decode figure
            // is of all of them decoding together, as mlx-lm's BatchGenerator
            // prefills its batch before decoding it.
            request.interactive = false;
            request
        })
        .collect();
    run_requests(handle, requests, gen_tokens)
}

/// `concurrency` chat requests at once, each about `image` (the same image,
/// a different question each, so they share no whole prompt), greedy with
/// end-of-sequence banned so each decodes `gen_tokens`: decoding with image
/// tokens in every row's cache.
pub fn vision_decode(
    handle: &engine::handle::EngineHandle,
    image: &[u8],
    concurrency: usize,
    gen_tokens: usize,
) -> Result<BatchReport> {
    let image = engine::batch::ImageInput::from_bytes(image.to_vec());
    let requests = (0..concurrency)
        .map(|i| {
            let mut request =
                image_request(&image, &format!("Describe this image. ({i})"), gen_tokens);
            request.sampling = SamplingParams {
                logit_bias: handle
                    .model_info()
                    .eos_token_ids
                    .iter()
                    .map(|&id| (id, f32::NEG_INFINITY))
                    .collect(),
                ..Default::default()
            };
            request
        })
        .collect();
    run_requests(handle, requests, gen_tokens)
}

/// A chat request: one user message of `image` then `text`.
fn image_request(
    image: &engine::batch::ImageInput,
    text: &str,
    max_tokens: usize,
) -> engine::batch::Request {
    use engine::batch::{Prompt, Request};
    use engine::tokenizer::{ChatMessage, ContentPart, MessageContent, TemplateOptions};
    let parts =
        vec![ContentPart::Image { image: Some(image.sha256.clone()) }, ContentPart::text(text)];
    let message = ChatMessage { content: MessageContent::Parts(parts), ..ChatMessage::user("") };
    let mut request =
        Request::new(Prompt::Chat { messages: vec![message], options: TemplateOptions::default() })
            .with_max_tokens(max_tokens);
    request.images = vec![image.clone()];
    request
}

/// Submits `requests` at once and waits for all of them.
fn run_requests(
    handle: &engine::handle::EngineHandle,
    requests: Vec<engine::batch::Request>,
    gen_tokens: usize,
) -> Result<BatchReport> {
    use std::time::Instant;
    let concurrency = requests.len();
    let mut lens: Vec<usize> = Vec::new();
    let started = Instant::now();
    let streams: Vec<_> =
        requests.into_iter().map(|r| (Instant::now(), handle.submit(r))).collect();
    let mut last_first = started;
    // When the last request ended, as its reader saw it (not after the
    // polling loop's next sleep, which added up to 20 ms to the decode time).
    let mut last_end = started;
    let mut generated = 0usize;
    let mut per_request = 0.0;
    let threads: Vec<_> = streams
        .into_iter()
        .map(|(submitted, mut s)| {
            std::thread::spawn(move || {
                let mut done = engine::handle::Completion::default();
                while let Some(e) = s.recv_blocking() {
                    if done.absorb(e) {
                        break;
                    }
                }
                // The first token's instant from the engine's own figure: the
                // first event is `Accepted`, long before any token.
                (submitted + done.stats.time_to_first_token, Instant::now(), done)
            })
        })
        .collect();
    let (mut ttft_sum, mut ttft_max, mut all_tokens) = (0.0, 0.0f64, 0usize);
    let mut min_cached = usize::MAX;
    let mut peak_kv = 0;
    while !threads.iter().all(|t| t.is_finished()) {
        peak_kv = peak_kv.max(handle.stats()?.kv_cache_bytes);
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for t in threads {
        let (first, ended, c) = t.join().expect("bench reader thread");
        last_end = last_end.max(ended);
        if let Some(e) = c.error {
            return Err(engine::Error::InvalidRequest(e.message));
        }
        last_first = last_first.max(first);
        generated += c.stats.generated_tokens.saturating_sub(1);
        per_request += c.stats.generation_tps / concurrency as f64;
        // Measured here, from the common submit time, not from the stats:
        // all requests count from the same instant.
        let ttft = (first - started).as_secs_f64();
        ttft_sum += ttft;
        ttft_max = ttft_max.max(ttft);
        all_tokens += c.stats.prompt_tokens + c.stats.generated_tokens;
        lens.push(c.stats.prompt_tokens);
        min_cached = min_cached.min(c.stats.cached_prompt_tokens);
    }
    let wall = started.elapsed().as_secs_f64();
    let decode_secs = (last_end - last_first).as_secs_f64().max(1e-9);
    Ok(BatchReport {
        concurrency,
        prompt_tokens: lens.iter().copied().max().unwrap_or(0),
        gen_tokens,
        aggregate_decode_tps: generated as f64 / decode_secs,
        per_request_decode_tps: per_request,
        wall_secs: wall,
        min_prompt_tokens: lens.iter().copied().min().unwrap_or(0),
        ttft_mean_secs: ttft_sum / concurrency.max(1) as f64,
        ttft_max_secs: ttft_max,
        total_tps: all_tokens as f64 / wall.max(1e-9),
        peak_kv_cache_bytes: peak_kv,
        min_cached_prompt_tokens: if concurrency == 0 { 0 } else { min_cached },
    })
}

/// Time from submit to first token for a request that arrives while
/// `running` others decode, in decode steps of the running batch.
#[derive(Debug, Clone, Serialize)]
pub struct JoinReport {
    pub running: usize,
    pub prompt_tokens: usize,
    pub join_secs: f64,
    pub decode_step_secs: f64,
    /// The joining request's own prefill time (from its prompt tok/s).
    pub own_prefill_secs: f64,
    /// (join time - own prefill) / decode step time.
    pub join_steps_beyond_prefill: f64,
}

pub fn join_latency(
    handle: &engine::handle::EngineHandle,
    running: usize,
    prompt_tokens: usize,
) -> Result<JoinReport> {
    use std::time::{Duration, Instant};
    let background: Vec<_> = (0..running)
        .map(|i| handle.submit(bench_request(handle, bench_prompt(handle, 32, i as u64), 100_000)))
        .collect();
    // Let the batch settle into decoding, then time its steps.
    std::thread::sleep(Duration::from_millis(500));
    let s0 = handle.stats()?;
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_millis(1000));
    let s1 = handle.stats()?;
    let step = t0.elapsed().as_secs_f64() / (s1.decode_steps - s0.decode_steps).max(1) as f64;

    let joining = handle.submit(bench_request(handle, bench_prompt(handle, prompt_tokens, 99), 2));
    // The engine's own first-token time: the stream's first event is its
    // `Accepted`, sent at submission.
    let c = joining.collect_blocking();
    let join = c.stats.time_to_first_token.as_secs_f64();
    for b in &background {
        handle.cancel(b.id);
    }
    drop(background);
    let own_prefill = prompt_tokens as f64 / c.stats.prompt_tps.max(1e-9);
    Ok(JoinReport {
        running,
        prompt_tokens,
        join_secs: join,
        decode_step_secs: step,
        own_prefill_secs: own_prefill,
        join_steps_beyond_prefill: (join - own_prefill) / step,
    })
}

/// Time to first token of a chat's second turn, with the first turn's KV
/// reused from the prefix cache, against the same prompt prefilled cold.
#[derive(Debug, Clone, Serialize)]
pub struct Turn2Report {
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub ttft_secs: f64,
}

/// A first turn whose user message is `history_words` words long, then a
/// short second question; runs both turns on `handle` and reports turn 2.
pub fn chat_turn2(
    handle: &engine::handle::EngineHandle,
    history_words: usize,
) -> Result<Turn2Report> {
    let chat = chat_first_turn(handle, history_words)?;
    chat_next_turn(handle, chat)
}

/// The first turn of the benchmark chat (a system prompt, a user message of
/// `history_words` words, the reply): the conversation so far.
pub fn chat_first_turn(
    handle: &engine::handle::EngineHandle,
    history_words: usize,
) -> Result<Vec<engine::tokenizer::ChatMessage>> {
    use engine::tokenizer::ChatMessage;
    let words = ["river", "mountain", "lantern", "orchard", "signal", "harbor", "meadow", "copper"];
    let long: Vec<&str> = (0..history_words).map(|i| words[i % words.len()]).collect();
    let mut chat = vec![
        ChatMessage::system("You are a helpful assistant."),
        ChatMessage::user(format!("Remember these words: {}", long.join(" ")).as_str()),
    ];
    let reply = ask_chat(handle, chat.clone())?;
    chat.push(ChatMessage::assistant(reply.content.as_str()));
    Ok(chat)
}

/// The chat's next question after `chat`, timed.
pub fn chat_next_turn(
    handle: &engine::handle::EngineHandle,
    mut chat: Vec<engine::tokenizer::ChatMessage>,
) -> Result<Turn2Report> {
    chat.push(engine::tokenizer::ChatMessage::user("Which word came first?"));
    let c = ask_chat(handle, chat)?;
    Ok(Turn2Report {
        prompt_tokens: c.stats.prompt_tokens,
        cached_tokens: c.stats.cached_prompt_tokens,
        ttft_secs: c.stats.time_to_first_token.as_secs_f64(),
    })
}

fn ask_chat(
    handle: &engine::handle::EngineHandle,
    messages: Vec<engine::tokenizer::ChatMessage>,
) -> Result<engine::handle::Completion> {
    use engine::batch::{Prompt, Request};
    let prompt = Prompt::Chat { messages, options: engine::tokenizer::TemplateOptions::default() };
    let c = handle.submit(Request::new(prompt).with_max_tokens(16)).collect_blocking();
    match &c.error {
        Some(e) => Err(engine::Error::InvalidRequest(e.message.clone())),
        None => Ok(c),
    }
}

/// A chat continued after the engine restarts: time to first token of its
/// next message with the prefix cache's disk tier (the first turn's KV read
/// from disk) against without it (the whole chat prefilled again).
#[derive(Debug, Clone, Serialize)]
pub struct RestartReport {
    pub prompt_tokens: usize,
    pub with_disk: Turn2Report,
    pub without_disk: Turn2Report,
    /// The first turn's file on disk.
    pub file_bytes: u64,
}

/// Runs the first turn on an engine `start(Some(folder))` gives, stops it,
/// then the next message on a fresh engine with the same folder and on one
/// without a disk tier.
pub fn chat_after_restart(
    start: impl Fn(Option<&std::path::Path>) -> Result<engine::handle::EngineHandle>,
    history_words: usize,
) -> Result<RestartReport> {
    let folder = std::env::temp_dir().join(format!("vlm-bench-prefix-disk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&folder);
    let first = start(Some(&folder))?;
    let chat = chat_first_turn(&first, history_words)?;
    // Stopping waits for the writer: the file is complete.
    first.shutdown();
    let file_bytes = folder_bytes(&folder);
    let restarted = start(Some(&folder))?;
    let with_disk = chat_next_turn(&restarted, chat.clone())?;
    restarted.shutdown();
    let without = start(None)?;
    let without_disk = chat_next_turn(&without, chat)?;
    without.shutdown();
    let _ = std::fs::remove_dir_all(&folder);
    Ok(RestartReport {
        prompt_tokens: with_disk.prompt_tokens,
        with_disk,
        without_disk,
        file_bytes,
    })
}

/// Bytes of the files under `folder` and its subfolders.
fn folder_bytes(folder: &std::path::Path) -> u64 {
    std::fs::read_dir(folder)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => folder_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// The vision-feature cache's effect: the encode step (decode + preprocess +
/// vision tower) on a miss against a cache lookup on a hit.
#[derive(Debug, Clone, Serialize)]
pub struct VisionEncodeReport {
    pub grid: [i32; 3],
    pub image_tokens: usize,
    /// Median seconds over the runs.
    pub preprocess_secs: f64,
    pub tower_secs: f64,
    pub miss_secs: f64,
    pub hit_secs: f64,
    pub hit_speedup: f64,
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

pub fn vision_encode(
    loaded: &LoadedModel,
    image: &[u8],
    runs: usize,
) -> Result<VisionEncodeReport> {
    use std::time::Instant;

    use engine::vision::{CachedFeatures, VisionFeatureCache};
    let (Some(vision), Some(preprocessor)) = (loaded.model.vision(), loaded.preprocessor.as_ref())
    else {
        return Err(engine::Error::InvalidRequest(format!(
            "{} is not a vision model",
            loaded.info.name
        )));
    };
    let runs = runs.max(1);
    let (mut pre, mut tower, mut hit) = (Vec::new(), Vec::new(), Vec::new());
    let mut cache = VisionFeatureCache::new(1 << 30);
    let key = VisionFeatureCache::key("bench", &preprocessor.cache_key(), &loaded.info.name);
    let mut last = None;
    // One warm-up run first, as for the text figures.
    for run in 0..=runs {
        let t0 = Instant::now();
        let p = preprocessor.preprocess(image)?;
        p.pixels.eval()?;
        let t1 = Instant::now();
        let features = vision.encode(&p.pixels, p.grid)?;
        features.eval()?;
        let t2 = Instant::now();
        cache.insert(key.clone(), CachedFeatures { features, grid: p.grid });
        let t3 = Instant::now();
        let found = cache.get(&key).expect("just inserted");
        found.features.eval()?;
        let t4 = Instant::now();
        if run > 0 {
            pre.push((t1 - t0).as_secs_f64());
            tower.push((t2 - t1).as_secs_f64());
            hit.push((t4 - t3).as_secs_f64());
        }
        last = Some(found);
    }
    let found = last.expect("at least one run");
    let (pre, tower, hit) = (median(pre), median(tower), median(hit));
    Ok(VisionEncodeReport {
        grid: found.grid,
        image_tokens: found.features.dim(0) as usize,
        preprocess_secs: pre,
        tower_secs: tower,
        miss_secs: pre + tower,
        hit_secs: hit,
        hit_speedup: (pre + tower) / hit.max(1e-9),
    })
}

/// Time to first token for the same image asked about twice on `handle`.
#[derive(Debug, Clone, Serialize)]
pub struct VisionTtftReport {
    pub prompt_tokens: usize,
    /// A fresh image's time to first token (a vision-cache miss), the
    /// median of the runs after one image ask as warm-up.
    pub first_ttft_secs: f64,
    pub repeat_ttft_secs: f64,
    /// Prompt tokens the repeat reused from the prefix cache.
    pub repeat_cached_tokens: usize,
    /// Prompt processing of the first request (image encode + prefill), tokens/s.
    pub first_prompt_tps: f64,
}

pub fn vision_ttft(
    handle: &engine::handle::EngineHandle,
    image: &[u8],
    runs: usize,
) -> Result<VisionTtftReport> {
    use engine::batch::{ImageInput, Prompt, Request};
    // A short text request first, so the first ask pays no first-use costs
    // of the engine (the reference's timings come after a warm-up too).
    let warm = handle
        .submit(Request::new(Prompt::Tokens(bench_prompt(handle, 16, 0))).with_max_tokens(2))
        .collect_blocking();
    if let Some(e) = warm.error {
        return Err(engine::Error::InvalidRequest(e.message));
    }
    // The same picture as other bytes (zeros after the file's end, which
    // decoders ignore): each a vision-cache miss, as each of the
    // reference's runs encodes its image again.
    let variant = |n: usize| {
        let mut bytes = image.to_vec();
        bytes.resize(image.len() + n, 0);
        ImageInput::from_bytes(bytes)
    };
    let ask = |image: &ImageInput| {
        let c = handle.submit(image_request(image, "Describe this image.", 2)).collect_blocking();
        match c.error {
            Some(e) => Err(engine::Error::InvalidRequest(e.message)),
            None => Ok(c.stats),
        }
    };
    // One image ask as warm-up (the reference drops its first run too),
    // then the median of `runs` fresh images; the repeat sends the last
    // one's bytes again.
    ask(&variant(1))?;
    let runs = runs.max(1);
    let mut fresh = Vec::with_capacity(runs);
    for n in 0..runs {
        fresh.push(ask(&variant(2 + n))?);
    }
    fresh.sort_by_key(|s| s.time_to_first_token);
    let first = fresh[fresh.len() / 2].clone();
    let repeat = ask(&variant(1 + runs))?;
    Ok(VisionTtftReport {
        prompt_tokens: first.prompt_tokens,
        first_ttft_secs: first.time_to_first_token.as_secs_f64(),
        repeat_ttft_secs: repeat.time_to_first_token.as_secs_f64(),
        repeat_cached_tokens: repeat.cached_prompt_tokens,
        first_prompt_tps: first.prompt_tps,
    })
}
