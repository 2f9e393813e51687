//! A Qwen3 GGUF, written here from a tiny Qwen3 folder the way llama.cpp's
//! converter lays it out (its tensor names, `qwen3.*` metadata, the
//! vocabulary as `tokenizer.ggml.*` arrays), loads as the same model: the
//! same logits and the same tokens. This checks the metadata → config mapping
//! (a misread head count, head dim, epsilon or rope base changes the logits),
//! that Qwen3's Q/K weights are not permuted as llama's are, and that the
//! Q/K norms find their names.
use std::collections::HashMap;
use std::path::Path;

use engine::model::{self, LoadOptions, WeightFormat};
use engine::weights::gguf::{dequantize, mxfp4_to_mlx, GgmlType};
use engine::weights::{quantized_ops, QuantMode, QuantSpec};
use fixtures::{byte_level_meta, write_gguf, write_tiny_family, GgufTensor, GgufValue, TinyFamily};
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
    lfm2_gguf_loads_as_its_folder(TinyFamily::Lfm2, "LFM2", "Lfm2ForCausalLM");
}

/// An LFM2-MoE GGUF as llama.cpp's converter writes it (`lfm2moe`): LFM2's
/// layout, plus each block's experts stacked into `ffn_{gate,up,down}_exps`,
/// the router as `ffn_gate_inp`, its load-balancing bias as
/// `exp_probs_b.bias`, the dense blocks counted by
/// `leading_dense_block_count` and sigmoid gating. The tiny folder is in
/// Hugging Face's names (experts one by one), so the stacking here is the
/// converter's, not our loader's.
#[test]
fn an_lfm2_moe_gguf_loads_as_the_folder_it_was_written_from() {
    lfm2_gguf_loads_as_its_folder(TinyFamily::Lfm2Moe, "LFM2-MoE", "Lfm2MoeForCausalLM");
}

fn lfm2_gguf_loads_as_its_folder(family: TinyFamily, name: &str, class_name: &str) {
    let moe = family == TinyFamily::Lfm2Moe;
    let arch = if moe { "lfm2moe" } else { "lfm2" };
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join(family.name());
    write_tiny_family(&folder, family, None, 5).unwrap();
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
    let tokenizer = fixtures::lfm2_byte_level_meta();
    let mut metadata = vec![
        ("general.architecture".to_string(), GgufValue::Str(arch.into())),
        (format!("{arch}.block_count"), int("num_hidden_layers")),
        (format!("{arch}.context_length"), int("max_position_embeddings")),
        (format!("{arch}.embedding_length"), int("hidden_size")),
        (format!("{arch}.feed_forward_length"), GgufValue::U32(ff)),
        (format!("{arch}.attention.head_count"), int("num_attention_heads")),
        (format!("{arch}.attention.head_count_kv"), GgufValue::I32s(per_layer)),
        (
            format!("{arch}.attention.layer_norm_rms_epsilon"),
            GgufValue::F32(config["norm_eps"].as_f64().unwrap() as f32),
        ),
        (
            format!("{arch}.rope.freq_base"),
            GgufValue::F32(config["rope_theta"].as_f64().unwrap() as f32),
        ),
        (format!("{arch}.shortconv.l_cache"), int("conv_L_cache")),
        ("tokenizer.ggml.model".into(), GgufValue::Str(tokenizer.model.clone())),
        ("tokenizer.ggml.pre".into(), GgufValue::Str(tokenizer.pre.clone().unwrap())),
        ("tokenizer.ggml.tokens".into(), GgufValue::Strings(tokenizer.tokens.clone())),
        ("tokenizer.ggml.token_type".into(), GgufValue::I32s(tokenizer.token_types.clone())),
        ("tokenizer.ggml.merges".into(), GgufValue::Strings(tokenizer.merges.clone())),
        ("tokenizer.ggml.bos_token_id".into(), GgufValue::U32(tokenizer.bos_id.unwrap())),
        ("tokenizer.ggml.eos_token_id".into(), GgufValue::U32(tokenizer.eos_id.unwrap())),
        ("tokenizer.ggml.add_bos_token".into(), GgufValue::Bool(false)),
        (
            "tokenizer.chat_template".into(),
            GgufValue::Str(tokenizer.chat_template.clone().unwrap()),
        ),
    ];
    if moe {
        metadata.extend([
            (format!("{arch}.expert_count"), int("num_experts")),
            (format!("{arch}.expert_used_count"), int("num_experts_per_tok")),
            (format!("{arch}.expert_feed_forward_length"), int("moe_intermediate_size")),
            (format!("{arch}.leading_dense_block_count"), int("num_dense_layers")),
            // llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID
            (format!("{arch}.expert_gating_func"), GgufValue::U32(2)),
        ]);
    }
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
        if module == "feed_forward.expert_bias" {
            return format!("blk.{layer}.exp_probs_b.bias");
        }
        let (name, suffix) = module.rsplit_once('.').unwrap();
        let g = match name {
            "operator_norm" => "attn_norm",
            "ffn_norm" => "ffn_norm",
            "feed_forward.w1" => "ffn_gate",
            "feed_forward.w3" => "ffn_up",
            "feed_forward.w2" => "ffn_down",
            "feed_forward.gate" => "ffn_gate_inp",
            "feed_forward.experts.w1" => "ffn_gate_exps",
            "feed_forward.experts.w3" => "ffn_up_exps",
            "feed_forward.experts.w2" => "ffn_down_exps",
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
    let experts = config["num_experts"].as_i64().unwrap_or(0) as usize;
    let mut stacked: HashMap<String, Array> = HashMap::new();
    let mut names: Vec<&String> = weights.keys().filter(|n| !n.contains(".experts.")).collect();
    for layer in 0..types.len() {
        for part in ["w1", "w3", "w2"] {
            let ffn = format!("model.layers.{layer}.feed_forward");
            let one = |e: usize| weights.get(&format!("{ffn}.experts.{e}.{part}.weight"));
            if one(0).is_none() {
                continue;
            }
            // the converter's torch.stack(dim=0) over the experts in order
            let each: Vec<Array> = (0..experts).map(|e| one(e).unwrap().clone()).collect();
            stacked.insert(
                format!("{ffn}.experts.{part}.weight"),
                mlx_rs::ops::stack(&each, 0).unwrap(),
            );
        }
    }
    assert_eq!(!stacked.is_empty(), moe, "experts one by one in the MoE folder only");
    names.extend(stacked.keys());
    names.sort();
    let tensors: Vec<GgufTensor> = names
        .into_iter()
        .map(|name| {
            let a = weights.get(name).unwrap_or_else(|| &stacked[name]);
            let mut a = a.as_dtype(Dtype::Float32).unwrap();
            if name.ends_with("conv.conv.weight") {
                // Hugging Face's `[C, 1, K]` (or MLX's `[C, K, 1]`) squeezed
                // to `[C, K]`, as llama.cpp's converter does
                let one = if a.shape()[1] == 1 { 1 } else { 2 };
                a = a.squeeze_axes(&[one]).unwrap();
            }
            a.eval().unwrap();
            let shape: Vec<usize> = a.shape().iter().map(|&d| d as usize).collect();
            GgufTensor::f32(gguf_name(name), &shape, a.as_slice::<f32>())
        })
        .collect();
    let gguf = dir.path().join(format!("tiny-{arch}-f32.gguf"));
    let (keys, values): (Vec<String>, Vec<GgufValue>) = metadata.into_iter().unzip();
    let metadata: Vec<(&str, GgufValue)> = keys.iter().map(String::as_str).zip(values).collect();
    write_gguf(&gguf, &metadata, &tensors).unwrap();

    let from_folder = model::load(&folder, &LOAD).unwrap();
    let from_gguf = model::load(&gguf, &LOAD).unwrap();
    assert_eq!(from_gguf.info.family, name);
    assert_eq!(from_gguf.info.cache_layout, from_folder.info.cache_layout);
    assert!(from_gguf.info.capabilities.tools, "the template's tool format");
    let prompt: Vec<u32> = (0..24).map(|i| 3 + (i * 37 + 11) % 250).collect();
    let a = forward_fresh(from_folder.model.as_ref(), &tokens(&prompt));
    let b = forward_fresh(from_gguf.model.as_ref(), &tokens(&prompt));
    let diff = max_abs_diff(&a, &b);
    println!("{name} max |logit difference| folder vs GGUF: {diff:e}");
    assert!(diff < 1e-5, "the GGUF computes another model: logits differ by {diff}");
    assert_eq!(greedy_ids(&from_gguf, &prompt, 12), greedy_ids(&from_folder, &prompt, 12));
    converts_to_a_folder_that_computes_the_same(&gguf, LOAD.format, &prompt, class_name);
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
    let class = "Ministral3ForCausalLM";
    converts_to_a_folder_that_computes_the_same(&gguf, LOAD.format, &prompt, class);
}

/// `vlm convert` of `gguf` in `format` makes a folder that loads as the
/// GGUF does (the same logits and greedy tokens over `prompt`) and names the
/// family's Hugging Face `class`; returns the folder's config.json.
fn converts_to_a_folder_that_computes_the_same(
    gguf: &Path,
    format: WeightFormat,
    prompt: &[u32],
    class: &str,
) -> Value {
    let out = tempfile::tempdir().unwrap();
    engine::convert::gguf_to_folder(gguf, out.path(), format).unwrap();
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("config.json")).unwrap())
            .unwrap();
    assert_eq!(config["architectures"][0], class, "{format:?}");
    let load = LoadOptions { format };
    let (converted, from_gguf) =
        (model::load(out.path(), &load).unwrap(), model::load(gguf, &load).unwrap());
    assert_eq!(converted.info.cache_layout, from_gguf.info.cache_layout);
    let a = forward_fresh(converted.model.as_ref(), &tokens(prompt));
    let b = forward_fresh(from_gguf.model.as_ref(), &tokens(prompt));
    let diff = max_abs_diff(&a, &b);
    println!("{class} {format:?}: max |logit difference| converted folder vs GGUF: {diff:e}");
    assert!(diff < 1e-5, "{format:?}: the converted folder computes another model: {diff}");
    assert_eq!(greedy_ids(&converted, prompt, 12), greedy_ids(&from_gguf, prompt, 12));
    config
}

/// MXFP4 blocks `[.., groups, 17]` as ggml lays them out (the E8M0 exponent,
/// then value j in the low nibble of byte j and value j + 16 in its high
/// nibble) from OpenAI's / MLX's layout (16 bytes per group, values in order,
/// two to a byte, the first low) and the group's exponents — what llama.cpp's
/// converter does to gpt-oss's `*_blocks` and `*_scales`.
fn ggml_mxfp4(packed: &[u8], scales: &[u8]) -> Vec<u8> {
    assert_eq!(packed.len(), scales.len() * 16);
    let mut out = Vec::with_capacity(scales.len() * 17);
    for (group, &e) in packed.chunks_exact(16).zip(scales) {
        let value = |k: usize| (group[k / 2] >> (4 * (k % 2))) & 0xF;
        out.push(e);
        out.extend((0..16).map(|j| value(j) | (value(j + 16) << 4)));
    }
    out
}

fn bytes_of(a: &Array) -> Vec<u8> {
    let a = a.as_dtype(Dtype::Uint8).unwrap().contiguous().unwrap();
    a.eval().unwrap();
    a.as_slice::<u8>().to_vec()
}

/// gpt-oss as llama.cpp's converter writes it from OpenAI's checkpoint: the
/// experts' MXFP4 blocks re-laid as ggml's MXFP4 (type 39), gate and up split
/// from their interleaved rows (`ffn_gate_exps` / `ffn_up_exps`, biases
/// likewise), the sinks as `attn_sinks.weight`, the router as
/// `ffn_gate_inp`, the norm after attention as `post_attention_norm`,
/// `gpt-oss.*` metadata with YaRN under `rope.scaling.*`.
fn write_gpt_oss_gguf(folder: &Path, out: &Path) {
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(folder.join("config.json")).unwrap())
            .unwrap();
    let int = |k: &str| GgufValue::U32(config[k].as_u64().unwrap_or_else(|| panic!("{k}")) as u32);
    let float =
        |k: &str| GgufValue::F32(config[k].as_f64().unwrap_or_else(|| panic!("{k}")) as f32);
    let rope = &config["rope_scaling"];
    let tokenizer = fixtures::gpt_oss_byte_level_meta();
    let metadata = vec![
        ("general.architecture", GgufValue::Str("gpt-oss".into())),
        ("gpt-oss.block_count", int("num_hidden_layers")),
        ("gpt-oss.context_length", int("max_position_embeddings")),
        ("gpt-oss.embedding_length", int("hidden_size")),
        ("gpt-oss.feed_forward_length", int("intermediate_size")),
        ("gpt-oss.expert_feed_forward_length", int("intermediate_size")),
        ("gpt-oss.expert_count", int("num_local_experts")),
        ("gpt-oss.expert_used_count", int("num_experts_per_tok")),
        ("gpt-oss.attention.head_count", int("num_attention_heads")),
        ("gpt-oss.attention.head_count_kv", int("num_key_value_heads")),
        ("gpt-oss.attention.key_length", int("head_dim")),
        ("gpt-oss.attention.value_length", int("head_dim")),
        ("gpt-oss.attention.layer_norm_rms_epsilon", float("rms_norm_eps")),
        ("gpt-oss.attention.sliding_window", int("sliding_window")),
        ("gpt-oss.rope.freq_base", float("rope_theta")),
        ("gpt-oss.rope.scaling.type", GgufValue::Str("yarn".into())),
        ("gpt-oss.rope.scaling.factor", GgufValue::F32(rope["factor"].as_f64().unwrap() as f32)),
        (
            "gpt-oss.rope.scaling.original_context_length",
            GgufValue::U32(rope["original_max_position_embeddings"].as_u64().unwrap() as u32),
        ),
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
    let mut weights: HashMap<String, Array> =
        Array::load_safetensors(folder.join("model.safetensors")).unwrap();
    let f32_tensor = |name: String, a: &Array| {
        let a = a.as_dtype(Dtype::Float32).unwrap().contiguous().unwrap();
        a.eval().unwrap();
        let shape: Vec<usize> = a.shape().iter().map(|&d| d as usize).collect();
        GgufTensor::f32(name, &shape, a.as_slice::<f32>())
    };
    // Rows `start`, `start + 2`, … of `[E, 2I, ..]` (gate: 0, up: 1).
    let rows_of = |a: &Array, start: i32| {
        let idx: Vec<i32> = (start..a.dim(1)).step_by(2).collect();
        a.take_axis(Array::from_slice(&idx, &[idx.len() as i32]), 1).unwrap()
    };
    let mxfp4_tensor = |name: String, blocks: &Array, scales: &Array| {
        let s = blocks.shape();
        let shape = vec![s[0] as usize, s[1] as usize, s[2] as usize * 32];
        GgufTensor { name, shape, kind: 39, data: ggml_mxfp4(&bytes_of(blocks), &bytes_of(scales)) }
    };
    let mut tensors = Vec::new();
    let layers = config["num_hidden_layers"].as_i64().unwrap();
    for l in 0..layers {
        let (p, b) = (format!("model.layers.{l}"), format!("blk.{l}"));
        let x = format!("{p}.mlp.experts");
        let mut take = |n: &str| weights.remove(&format!("{x}.{n}")).unwrap();
        let (gu_blocks, gu_scales) = (take("gate_up_proj_blocks"), take("gate_up_proj_scales"));
        let (down_blocks, down_scales) = (take("down_proj_blocks"), take("down_proj_scales"));
        let (gu_bias, down_bias) = (take("gate_up_proj_bias"), take("down_proj_bias"));
        for (part, start) in [("gate", 0), ("up", 1)] {
            let name = format!("{b}.ffn_{part}_exps");
            let (blocks, scales) = (rows_of(&gu_blocks, start), rows_of(&gu_scales, start));
            tensors.push(mxfp4_tensor(format!("{name}.weight"), &blocks, &scales));
            tensors.push(f32_tensor(format!("{name}.bias"), &rows_of(&gu_bias, start)));
        }
        tensors.push(mxfp4_tensor(format!("{b}.ffn_down_exps.weight"), &down_blocks, &down_scales));
        tensors.push(f32_tensor(format!("{b}.ffn_down_exps.bias"), &down_bias));
    }
    let mut names: Vec<String> = weights.keys().cloned().collect();
    names.sort();
    for name in names {
        let gguf = match name.as_str() {
            "model.embed_tokens.weight" => "token_embd.weight".to_string(),
            "model.norm.weight" => "output_norm.weight".to_string(),
            "lm_head.weight" => "output.weight".to_string(),
            _ => {
                let rest = name.strip_prefix("model.layers.").unwrap();
                let (layer, module) = rest.split_once('.').unwrap();
                let part = match module {
                    "self_attn.sinks" => "attn_sinks.weight".to_string(),
                    _ => {
                        let (m, suffix) = module.rsplit_once('.').unwrap();
                        let g = match m {
                            "input_layernorm" => "attn_norm",
                            "post_attention_layernorm" => "post_attention_norm",
                            "self_attn.q_proj" => "attn_q",
                            "self_attn.k_proj" => "attn_k",
                            "self_attn.v_proj" => "attn_v",
                            "self_attn.o_proj" => "attn_output",
                            "mlp.router" => "ffn_gate_inp",
                            other => panic!("unexpected tensor {other}"),
                        };
                        format!("{g}.{suffix}")
                    }
                };
                format!("blk.{layer}.{part}")
            }
        };
        tensors.push(f32_tensor(gguf, &weights[&name]));
    }
    write_gguf(out, &metadata, &tensors).unwrap();
}

/// A gpt-oss GGUF with its experts in MXFP4, written from the tiny gpt-oss in
/// OpenAI's MXFP4 layout, loads as that folder does — the experts kept as
/// MLX `mxfp4` and, with `--weights float32`, dequantized: the same logits
/// over a prompt longer than the sliding window and the same greedy tokens.
/// A misread nibble order, exponent, gate/up split, sink, router or YaRN key
/// changes the logits.
#[test]
fn a_gpt_oss_mxfp4_gguf_loads_as_the_folder_it_was_written_from() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("gpt_oss");
    fixtures::write_tiny_gpt_oss_openai_mxfp4(&folder, 5).unwrap();
    let gguf = dir.path().join("tiny-gpt-oss-mxfp4.gguf");
    write_gpt_oss_gguf(&folder, &gguf);

    let prompt: Vec<u32> = (0..24).map(|i| 3 + (i * 37 + 11) % 250).collect();
    for format in [WeightFormat::AsStored, WeightFormat::Float32] {
        let load = LoadOptions { format };
        let from_folder = model::load(&folder, &load).unwrap();
        let from_gguf = model::load(&gguf, &load).unwrap();
        assert_eq!(from_gguf.info.family, "gpt-oss");
        assert_eq!(from_gguf.info.cache_layout, from_folder.info.cache_layout, "{format:?}");
        assert_eq!(from_gguf.info.context_length(), from_folder.info.context_length());
        let a = forward_fresh(from_folder.model.as_ref(), &tokens(&prompt));
        let b = forward_fresh(from_gguf.model.as_ref(), &tokens(&prompt));
        let diff = max_abs_diff(&a, &b);
        println!("gpt-oss {format:?}: max |logit difference| folder vs GGUF: {diff:e}");
        assert!(
            diff < 1e-5,
            "{format:?}: the GGUF computes another model: logits differ by {diff}"
        );
        assert_eq!(
            greedy_ids(&from_gguf, &prompt, 12),
            greedy_ids(&from_folder, &prompt, 12),
            "{format:?}"
        );
        let rendered = |m: &model::LoadedModel| m.info.capabilities;
        assert_eq!(
            rendered(&from_gguf),
            rendered(&from_folder),
            "harmony's template, from the GGUF"
        );
        // `vlm convert`: kept as MLX `mxfp4` (named so in config.json: its
        // groups of 32 at 4 bits are affine 4-bit's too), or dequantized.
        let config = converts_to_a_folder_that_computes_the_same(
            &gguf,
            format,
            &prompt,
            "GptOssForCausalLM",
        );
        let mxfp4 = |q: &Value| {
            q.as_object().is_some_and(|m| m.values().any(|v| v["mode"] == "mxfp4"))
                || q["mode"] == "mxfp4"
        };
        match format {
            WeightFormat::AsStored => assert!(mxfp4(&config["quantization"]), "{config}"),
            WeightFormat::Float32 => assert!(config.get("quantization").is_none(), "{config}"),
        }
    }
}

/// The import reads ggml's MXFP4 blocks as gguf-py (llama.cpp's own Python
/// package) reads them — bytes and values it wrote and read itself
/// (scripts/make-gguf-mxfp4-golden.sh) — both dequantized here and as MLX
/// `mxfp4` after the re-packing; and the test writer's ggml layout above
/// turns the re-packed bytes back into gguf-py's.
#[test]
fn mxfp4_blocks_read_as_gguf_py_reads_them() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens/gguf_mxfp4_gguf_py.json");
    let golden: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let hex = golden["blocks_hex"].as_str().unwrap();
    let blocks: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    let want: Vec<f32> = golden["dequantized"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect();
    let (rows, cols) =
        (golden["shape"][0].as_i64().unwrap() as i32, golden["shape"][1].as_i64().unwrap() as i32);
    assert_eq!(want.len(), (rows * cols) as usize);

    let ours = dequantize(GgmlType::Mxfp4, &blocks).unwrap();
    assert_eq!(ours, want, "dequantized as gguf-py does");

    let (packed, scales) = mxfp4_to_mlx(&blocks);
    let w = Array::from_slice(&packed, &[rows, cols / 8]);
    let s = Array::from_slice(&scales, &[rows, cols / 32]);
    let spec = QuantSpec { group_size: 32, bits: 4 };
    let mlx = quantized_ops::dequantize(&w, &s, None, spec, QuantMode::Mxfp4, Some(Dtype::Float32))
        .unwrap();
    mlx.eval().unwrap();
    assert_eq!(mlx.as_slice::<f32>(), &want[..], "MLX's mxfp4 reads the re-packed bytes alike");

    let packed_bytes: Vec<u8> = packed.iter().flat_map(|w| w.to_le_bytes()).collect();
    assert_eq!(ggml_mxfp4(&packed_bytes, &scales), blocks, "the test writer's layout is ggml's");
}
