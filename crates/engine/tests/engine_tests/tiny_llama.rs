//! A tiny seeded llama in the real on-disk formats (float and 4-bit): it
//! loads through the real code, generates deterministically, its KV cache and
//! chunked prefill agree with a plain forward pass, and broken checkpoints
//! fail with errors that name the problem.
use std::collections::HashMap;
use std::path::Path;

use crate::common;

use common::{forward_cached, forward_fresh, max_abs_diff, tokens};
use engine::generate::{generate, prefill, GenerateParams};
use engine::model::{self, LoadOptions, LoadedModel, WeightFormat};
use engine::weights::QuantSpec;
use fixtures::{write_tiny_llama, TinyLlama};
use mlx_rs::{ops::indexing::IndexOp, Array};

fn q4() -> TinyLlama {
    TinyLlama { quantize: Some(QuantSpec { group_size: 32, bits: 4 }), ..TinyLlama::default() }
}

fn load(dir: &Path, format: WeightFormat) -> engine::Result<LoadedModel> {
    model::load(dir, &LoadOptions { format })
}

fn greedy_ids(m: &LoadedModel, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut out = Vec::new();
    let params = GenerateParams { max_tokens: n, ..Default::default() };
    generate(m.model.as_ref(), &m.tokenizer, prompt, &params, |t| {
        out.extend(t.id);
        true
    })
    .unwrap();
    out
}

/// A prompt of ordinary (non-special) ids.
fn prompt(n: usize) -> Vec<u32> {
    (0..n).map(|i| 3 + (i as u32 * 37) % 250).collect()
}

#[test]
fn float_and_quantized_models_load_and_generate_deterministically() {
    let dir = tempfile::tempdir().unwrap();
    for (name, spec) in [("float", TinyLlama::default()), ("q4", q4())] {
        let path = dir.path().join(name);
        let vocab = write_tiny_llama(&path, &spec).unwrap();
        for format in [WeightFormat::AsStored, WeightFormat::Float32] {
            let m = load(&path, format).unwrap();
            assert_eq!(m.model.shape().vocab_size, vocab);
            assert_eq!(m.model.shape().num_layers, 2);
            assert_eq!(m.info.stored_quantization.is_some(), spec.quantize.is_some(), "{name}");
            let a = greedy_ids(&m, &prompt(10), 12);
            let b = greedy_ids(&m, &prompt(10), 12);
            assert!(!a.is_empty());
            assert_eq!(a, b, "{name} {format:?}: greedy decoding is not deterministic");
        }
    }
}

#[test]
fn quantized_weights_dequantized_at_load_give_the_same_logits() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &q4()).unwrap();
    let stored = load(dir.path(), WeightFormat::AsStored).unwrap();
    let float = load(dir.path(), WeightFormat::Float32).unwrap();
    let ids = tokens(&prompt(9));
    let a = forward_fresh(stored.model.as_ref(), &ids);
    let b = forward_fresh(float.model.as_ref(), &ids);
    // Same quantized values either way; MLX's quantized kernel keeps some
    // float16 rounding of the (float16) scales and biases, the float32 path
    // none, and the summation order differs. Measured 1.1e-3 (see also
    // parity_mlx_lm.rs); a wrong layout would move logits by 1e-2 and more.
    let d = max_abs_diff(&a, &b);
    assert!(d < 5e-3, "quantized matmul vs dequantized weights differ by {d}");
}

#[test]
fn incremental_decoding_matches_a_full_forward_pass() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlama::default()).unwrap();
    let m = load(dir.path(), WeightFormat::AsStored).unwrap();
    let seq = prompt(20);
    let model = m.model.as_ref();
    let full = forward_fresh(model, &tokens(&seq));
    // Prompt of 12, then one token at a time through the cache.
    let mut cache = model.new_cache(1);
    let mut rows = vec![forward_cached(model, &mut cache, &tokens(&seq[..12]))];
    for &t in &seq[12..] {
        rows.push(forward_cached(model, &mut cache, &tokens(&[t])));
    }
    let stepped = mlx_rs::ops::concatenate(&rows, 1).unwrap();
    let d = max_abs_diff(&full, &stepped);
    assert!(d < 1e-4, "cached decoding drifts from the full pass by {d}");
    assert_eq!(cache.offsets(), [20]);
}

#[test]
fn chunked_prefill_of_a_long_prompt_matches_one_shot_prefill() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlama::default()).unwrap();
    let m = load(dir.path(), WeightFormat::AsStored).unwrap();
    let seq = prompt(1100); // three chunks of at most 512
    let one_shot = forward_fresh(m.model.as_ref(), &tokens(&seq));
    let last = one_shot.index((.., -1, ..));
    let mut cache = m.model.new_cache(1);
    let chunked = prefill(m.model.as_ref(), &mut cache, &seq).unwrap();
    let d = max_abs_diff(&last, &chunked);
    assert!(d < 1e-4, "chunked prefill differs from one-shot by {d}");
    assert_eq!(cache.offsets(), [1100]);
}

#[test]
fn a_prompt_longer_than_the_context_is_a_clean_error() {
    let dir = tempfile::tempdir().unwrap();
    let spec = TinyLlama { max_context: 64, ..TinyLlama::default() };
    write_tiny_llama(dir.path(), &spec).unwrap();
    let m = load(dir.path(), WeightFormat::AsStored).unwrap();
    let err =
        generate(m.model.as_ref(), &m.tokenizer, &prompt(80), &GenerateParams::default(), |_| true)
            .unwrap_err();
    assert_eq!(err.code(), "CONTEXT_LENGTH_EXCEEDED");
    let msg = err.to_string();
    assert!(msg.contains("80") && msg.contains("64"), "{msg}");
    // A request that fits still runs afterwards.
    assert!(!greedy_ids(&m, &prompt(10), 4).is_empty());
}

#[test]
fn max_tokens_zero_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlama::default()).unwrap();
    let m = load(dir.path(), WeightFormat::AsStored).unwrap();
    let params = GenerateParams { max_tokens: 0, ..Default::default() };
    let err = generate(m.model.as_ref(), &m.tokenizer, &prompt(5), &params, |_| true).unwrap_err();
    assert_eq!(err.code(), "INVALID_REQUEST");
}

/// Rewrites model.safetensors through `edit`.
fn edit_weights(dir: &Path, edit: impl FnOnce(&mut HashMap<String, Array>)) {
    let file = dir.join("model.safetensors");
    let mut tensors = Array::load_safetensors(&file).unwrap();
    // Loading is lazy: read everything before the file is rewritten.
    for t in tensors.values() {
        t.eval().unwrap();
    }
    edit(&mut tensors);
    Array::save_safetensors(tensors.iter(), None, &file).unwrap();
}

#[test]
fn a_missing_tensor_is_named() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlama::default()).unwrap();
    edit_weights(dir.path(), |t| {
        t.remove("model.layers.1.mlp.up_proj.weight");
    });
    let err = load(dir.path(), WeightFormat::AsStored).err().expect("must fail");
    assert_eq!(err.code(), "MISSING_TENSOR");
    assert!(err.to_string().contains("model.layers.1.mlp.up_proj.weight"), "{err}");
}

#[test]
fn a_wrong_shape_is_named_with_both_shapes() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlama::default()).unwrap();
    edit_weights(dir.path(), |t| {
        t.insert(
            "model.layers.0.self_attn.k_proj.weight".into(),
            mlx_rs::ops::zeros::<f32>(&[16, 64]).unwrap(),
        );
    });
    let err = load(dir.path(), WeightFormat::AsStored).err().expect("must fail");
    assert_eq!(err.code(), "TENSOR_SHAPE_MISMATCH");
    let msg = err.to_string();
    assert!(
        msg.contains("model.layers.0.self_attn.k_proj.weight")
            && msg.contains("[16, 64]")
            && msg.contains("[32, 64]"),
        "{msg}"
    );
}

#[test]
fn a_wrong_shape_in_a_quantized_checkpoint_is_named() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &q4()).unwrap();
    edit_weights(dir.path(), |t| {
        t.insert(
            "model.layers.0.mlp.down_proj.scales".into(),
            mlx_rs::ops::zeros::<f32>(&[64, 3]).unwrap(),
        );
    });
    let err = load(dir.path(), WeightFormat::AsStored).err().expect("must fail");
    assert_eq!(err.code(), "TENSOR_SHAPE_MISMATCH");
    assert!(err.to_string().contains("model.layers.0.mlp.down_proj.scales"), "{err}");
}

#[test]
fn a_truncated_safetensors_file_is_reported_as_truncated() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlama::default()).unwrap();
    let file = dir.path().join("model.safetensors");
    let len = std::fs::metadata(&file).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
    f.set_len(len - 1000).unwrap();
    let err = load(dir.path(), WeightFormat::AsStored).err().expect("must fail");
    assert_eq!(err.code(), "CORRUPT_WEIGHTS");
    assert!(err.to_string().contains("truncated"), "{err}");

    // A file cut inside its header.
    let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
    f.set_len(20).unwrap();
    let err = load(dir.path(), WeightFormat::AsStored).err().expect("must fail");
    assert_eq!(err.code(), "CORRUPT_WEIGHTS", "{err}");
}

#[test]
fn unknown_folders_and_architectures_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let err = load(&dir.path().join("nope"), WeightFormat::AsStored).err().expect("must fail");
    assert_eq!(err.code(), "MODEL_NOT_FOUND");
    let err = load(dir.path(), WeightFormat::AsStored).err().expect("must fail");
    assert_eq!(err.code(), "MODEL_NOT_FOUND", "{err}");

    write_tiny_llama(dir.path(), &TinyLlama::default()).unwrap();
    let config = dir.path().join("config.json");
    let text = std::fs::read_to_string(&config).unwrap().replace("\"llama\"", "\"mamba\"");
    std::fs::write(&config, text).unwrap();
    let err = load(dir.path(), WeightFormat::AsStored).err().expect("must fail");
    assert_eq!(err.code(), "UNSUPPORTED_ARCHITECTURE");
    assert!(err.to_string().contains("mamba"), "{err}");
}
