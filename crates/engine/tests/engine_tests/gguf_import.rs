//! A Qwen3 GGUF, written here from a tiny Qwen3 folder the way llama.cpp's
//! converter lays it out (its tensor names, `qwen3.*` metadata, the
//! vocabulary as `tokenizer.ggml.*` arrays), loads as the same model: the
//! same logits and the same tokens. This checks the metadata → config mapping
//! (a misread head count, head dim, epsilon or rope base changes the logits),
//! that Qwen3's Q/K weights are not permuted as llama's are, and that the
//! Q/K norms find their names.
use std::collections::HashMap;
use std::path::Path;

use engine::model;
use engine::testing::{
    byte_level_meta, write_gguf, write_tiny_family, GgufTensor, GgufValue, TinyFamily,
};
use mlx_rs::{Array, Dtype};
use serde_json::Value;

use crate::common;

use common::{forward_fresh, greedy_ids, max_abs_diff, tokens, LOAD};

/// Hugging Face module names → llama.cpp's, for the tensors a Qwen3 has.
fn gguf_name(hf: &str) -> String {
    let top = [
        ("model.embed_tokens.weight", "token_embd.weight"),
        ("model.norm.weight", "output_norm.weight"),
        ("lm_head.weight", "output.weight"),
    ];
    if let Some((_, g)) = top.iter().find(|(h, _)| *h == hf) {
        return g.to_string();
    }
    let rest = hf.strip_prefix("model.layers.").unwrap_or_else(|| panic!("unexpected tensor {hf}"));
    let (layer, module) = rest.split_once('.').unwrap();
    let blocks = [
        ("input_layernorm", "attn_norm"),
        ("self_attn.q_proj", "attn_q"),
        ("self_attn.k_proj", "attn_k"),
        ("self_attn.v_proj", "attn_v"),
        ("self_attn.o_proj", "attn_output"),
        ("self_attn.q_norm", "attn_q_norm"),
        ("self_attn.k_norm", "attn_k_norm"),
        ("post_attention_layernorm", "ffn_norm"),
        ("mlp.gate_proj", "ffn_gate"),
        ("mlp.up_proj", "ffn_up"),
        ("mlp.down_proj", "ffn_down"),
    ];
    let (name, suffix) = module.rsplit_once('.').unwrap();
    let (_, g) =
        blocks.iter().find(|(h, _)| *h == name).unwrap_or_else(|| panic!("unexpected tensor {hf}"));
    format!("blk.{layer}.{g}.{suffix}")
}

fn write_qwen3_gguf(folder: &Path, out: &Path) {
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(folder.join("config.json")).unwrap())
            .unwrap();
    let int = |k: &str| GgufValue::U32(config[k].as_u64().unwrap_or_else(|| panic!("{k}")) as u32);
    let float =
        |k: &str| GgufValue::F32(config[k].as_f64().unwrap_or_else(|| panic!("{k}")) as f32);
    let tokenizer = byte_level_meta();
    let metadata = vec![
        ("general.architecture", GgufValue::Str("qwen3".into())),
        ("general.name", GgufValue::Str("Tiny Qwen3".into())),
        ("qwen3.block_count", int("num_hidden_layers")),
        ("qwen3.context_length", int("max_position_embeddings")),
        ("qwen3.embedding_length", int("hidden_size")),
        ("qwen3.feed_forward_length", int("intermediate_size")),
        ("qwen3.attention.head_count", int("num_attention_heads")),
        ("qwen3.attention.head_count_kv", int("num_key_value_heads")),
        ("qwen3.attention.key_length", int("head_dim")),
        ("qwen3.attention.value_length", int("head_dim")),
        ("qwen3.attention.layer_norm_rms_epsilon", float("rms_norm_eps")),
        ("qwen3.rope.freq_base", float("rope_theta")),
        ("tokenizer.ggml.model", GgufValue::Str(tokenizer.model.clone())),
        ("tokenizer.ggml.pre", GgufValue::Str(tokenizer.pre.clone().unwrap())),
        ("tokenizer.ggml.tokens", GgufValue::Strings(tokenizer.tokens.clone())),
        ("tokenizer.ggml.token_type", GgufValue::I32s(tokenizer.token_types.clone())),
        ("tokenizer.ggml.merges", GgufValue::Strings(tokenizer.merges.clone())),
        ("tokenizer.ggml.bos_token_id", GgufValue::U32(tokenizer.bos_id.unwrap())),
        ("tokenizer.ggml.eos_token_id", GgufValue::U32(tokenizer.eos_id.unwrap())),
        ("tokenizer.ggml.add_bos_token", GgufValue::Bool(false)),
        ("tokenizer.chat_template", GgufValue::Str(tokenizer.chat_template.clone().unwrap())),
    ];
    let weights: HashMap<String, Array> =
        Array::load_safetensors(folder.join("model.safetensors")).unwrap();
    let mut names: Vec<&String> = weights.keys().collect();
    names.sort();
    let tensors: Vec<GgufTensor> = names
        .into_iter()
        .map(|name| {
            let a = weights[name].as_dtype(Dtype::Float32).unwrap();
            a.eval().unwrap();
            let shape: Vec<usize> = a.shape().iter().map(|&d| d as usize).collect();
            GgufTensor::f32(gguf_name(name), &shape, a.as_slice::<f32>())
        })
        .collect();
    write_gguf(out, &metadata, &tensors).unwrap();
}

#[test]
fn a_qwen3_gguf_loads_as_the_folder_it_was_written_from() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("qwen3");
    write_tiny_family(&folder, TinyFamily::Qwen3, None, 5).unwrap();
    let gguf = dir.path().join("tiny-qwen3-f32.gguf");
    write_qwen3_gguf(&folder, &gguf);

    let from_folder = model::load(&folder, &LOAD).unwrap();
    let from_gguf = model::load(&gguf, &LOAD).unwrap();
    assert_eq!(from_gguf.info.family, from_folder.info.family);
    assert_eq!(from_gguf.info.context_length(), from_folder.info.context_length());

    let text = "hello world, héllo 🙂";
    let ids = from_folder.tokenizer.encode(text, false).unwrap();
    assert_eq!(
        from_gguf.tokenizer.encode(text, false).unwrap(),
        ids,
        "the GGUF vocabulary tokenizes alike"
    );

    let prompt: Vec<u32> = (0..24).map(|i| 3 + (i * 37 + 11) % 250).collect();
    let a = forward_fresh(from_folder.model.as_ref(), &tokens(&prompt));
    let b = forward_fresh(from_gguf.model.as_ref(), &tokens(&prompt));
    let diff = max_abs_diff(&a, &b);
    println!("max |logit difference| folder vs GGUF: {diff:e}");
    assert!(diff < 1e-5, "the GGUF computes another model: logits differ by {diff}");
    assert_eq!(greedy_ids(&from_gguf, &prompt, 12), greedy_ids(&from_folder, &prompt, 12));
}

/// An LFM2 GGUF as llama.cpp's converter writes it: `lfm2.*` metadata with
/// the KV heads of each layer (0 for a convolution), `shortconv.l_cache`,
/// the MLP width already adjusted, the convolution kernels squeezed to
/// `[C, K]`, the final norm as `token_embd_norm`. It loads as the folder
/// it was written from: same attention plan, same logits and tokens.
#[test]
fn an_lfm2_gguf_loads_as_the_folder_it_was_written_from() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("lfm2");
    write_tiny_family(&folder, TinyFamily::Lfm2, None, 5).unwrap();
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(folder.join("config.json")).unwrap())
            .unwrap();
    let int = |k: &str| GgufValue::U32(config[k].as_u64().unwrap_or_else(|| panic!("{k}")) as u32);
    let types: Vec<&str> =
        config["layer_types"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    let kv = config["num_key_value_heads"].as_i64().unwrap() as i32;
    let per_layer: Vec<i32> =
        types.iter().map(|t| if *t == "full_attention" { kv } else { 0 }).collect();
    let weights: HashMap<String, Array> =
        Array::load_safetensors(folder.join("model.safetensors")).unwrap();
    let ff = weights["model.layers.0.feed_forward.w1.weight"].shape()[0] as u32;
    let tokenizer = engine::testing::lfm2_byte_level_meta();
    let metadata = vec![
        ("general.architecture", GgufValue::Str("lfm2".into())),
        ("lfm2.block_count", int("num_hidden_layers")),
        ("lfm2.context_length", int("max_position_embeddings")),
        ("lfm2.embedding_length", int("hidden_size")),
        ("lfm2.feed_forward_length", GgufValue::U32(ff)),
        ("lfm2.attention.head_count", int("num_attention_heads")),
        ("lfm2.attention.head_count_kv", GgufValue::I32s(per_layer)),
        (
            "lfm2.attention.layer_norm_rms_epsilon",
            GgufValue::F32(config["norm_eps"].as_f64().unwrap() as f32),
        ),
        ("lfm2.rope.freq_base", GgufValue::F32(config["rope_theta"].as_f64().unwrap() as f32)),
        ("lfm2.shortconv.l_cache", int("conv_L_cache")),
        ("tokenizer.ggml.model", GgufValue::Str(tokenizer.model.clone())),
        ("tokenizer.ggml.pre", GgufValue::Str(tokenizer.pre.clone().unwrap())),
        ("tokenizer.ggml.tokens", GgufValue::Strings(tokenizer.tokens.clone())),
        ("tokenizer.ggml.token_type", GgufValue::I32s(tokenizer.token_types.clone())),
        ("tokenizer.ggml.merges", GgufValue::Strings(tokenizer.merges.clone())),
        ("tokenizer.ggml.bos_token_id", GgufValue::U32(tokenizer.bos_id.unwrap())),
        ("tokenizer.ggml.eos_token_id", GgufValue::U32(tokenizer.eos_id.unwrap())),
        ("tokenizer.ggml.add_bos_token", GgufValue::Bool(false)),
        ("tokenizer.chat_template", GgufValue::Str(tokenizer.chat_template.clone().unwrap())),
    ];
    let gguf_name = |hf: &str| -> String {
        let top = [
            ("model.embed_tokens.weight", "token_embd.weight"),
            ("model.embedding_norm.weight", "token_embd_norm.weight"),
        ];
        if let Some((_, g)) = top.iter().find(|(h, _)| *h == hf) {
            return g.to_string();
        }
        let rest = hf.strip_prefix("model.layers.").unwrap();
        let (layer, module) = rest.split_once('.').unwrap();
        let (name, suffix) = module.rsplit_once('.').unwrap();
        let g = match name {
            "operator_norm" => "attn_norm",
            "ffn_norm" => "ffn_norm",
            "feed_forward.w1" => "ffn_gate",
            "feed_forward.w3" => "ffn_up",
            "feed_forward.w2" => "ffn_down",
            "self_attn.q_proj" => "attn_q",
            "self_attn.k_proj" => "attn_k",
            "self_attn.v_proj" => "attn_v",
            "self_attn.out_proj" => "attn_output",
            "self_attn.q_layernorm" => "attn_q_norm",
            "self_attn.k_layernorm" => "attn_k_norm",
            "conv.conv" => "shortconv.conv",
            "conv.in_proj" => "shortconv.in_proj",
            "conv.out_proj" => "shortconv.out_proj",
            other => panic!("unexpected tensor {other}"),
        };
        format!("blk.{layer}.{g}.{suffix}")
    };
    let mut names: Vec<&String> = weights.keys().collect();
    names.sort();
    let tensors: Vec<GgufTensor> = names
        .into_iter()
        .map(|name| {
            let mut a = weights[name].as_dtype(Dtype::Float32).unwrap();
            if name.ends_with("conv.conv.weight") {
                // `[C, 1, K]` squeezed, as llama.cpp's converter does
                a = a.squeeze_axes(&[1]).unwrap();
            }
            a.eval().unwrap();
            let shape: Vec<usize> = a.shape().iter().map(|&d| d as usize).collect();
            GgufTensor::f32(gguf_name(name), &shape, a.as_slice::<f32>())
        })
        .collect();
    let gguf = dir.path().join("tiny-lfm2-f32.gguf");
    write_gguf(&gguf, &metadata, &tensors).unwrap();

    let from_folder = model::load(&folder, &LOAD).unwrap();
    let from_gguf = model::load(&gguf, &LOAD).unwrap();
    assert_eq!(from_gguf.info.family, "LFM2");
    assert_eq!(from_gguf.info.cache_layout, from_folder.info.cache_layout);
    assert!(from_gguf.info.capabilities.tools, "the template's tool format");
    let prompt: Vec<u32> = (0..24).map(|i| 3 + (i * 37 + 11) % 250).collect();
    let a = forward_fresh(from_folder.model.as_ref(), &tokens(&prompt));
    let b = forward_fresh(from_gguf.model.as_ref(), &tokens(&prompt));
    let diff = max_abs_diff(&a, &b);
    println!("LFM2 max |logit difference| folder vs GGUF: {diff:e}");
    assert!(diff < 1e-5, "the GGUF computes another model: logits differ by {diff}");
    assert_eq!(greedy_ids(&from_gguf, &prompt, 12), greedy_ids(&from_folder, &prompt, 12));
}

/// A Ministral 3 GGUF as llama.cpp's converter writes it (`mistral3.*`
/// metadata, YaRN under `rope.scaling.*`, the attention temperature's β as
/// `attention.temperature_scale`, Q and K rows permuted for its interleaved
/// RoPE) loads as the folder it was written from: the same logits and
/// tokens over a prompt that crosses the tiny model's original context of 8
/// (so the temperature scales queries). llama.cpp's `mistral3` has no
/// sliding layers: the folder is compared with every layer attending fully.
#[test]
fn a_ministral3_gguf_loads_as_the_folder_it_was_written_from() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("ministral3");
    write_tiny_family(&folder, TinyFamily::Ministral3, None, 5).unwrap();
    let config_path = folder.join("config.json");
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    config.as_object_mut().unwrap().remove("layer_types");
    config.as_object_mut().unwrap().remove("sliding_window");
    std::fs::write(&config_path, config.to_string()).unwrap();

    let int = |k: &str| GgufValue::U32(config[k].as_u64().unwrap_or_else(|| panic!("{k}")) as u32);
    let float =
        |k: &str| GgufValue::F32(config[k].as_f64().unwrap_or_else(|| panic!("{k}")) as f32);
    let rope = &config["rope_parameters"];
    let rope_float = |k: &str| GgufValue::F32(rope[k].as_f64().unwrap() as f32);
    let tokenizer = byte_level_meta();
    let metadata = vec![
        ("general.architecture", GgufValue::Str("mistral3".into())),
        ("mistral3.block_count", int("num_hidden_layers")),
        ("mistral3.context_length", int("max_position_embeddings")),
        ("mistral3.embedding_length", int("hidden_size")),
        ("mistral3.feed_forward_length", int("intermediate_size")),
        ("mistral3.attention.head_count", int("num_attention_heads")),
        ("mistral3.attention.head_count_kv", int("num_key_value_heads")),
        ("mistral3.attention.key_length", int("head_dim")),
        ("mistral3.attention.value_length", int("head_dim")),
        ("mistral3.attention.layer_norm_rms_epsilon", float("rms_norm_eps")),
        ("mistral3.rope.freq_base", rope_float("rope_theta")),
        ("mistral3.rope.scaling.type", GgufValue::Str("yarn".into())),
        ("mistral3.rope.scaling.factor", rope_float("factor")),
        ("mistral3.rope.scaling.yarn_beta_fast", rope_float("beta_fast")),
        ("mistral3.rope.scaling.yarn_beta_slow", rope_float("beta_slow")),
        ("mistral3.rope.scaling.yarn_log_multiplier", GgufValue::F32(1.0)),
        (
            "mistral3.rope.scaling.original_context_length",
            GgufValue::U32(rope["original_max_position_embeddings"].as_u64().unwrap() as u32),
        ),
        ("mistral3.attention.temperature_scale", rope_float("llama_4_scaling_beta")),
        ("tokenizer.ggml.model", GgufValue::Str(tokenizer.model.clone())),
        ("tokenizer.ggml.pre", GgufValue::Str(tokenizer.pre.clone().unwrap())),
        ("tokenizer.ggml.tokens", GgufValue::Strings(tokenizer.tokens.clone())),
        ("tokenizer.ggml.token_type", GgufValue::I32s(tokenizer.token_types.clone())),
        ("tokenizer.ggml.merges", GgufValue::Strings(tokenizer.merges.clone())),
        ("tokenizer.ggml.bos_token_id", GgufValue::U32(tokenizer.bos_id.unwrap())),
        ("tokenizer.ggml.eos_token_id", GgufValue::U32(tokenizer.eos_id.unwrap())),
        ("tokenizer.ggml.add_bos_token", GgufValue::Bool(false)),
        ("tokenizer.chat_template", GgufValue::Str(tokenizer.chat_template.clone().unwrap())),
    ];
    let weights: HashMap<String, Array> =
        Array::load_safetensors(folder.join("model.safetensors")).unwrap();
    let heads = |name: &str| {
        let key =
            if name.contains("q_proj") { "num_attention_heads" } else { "num_key_value_heads" };
        config[key].as_i64().unwrap() as i32
    };
    let mut names: Vec<&String> = weights.keys().collect();
    names.sort();
    let tensors: Vec<GgufTensor> = names
        .into_iter()
        .map(|name| {
            let mut a = weights[name].as_dtype(Dtype::Float32).unwrap();
            if name.contains("q_proj") || name.contains("k_proj") {
                // llama.cpp's permutation: per head, rows (2, d/2) → (d/2, 2).
                let (rows, cols) = (a.dim(0), a.dim(1));
                let h = heads(name);
                a = a
                    .reshape(&[h, 2, rows / h / 2, cols])
                    .unwrap()
                    .transpose_axes(&[0, 2, 1, 3])
                    .unwrap()
                    .reshape(&[rows, cols])
                    .unwrap();
            }
            a.eval().unwrap();
            let shape: Vec<usize> = a.shape().iter().map(|&d| d as usize).collect();
            GgufTensor::f32(gguf_name(name), &shape, a.as_slice::<f32>())
        })
        .collect();
    let gguf = dir.path().join("tiny-ministral3-f32.gguf");
    write_gguf(&gguf, &metadata, &tensors).unwrap();

    let from_folder = model::load(&folder, &LOAD).unwrap();
    let from_gguf = model::load(&gguf, &LOAD).unwrap();
    assert_eq!(from_gguf.info.family, from_folder.info.family);
    let prompt: Vec<u32> = (0..24).map(|i| 3 + (i * 37 + 11) % 250).collect();
    let a = forward_fresh(from_folder.model.as_ref(), &tokens(&prompt));
    let b = forward_fresh(from_gguf.model.as_ref(), &tokens(&prompt));
    let diff = max_abs_diff(&a, &b);
    println!("max |logit difference| folder vs GGUF: {diff:e}");
    assert!(diff < 1e-5, "the GGUF computes another model: logits differ by {diff}");
    assert_eq!(greedy_ids(&from_gguf, &prompt, 12), greedy_ids(&from_folder, &prompt, 12));
}
