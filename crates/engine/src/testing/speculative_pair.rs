//! A tiny target and a draft that agrees with it part of the time, for
//! checking speculative decoding against the reference (mlx-lm's
//! `speculative_generate_step`): `scripts/make-speculative-golden.sh` writes
//! the pair through the `write_tiny_model --speculative-pair` example and
//! records mlx-lm on it; `tests/engine_tests/speculative_reference.rs`
//! writes the very same files with [`write_speculative_pair`].
//!
//! Two random models agree on almost nothing, so a draft with weights of its
//! own would have every draft rejected and the comparison would prove
//! little. This draft is the target with every weight moved by seeded
//! noise: it guesses right often, not always. ([`write_draft_of`] can also
//! cut the target short, as self-speculative drafts are; on this tiny
//! target its first 3 of 4 layers kept no whole draft of 3 tokens on the
//! test's prompts, which leaves less to compare.)
//!
//! Likewise for the multi-token-prediction head against mlx-vlm
//! (`scripts/make-speculative-mtp-golden.sh`, `write_tiny_model
//! --mtp-target`, `speculative_mtp_reference.rs`): [`write_mtp_target`]
//! writes a tiny Qwen3.5 with its head, [`split_mtp_head`] the head alone as
//! mlx-vlm's splitter does.
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use mlx_rs::{ops, Array};
use serde_json::{json, Value};

use super::{write_qwen35_vl, write_tiny_qwen2, Qwen35VlDims, Rng, TinyLlama};
use crate::error::{Error, Result};

/// The target: a tiny Qwen2 (biases on Q, K and V) of this many layers.
const PAIR_TARGET_LAYERS: i32 = 4;
/// The draft keeps all the target's layers…
const PAIR_DRAFT_LAYERS: i32 = PAIR_TARGET_LAYERS;
/// …each weight multiplied by 1 + u, u uniform in ±this.
const PAIR_DRAFT_NOISE: f32 = 0.2;
/// A seed whose target meets the reference script's conditions (no special
/// id in its greedy replies, no near-tie) and drafts kept and rejected on
/// every prompt (31 to 39 each failed one of these, or replied one token
/// over and over).
const PAIR_SEED: u64 = 40;

/// Writes `dir/target` and `dir/draft`; returns their paths.
pub fn write_speculative_pair(dir: &Path) -> Result<(PathBuf, PathBuf)> {
    let (target, draft) = (dir.join("target"), dir.join("draft"));
    let spec = TinyLlama { layers: PAIR_TARGET_LAYERS, seed: PAIR_SEED, ..TinyLlama::default() };
    write_tiny_qwen2(&target, &spec)?;
    write_draft_of(&target, &draft, PAIR_DRAFT_LAYERS, PAIR_DRAFT_NOISE, PAIR_SEED + 1)?;
    Ok((target, draft))
}

/// A draft for the float checkpoint in `target`: its first `layers` decoder
/// layers and everything outside the layers, each weight `w` stored as
/// `w * (1 + u)` with `u` uniform in ±`noise` (seeded; tensors in name
/// order), with the target's tokenizer files.
pub fn write_draft_of(target: &Path, dir: &Path, layers: i32, noise: f32, seed: u64) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let file = target.join("model.safetensors");
    let tensors = Array::load_safetensors(&file).map_err(|e| Error::Mlx(e.to_string()))?;
    let mut names: Vec<&String> =
        tensors.keys().filter(|name| layer_of(name).is_none_or(|i| i < layers)).collect();
    names.sort();
    let mut rng = Rng(seed);
    let mut out: HashMap<String, Array> = HashMap::new();
    for name in names {
        let w = &tensors[name];
        assert_eq!(w.dtype(), mlx_rs::Dtype::Float32, "{name}: a float32 checkpoint");
        let scale = rng.tensor(w.shape(), noise, 1.0);
        out.insert(name.clone(), w.multiply(&scale)?);
    }
    mlx_rs::transforms::eval(out.values())?;
    Array::save_safetensors(out.iter(), &HashMap::new(), dir.join("model.safetensors"))
        .map_err(|e| Error::Mlx(e.to_string()))?;

    let config_path = target.join("config.json");
    let text = std::fs::read_to_string(&config_path).map_err(|e| Error::io(&config_path, e))?;
    let mut config: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::InvalidConfig(e.to_string()))?;
    assert!(config.get("quantization").is_none(), "a float checkpoint");
    config["num_hidden_layers"] = layers.into();
    let to = dir.join("config.json");
    std::fs::write(&to, serde_json::to_string_pretty(&config).expect("serializable"))
        .map_err(|e| Error::io(&to, e))?;
    // The tokenizer's files, as they are.
    for entry in std::fs::read_dir(target).map_err(|e| Error::io(target, e))? {
        let path = entry.map_err(|e| Error::io(target, e))?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if path.is_file() && !matches!(name, "model.safetensors" | "config.json") {
            let to = dir.join(name);
            std::fs::copy(&path, &to).map_err(|e| Error::io(&to, e))?;
        }
    }
    Ok(())
}

/// `model.layers.<i>.…` → `i`.
fn layer_of(name: &str) -> Option<i32> {
    name.strip_prefix("model.layers.")?.split('.').next()?.parse().ok()
}

const MTP_SEED: u64 = 42;
/// How much the target's layers, and the head's, add to their residual streams.
const MTP_DAMPING: f32 = 0.3;

/// Writes `dir/target`, a tiny Qwen3.5 in Hugging Face's layout with its
/// vision tower (so mlx-vlm loads it) and a one-layer multi-token-prediction
/// head (`mtp.*`), and returns its path. Its safetensors are marked as
/// PyTorch's (`format: pt`, as Hugging Face's are), not MLX's: mlx-vlm's
/// splitter reads the metadata to tell a Hugging Face checkpoint, whose
/// head norms it turns from `w − 1` into `w`, from an MLX one.
pub fn write_mtp_target(dir: &Path) -> Result<PathBuf> {
    write_mtp_target_seeded(dir, MTP_SEED)
}

/// [`write_mtp_target`] with another seed (to look for one without near-ties).
pub fn write_mtp_target_seeded(dir: &Path, seed: u64) -> Result<PathBuf> {
    let target = dir.join("target");
    let mut dims = Qwen35VlDims::tiny();
    dims.text.qwen35.mtp_layers = 1;
    write_qwen35_vl(&target, &dims, None, seed)?;
    let file = target.join("model.safetensors");
    let mut tensors = Array::load_safetensors(&file).map_err(|e| Error::Mlx(e.to_string()))?;
    // A random head would never guess right. With the target's layers'
    // outputs damped, its next token depends mostly on the last one (its
    // input embeddings are large), so a head that passes the next token's
    // embedding through (`fc` ≈ [I | 0], its layer's outputs damped too)
    // guesses the target's next-but-one token often, not always: rounds
    // both keep and reject drafts.
    let damped: Vec<String> = tensors
        .keys()
        .filter(|k| {
            k.starts_with("model.language_model.layers.")
                && ["o_proj.weight", "down_proj.weight", "out_proj.weight"]
                    .iter()
                    .any(|s| k.ends_with(s))
        })
        .cloned()
        .collect();
    for name in damped {
        let w = tensors[&name].multiply(Array::from_f32(MTP_DAMPING))?;
        tensors.insert(name, w);
    }
    let fc = tensors.get("mtp.fc.weight").expect("a head").clone();
    let d = fc.dim(0);
    let mut rng = Rng(seed + 1);
    let pass =
        ops::concatenate(&[ops::eye::<f32>(d, None, None)?, ops::zeros::<f32>(&[d, d])?], 1)?;
    tensors.insert("mtp.fc.weight".into(), pass.add(rng.tensor(&[d, 2 * d], 0.05, 0.0))?);
    for damped in ["mtp.layers.0.self_attn.o_proj.weight", "mtp.layers.0.mlp.down_proj.weight"] {
        let w = tensors[damped].multiply(Array::from_f32(MTP_DAMPING))?;
        tensors.insert(damped.into(), w);
    }
    // Read before the file is written over (loading is lazy).
    mlx_rs::transforms::eval(tensors.values())?;
    let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
    Array::save_safetensors(tensors.iter(), &metadata, &file)
        .map_err(|e| Error::Mlx(e.to_string()))?;
    Ok(target)
}

/// Head norms Hugging Face stores as `w − 1` (mlx-vlm's list for Qwen3.5).
const HEAD_NORMS: [&str; 7] = [
    ".input_layernorm.weight",
    ".post_attention_layernorm.weight",
    ".q_norm.weight",
    ".k_norm.weight",
    "norm.weight",
    "pre_fc_norm_embedding.weight",
    "pre_fc_norm_hidden.weight",
];

/// Writes into `dir` the multi-token-prediction head of the Hugging Face
/// checkpoint `target` alone, as mlx-vlm's `split_mtp` does: its `mtp.*`
/// tensors without the prefix, the norms made plain (`w − 1` → `w`), in
/// `model.safetensors` (MLX's format); config.json with `model_type:
/// "qwen3_5_mtp"`, the target's `text_config` and `block_size` (the head's
/// layers + 2); the tokenizer's files.
pub fn split_mtp_head(target: &Path, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let file = target.join("model.safetensors");
    let tensors = Array::load_safetensors(&file).map_err(|e| Error::Mlx(e.to_string()))?;
    let mut head = HashMap::new();
    for (name, t) in tensors {
        let Some(short) = name.strip_prefix("mtp.") else { continue };
        let t = if t.ndim() == 1 && HEAD_NORMS.iter().any(|s| short.ends_with(s)) {
            t.add(ops::ones_like(&t)?)?
        } else {
            t
        };
        head.insert(short.to_string(), t);
    }
    if head.is_empty() {
        return Err(Error::InvalidConfig(format!("{}: no mtp.* tensors", file.display())));
    }
    mlx_rs::transforms::eval(head.values())?;
    let metadata = HashMap::from([("format".to_string(), "mlx".to_string())]);
    Array::save_safetensors(head.iter(), &metadata, dir.join("model.safetensors"))
        .map_err(|e| Error::Mlx(e.to_string()))?;

    let config_path = target.join("config.json");
    let text = std::fs::read_to_string(&config_path).map_err(|e| Error::io(&config_path, e))?;
    let config: Value =
        serde_json::from_str(&text).map_err(|e| Error::InvalidConfig(e.to_string()))?;
    let text_config = config["text_config"].clone();
    let depth = text_config["mtp_num_hidden_layers"].as_i64().unwrap_or(1);
    let tied = text_config["tie_word_embeddings"].as_bool().unwrap_or(true);
    let head_config = json!({
        "block_size": depth + 2,
        "model_type": "qwen3_5_mtp",
        "text_config": text_config,
        "tie_word_embeddings": tied,
    });
    let to = dir.join("config.json");
    std::fs::write(&to, serde_json::to_string_pretty(&head_config).expect("serializable"))
        .map_err(|e| Error::io(&to, e))?;
    for name in ["tokenizer.json", "tokenizer_config.json", "vocab.json"] {
        let from = target.join(name);
        if from.is_file() {
            let to = dir.join(name);
            std::fs::copy(&from, &to).map_err(|e| Error::io(&to, e))?;
        }
    }
    Ok(())
}
