//! A tiny seeded Ministral 3 (`ministral3`, the text model of Mistral 3)
//! in the layouts users download: float with Hugging Face names, or 4-bit as
//! mlx-lm converts it. An explicit head size (32) unlike hidden / heads,
//! GQA, an untied head; YaRN RoPE and Llama 4's attention scaling as the
//! released checkpoints set them, but with an original context of 8 so the
//! test prompts (23 tokens) cross two of its steps; sliding (window 8) and
//! full layers alternating, which the reference supports though the
//! released checkpoints attend fully.
use std::collections::HashMap;
use std::path::Path;

use mlx_rs::Array;
use serde_json::{json, Value};

use super::families::Dims;
use super::{save_checkpoint, tiny_tokenizer, Rng};
use crate::error::{Error, Result};
use crate::weights::QuantSpec;

/// The tiny checkpoint's sliding window and original context (both shorter
/// than the test prompts).
pub const MINISTRAL3_WINDOW: i32 = 8;

/// The text config of a tiny Ministral 3 (`ministral3`) of sizes `d`.
pub(crate) fn ministral3_text_config(d: Dims, vocab: i32, tied: bool) -> Value {
    let types: Vec<&str> = (0..d.layers)
        .map(|l| if l % 2 == 0 { "sliding_attention" } else { "full_attention" })
        .collect();
    json!({
        "model_type": "ministral3",
        "vocab_size": vocab,
        "hidden_size": d.hidden,
        "intermediate_size": d.intermediate,
        "head_dim": d.head_dim,
        "num_hidden_layers": d.layers,
        "num_attention_heads": d.heads,
        "num_key_value_heads": d.kv_heads,
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 16 * MINISTRAL3_WINDOW,
        "layer_types": types,
        "sliding_window": MINISTRAL3_WINDOW,
        "tie_word_embeddings": tied,
        "rope_parameters": {"rope_type": "yarn", "type": "yarn", "rope_theta": 1000000.0,
            "factor": 16.0, "original_max_position_embeddings": MINISTRAL3_WINDOW,
            "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
            "llama_4_scaling_beta": 0.1},
    })
}

/// The decoder's tensors under `prefix` and the head as `head` (`None`:
/// tied); returns the matrices' module paths (what 4-bit quantizes).
pub(crate) fn decoder_tensors(
    tensors: &mut HashMap<String, Array>,
    rng: &mut Rng,
    d: Dims,
    vocab: i32,
    prefix: &str,
    head: Option<&str>,
) -> Vec<String> {
    let (h, hd, i) = (d.hidden, d.head_dim, d.intermediate);
    let mut matrices = Vec::new();
    let mut put = |name: String, shape: &[i32], scale: f32, center: f32| {
        tensors.insert(name, rng.tensor(shape, scale, center));
    };
    put(format!("{prefix}.embed_tokens.weight"), &[vocab, h], 0.5, 0.0);
    matrices.push(format!("{prefix}.embed_tokens"));
    if let Some(head) = head {
        put(format!("{head}.weight"), &[vocab, h], 1.0 / (h as f32).sqrt(), 0.0);
        matrices.push(head.to_string());
    }
    put(format!("{prefix}.norm.weight"), &[h], 0.1, 1.0);
    for l in 0..d.layers {
        let p = format!("{prefix}.layers.{l}");
        put(format!("{p}.input_layernorm.weight"), &[h], 0.1, 1.0);
        put(format!("{p}.post_attention_layernorm.weight"), &[h], 0.1, 1.0);
        for (name, out, inp) in [
            ("self_attn.q_proj", d.heads * hd, h),
            ("self_attn.k_proj", d.kv_heads * hd, h),
            ("self_attn.v_proj", d.kv_heads * hd, h),
            ("self_attn.o_proj", h, d.heads * hd),
            ("mlp.gate_proj", i, h),
            ("mlp.up_proj", i, h),
            ("mlp.down_proj", h, i),
        ] {
            put(format!("{p}.{name}.weight"), &[out, inp], 1.0 / (inp as f32).sqrt(), 0.0);
            matrices.push(format!("{p}.{name}"));
        }
    }
    matrices
}

/// Writes the tiny text-only Ministral 3 of `d` into `dir`; returns its
/// vocabulary size.
pub(crate) fn write_ministral3(
    dir: &Path,
    d: Dims,
    quantize: Option<QuantSpec>,
    seed: u64,
) -> Result<i32> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let tokenizer = tiny_tokenizer()?;
    tokenizer.write_hf_files(dir)?;
    let vocab = tokenizer.vocab_size() as i32;
    let mut tensors = HashMap::new();
    let mut rng = Rng(seed);
    let matrices = decoder_tensors(&mut tensors, &mut rng, d, vocab, "model", Some("lm_head"));
    let mut config = ministral3_text_config(d, vocab, false);
    config["architectures"] = json!(["Ministral3ForCausalLM"]);
    config["bos_token_id"] = json!(1);
    config["eos_token_id"] = json!(2);
    config["torch_dtype"] = json!("float32");
    save_checkpoint(dir, tensors, &matrices, config, quantize)?;
    Ok(vocab)
}
