//! KV-cache quantization: storage size, join/leave with quantized rows, the
//! float last layer, honest reporting when it cannot apply, and output quality
//! on the real default model.
use engine::batch::{Prompt, Request, SchedulerConfig};
use engine::cache::{BatchCache, CacheLayout, KvQuantization};
use engine::handle::{EngineConfig, EngineHandle};
use engine::model::LoadOptions;
use engine::testing::{write_tiny_llama, TinyLlama};
use engine::tokenizer::{ChatMessage, TemplateOptions};
use mlx_rs::{random, Array};

fn q(bits: i32, group_size: i32) -> KvQuantization {
    KvQuantization { bits, group_size, start: 0 }
}

mod common;

use common::max_abs_diff;

/// Writes one step of `keys`/`values` per layer into `cache`.
fn write_step(cache: &mut BatchCache, kv: &[(Array, Array)]) {
    cache.begin_step(kv[0].0.dim(2)).unwrap();
    for (l, (k, v)) in kv.iter().enumerate() {
        cache.update(l, k, v).unwrap();
    }
    cache.finish_step().unwrap();
}

/// A one-row cache of `layers` full-attention layers holding `len` random tokens.
fn row(layers: usize, len: i32, seed: u64) -> (BatchCache, Vec<(Array, Array)>) {
    random::seed(seed).unwrap();
    let kv: Vec<(Array, Array)> = (0..layers)
        .map(|_| {
            let k = random::normal::<f32>(&[1, 2, len, 64], None, None, None).unwrap();
            let v = random::normal::<f32>(&[1, 2, len, 64], None, None, None).unwrap();
            (k, v)
        })
        .collect();
    let mut cache = BatchCache::new(&CacheLayout::full(layers), 1, None);
    write_step(&mut cache, &kv);
    (cache, kv)
}

#[test]
fn quantized_storage_has_its_theoretical_size_and_the_last_layer_stays_float() {
    for (bits, group) in [(8, 32), (8, 64), (4, 32), (4, 64)] {
        let layers = 3;
        let mut cache = BatchCache::new(&CacheLayout::full(layers), 0, Some(q(bits, group)));
        let (prefilled, _) = row(layers, 100, 1);
        cache.extend(prefilled).unwrap();
        // One decode step makes the buffers grow to their step size.
        let k = random::normal::<f32>(&[1, 2, 1, 64], None, None, None).unwrap();
        let v = random::normal::<f32>(&[1, 2, 1, 64], None, None, None).unwrap();
        write_step(&mut cache, &vec![(k, v); layers]);
        assert_eq!(cache.quantized_layers(), layers - 1, "the last layer must stay float");
        let cols = 256.0; // 101 tokens in buffers that grow 256 columns at a time
        let per_vector_q = 64.0 * bits as f64 / 8.0 + (64.0 / group as f64) * 2.0 * 4.0; // values + f32 scales and biases
        let per_vector_f = 64.0 * 4.0;
        let theory = 2.0 * 2.0 * cols * ((layers - 1) as f64 * per_vector_q + per_vector_f); // K and V, 2 heads
        let actual = cache.nbytes() as f64;
        let off = (actual - theory).abs() / theory;
        println!("{bits}-bit group {group}: {actual} bytes, theory {theory}");
        assert!(off < 0.01, "{bits}-bit g{group}: {actual} bytes vs theoretical {theory}");
    }
}

#[test]
fn rows_keep_their_contents_when_joining_and_leaving_a_quantized_batch() {
    let layers = 2;
    let mut cache = BatchCache::new(&CacheLayout::full(layers), 0, Some(q(8, 32)));
    let (a, a_kv) = row(layers, 40, 2);
    let (b, b_kv) = row(layers, 7, 3);
    let (c, c_kv) = row(layers, 23, 4);
    cache.extend(a).unwrap();
    cache.extend(b).unwrap();
    cache.extend(c).unwrap();
    assert_eq!(cache.offsets(), [40, 7, 23]);
    // 8-bit affine error is at most one group scale: |x| < ~5 over a range of
    // ~10 gives a scale of ~0.04.
    let tolerance = 0.05;
    let check = |cache: &BatchCache, row: usize, kv: &[(Array, Array)]| {
        for (l, (wk, wv)) in kv.iter().enumerate() {
            let (gk, gv) = cache.row_keys_values(row, l).unwrap().expect("the layer ran");
            let (gk, gv) = (&gk, &gv);
            assert_eq!(gk.shape(), wk.shape());
            let quantized = l + 1 < kv.len();
            let tol = if quantized { tolerance } else { 0.0 };
            assert!(max_abs_diff(gk, wk) <= tol, "row {row} layer {l} keys");
            assert!(max_abs_diff(gv, wv) <= tol, "row {row} layer {l} values");
        }
    };
    check(&cache, 0, &a_kv);
    check(&cache, 1, &b_kv);
    check(&cache, 2, &c_kv);
    cache.filter(&[2, 1]).unwrap();
    assert_eq!(cache.offsets(), [23, 7]);
    check(&cache, 0, &c_kv);
    check(&cache, 1, &b_kv);
}

#[test]
fn quantization_that_cannot_apply_is_reported_not_silent() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlama::default()).unwrap(); // head_dim 16
    let scheduler = SchedulerConfig { kv_quantization: Some(q(8, 32)), ..Default::default() };
    let engine = EngineHandle::start(dir.path(), EngineConfig { load: LoadOptions::default(), scheduler }).unwrap();
    let status = engine.stats().unwrap().kv_quantization;
    assert!(status.starts_with("not applied") && status.contains("16"), "{status}");
    // It still serves.
    let c = engine.submit(Request::new(Prompt::Tokens(vec![5, 6, 7])).with_max_tokens(3)).collect_blocking();
    assert!(c.error.is_none());

    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlama { heads: 2, kv_heads: 1, ..TinyLlama::default() }).unwrap(); // head_dim 32
    let scheduler = SchedulerConfig { kv_quantization: Some(q(4, 32)), ..Default::default() };
    let engine = EngineHandle::start(dir.path(), EngineConfig { load: LoadOptions::default(), scheduler }).unwrap();
    let mut s = engine.submit(Request::new(Prompt::Tokens(vec![5, 6, 7, 8, 9])).with_max_tokens(50));
    let _ = s.recv_blocking();
    let stats = engine.stats().unwrap();
    assert!(stats.kv_quantization.starts_with("4-bit"), "{}", stats.kv_quantization);
    assert!(s.collect_blocking().error.is_none());
}

/// Each finished request reports the KV bytes its own tokens took, float or
/// quantized, without the padding a batch adds for its neighbours.
#[test]
fn each_request_reports_the_kv_bytes_of_its_own_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = TinyLlama { heads: 2, kv_heads: 1, ..TinyLlama::default() }; // head_dim 32, 2 layers
    write_tiny_llama(dir.path(), &tiny).unwrap();
    let head_dim = 32.0;
    for quantization in [None, Some(q(8, 32)), Some(q(4, 32))] {
        let scheduler = SchedulerConfig { kv_quantization: quantization, ..Default::default() };
        let engine = EngineHandle::start(dir.path(), EngineConfig { load: LoadOptions::default(), scheduler }).unwrap();
        // Two prompts of different lengths decode together, so the shorter is left-padded.
        let short = engine.submit(Request::new(Prompt::Tokens(vec![5, 6, 7])).with_max_tokens(12));
        let long = engine.submit(Request::new(Prompt::Tokens((5..45).collect())).with_max_tokens(12));
        for c in [short.collect_blocking(), long.collect_blocking()] {
            assert!(c.error.is_none());
            let st = &c.stats;
            // Decoding runs one step ahead of the read-back, so when a row
            // finishes its last token has already been fed: the cache holds
            // every prompt and generated token.
            let columns = (st.prompt_tokens + st.generated_tokens) as f64;
            let float_vector = head_dim * 4.0;
            let per_column = match quantization {
                None => 2.0 * 2.0 * float_vector, // K and V, 2 float layers
                Some(kq) => {
                    let packed = head_dim * kq.bits as f64 / 8.0 + head_dim / kq.group_size as f64 * 2.0 * 4.0;
                    2.0 * (packed + float_vector) // a quantized layer and the float last one
                }
            };
            let want = per_column * columns;
            let got = st.kv_cache_bytes as f64;
            assert!((got - want).abs() / want < 0.01, "{quantization:?}: {got} bytes, expected {want}");
        }
        engine.shutdown();
    }
}

/// Greedy answers with an 8-bit and a 4-bit KV cache against the float cache
/// on the real default model.
#[test]
fn quantized_kv_on_the_default_model_agrees_with_float() {
    let path = hub::default_model::locate().expect("run scripts/setup.sh");
    let questions = [
        "What is the capital of France?",
        "Name three colors.",
        "Write one sentence about the sea.",
        "Why is the sky blue?",
    ];
    let tok = engine::model::load(&path, &LoadOptions::default()).unwrap().tokenizer;
    let answers = |kv: Option<KvQuantization>| -> Vec<String> {
        let scheduler = SchedulerConfig { kv_quantization: kv, prefix_cache_bytes: 0, ..Default::default() };
        let engine = EngineHandle::start(&path, EngineConfig { load: LoadOptions::default(), scheduler }).unwrap();
        let streams: Vec<_> = questions
            .iter()
            .map(|q| {
                let prompt = Prompt::Chat { messages: vec![ChatMessage::user(*q)], options: TemplateOptions::default() };
                engine.submit(Request::new(prompt).with_max_tokens(32))
            })
            .collect();
        streams
            .into_iter()
            .map(|s| {
                let c = s.collect_blocking();
                assert!(c.error.is_none(), "{:?}", c.error);
                c.content
            })
            .collect()
    };
    let agreement = |a: &[String], b: &[String], label: &str| -> f64 {
        let (mut same, mut total) = (0usize, 0usize);
        for (x, y) in a.iter().zip(b) {
            let (x, y) = (tok.encode(x, false).unwrap(), tok.encode(y, false).unwrap());
            // Greedy tokens agree up to the first divergence; count that prefix.
            let n = x.iter().zip(&y).take_while(|(p, q)| p == q).count();
            println!("  {label}: agrees for {n} of {} tokens", x.len());
            same += n;
            total += x.len();
        }
        let rate = same as f64 / total as f64;
        println!("{label}: {same} of {total} greedy tokens agree with the float cache ({:.0}%)", rate * 100.0);
        rate
    };
    let float = answers(None);
    // Control: a setting that never reaches its start length changes nothing.
    let never = answers(Some(KvQuantization { start: 1 << 20, ..q(8, 32) }));
    assert_eq!(agreement(&float, &never, "8-bit from 1M tokens (never)"), 1.0);
    // Stated figures (SmolLM2-135M, 4 prompts, 32 tokens, measured 2026-11-23):
    // 8-bit g32 ~47% of tokens before the first divergence, 4-bit lower. This
    // small model's keys have outlier channels that affine groups spread over.
    // Since the four prompts share one prefill pass, 8-bit g32 measures 30%
    // (33% with a pass per prompt): the float KV differs in its last bits
    // (batched matmuls round differently), which moves values across 8-bit
    // rounding steps — noise in where the first divergence falls, not a
    // quality change (the float answers are unchanged: prefill_batching.rs).
    for (bits, group, min_rate) in [(8, 32, 0.25), (8, 64, 0.2), (4, 32, 0.0), (4, 64, 0.0)] {
        let quant = answers(Some(q(bits, group)));
        let rate = agreement(&float, &quant, &format!("{bits}-bit KV, group {group}"));
        assert!(rate >= min_rate, "{bits}-bit agreement {rate:.2} below {min_rate}");
        println!("  first answer: {:?}", quant[0]);
        // Coherent: still answers the first question right.
        assert!(quant[0].contains("Paris"), "{bits}-bit g{group}: {:?}", quant[0]);
    }
}
