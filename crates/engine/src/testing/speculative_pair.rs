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
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use mlx_rs::Array;

use super::{write_tiny_qwen2, Rng, TinyLlama};
use crate::error::{Error, Result};

/// The target: a tiny Qwen2 (biases on Q, K and V) of this many layers.
const PAIR_TARGET_LAYERS: i32 = 4;
/// The draft keeps all the target's layers…
const PAIR_DRAFT_LAYERS: i32 = PAIR_TARGET_LAYERS;
/// …each weight multiplied by 1 + u, u uniform in ±this.
const PAIR_DRAFT_NOISE: f32 = 0.2;
const PAIR_SEED: u64 = 31;

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
