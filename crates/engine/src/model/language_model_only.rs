//! Loading the language model of a multimodal checkpoint whose towers this
//! family does not run yet (Gemma 4, Qwen3.5): its tensors are renamed to the
//! text model's names — Hugging Face nests them as `model.language_model.*`,
//! mlx-vlm and mlx-lm as `language_model.model.*` — and the towers' tensors
//! are dropped. (Their per-module quantization settings keep the saved
//! names: `Quantization::for_module` looks under both.)
use super::layers::LayerLoader;

const RENAME: &[(&str, &str)] = &[
    ("model.language_model.", "model."),
    ("language_model.model.", "model."),
    ("language_model.lm_head.", "lm_head."),
];

/// Renames the language model's tensors and drops those under `towers`
/// (prefixes after an optional `model.`); says how many were skipped.
pub fn keep_language_model(loader: &mut LayerLoader, towers: &[&str], family: &str) {
    let names: Vec<String> = loader.weights.names().map(str::to_owned).collect();
    let mut skipped = 0;
    for name in names {
        let bare = name.strip_prefix("model.").unwrap_or(&name);
        if towers.iter().any(|t| bare.starts_with(t)) {
            loader.weights.remove(&name);
            skipped += 1;
        } else if let Some((from, to)) = RENAME.iter().find(|(from, _)| name.starts_with(from)) {
            loader.weights.rename(&name, format!("{to}{}", &name[from.len()..]));
        }
    }
    if skipped > 0 {
        tracing::info!(
            tensors = skipped,
            "{family}: tensors of towers not loaded (text only for now)"
        );
    }
}
