//! GGUF import (the files LM Studio and Ollama users have).
//!
//! MLX's own GGUF loader reads the file: Q4_0/Q4_1/Q8_0 tensors arrive
//! already as MLX affine-quantized `(weight, scales, biases)` with group size
//! 32. This module renames llama.cpp's tensors to Hugging Face names, undoes
//! llama.cpp's Q/K row permutation, turns the metadata into a config.json-like
//! value for the model family, and collects the tokenizer's metadata.
use std::{collections::HashMap, path::Path};

use mlx_rs::{io::GgufFile, Array};
use serde_json::{json, Map, Value};

use super::{Quantization, QuantSpec, Weights};
use crate::error::{Error, Result};
use crate::tokenizer::GgufTokenizerMeta;

/// Everything a GGUF file provides, in the shapes the rest of the engine uses.
pub struct GgufModel {
    pub weights: Weights,
    /// The metadata as HF config.json fields (`model_type`, `hidden_size`, ...).
    pub config: Value,
    pub quantization: Quantization,
    pub tokenizer: GgufTokenizerMeta,
    /// `general.name`, when the file has one.
    pub name: Option<String>,
}

/// llama.cpp quantizes in blocks of 32 values.
const GGUF_GROUP: i32 = 32;

pub fn load(path: &Path) -> Result<GgufModel> {
    let corrupt = |reason: String| Error::CorruptWeights { path: path.to_path_buf(), reason };
    let file = GgufFile::load(path).map_err(|e| corrupt(e.to_string()))?;
    let meta = Metadata { file: &file, path };
    let arch = meta.string("general.architecture")?.ok_or_else(|| corrupt("no general.architecture".into()))?;
    let tensors = file.arrays().map_err(|e| corrupt(e.to_string()))?;

    let tokenizer = tokenizer_meta(&meta)?;
    let config = config_from_metadata(&meta, &arch, &tensors, &tokenizer)?;
    let mut weights = Weights::new(HashMap::new(), path.display().to_string());
    for (name, t) in tensors {
        match hf_name(&name) {
            Some(hf) => weights.insert(hf, t),
            None => tracing::warn!(tensor = %name, "GGUF tensor with no known Hugging Face name; ignored"),
        }
    }
    if arch == "llama" {
        let heads = int(&config, "num_attention_heads")?;
        let kv_heads = int(&config, "num_key_value_heads")?;
        unpermute_qk(&mut weights, "q_proj", heads)?;
        unpermute_qk(&mut weights, "k_proj", kv_heads)?;
    }
    let quantization = quantization_from_shapes(&weights);
    Ok(GgufModel { weights, config, quantization, tokenizer, name: meta.string("general.name")? })
}

struct Metadata<'a> {
    file: &'a GgufFile,
    path: &'a Path,
}

impl Metadata<'_> {
    fn err(&self, e: impl std::fmt::Display) -> Error {
        Error::CorruptWeights { path: self.path.to_path_buf(), reason: e.to_string() }
    }
    fn string(&self, key: &str) -> Result<Option<String>> {
        self.file.get_metadata_string(key).map_err(|e| self.err(format!("{key}: {e}")))
    }
    fn strings(&self, key: &str) -> Result<Option<Vec<String>>> {
        self.file.get_metadata_strings(key).map_err(|e| self.err(format!("{key}: {e}")))
    }
    fn array(&self, key: &str) -> Result<Option<Array>> {
        self.file.get_metadata_array(key).map_err(|e| self.err(format!("{key}: {e}")))
    }
    fn number(&self, key: &str) -> Result<Option<f64>> {
        let Some(a) = self.array(key)? else { return Ok(None) };
        let a = a.as_dtype(mlx_rs::Dtype::Float32)?;
        a.try_item_cast::<f32>().map(|v| Some(v as f64)).map_err(|e| self.err(format!("{key}: {e}")))
    }
    fn ints(&self, key: &str) -> Result<Option<Vec<i32>>> {
        let Some(a) = self.array(key)? else { return Ok(None) };
        let a = a.as_dtype(mlx_rs::Dtype::Int32)?;
        a.to_vec_cast::<i32>().map(Some).map_err(|e| self.err(format!("{key}: {e}")))
    }
}

fn tokenizer_meta(meta: &Metadata) -> Result<GgufTokenizerMeta> {
    let id = |key: &str| -> Result<Option<u32>> { Ok(meta.number(key)?.map(|v| v as u32)) };
    Ok(GgufTokenizerMeta {
        model: meta.string("tokenizer.ggml.model")?.unwrap_or_default(),
        pre: meta.string("tokenizer.ggml.pre")?,
        tokens: meta.strings("tokenizer.ggml.tokens")?.unwrap_or_default(),
        merges: meta.strings("tokenizer.ggml.merges")?.unwrap_or_default(),
        token_types: meta.ints("tokenizer.ggml.token_type")?.unwrap_or_default(),
        bos_id: id("tokenizer.ggml.bos_token_id")?,
        eos_id: id("tokenizer.ggml.eos_token_id")?,
        add_bos: meta.number("tokenizer.ggml.add_bos_token")?.map(|v| v != 0.0),
        chat_template: meta.string("tokenizer.chat_template")?,
    })
}

fn config_from_metadata(
    meta: &Metadata,
    arch: &str,
    tensors: &HashMap<String, Array>,
    tokenizer: &GgufTokenizerMeta,
) -> Result<Value> {
    let mut c = Map::new();
    c.insert("model_type".into(), json!(arch));
    let fields = [
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
    for (hf, gguf) in fields {
        if let Some(v) = meta.number(&format!("{arch}.{gguf}"))? {
            let v = if hf == "rms_norm_eps" || hf == "rope_theta" { json!(v) } else { json!(v as i64) };
            c.insert(hf.into(), v);
        }
    }
    let vocab = match tensors.get("token_embd.weight") {
        Some(t) => t.dim(0) as usize,
        None => tokenizer.tokens.len(),
    };
    c.insert("vocab_size".into(), json!(vocab));
    c.insert("tie_word_embeddings".into(), json!(!tensors.contains_key("output.weight")));
    if tensors.contains_key("rope_freqs.weight") {
        return Err(Error::InvalidConfig(
            "this GGUF carries rope_freqs (Llama 3.1 long-context scaling), which GGUF import does not support yet; \
             use the mlx-community safetensors folder of this model"
                .into(),
        ));
    }
    Ok(Value::Object(c))
}

fn int(config: &Value, key: &str) -> Result<i32> {
    config
        .get(key)
        .and_then(Value::as_i64)
        .map(|v| v as i32)
        .ok_or_else(|| Error::InvalidConfig(format!("GGUF metadata has no {key}")))
}

/// llama.cpp tensor names → Hugging Face names.
fn hf_name(gguf: &str) -> Option<String> {
    let top = |rest: &str| -> Option<&'static str> {
        Some(match rest {
            "token_embd" => "model.embed_tokens",
            "output_norm" => "model.norm",
            "output" => "lm_head",
            _ => return None,
        })
    };
    let (module, param) = gguf.rsplit_once('.')?;
    if let Some(rest) = module.strip_prefix("blk.") {
        let (layer, part) = rest.split_once('.')?;
        let hf_part = match part {
            "attn_norm" => "input_layernorm",
            "attn_q" => "self_attn.q_proj",
            "attn_k" => "self_attn.k_proj",
            "attn_v" => "self_attn.v_proj",
            "attn_output" => "self_attn.o_proj",
            "ffn_norm" => "post_attention_layernorm",
            "ffn_gate" => "mlp.gate_proj",
            "ffn_up" => "mlp.up_proj",
            "ffn_down" => "mlp.down_proj",
            _ => return None,
        };
        return Some(format!("model.layers.{layer}.{hf_part}.{param}"));
    }
    Some(format!("{}.{param}", top(module)?))
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

/// GGUF has no quantization block: derive each module's bits from its shapes
/// (packed uint32 columns vs. groups of 32).
fn quantization_from_shapes(weights: &Weights) -> Quantization {
    let mut q = Quantization::default();
    for name in weights.names() {
        let Some(module) = name.strip_suffix(".scales") else { continue };
        let (Some(w), Some(s)) = (weights.shape_of(&format!("{module}.weight")), weights.shape_of(name)) else {
            continue;
        };
        let in_features = s[1] * GGUF_GROUP;
        let bits = w[1] * 32 / in_features;
        q.overrides.insert(module.to_string(), Some(QuantSpec { group_size: GGUF_GROUP, bits }));
    }
    q
}
