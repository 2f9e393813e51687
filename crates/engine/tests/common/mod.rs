//! Helpers the engine's integration tests share: running a model by hand
//! (a fresh forward pass, a cached step, greedy decoding) and comparing
//! logits. Each test binary uses a different subset.
#![allow(dead_code)]

use std::path::Path;

use engine::batch::{Event, Prompt, Request, Scheduler, SchedulerConfig};
use engine::cache::BatchCache;
use engine::generate::{generate, GenerateParams};
use engine::handle::{Completion, RequestStream};
use engine::model::{self, LanguageModel, LoadOptions, LoadedModel, Positions, WeightFormat};
use engine::sample::SamplingParams;
use engine::testing::{write_tiny_family, TinyFamily};
use mlx_rs::{Array, Dtype};
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
