//! Helpers the engine's integration tests share: running a model by hand
//! (a fresh forward pass, a cached step, greedy decoding) and comparing
//! logits. Each test binary uses a different subset.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use engine::batch::{
    Event, ImageInput, PreparedRequest, Preparer, Prompt, Request, Scheduler, SchedulerConfig,
};
use engine::cache::BatchCache;
use engine::generate::{generate, GenerateParams};
use engine::handle::{Completion, RequestStream};
use engine::model::{self, LanguageModel, LoadOptions, LoadedModel, Positions, WeightFormat};
use engine::sample::SamplingParams;
use fixtures::{write_tiny_family, TinyFamily};
use mlx_rs::{Array, Dtype};
use serde_json::Value;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// Weights as stored: the tiny checkpoints' exact computation.
pub const LOAD: LoadOptions = LoadOptions { format: WeightFormat::AsStored };

/// `[1, L]` int32 token ids.
pub fn tokens(ids: &[u32]) -> Array {
    let ids: Vec<i32> = ids.iter().map(|&t| t as i32).collect();
    Array::from_slice(&ids, &[1, ids.len() as i32])
}

/// Logits `[1, L, vocab]` of `tokens` run through the model with `cache`
/// (one row), at the positions the cache is at.
pub fn forward_cached(model: &dyn LanguageModel, cache: &mut BatchCache, tokens: &Array) -> Array {
    let positions = Positions::Start(cache.offsets()[0]);
    model.forward(tokens, &positions, cache).expect("forward")
}

/// Logits `[1, L, vocab]` of one forward pass from an empty cache.
pub fn forward_fresh(model: &dyn LanguageModel, tokens: &Array) -> Array {
    forward_cached(model, &mut model.new_cache(1), tokens)
}

/// `[1, L, vocab]` logits → rows of f32.
pub fn rows(logits: &Array) -> Vec<Vec<f32>> {
    let shape = logits.shape().to_vec();
    assert_eq!(shape.len(), 3, "logits shape {shape:?}");
    let (l, vocab) = (shape[1] as usize, shape[2] as usize);
    let flat = logits.as_dtype(Dtype::Float32).expect("cast").reshape(&[-1]).expect("reshape");
    flat.eval().expect("eval");
    let data = flat.as_slice::<f32>();
    (0..l).map(|i| data[i * vocab..(i + 1) * vocab].to_vec()).collect()
}

/// The first maximum, as `mx.argmax` picks it.
pub fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as u32
}

/// Greedy decoding with our cache: the prompt in one forward pass, then one
/// token at a time. Raw ids, not stopping at EOS (goldens do not either).
pub fn greedy_ids(loaded: &LoadedModel, prompt: &[u32], n: usize) -> Vec<u32> {
    let model = loaded.model.as_ref();
    let mut cache = model.new_cache(1);
    let mut input = tokens(prompt);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let logits = forward_cached(model, &mut cache, &input);
        let next = argmax(rows(&logits).last().expect("a position"));
        out.push(next);
        input = tokens(&[next]);
    }
    out
}

/// Largest elementwise difference.
pub fn max_abs_diff(a: &Array, b: &Array) -> f32 {
    let a = a.as_dtype(Dtype::Float32).expect("cast");
    let b = b.as_dtype(Dtype::Float32).expect("cast");
    a.subtract(&b)
        .expect("same shapes")
        .abs()
        .expect("abs")
        .max(None)
        .expect("max")
        .item_cast::<f32>()
}

/// A scheduler driven step by step on this thread, and its requests' events.
pub struct Driver {
    pub scheduler: Scheduler,
    requests: Vec<(u64, UnboundedReceiver<Event>, Completion, bool)>,
}

impl Driver {
    pub fn new(dir: &Path, config: SchedulerConfig) -> Self {
        Self::of(model::load(dir, &LOAD).unwrap(), config)
    }

    /// A driver for a model already loaded.
    pub fn of(loaded: LoadedModel, config: SchedulerConfig) -> Self {
        Self::of_scheduler(Scheduler::new(loaded, config))
    }

    /// A driver for a scheduler already built (e.g. given a draft model).
    pub fn of_scheduler(scheduler: Scheduler) -> Self {
        Self { scheduler, requests: Vec::new() }
    }

    /// Queues a request; returns its index for [`Self::completion`].
    pub fn submit(&mut self, request: Request) -> usize {
        let id = self.requests.len() as u64 + 1;
        let (tx, rx) = unbounded_channel();
        self.scheduler.submit(id, request, tx);
        self.requests.push((id, rx, Completion::default(), false));
        self.requests.len() - 1
    }

    pub fn step(&mut self) {
        self.scheduler.step().unwrap();
        self.drain();
    }

    pub fn drain(&mut self) {
        for (_, rx, c, done) in &mut self.requests {
            while let Ok(e) = rx.try_recv() {
                *done |= c.absorb(e);
            }
        }
    }

    pub fn run_to_end(&mut self) {
        let mut steps = 0;
        while self.scheduler.has_work() {
            self.step();
            steps += 1;
            assert!(steps < 10_000, "the scheduler never finished");
        }
        self.drain();
        assert!(self.requests.iter().all(|r| r.3), "every request got Finished");
    }

    /// Runs `requests` to their end, the first `first` from the start and
    /// the rest joining after `join_after` steps (mid-decode); returns
    /// their completions in order.
    pub fn run_joining(
        &mut self,
        requests: &[Request],
        first: usize,
        join_after: usize,
    ) -> Vec<Completion> {
        let mut rows: Vec<usize> =
            requests[..first].iter().map(|r| self.submit(r.clone())).collect();
        for _ in 0..join_after {
            self.step();
        }
        rows.extend(requests[first..].iter().map(|r| self.submit(r.clone())));
        self.run_to_end();
        rows.iter().map(|&r| self.completion(r).clone()).collect()
    }

    pub fn completion(&self, i: usize) -> &Completion {
        &self.requests[i].2
    }

    pub fn cancel(&mut self, i: usize) {
        self.scheduler.cancel(self.requests[i].0);
    }
}

/// A tiny seeded checkpoint of `family` in a fresh temporary folder.
pub fn family_checkpoint(family: TinyFamily, seed: u64) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_family(dir.path(), family, None, seed).unwrap();
    dir
}

/// Ordinary byte tokens, distinct per `salt` from the first token on.
pub fn salted_prompt(len: usize, salt: u32) -> Vec<u32> {
    (0..len as u32).map(|i| 3 + (salt * 31 + i * 7 + i * i) % 250).collect()
}

/// Greedy, never stopping at EOS: every row runs its full length.
pub fn greedy_no_eos() -> SamplingParams {
    SamplingParams {
        logit_bias: [(2, f32::NEG_INFINITY)].into_iter().collect(),
        ..SamplingParams::greedy()
    }
}

/// A raw-token request under [`greedy_no_eos`].
pub fn greedy_request(ids: &[u32], max_tokens: usize) -> Request {
    Request::new(Prompt::Tokens(ids.to_vec()))
        .with_max_tokens(max_tokens)
        .with_sampling(greedy_no_eos())
}

/// The single-stream path (`generate`) under [`greedy_no_eos`]: no
/// scheduler, no cache reused.
pub fn single_stream_text(dir: &Path, ids: &[u32], max_tokens: usize) -> String {
    let m = model::load(dir, &LOAD).unwrap();
    let mut text = String::new();
    let params = GenerateParams { max_tokens, sampling: greedy_no_eos() };
    generate(m.model.as_ref(), &m.tokenizer, ids, &params, |t| {
        text.push_str(t.text);
        true
    })
    .unwrap();
    text
}

/// Reads `stream` until `chars` characters of its answer are out, so it is
/// decoding in the running batch: a request submitted next joins mid-decode
/// (no sleeping and hoping). Returns what was read.
pub fn wait_until_decoding(stream: &mut RequestStream, chars: usize) -> Completion {
    let mut partial = Completion::default();
    while partial.content.chars().count() < chars {
        let event = stream.recv_blocking().expect("the stream ended before it decoded");
        assert!(!partial.absorb(event), "it finished before the next request could join");
    }
    partial
}

/// A reference's greedy ids up to its first end-of-turn token, which ends
/// our stream.
pub fn until_eos(mut want: Vec<u32>, eos: &[u32]) -> Vec<u32> {
    if let Some(end) = want.iter().position(|t| eos.contains(t)) {
        want.truncate(end);
    }
    want
}

/// A completion's generated ids (asked with `logprobs`), end-of-turn tokens
/// left out.
pub fn generated_ids(c: &Completion, eos: &[u32]) -> Vec<u32> {
    assert!(c.error.is_none(), "{:?}", c.error);
    c.logprobs.iter().map(|l| l.token.id).filter(|t| !eos.contains(t)).collect()
}

/// A vision family's golden cases answered as the reference answered them
/// (`expected(case, eos)`): each request alone (one row, no prefix or
/// vision cache), then all of them batched with an unrelated text request
/// decoding alongside. The folder's weights are used as stored.
pub fn greedy_alone_and_batched(
    dir: &Path,
    label: &str,
    requests: impl Fn() -> Vec<(String, Request)>,
    expected: impl Fn(&str, &[u32]) -> Vec<u32>,
) {
    use engine::handle::{EngineConfig, EngineHandle};
    use engine::tokenizer::{ChatMessage, TemplateOptions};
    let start = |scheduler| {
        let load = LoadOptions { format: WeightFormat::AsStored };
        EngineHandle::start(dir, EngineConfig { load, scheduler }).unwrap()
    };
    let alone = start(SchedulerConfig {
        max_running: 1,
        prefix_cache_bytes: 0,
        vision_cache_bytes: 0,
        ..Default::default()
    });
    let eos = alone.model_info().eos_token_ids.clone();
    for (case, request) in requests() {
        let got = alone.submit(request).collect_blocking();
        assert_eq!(generated_ids(&got, &eos), expected(&case, &eos), "{label} {case} alone");
    }
    alone.shutdown();

    let engine = start(SchedulerConfig::default());
    let mut other = Request::new(Prompt::Chat {
        messages: vec![ChatMessage::user("an unrelated request decoding alongside")],
        options: TemplateOptions::default(),
    })
    .with_max_tokens(20);
    other.logprobs = Some(0);
    let other = engine.submit(other);
    let streams: Vec<_> =
        requests().into_iter().map(|(case, r)| (case, engine.submit(r))).collect();
    for (case, stream) in streams {
        let got = stream.collect_blocking();
        assert_eq!(generated_ids(&got, &eos), expected(&case, &eos), "{label} {case} batched");
    }
    assert!(other.collect_blocking().error.is_none());
    engine.shutdown();
}

/// A checked-in file under `crates/engine/tests` (`goldens/…`, `fixtures/…`).
pub fn test_file(parts: &[&str]) -> PathBuf {
    let mut path = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    path.push("tests");
    path.extend(parts);
    path
}

/// A reference golden's JSON (`tests/goldens/<name>`).
pub fn golden_json(name: &str) -> Value {
    let path = test_file(&["goldens", name]);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// A reference golden's arrays (`tests/goldens/<name>`, safetensors).
pub fn golden_arrays(name: &str) -> HashMap<String, Array> {
    Array::load_safetensors(test_file(&["goldens", name])).unwrap()
}

/// An image of `tests/fixtures/images`.
pub fn fixture_image(name: &str) -> ImageInput {
    ImageInput::from_bytes(std::fs::read(test_file(&["fixtures", "images", name])).unwrap())
}

/// A golden's list of token ids.
pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// Each case `model` answered in a vision family's golden, as a request:
/// the case's images (`cases[case]`, fixture names) first, then the
/// golden's `text` (as mlx-vlm's message puts them), plain greedy for as
/// many tokens as the reference's, token ids back.
pub fn golden_requests(golden: &Value, model: &str) -> Vec<(String, Request)> {
    use engine::tokenizer::{ChatMessage, ContentPart, MessageContent, TemplateOptions};
    let text = golden["text"].as_str().unwrap();
    golden["models"][model]
        .as_object()
        .unwrap()
        .iter()
        .map(|(case, rec)| {
            let images: Vec<ImageInput> = golden["cases"][case]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| fixture_image(f.as_str().unwrap()))
                .collect();
            let mut parts: Vec<ContentPart> = images
                .iter()
                .map(|i| ContentPart::Image { image: Some(i.sha256.clone()) })
                .collect();
            parts.push(ContentPart::text(text));
            let message =
                ChatMessage { content: MessageContent::Parts(parts), ..ChatMessage::user("") };
            let prompt =
                Prompt::Chat { messages: vec![message], options: TemplateOptions::default() };
            let mut request =
                Request::new(prompt).with_max_tokens(rec["greedy_ids"].as_array().unwrap().len());
            request.images = images;
            request.logprobs = Some(0);
            (case.clone(), request)
        })
        .collect()
}

/// The greedy ids `model` gave for `case` in a golden, up to its first
/// end-of-turn token (see [`until_eos`]).
pub fn golden_greedy_ids(golden: &Value, model: &str, case: &str, eos: &[u32]) -> Vec<u32> {
    until_eos(ids(&golden["models"][model][case]["greedy_ids"]), eos)
}

/// Every case `model` answered in a vision family's golden, submitted at
/// once (batched) to an engine on `dir` with the default scheduler and the
/// weights held as `format`: each answer is the reference's greedy ids.
/// `label` names the run in a failure.
pub fn golden_batched(dir: &Path, format: WeightFormat, golden: &Value, model: &str, label: &str) {
    use engine::handle::{EngineConfig, EngineHandle};
    let config =
        EngineConfig { load: LoadOptions { format }, scheduler: SchedulerConfig::default() };
    let engine = EngineHandle::start(dir, config).unwrap();
    let eos = engine.model_info().eos_token_ids.clone();
    let streams: Vec<_> = golden_requests(golden, model)
        .into_iter()
        .map(|(case, r)| (case, engine.submit(r)))
        .collect();
    for (case, stream) in streams {
        let got = stream.collect_blocking();
        let want = golden_greedy_ids(golden, model, &case, &eos);
        assert_eq!(generated_ids(&got, &eos), want, "{label} {case}");
    }
    engine.shutdown();
}

/// Each case `model` answered in a vision family's golden, prepared as the
/// engine prepares a request (the folder `dir` loaded with its weights as
/// stored): its prompt ids are the reference's, and `check(case, record,
/// prepared)` checks the rest (the family's image layout and pixels).
pub fn golden_prompts(
    dir: &Path,
    golden: &Value,
    model: &str,
    mut check: impl FnMut(&str, &Value, PreparedRequest),
) {
    let loaded = model::load(dir, &LOAD).unwrap();
    let preparer = Preparer::new(&loaded, 8192);
    for (case, request) in golden_requests(golden, model) {
        let rec = &golden["models"][model][&case];
        let prepared = preparer.prepare(request, std::time::Instant::now()).unwrap();
        assert_eq!(prepared.prompt, ids(&rec["prompt_ids"]), "{model} {case}: prompt ids");
        check(&case, rec, prepared);
    }
}

/// The grid of each image of a prepared request, in order.
pub fn image_grids(prepared: &PreparedRequest) -> Vec<[i32; 3]> {
    prepared.images.iter().flat_map(|i| i.images.iter().map(|p| p.patches.grid)).collect()
}

/// A golden's list of number pairs (sizes, rows and columns); none when
/// the record has none.
pub fn pairs(v: &Value) -> Vec<[i32; 2]> {
    let pair = |p: &Value| [p[0].as_i64().unwrap() as i32, p[1].as_i64().unwrap() as i32];
    v.as_array().map(|a| a.iter().map(pair).collect()).unwrap_or_default()
}

/// A copy of the checkpoint folder `hf` whose tensors `rename` renames,
/// reshapes or leaves out (`None`), as another exporter saves them; the
/// other files as they are.
pub fn rewritten_folder(
    hf: &Path,
    rename: impl Fn(String, Array) -> Option<(String, Array)>,
) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(hf).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap() != "model.safetensors" {
            std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
        }
    }
    let tensors = Array::load_safetensors(hf.join("model.safetensors")).unwrap();
    let renamed: HashMap<String, Array> =
        tensors.into_iter().filter_map(|(name, t)| rename(name, t)).collect();
    Array::save_safetensors(renamed.iter(), None, dir.path().join("model.safetensors")).unwrap();
    dir
}

/// Whether the folder's `model.safetensors` holds a tensor `name`.
pub fn holds_tensor(dir: &Path, name: &str) -> bool {
    Array::load_safetensors(dir.join("model.safetensors")).unwrap().contains_key(name)
}

/// [`greedy_alone_and_batched`] on the cases `model` answered in a vision
/// family's golden.
pub fn golden_greedy_alone_and_batched(dir: &Path, golden: &Value, model: &str) {
    greedy_alone_and_batched(
        dir,
        model,
        || golden_requests(golden, model),
        |case, eos| golden_greedy_ids(golden, model, case, eos),
    );
}
