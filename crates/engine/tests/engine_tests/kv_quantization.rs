//! KV-cache quantization: storage size, join/leave with quantized rows, the
//! float last layer, honest reporting when it cannot apply, and output quality
//! on the real default model.
use std::path::Path;

use engine::batch::{Prompt, Request, SchedulerConfig};
use engine::cache::{BatchCache, CacheLayout, KvQuantization};
use engine::handle::{EngineConfig, EngineHandle};
use engine::model::{LoadOptions, WeightFormat};
use engine::testing::{write_tiny_llama, TinyLlama};
use mlx_rs::{random, Array};

/// How far below our top logit mlx-lm's token may be (see the golden test).
/// Measured against a golden recorded on another CPU: near-ties of 1.6e-4
/// (4-bit from 0) and 2.0e-3, 9.6e-3 (8-bit from 40); 0 against one recorded
/// on the same machine. Driving the cache wrongly (quantizing the prompt's
/// own pass) put mlx-lm's token 0.62 below ours.
const NEAR_TIE: f32 = 0.05;

fn q(bits: i32, group_size: i32) -> KvQuantization {
    KvQuantization { bits, group_size, start: 0 }
}

use crate::common;

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
    let engine =
        EngineHandle::start(dir.path(), EngineConfig { load: LoadOptions::default(), scheduler })
            .unwrap();
    let status = engine.stats().unwrap().kv_quantization;
    assert!(status.starts_with("not applied") && status.contains("16"), "{status}");
    // It still serves.
    let c = engine
        .submit(Request::new(Prompt::Tokens(vec![5, 6, 7])).with_max_tokens(3))
        .collect_blocking();
    assert!(c.error.is_none());

    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlama { heads: 2, kv_heads: 1, ..TinyLlama::default() })
        .unwrap(); // head_dim 32
    let scheduler = SchedulerConfig { kv_quantization: Some(q(4, 32)), ..Default::default() };
    let engine =
        EngineHandle::start(dir.path(), EngineConfig { load: LoadOptions::default(), scheduler })
            .unwrap();
    let mut s =
        engine.submit(Request::new(Prompt::Tokens(vec![5, 6, 7, 8, 9])).with_max_tokens(50));
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
        let engine = EngineHandle::start(
            dir.path(),
            EngineConfig { load: LoadOptions::default(), scheduler },
        )
        .unwrap();
        // Two prompts of different lengths decode together, so the shorter is left-padded.
        let short = engine.submit(Request::new(Prompt::Tokens(vec![5, 6, 7])).with_max_tokens(12));
        let long =
            engine.submit(Request::new(Prompt::Tokens((5..45).collect())).with_max_tokens(12));
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
                    let packed = head_dim * kq.bits as f64 / 8.0
                        + head_dim / kq.group_size as f64 * 2.0 * 4.0;
                    2.0 * (packed + float_vector) // a quantized layer and the float last one
                }
            };
            let want = per_column * columns;
            let got = st.kv_cache_bytes as f64;
            assert!(
                (got - want).abs() / want < 0.01,
                "{quantization:?}: {got} bytes, expected {want}"
            );
        }
        engine.shutdown();
    }
}

/// The reference: Python mlx-lm's `QuantizedKVCache` and quantized attention
/// on the default model (the float32 folder `vlm convert` writes), driven as
/// our engine drives its cache (`scripts/goldens/kv_quant.py`): the prompt in
/// one pass, then one token at a time, with the same bits, group size and
/// start. mlx-lm's greedy tokens are fed to our model with the same cache
/// (teacher forcing), and at every step its token must be our top token or
/// within NEAR_TIE of it (a float cache: at every step). Comparing
/// free-running greedy answers instead broke
/// across machines: MLX's CPU kernels round differently with the CPU's vector
/// width, and mlx-lm itself picked other tokens on an AVX-512 EPYC than where
/// the golden was recorded (4-bit from 0: the third prompt's 6th token; 8-bit
/// from 40: its 9th), near-ties that then send the rest of the answer
/// elsewhere.
#[test]
fn quantized_kv_follows_mlx_lm_s_greedy_tokens_on_the_default_model() {
    let path = hub::default_model::locate().expect("run scripts/setup.sh");
    let golden: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens/kv_quant_mlx_lm.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
    };
    let prompts: Vec<Vec<u32>> = golden["prompts"].as_array().unwrap().iter().map(ids).collect();
    let loaded =
        engine::model::load(&path, &LoadOptions { format: WeightFormat::Float32 }).unwrap();
    let model = loaded.model.as_ref();
    let layout = model.cache_layout();
    // Every setting's tokens, teacher-forced; returns the steps where ours differ.
    let follow = |kv: Option<KvQuantization>,
                  greedy: &serde_json::Value|
     -> Vec<(usize, usize, f32)> {
        let mut near_ties = Vec::new();
        for (p, (prompt, theirs)) in prompts.iter().zip(greedy.as_array().unwrap()).enumerate() {
            // As the engine does: the prompt prefilled in a float cache of
            // its own, which then joins the (quantizing) decode batch.
            let mut prefill = BatchCache::new(&layout, 1, None);
            let mut logits =
                common::rows(&common::forward_cached(model, &mut prefill, &common::tokens(prompt)));
            let mut cache = BatchCache::new(&layout, 0, kv);
            cache.extend(prefill).unwrap();
            let mut input = None;
            for (step, theirs) in ids(theirs).into_iter().enumerate() {
                if let Some(input) = &input {
                    logits = common::rows(&common::forward_cached(model, &mut cache, input));
                }
                let last = logits.last().unwrap();
                let ours = common::argmax(last);
                let gap = last[ours as usize] - last[theirs as usize];
                assert!(gap <= NEAR_TIE, "{kv:?}, prompt {p}, step {step}: mlx-lm's token {theirs} is {gap:.3} below ours {ours}");
                if ours != theirs {
                    near_ties.push((p, step, gap));
                }
                if loaded.tokenizer.is_eos(theirs) {
                    break;
                }
                input = Some(common::tokens(&[theirs]));
            }
        }
        near_ties
    };
    let float = follow(None, &golden["float"]);
    println!("float cache: near-ties (prompt, step, gap) {float:?}");
    assert!(float.is_empty(), "a float cache is the same computation as mlx-lm's: {float:?}");
    for s in golden["settings"].as_array().unwrap() {
        let q = KvQuantization {
            bits: s["bits"].as_i64().unwrap() as i32,
            group_size: s["group_size"].as_i64().unwrap() as i32,
            start: s["start"].as_u64().unwrap() as usize,
        };
        let near_ties = follow(Some(q), &s["greedy"]);
        println!("{q:?}: near-ties (prompt, step, gap) {near_ties:?}");
    }
}
