//! Tiny Qwen3.5 and Qwen3-VL folders with a real vision tower (the Qwen3-VL
//! tower), in the real on-disk format, loadable by our loader and by Python
//! mlx-vlm (`scripts/make-vision-goldens.sh`): Qwen3.5's hybrid language
//! model of [`super::families`], or a Qwen3 decoder of odd sizes (hidden 96,
//! three query heads over one KV head) for Qwen3-VL; a tower with patch 16
//! and a 4×4 learned position grid (so every test image interpolates it),
//! with two DeepStack taps for Qwen3-VL; Qwen's byte-level tokenizer with the
//! vision tokens and chat template, and preprocessor_config.json with small
//! pixel bounds.
//!
//! Float folders use Hugging Face's names (`model.language_model.*`,
//! `model.visual.*`, the Conv3d kernel `[out, C, T, P, P]`); quantized ones
//! mlx-community's (`language_model.model.*`, `vision_tower.*`,
//! `[out, T, P, P, C]`), the language model quantized, the tower float.
use std::collections::HashMap;
use std::path::Path;

use mlx_rs::Array;
use serde_json::json;

use super::families::{qwen35_parts, Dims, TinyFamily};
use super::{qwen_byte_level_meta, save_checkpoint, Rng};
use crate::error::{Error, Result};
use crate::tokenizer::Tokenizer;
use crate::weights::QuantSpec;

/// The tiny tower's sizes (Qwen3-VL's has one more block: three, two of
/// them tapped by DeepStack).
const WIDTH: i32 = 32;
const HEADS: i32 = 2;
const MLP: i32 = 48;
const DEPTH: i32 = 2;
const QWEN3_VL_DEPTH: i32 = 3;
const QWEN3_VL_DEEPSTACK: [i32; 2] = [0, 1];
/// The tiny Qwen3-VL decoder.
const QWEN3_VL_HIDDEN: i32 = 96;
const QWEN3_VL_LAYERS: i32 = 3;
const QWEN3_VL_HEADS: i32 = 3;
const QWEN3_VL_KV_HEADS: i32 = 1;
const QWEN3_VL_HEAD_DIM: i32 = 32;
const QWEN3_VL_MLP: i32 = 160;
const PATCH: i32 = 16;
const TEMPORAL: i32 = 2;
const CHANNELS: i32 = 3;
/// A 4×4 learned position grid.
const POSITIONS: i32 = 16;
/// Image area bounds after resizing: at most 32 features (factor 32).
pub const QWEN35_MIN_PIXELS: i32 = 64 * 64;
pub const QWEN35_MAX_PIXELS: i32 = 32 * 32 * 32;

/// Writes a tiny Qwen3.5 (dense) with its vision tower into `dir`; returns
/// the vocabulary size.
pub fn write_tiny_qwen35_vl(dir: &Path, quantize: Option<QuantSpec>, seed: u64) -> Result<i32> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let tokenizer = Tokenizer::from_gguf(qwen_byte_level_meta())?;
    tokenizer.write_hf_files(dir)?;
    let vocab = tokenizer.vocab_size() as i32;
    let hf = quantize.is_none();
    let dims = Dims::tiny(TinyFamily::Qwen35);
    let (mut tensors, matrices, mut config) = qwen35_parts(dims, seed, vocab, hf)?;
    let prefix = if hf { "model.visual" } else { "vision_tower" };
    write_tower(&mut tensors, &mut Rng(seed + 1000), prefix, dims.hidden, hf, DEPTH, &[]);
    config["vision_config"] = vision_config("qwen3_5", DEPTH, dims.hidden, &[]);
    finish_folder(dir, &tokenizer, tensors, &matrices, config, quantize)?;
    Ok(vocab)
}

/// Writes a tiny Qwen3-VL (dense) into `dir`; returns the vocabulary size.
pub fn write_tiny_qwen3_vl(dir: &Path, quantize: Option<QuantSpec>, seed: u64) -> Result<i32> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let tokenizer = Tokenizer::from_gguf(qwen_byte_level_meta())?;
    tokenizer.write_hf_files(dir)?;
    let vocab = tokenizer.vocab_size() as i32;
    let hf = quantize.is_none();
    let mut rng = Rng(seed);
    let (mut tensors, matrices) = qwen3_decoder(&mut rng, vocab, hf);
    let prefix = if hf { "model.visual" } else { "vision_tower" };
    write_tower(&mut tensors, &mut Rng(seed + 1000), prefix, QWEN3_VL_HIDDEN, hf, QWEN3_VL_DEPTH, &QWEN3_VL_DEEPSTACK);
    let text = json!({
        "model_type": "qwen3_vl_text",
        "hidden_size": QWEN3_VL_HIDDEN,
        "num_hidden_layers": QWEN3_VL_LAYERS,
        "intermediate_size": QWEN3_VL_MLP,
        "num_attention_heads": QWEN3_VL_HEADS,
        "num_key_value_heads": QWEN3_VL_KV_HEADS,
        "head_dim": QWEN3_VL_HEAD_DIM,
        "rms_norm_eps": 1e-6,
        "vocab_size": vocab,
        "max_position_embeddings": 4096,
        "rope_theta": 5_000_000.0,
        "rope_scaling": {"rope_type": "default", "mrope_section": [6, 5, 5], "mrope_interleaved": true},
        "tie_word_embeddings": false,
        "attention_bias": false,
        "hidden_act": "silu",
    });
    let config = json!({
        "model_type": "qwen3_vl",
        "architectures": ["Qwen3VLForConditionalGeneration"],
        "text_config": text,
        "vision_config": vision_config("qwen3_vl", QWEN3_VL_DEPTH, QWEN3_VL_HIDDEN, &QWEN3_VL_DEEPSTACK),
        "tie_word_embeddings": false,
    });
    finish_folder(dir, &tokenizer, tensors, &matrices, config, quantize)?;
    Ok(vocab)
}

/// A Qwen3 decoder under the multimodal names: seeded weights, and which
/// of them are (quantizable) matrices.
fn qwen3_decoder(rng: &mut Rng, vocab: i32, hf: bool) -> (HashMap<String, Array>, Vec<String>) {
    let (d, hd, ff) = (QWEN3_VL_HIDDEN, QWEN3_VL_HEAD_DIM, QWEN3_VL_MLP);
    let (q, kv) = (QWEN3_VL_HEADS * hd, QWEN3_VL_KV_HEADS * hd);
    let lm = if hf { "model.language_model" } else { "language_model.model" };
    let mut tensors = HashMap::new();
    let mut matrices = vec![format!("{lm}.embed_tokens")];
    let mut matrix = |tensors: &mut HashMap<String, Array>, rng: &mut Rng, name: String, rows: i32, cols: i32| {
        tensors.insert(format!("{name}.weight"), rng.tensor(&[rows, cols], 1.0 / (cols as f32).sqrt(), 0.0));
        matrices.push(name);
    };
    let norm = |tensors: &mut HashMap<String, Array>, rng: &mut Rng, name: String, dim: i32| {
        tensors.insert(format!("{name}.weight"), rng.tensor(&[dim], 0.1, 1.0));
    };
    tensors.insert(format!("{lm}.embed_tokens.weight"), rng.tensor(&[vocab, d], 0.5, 0.0));
    for i in 0..QWEN3_VL_LAYERS {
        let p = format!("{lm}.layers.{i}");
        norm(&mut tensors, rng, format!("{p}.input_layernorm"), d);
        norm(&mut tensors, rng, format!("{p}.post_attention_layernorm"), d);
        matrix(&mut tensors, rng, format!("{p}.self_attn.q_proj"), q, d);
        matrix(&mut tensors, rng, format!("{p}.self_attn.k_proj"), kv, d);
        matrix(&mut tensors, rng, format!("{p}.self_attn.v_proj"), kv, d);
        matrix(&mut tensors, rng, format!("{p}.self_attn.o_proj"), d, q);
        norm(&mut tensors, rng, format!("{p}.self_attn.q_norm"), hd);
        norm(&mut tensors, rng, format!("{p}.self_attn.k_norm"), hd);
        matrix(&mut tensors, rng, format!("{p}.mlp.gate_proj"), ff, d);
        matrix(&mut tensors, rng, format!("{p}.mlp.up_proj"), ff, d);
        matrix(&mut tensors, rng, format!("{p}.mlp.down_proj"), d, ff);
    }
    norm(&mut tensors, rng, format!("{lm}.norm"), d);
    let head = if hf { "lm_head" } else { "language_model.lm_head" };
    matrix(&mut tensors, rng, head.to_string(), vocab, d);
    (tensors, matrices)
}

fn vision_config(model_type: &str, depth: i32, out_hidden: i32, deepstack: &[i32]) -> serde_json::Value {
    json!({
        "model_type": model_type,
        "depth": depth,
        "hidden_size": WIDTH,
        "intermediate_size": MLP,
        "num_heads": HEADS,
        "out_hidden_size": out_hidden,
        "in_channels": CHANNELS,
        "patch_size": PATCH,
        "spatial_merge_size": 2,
        "temporal_patch_size": TEMPORAL,
        "num_position_embeddings": POSITIONS,
        "hidden_act": "gelu_pytorch_tanh",
        "deepstack_visual_indexes": deepstack,
    })
}

/// The token ids, preprocessor_config.json and the checkpoint itself.
fn finish_folder(
    dir: &Path,
    tokenizer: &Tokenizer,
    tensors: HashMap<String, Array>,
    matrices: &[String],
    mut config: serde_json::Value,
    quantize: Option<QuantSpec>,
) -> Result<()> {
    let id = |t: &str| tokenizer.token_to_id(t).expect("special token in the tiny vocabulary");
    for (key, token) in [
        ("image_token_id", "<|image_pad|>"),
        ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"),
        ("vision_end_token_id", "<|vision_end|>"),
    ] {
        config[key] = json!(id(token));
    }
    config["text_config"]["eos_token_id"] = json!(id("<|im_end|>"));
    config["eos_token_id"] = json!(id("<|im_end|>"));
    let pre = json!({
        "min_pixels": QWEN35_MIN_PIXELS,
        "max_pixels": QWEN35_MAX_PIXELS,
        "size": {"shortest_edge": QWEN35_MIN_PIXELS, "longest_edge": QWEN35_MAX_PIXELS},
        "patch_size": PATCH,
        "temporal_patch_size": TEMPORAL,
        "merge_size": 2,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "image_processor_type": "Qwen2VLImageProcessorFast",
        "processor_class": "Qwen3VLProcessor",
    });
    let path = dir.join("preprocessor_config.json");
    std::fs::write(&path, serde_json::to_string_pretty(&pre).expect("serializable")).map_err(|e| Error::io(&path, e))?;
    save_checkpoint(dir, tensors, matrices, config, quantize)
}

fn write_tower(
    tensors: &mut HashMap<String, Array>,
    rng: &mut Rng,
    prefix: &str,
    out_hidden: i32,
    torch_layout: bool,
    depth: i32,
    deepstack: &[i32],
) {
    let mut put = |name: String, t: Array| {
        tensors.insert(format!("{prefix}.{name}"), t);
    };
    let linear = |rng: &mut Rng, put: &mut dyn FnMut(String, Array), path: &str, input: i32, output: i32| {
        put(format!("{path}.weight"), rng.tensor(&[output, input], 1.0 / (input as f32).sqrt(), 0.0));
        put(format!("{path}.bias"), rng.tensor(&[output], 0.1, 0.0));
    };
    let norm = |rng: &mut Rng, put: &mut dyn FnMut(String, Array), path: &str, dim: i32| {
        put(format!("{path}.weight"), rng.tensor(&[dim], 0.1, 1.0));
        put(format!("{path}.bias"), rng.tensor(&[dim], 0.1, 0.0));
    };
    let values = CHANNELS * TEMPORAL * PATCH * PATCH;
    let kernel = rng.tensor(&[WIDTH, CHANNELS, TEMPORAL, PATCH, PATCH], 1.0 / (values as f32).sqrt(), 0.0);
    let kernel = if torch_layout { kernel } else { kernel.transpose_axes(&[0, 2, 3, 4, 1]).expect("5-D kernel") };
    put("patch_embed.proj.weight".into(), kernel);
    put("patch_embed.proj.bias".into(), rng.tensor(&[WIDTH], 0.1, 0.0));
    put("pos_embed.weight".into(), rng.tensor(&[POSITIONS, WIDTH], 0.5, 0.0));
    for i in 0..depth {
        let p = format!("blocks.{i}");
        norm(rng, &mut put, &format!("{p}.norm1"), WIDTH);
        norm(rng, &mut put, &format!("{p}.norm2"), WIDTH);
        linear(rng, &mut put, &format!("{p}.attn.qkv"), WIDTH, 3 * WIDTH);
        linear(rng, &mut put, &format!("{p}.attn.proj"), WIDTH, WIDTH);
        linear(rng, &mut put, &format!("{p}.mlp.linear_fc1"), WIDTH, MLP);
        linear(rng, &mut put, &format!("{p}.mlp.linear_fc2"), MLP, WIDTH);
    }
    let merged = WIDTH * 4;
    norm(rng, &mut put, "merger.norm", WIDTH);
    linear(rng, &mut put, "merger.linear_fc1", merged, merged);
    linear(rng, &mut put, "merger.linear_fc2", merged, out_hidden);
    for level in 0..deepstack.len() {
        let p = format!("deepstack_merger_list.{level}");
        norm(rng, &mut put, &format!("{p}.norm"), merged);
        linear(rng, &mut put, &format!("{p}.linear_fc1"), merged, merged);
        linear(rng, &mut put, &format!("{p}.linear_fc2"), merged, out_hidden);
    }
}
