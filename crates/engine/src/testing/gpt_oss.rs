//! A tiny seeded gpt-oss in the two layouts users download: float as OpenAI
//! ships it (each layer's experts' gate and up fused in
//! `experts.gate_up_proj.weight`, their rows interleaved, biases named
//! `*_proj_bias`) or 4-bit as mlx-lm converts it (`experts.{gate,up,down}_proj`
//! with `.bias`). Sliding and full attention layers alternate, the window
//! (8) shorter than the test prompts; GQA with an explicit head size (32)
//! unlike hidden / heads; a learned sink per head; YaRN RoPE as gpt-oss-20b
//! sets it; top 2 of 4 experts. The tokenizer has harmony's specials and
//! gpt-oss's own chat template. The tensors are what the family's loader
//! takes for the config ([`super::recorded`]); what stays written out here
//! is OpenAI's layout and the few values the tests want larger or zero.
use std::collections::HashMap;
use std::path::Path;

use mlx_rs::{ops, Array};
use serde_json::{json, Value};

use super::families::{Dims, TinyFamily};
use super::recorded::{write_recorded_as, Tensors};
use super::{byte_level_meta, save_checkpoint, Values};
use crate::error::{Error, Result};
use crate::tokenizer::{GgufTokenizerMeta, Tokenizer};
use crate::weights::quantized_ops;
use crate::weights::{QuantMode, QuantSpec};

/// gpt-oss's chat template as its checkpoints ship it (the harmony format).
pub const GPT_OSS_CHAT_TEMPLATE: &str =
    include_str!("../../tests/fixtures/templates/gpt-oss.jinja");

/// Harmony's special tokens, appended after the tiny vocabulary
/// (`<|endoftext|>` is the tiny vocabulary's id 0 already).
pub const GPT_OSS_SPECIAL_TOKENS: [&str; 8] = [
    "<|startoftext|>",
    "<|start|>",
    "<|end|>",
    "<|message|>",
    "<|channel|>",
    "<|constrain|>",
    "<|return|>",
    "<|call|>",
];

/// The sliding window of the tiny checkpoint (shorter than the test prompts).
pub const GPT_OSS_WINDOW: i32 = 8;
/// gpt-oss's own window, for checkpoints of benchmark size.
const REAL_WINDOW: i32 = 128;

/// The tiny vocabulary with harmony's specials; generation ends at
/// `<|return|>` or `<|call|>` (config.json's `eos_token_id` lists both).
pub fn gpt_oss_byte_level_meta() -> GgufTokenizerMeta {
    let mut meta = byte_level_meta();
    let first = meta.tokens.len() as u32;
    for t in GPT_OSS_SPECIAL_TOKENS {
        meta.tokens.push(t.to_owned());
        meta.token_types.push(3);
    }
    meta.bos_id = Some(first);
    meta.eos_id = Some(first + 6);
    meta.add_bos = Some(false);
    meta.chat_template = Some(GPT_OSS_CHAT_TEMPLATE.into());
    meta
}

/// Writes the tiny gpt-oss of `d` (`hidden`, `layers`, `heads`, `kv_heads`,
/// `head_dim`, `experts`, `top_k`, `moe_intermediate`) into `dir`; returns
/// its vocabulary size.
pub(crate) fn write_gpt_oss(
    dir: &Path,
    d: Dims,
    quantize: Option<QuantSpec>,
    seed: u64,
) -> Result<i32> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let tokenizer = Tokenizer::from_gguf(gpt_oss_byte_level_meta())?;
    tokenizer.write_hf_files(dir)?;
    let vocab = tokenizer.vocab_size() as i32;
    let config = gpt_oss_config(d, vocab, &tokenizer);
    // Float as OpenAI ships it; 4-bit in mlx-lm's names, the loader's own.
    let openai = quantize.is_none();
    write_recorded_as(
        dir,
        config,
        quantize,
        Values::seeded(seed),
        |_| false,
        |tensors| {
            test_values(tensors, vocab)?;
            if openai {
                fuse_experts_gate_up(tensors)?;
            }
            Ok(())
        },
    )?;
    Ok(vocab)
}

/// Where the tiny gpt-oss's values leave the recording's rules: the
/// head's rows of the specials (the tiny vocabulary's ChatML three and
/// harmony's, end-of-turn tokens among them) are zero, so random weights
/// rarely end a reply early and tests decode the lengths they ask for; the
/// sinks are of either sign and up to a few logits (±2), so some heads give
/// them real weight; the experts' gate and up matrices are large (±1.2),
/// so the SwiGLU's clamps at ±7 cut some values.
fn test_values(tensors: &mut Tensors, vocab: i32) -> Result<()> {
    let ordinary: Vec<f32> = (0..vocab)
        .map(|t| {
            let special = t < 3 || t >= vocab - GPT_OSS_SPECIAL_TOKENS.len() as i32;
            if special {
                0.0
            } else {
                1.0
            }
        })
        .collect();
    let ordinary = Array::from_slice(&ordinary, &[vocab, 1]);
    for (name, t) in tensors.iter_mut() {
        if name == "lm_head.weight" {
            *t = t.multiply(&ordinary)?;
            continue;
        }
        // The recording draws vectors at ±0.1 and matrices at ±1/√(inputs).
        let factor = if name.ends_with(".sinks") {
            20.0
        } else if name.ends_with(".experts.gate_proj.weight")
            || name.ends_with(".experts.up_proj.weight")
        {
            1.2 * (t.dim(-1) as f32).sqrt()
        } else {
            continue;
        };
        *t = t.multiply(Array::from_f32(factor))?;
    }
    Ok(())
}

/// OpenAI's layout of every layer's experts ([`fuse_gate_up`]).
fn fuse_experts_gate_up(tensors: &mut Tensors) -> Result<()> {
    let experts: Vec<String> = tensors
        .keys()
        .filter_map(|n| n.strip_suffix(".gate_proj.weight"))
        .filter(|x| x.ends_with(".experts"))
        .map(str::to_string)
        .collect();
    for x in experts {
        fuse_gate_up(tensors, &x)?;
    }
    Ok(())
}

/// The tiny gpt-oss's config.json: sliding and full layers alternating.
fn gpt_oss_config(d: Dims, vocab: i32, tokenizer: &Tokenizer) -> Value {
    let (h, hd, e, i) = (d.hidden, d.head_dim, d.experts, d.moe_intermediate);
    let types: Vec<&str> = (0..d.layers)
        .map(|l| if l % 2 == 0 { "sliding_attention" } else { "full_attention" })
        .collect();
    json!({
        "model_type": "gpt_oss",
        "architectures": ["GptOssForCausalLM"],
        "vocab_size": vocab,
        "hidden_size": h,
        "intermediate_size": i,
        "head_dim": hd,
        "num_hidden_layers": d.layers,
        "num_attention_heads": d.heads,
        "num_key_value_heads": d.kv_heads,
        "num_local_experts": e,
        "num_experts_per_tok": d.top_k,
        "experts_per_token": d.top_k,
        // The tiny test sizes cross a short window; bench sizes keep the real one.
        "sliding_window": if h >= 512 { REAL_WINDOW } else { GPT_OSS_WINDOW },
        "layer_types": types,
        "rms_norm_eps": 1e-5,
        "rope_theta": 150000,
        "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                         "original_max_position_embeddings": 4096, "rope_type": "yarn",
                         "truncate": false},
        "swiglu_limit": 7.0,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": false,
        "bos_token_id": tokenizer.token_to_id("<|startoftext|>"),
        "eos_token_id": [tokenizer.token_to_id("<|return|>"), 0, tokenizer.token_to_id("<|call|>")],
        "torch_dtype": "float32",
    })
}

/// OpenAI's layout: gate and up `[E, I, D]` → `gate_up_proj.weight`
/// `[E, 2I, D]` with rows gate 0, up 0, gate 1, …; their biases likewise
/// into `gate_up_proj_bias`; `down_proj.bias` → `down_proj_bias`.
fn fuse_gate_up(tensors: &mut HashMap<String, Array>, x: &str) -> Result<()> {
    let mut take = |name: &str| tensors.remove(&format!("{x}.{name}")).expect("written above");
    let interleave = |gate: Array, up: Array| -> Result<Array> {
        // Stacked on a new axis after the rows, then the two merged.
        let mut shape = gate.shape().to_vec();
        let both = ops::stack(&[gate, up], 2)?;
        shape[1] *= 2;
        Ok(both.reshape(&shape)?)
    };
    let weight = interleave(take("gate_proj.weight"), take("up_proj.weight"))?;
    let bias = interleave(take("gate_proj.bias"), take("up_proj.bias"))?;
    let down_bias = take("down_proj.bias");
    tensors.insert(format!("{x}.gate_up_proj.weight"), weight);
    tensors.insert(format!("{x}.gate_up_proj_bias"), bias);
    tensors.insert(format!("{x}.down_proj_bias"), down_bias);
    Ok(())
}

/// The tiny float gpt-oss as OpenAI ships gpt-oss: each layer's experts in
/// MXFP4 (`gate_up_proj_blocks` `[E, 2I, D / 32, 16]` bytes and
/// `gate_up_proj_scales`, rows interleaved; `down_proj_*` likewise), the rest
/// float, and Hugging Face's `quantization_config` naming the method.
pub fn write_tiny_gpt_oss_openai_mxfp4(dir: &Path, seed: u64) -> Result<i32> {
    let d = Dims::tiny(TinyFamily::GptOss);
    let vocab = write_gpt_oss(dir, d, None, seed)?;
    let file = dir.join("model.safetensors");
    let mut tensors = Array::load_safetensors(&file).map_err(|e| Error::Mlx(e.to_string()))?;
    let mx = QuantSpec { group_size: 32, bits: 4 };
    for l in 0..d.layers {
        let x = format!("model.layers.{l}.mlp.experts");
        for proj in ["gate_up_proj", "down_proj"] {
            let w = tensors.remove(&format!("{x}.{proj}.weight")).expect("written above");
            let (e, rows, cols) = (w.dim(0), w.dim(1), w.dim(2));
            let (q, scales, _) = quantized_ops::quantize(&w, mx, QuantMode::Mxfp4)?;
            let blocks = q.view::<u8>()?.reshape(&[e, rows, cols / 32, 16])?;
            tensors.insert(format!("{x}.{proj}_blocks"), blocks);
            tensors.insert(format!("{x}.{proj}_scales"), scales);
        }
    }
    // MLX reads the file lazily: everything in memory before it is rewritten.
    mlx_rs::transforms::eval(tensors.values())?;
    let config_path = dir.join("config.json");
    let text = std::fs::read_to_string(&config_path).map_err(|e| Error::io(&config_path, e))?;
    let mut config: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::InvalidConfig(e.to_string()))?;
    config["quantization_config"] = json!({"quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                   "model.embed_tokens", "lm_head"]});
    save_checkpoint(dir, tensors, &[], config, None)?;
    Ok(vocab)
}
