//! GGUF import (the files LM Studio and Ollama users have).
//!
//! We read the file ourselves (`reader.rs`). Q4_0 / Q4_1 / Q8_0 tensors map
//! exactly onto MLX affine quantization (group 32) and stay quantized; every
//! other block type (the K-quants of `Q4_K_M` / `Q6_K` files, Q5_0, ...) is
//! dequantized to float32 at load — on the CPU backend float weights are the
//! fast path anyway — or, when quantized weights are kept (Metal), requantized
//! to MLX affine 4-bit (8-bit for types of more than 4.5 bits), group 32.
//! MXFP4 tensors (gpt-oss's experts) are MLX's `mxfp4` mode byte for byte
//! (the codes re-ordered): kept as they are, or dequantized to float32.
//!
//! The family's [`GgufImport`] (from the model registry) renames llama.cpp's
//! tensors to Hugging Face names, turns its metadata into a config.json-like
//! value, undoes llama.cpp's Q/K row permutation where it applies one, and
//! removes the `+1` it stores in Gemma's RMSNorm weights.
mod blocks;
mod config;
mod reader;

use std::{collections::HashMap, path::Path};

use mlx_rs::{ops, Array, Dtype};
use serde_json::{Map, Value};

use blocks::to_mlx_affine;
pub use blocks::{dequantize, mxfp4_to_mlx, GgmlType};
pub use config::{family_of, imported_config, GgufMetadata};
pub use reader::{GgufFile, MetaValue};

use super::{QuantMode, QuantSpec, Quantization, Weights};
use crate::error::{Error, Result};
use crate::model::registry::Family;
use crate::model::WeightFormat;
use crate::tokenizer::{GgufSentencePieceMeta, GgufTokenizerMeta};

/// How llama.cpp exports one model family.
pub struct GgufImport {
    /// `general.architecture` (llama.cpp's name: "llama", "qwen3moe", "gemma3").
    pub architecture: &'static str,
    /// Hugging Face's class for the family (config.json `architectures`),
    /// which `vlm convert` writes into the folder it makes.
    pub class_name: &'static str,
    /// Block tensor names (`blk.N.<part>`) → Hugging Face names
    /// (`model.layers.N.<part>`), on top of [`COMMON_BLOCK_NAMES`] (these win).
    /// A name with its parameter (`attn_sinks.weight`) names the whole
    /// Hugging Face tensor (`self_attn.sinks`).
    pub block_names: &'static [(&'static str, &'static str)],
    /// Metadata keys (after `<architecture>.`) → config.json fields, on top of
    /// [`COMMON_CONFIG_KEYS`].
    pub config_keys: &'static [(&'static str, &'static str)],
    /// llama.cpp permuted Q and K rows for its interleaved RoPE.
    pub permuted_qk: bool,
    /// llama.cpp stored RMSNorm weights with 1 added (Gemma's `(1 + w)` norm).
    pub norm_plus_one: bool,
    /// Fills in config fields llama.cpp does not store but hard-codes for
    /// the architecture, so a converted folder says them explicitly.
    pub complete_config: Option<fn(&mut Map<String, Value>)>,
}

/// Block tensors most families share (the llama layout).
pub const COMMON_BLOCK_NAMES: &[(&str, &str)] = &[
    ("attn_norm", "input_layernorm"),
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("ffn_norm", "post_attention_layernorm"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
];

/// Two lists of block names as one, for a family whose GGUF layout extends
/// another's (LFM2-MoE's is LFM2's plus its experts).
pub const fn joined_block_names<const A: usize, const B: usize, const N: usize>(
    a: [(&'static str, &'static str); A],
    b: [(&'static str, &'static str); B],
) -> [(&'static str, &'static str); N] {
    assert!(A + B == N, "N must be A + B");
    let mut out = [("", ""); N];
    let mut i = 0;
    while i < N {
        out[i] = if i < A { a[i] } else { b[i - A] };
        i += 1;
    }
    out
}

/// Metadata every family has.
pub const COMMON_CONFIG_KEYS: &[(&str, &str)] = &[
    ("hidden_size", "embedding_length"),
    ("num_hidden_layers", "block_count"),
    ("intermediate_size", "feed_forward_length"),
    ("num_attention_heads", "attention.head_count"),
    ("num_key_value_heads", "attention.head_count_kv"),
    ("rms_norm_eps", "attention.layer_norm_rms_epsilon"),
    ("rope_theta", "rope.freq_base"),
    ("max_position_embeddings", "context_length"),
    ("head_dim", "attention.key_length"),
];

/// Config fields that are floats (the rest are integers).
const FLOAT_FIELDS: &[&str] = &[
    "rms_norm_eps",
    "rope_theta",
    "rope_local_base_freq",
    "llama_4_scaling_beta",
    "beta_fast",
    "beta_slow",
];

/// Everything a GGUF file provides, in the shapes the rest of the engine uses.
pub struct GgufModel {
    pub family: &'static Family,
    /// The family's config.json `model_type`.
    pub model_type: String,
    pub weights: Weights,
    /// The metadata as config.json fields (`hidden_size`, ...).
    pub config: Value,
    /// What stays MLX-quantized (Q4_0 / Q4_1 / Q8_0, or requantized tensors).
    pub quantization: Quantization,
    pub tokenizer: GgufTokenizerMeta,
    pub sentencepiece: GgufSentencePieceMeta,
    /// `general.name`, when the file has one.
    pub name: Option<String>,
    /// The file's tensor types, in words ("Q4_K ×27, Q6_K ×9, ...").
    pub stored: String,
    /// What the import did to types MLX cannot keep, in words.
    pub converted: Option<String>,
    /// The file's quantization for people ("4.9 bits per weight on average,
    /// embeddings 8-bit"); `None` for a float file.
    pub quantization_words: Option<String>,
}

/// llama.cpp quantizes in blocks of 32 values.
const GGUF_GROUP: i32 = 32;

/// The tokenizer of a GGUF file alone (its metadata; no tensor is read).
pub fn load_tokenizer(path: &Path) -> Result<crate::tokenizer::Tokenizer> {
    let (meta, spm) = tokenizer_meta(&GgufFile::open(path)?)?;
    crate::tokenizer::Tokenizer::from_gguf_with(meta, spm)
}

pub fn load(path: &Path, format: WeightFormat) -> Result<GgufModel> {
    let corrupt = |reason: String| Error::CorruptWeights { path: path.to_path_buf(), reason };
    let file = GgufFile::open(path)?;
    if file.get("general.architecture").and_then(MetaValue::as_str).is_none() {
        return Err(corrupt("no general.architecture".into()));
    }
    let (family, import) = family_of(&file)?;
    // Every tensor type is checked before gigabytes are read.
    if let Some(t) = file.tensors.iter().find(|t| !t.kind.dequantizable()) {
        return Err(Error::InvalidConfig(format!(
            "tensor {} is stored as {}, which GGUF import does not read (supported: F32, F16, BF16, Q4_0, Q4_1, \
             Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4)",
            t.name,
            t.kind.name()
        )));
    }
    if file.tensors.iter().any(|t| t.name == "rope_freqs.weight") {
        return Err(Error::InvalidConfig(
            "this GGUF carries rope_freqs (Llama 3.1 long-context scaling), which GGUF import does not support yet; \
             use the mlx-community safetensors folder of this model"
                .into(),
        ));
    }
    let (tokenizer, sentencepiece) = tokenizer_meta(&file)?;
    let embedding = file.tensors.iter().find(|t| t.name == "token_embd.weight");
    let vocab = embedding.map_or(tokenizer.tokens.len(), |t| t.shape[0]);
    let untied = file.tensors.iter().any(|t| t.name == "output.weight");
    let config = imported_config(&file, vocab, untied)?;
    let model_type = family.model_types[0].to_string();

    let mut weights = Weights::new(HashMap::new(), path.display().to_string());
    let mut quantization = Quantization::default();
    let mut converted: Vec<&'static str> = Vec::new();
    for t in &file.tensors {
        let Some(hf) = hf_name(&t.name, import) else {
            tracing::warn!(tensor = %t.name, "GGUF tensor with no known Hugging Face name; ignored");
            continue;
        };
        let data = file.read(t)?;
        let shape: Vec<i32> = t.shape.iter().map(|&d| d as i32).collect();
        let module = hf.strip_suffix(".weight").map(str::to_owned);
        if let (GgmlType::Mxfp4, WeightFormat::AsStored, Some(module), true) =
            (t.kind, format, &module, shape.len() >= 2)
        {
            insert_mxfp4(&mut weights, module, &shape, &data);
            quantization.overrides.insert(module.clone(), Some(MXFP4));
            quantization.override_modes.insert(module.clone(), QuantMode::Mxfp4);
            continue;
        }
        if let (Some(affine), Some(module)) = (to_mlx_affine(t.kind, &data), &module) {
            insert_affine(&mut weights, module, &shape, affine)?;
            quantization.overrides.insert(
                module.clone(),
                Some(QuantSpec {
                    group_size: GGUF_GROUP,
                    bits: t.kind.mlx_affine_bits().unwrap_or(4),
                }),
            );
            continue;
        }
        let values = dequantize(t.kind, &data).expect("checked dequantizable above");
        drop(data);
        let mut array = Array::from_slice(&values, &shape);
        if import.norm_plus_one && is_norm(&hf) {
            array = array.subtract(Array::from_f32(1.0))?;
        }
        let quantized_type = !matches!(t.kind, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16);
        if quantized_type && !converted.contains(&t.kind.name()) {
            converted.push(t.kind.name());
        }
        match (&module, format, quantized_type && shape.len() >= 2) {
            (Some(module), WeightFormat::AsStored, true) => {
                // Kept quantized, as MLX holds weights on Metal.
                let bits = if matches!(t.kind, GgmlType::Q4K | GgmlType::Q4_0 | GgmlType::Q4_1) {
                    4
                } else {
                    8
                };
                let (w, s, b) = ops::quantize(&array, GGUF_GROUP, bits)?;
                weights.insert(format!("{module}.weight"), w);
                weights.insert(format!("{module}.scales"), s.as_dtype(Dtype::Float16)?);
                weights.insert(format!("{module}.biases"), b.as_dtype(Dtype::Float16)?);
                quantization
                    .overrides
                    .insert(module.clone(), Some(QuantSpec { group_size: GGUF_GROUP, bits }));
            }
            _ => weights.insert(hf, array),
        }
    }
    if import.permuted_qk {
        let heads = int(&config, "num_attention_heads")?;
        let kv_heads = int(&config, "num_key_value_heads")?;
        unpermute_qk(&mut weights, "q_proj", heads)?;
        unpermute_qk(&mut weights, "k_proj", kv_heads)?;
    }
    let converted = (!converted.is_empty()).then(|| {
        let how = match format {
            WeightFormat::AsStored => "requantized to MLX affine 4/8-bit (group 32)",
            WeightFormat::Float32 => "dequantized to float32",
        };
        format!("{} {how}", converted.join(", "))
    });
    Ok(GgufModel {
        family,
        model_type,
        weights,
        config,
        quantization,
        tokenizer,
        sentencepiece,
        name: file.get("general.name").and_then(MetaValue::as_str).map(str::to_owned),
        stored: describe_types(&file),
        converted,
        quantization_words: bits_in_words(&file),
    })
}

/// Tensor types and counts ("Q5_0 ×81, Q4_K ×27, ..."), most common first.
fn describe_types(file: &GgufFile) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for t in &file.tensors {
        match counts.iter_mut().find(|(n, _)| *n == t.kind.name()) {
            Some((_, c)) => *c += 1,
            None => counts.push((t.kind.name(), 1)),
        }
    }
    counts.sort_by_key(|&(_, count)| std::cmp::Reverse(count));
    let list: Vec<String> = counts.iter().map(|(n, c)| format!("{n} ×{c}")).collect();
    format!("GGUF {}", list.join(", "))
}

/// The bits per weight of the file's matrices (averaged over their values
/// when types are mixed, as in `Q4_K_M` files), and the embeddings' apart.
fn bits_in_words(file: &GgufFile) -> Option<String> {
    let bits = |t: &reader::TensorInfo| t.kind.nominal_bits();
    let embedding = file.tensors.iter().find(|t| t.name == "token_embd.weight");
    let body: Vec<_> = file
        .tensors
        .iter()
        .filter(|t| t.shape.len() >= 2 && t.name != "token_embd.weight")
        .collect();
    let values: usize = body.iter().map(|t| t.elements()).sum();
    if values == 0 {
        return None;
    }
    let mean = body.iter().map(|t| bits(t) * t.elements() as f64).sum::<f64>() / values as f64;
    if mean >= 16.0 {
        return None;
    }
    let uniform = body.iter().all(|t| bits(t) == bits(body[0]));
    let mut words = if uniform {
        format!("{}-bit", mean as i32)
    } else {
        format!("{mean:.1} bits per weight on average")
    };
    if let Some(e) = embedding.filter(|e| bits(e) != mean || !uniform) {
        words.push_str(&format!(", embeddings {}-bit", bits(e) as i32));
    }
    Some(words)
}

fn is_norm(hf: &str) -> bool {
    hf.ends_with("norm.weight")
}

/// MLX's `mxfp4` mode: groups of 32, 4 bits.
const MXFP4: QuantSpec = QuantSpec { group_size: 32, bits: 4 };

/// Inserts `module.weight` (uint32 words of 8 codes) and `.scales` (uint8
/// exponents) of an MXFP4 tensor, as MLX's `mxfp4` mode holds them.
fn insert_mxfp4(weights: &mut Weights, module: &str, shape: &[i32], data: &[u8]) {
    let (packed, scales) = blocks::mxfp4_to_mlx(data);
    let (lead, cols) = shape.split_at(shape.len() - 1);
    let mut packed_shape = lead.to_vec();
    packed_shape.push(cols[0] / 8);
    let mut group_shape = lead.to_vec();
    group_shape.push(cols[0] / GGUF_GROUP);
    weights.insert(format!("{module}.weight"), Array::from_slice(&packed, &packed_shape));
    weights.insert(format!("{module}.scales"), Array::from_slice(&scales, &group_shape));
}

/// Inserts `module.weight` / `.scales` / `.biases` of an exactly re-packed block tensor.
fn insert_affine(
    weights: &mut Weights,
    module: &str,
    shape: &[i32],
    a: blocks::MlxAffine,
) -> Result<()> {
    let (lead, cols) = shape.split_at(shape.len() - 1);
    let cols = cols[0];
    let per_word = 32 / a.bits;
    let mut packed_shape = lead.to_vec();
    packed_shape.push(cols / per_word);
    let mut group_shape = lead.to_vec();
    group_shape.push(cols / GGUF_GROUP);
    weights.insert(format!("{module}.weight"), Array::from_slice(&a.packed, &packed_shape));
    weights.insert(format!("{module}.scales"), Array::from_slice(&a.scales, &group_shape));
    weights.insert(format!("{module}.biases"), Array::from_slice(&a.biases, &group_shape));
    Ok(())
}

fn tokenizer_meta(file: &GgufFile) -> Result<(GgufTokenizerMeta, GgufSentencePieceMeta)> {
    let get = |key: &str| file.get(key);
    let id = |key: &str| get(key).and_then(MetaValue::as_f64).map(|v| v as u32);
    let strings = |key: &str| -> Vec<String> {
        get(key)
            .and_then(MetaValue::as_array)
            .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
            .unwrap_or_default()
    };
    let numbers = |key: &str| -> Vec<f64> {
        get(key)
            .and_then(MetaValue::as_array)
            .map(|a| a.iter().filter_map(MetaValue::as_f64).collect())
            .unwrap_or_default()
    };
    let flag = |key: &str| get(key).and_then(MetaValue::as_f64).map(|v| v != 0.0);
    let meta = GgufTokenizerMeta {
        model: get("tokenizer.ggml.model")
            .and_then(MetaValue::as_str)
            .unwrap_or_default()
            .to_string(),
        pre: get("tokenizer.ggml.pre").and_then(MetaValue::as_str).map(str::to_owned),
        tokens: strings("tokenizer.ggml.tokens"),
        merges: strings("tokenizer.ggml.merges"),
        token_types: numbers("tokenizer.ggml.token_type").into_iter().map(|v| v as i32).collect(),
        bos_id: id("tokenizer.ggml.bos_token_id"),
        eos_id: id("tokenizer.ggml.eos_token_id"),
        add_bos: flag("tokenizer.ggml.add_bos_token"),
        chat_template: get("tokenizer.chat_template")
            .and_then(MetaValue::as_str)
            .map(str::to_owned),
    };
    let spm = GgufSentencePieceMeta {
        add_space_prefix: flag("tokenizer.ggml.add_space_prefix"),
        scores: numbers("tokenizer.ggml.scores").into_iter().map(|v| v as f32).collect(),
    };
    Ok((meta, spm))
}

fn int(config: &Value, key: &str) -> Result<i32> {
    config
        .get(key)
        .and_then(Value::as_i64)
        .map(|v| v as i32)
        .ok_or_else(|| Error::InvalidConfig(format!("GGUF metadata has no {key}")))
}

/// llama.cpp tensor names → Hugging Face names.
fn hf_name(gguf: &str, import: &GgufImport) -> Option<String> {
    let (module, param) = gguf.rsplit_once('.')?;
    if let Some(rest) = module.strip_prefix("blk.") {
        let (layer, part) = rest.split_once('.')?;
        let whole = format!("{part}.{param}");
        if let Some((_, hf)) = import.block_names.iter().find(|(g, _)| *g == whole) {
            return Some(format!("model.layers.{layer}.{hf}"));
        }
        let (_, hf_part) =
            import.block_names.iter().chain(COMMON_BLOCK_NAMES).find(|(g, _)| *g == part)?;
        return Some(format!("model.layers.{layer}.{hf_part}.{param}"));
    }
    let top = match module {
        "token_embd" => "model.embed_tokens",
        // the final norm where llama.cpp names it so (its "embedding norm")
        "token_embd_norm" => "model.embedding_norm",
        "output_norm" => "model.norm",
        "output" => "lm_head",
        _ => return None,
    };
    Some(format!("{top}.{param}"))
}

/// llama.cpp stores Q and K rows permuted for its interleaved RoPE: per head,
/// rows `(2, head_dim/2)` became `(head_dim/2, 2)`. Undo it so the model uses
/// the same (non-interleaved) RoPE as Hugging Face checkpoints. Quantized rows
/// move together with their scales and biases.
fn unpermute_qk(weights: &mut Weights, proj: &str, heads: i32) -> Result<()> {
    let layer_names: Vec<String> = weights
        .names()
        .filter(|n| n.contains(&format!(".self_attn.{proj}.")))
        .map(str::to_string)
        .collect();
    for name in layer_names {
        let t = weights.remove(&name).expect("listed above");
        let shape = t.shape().to_vec();
        let rows = shape[0];
        let head_dim = rows / heads;
        let mut split = vec![heads, head_dim / 2, 2];
        split.extend_from_slice(&shape[1..]);
        let mut axes: Vec<i32> = (0..split.len() as i32).collect();
        axes.swap(1, 2);
        let fixed = t.reshape(&split)?.transpose_axes(&axes)?.reshape(&shape)?;
        weights.insert(name, fixed);
    }
    Ok(())
}
