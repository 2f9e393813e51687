//! KV-cache quantization: storage size, join/leave with quantized rows, the
//! float last layer, honest reporting when it cannot apply, and output quality
//! on the real default model.
use std::path::Path;

use engine::batch::{Prompt, Request, SchedulerConfig};
use engine::cache::{BatchCache, CacheLayout, KvQuantization};
use engine::handle::{EngineConfig, EngineHandle};
use engine::model::{LoadOptions, WeightFormat};
use fixtures::{write_tiny_llama, TinyLlama};
use mlx_rs::{random, Array};

/// How closely our logits must follow mlx-lm's on its top tokens (see the
/// golden test). With the same MLX on the same CPU and BLAS threads ours are
/// bit-identical to mlx-lm's in every setting. Across roundings they are not,
/// and a quantized cache amplifies them: a last-bit difference moves a value
/// across a quantization step. Measured with mlx-lm itself against the golden
/// (`OPENBLAS_NUM_THREADS=2` instead of 1, on the machine that recorded it;
/// ours under the same change: means 0.025, 0.011, 0.13, margins up to 0.29):
/// float logits within 1e-4; 8-bit g64 within 0.22 (mean 0.031), 8-bit g32
/// from 40 within 0.16 (mean 0.016), 4-bit g32 within 1.1 (mean 0.15), and
/// mlx-lm's own top token changed where its margin over the runner-up was up
/// to 0.0088 (8-bit) and 0.29 (4-bit). A wrong group size (32 and 64 swapped)
/// gives means of 0.068 and 0.061 (8-bit) and 1.2 (4-bit), and changes the top
/// token at 4-bit margins up to 1.09; 4 and 8 bits swapped, means of 0.6-1.2.
struct Tolerance {
    /// The largest |ours − mlx-lm's| at any step (not bounded for a
    /// quantized cache: one value across a step moves a logit by up to 1.1).
    max_logit_diff: f32,
    /// The mean |ours − mlx-lm's| over all steps.
    mean_logit_diff: f32,
    /// Where our top token is another one, mlx-lm's own margin of its token
    /// over ours must be at most this.
    reference_near_tie: f32,
}

fn tolerance(kv: Option<KvQuantization>) -> Tolerance {
    match kv.map(|q| q.bits) {
        None => Tolerance { max_logit_diff: 1e-3, mean_logit_diff: 1e-3, reference_near_tie: 0.0 },
        Some(8) => Tolerance {
            max_logit_diff: f32::INFINITY,
            mean_logit_diff: 0.05,
            reference_near_tie: 0.05,
        },
        Some(_) => Tolerance {
            max_logit_diff: f32::INFINITY,
            mean_logit_diff: 0.5,
            reference_near_tie: 0.5,
        },
    }
}

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

/// mlx-lm's highest logits at one step, `[id, logit]`, highest first.
fn reference_top(step: &serde_json::Value) -> Vec<(u32, f32)> {
    let pair =
        |v: &serde_json::Value| (v[0].as_u64().unwrap() as u32, v[1].as_f64().unwrap() as f32);
    step.as_array().unwrap().iter().map(pair).collect()
}

/// What teacher-forcing mlx-lm's tokens through our model found for one setting.
#[derive(Debug, Default)]
struct Followed {
    /// The largest |our logit − mlx-lm's| over mlx-lm's top logits, every step.
    max_logit_diff: f32,
    /// Their mean.
    mean_logit_diff: f32,
    /// (prompt, step, mlx-lm's own margin of its token over ours) where our
    /// top token is another one.
    other_top: Vec<(usize, usize, f32)>,
    /// (prompt, step) where our top token is not among mlx-lm's top logits.
    outside_reference_top: Vec<(usize, usize)>,
}

/// The reference: Python mlx-lm's `QuantizedKVCache` and quantized attention
/// on the default model (the float32 folder `vlm convert` writes), driven as
/// our engine drives its cache (`scripts/goldens/kv_quant.py`, recorded by
/// `scripts/make-kv-quant-golden.sh`): the prompt in one pass, then one token
/// at a time, with the same bits, group size and start. The golden holds
/// mlx-lm's greedy tokens and, at every step, its own four highest logits.
/// mlx-lm's tokens are fed to our model with the same cache (teacher forcing);
/// at every step our logits for mlx-lm's top tokens must be within
/// `tolerance` of its own, and our top token may be another one only
/// where mlx-lm itself was at a near-tie (its token at most
/// `reference_near_tie` above ours, in its own logits).
///
/// Why not "our top token, or mlx-lm's within 0.05 of ours", as before: MLX's
/// CPU kernels round differently with the CPU's vector width and BLAS
/// threads, and mlx-lm's own greedy tokens move with them. Re-recorded on an
/// AVX-512 EPYC (OpenBLAS, one thread), the float and 8-bit g64 tokens equal
/// those recorded on another CPU, but 4-bit g32 differs from prompt 0 step 19,
/// prompt 2 step 5 and prompt 3 step 8, and 8-bit g32 from 40 from prompt 2
/// step 8. At prompt 3 step 8 the old golden's 7815 was 0.055 below our 7564
/// here, and as far below mlx-lm's own 7564 on this machine (its logits are
/// ours, bit for bit; with two OpenBLAS threads it prefers 7564 by 0.0022):
/// a near-tie in the reference, which a gap measured on our side alone cannot
/// tell from a wrong cache.
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
    // One setting's tokens, teacher-forced, compared with mlx-lm's top logits.
    let follow = |kv: Option<KvQuantization>,
                  greedy: &serde_json::Value,
                  top: &serde_json::Value|
     -> Followed {
        let mut found = Followed::default();
        let mut compared = 0;
        let per_prompt = greedy.as_array().unwrap().iter().zip(top.as_array().unwrap());
        for (p, (prompt, (theirs, top))) in prompts.iter().zip(per_prompt).enumerate() {
            // As the engine does: the prompt prefilled in a float cache of
            // its own, which then joins the (quantizing) decode batch.
            let mut prefill = BatchCache::new(&layout, 1, None);
            let mut logits =
                common::rows(&common::forward_cached(model, &mut prefill, &common::tokens(prompt)));
            let mut cache = BatchCache::new(&layout, 0, kv);
            cache.extend(prefill).unwrap();
            let mut input = None;
            for (step, (theirs, top)) in
                ids(theirs).into_iter().zip(top.as_array().unwrap()).enumerate()
            {
                if let Some(input) = &input {
                    logits = common::rows(&common::forward_cached(model, &mut cache, input));
                }
                let last = logits.last().unwrap();
                let reference = reference_top(top);
                assert_eq!(reference[0].0, theirs, "the golden's top logit is its greedy token");
                for &(id, logit) in &reference {
                    let diff = (last[id as usize] - logit).abs();
                    found.max_logit_diff = found.max_logit_diff.max(diff);
                    found.mean_logit_diff += diff;
                    compared += 1;
                }
                let ours = common::argmax(last);
                if ours != theirs {
                    match reference.iter().find(|(id, _)| *id == ours) {
                        Some(&(_, logit)) => {
                            found.other_top.push((p, step, reference[0].1 - logit))
                        }
                        None => found.outside_reference_top.push((p, step)),
                    }
                }
                if loaded.tokenizer.is_eos(theirs) {
                    break;
                }
                input = Some(common::tokens(&[theirs]));
            }
        }
        found.mean_logit_diff /= compared as f32;
        found
    };
    let check = |kv: Option<KvQuantization>, found: &Followed| {
        println!("{kv:?}: {found:?}");
        let tolerance = tolerance(kv);
        assert!(
            found.max_logit_diff <= tolerance.max_logit_diff,
            "{kv:?}: our logits are up to {} from mlx-lm's (tolerance {})",
            found.max_logit_diff,
            tolerance.max_logit_diff
        );
        assert!(
            found.mean_logit_diff <= tolerance.mean_logit_diff,
            "{kv:?}: our logits are {} from mlx-lm's on average (tolerance {})",
            found.mean_logit_diff,
            tolerance.mean_logit_diff
        );
        assert!(found.outside_reference_top.is_empty(), "{kv:?}: {found:?}");
        for &(p, step, margin) in &found.other_top {
            assert!(
                margin <= tolerance.reference_near_tie,
                "{kv:?}, prompt {p}, step {step}: our top token is another than mlx-lm's, which \
                 prefers its own by {margin:.4} (not a near-tie)"
            );
        }
    };
    check(None, &follow(None, &golden["float"], &golden["float_top"]));
    for s in golden["settings"].as_array().unwrap() {
        let q = KvQuantization {
            bits: s["bits"].as_i64().unwrap() as i32,
            group_size: s["group_size"].as_i64().unwrap() as i32,
            start: s["start"].as_u64().unwrap() as usize,
        };
        check(Some(q), &follow(Some(q), &s["greedy"], &s["top"]));
    }
}
