//! Qwen3.5 as released (`qwen3_5`, `qwen3_5_moe`): natively multimodal, the
//! hybrid language model of [`crate::model::qwen3_5`] with interleaved M-RoPE
//! positions for images, and the Qwen3-VL vision tower (no DeepStack).
//!
//! Weight names: Hugging Face nests the language model as
//! `model.language_model.*` and the tower as `model.visual.*`; mlx-vlm saves
//! `language_model.model.*` and `vision_tower.*`. A checkpoint without the
//! tower's tensors (a text-only conversion) loads text only.
use serde_json::Value;

use crate::error::Result;
use crate::model::language_model_only::keep_language_model;
use crate::model::layers::LayerLoader;
use crate::model::qwen3_5::Qwen35;
use crate::model::qwen3_vl::{gather_tower, Qwen3Vision, TOWER};
use crate::model::registry::{Family, ImageProcessing};
use crate::model::with_vision::WithVision;
use crate::model::LanguageModel;

pub const FAMILY: Family = Family {
    name: "Qwen3.5",
    model_types: &["qwen3_5", "qwen3_5_moe"],
    build: |_, config, loader| load(config, loader),
    layers: crate::model::qwen3_5::FAMILY.layers,
    gguf: None,
    image_processor: Some(ImageProcessing::one_view(
        crate::vision::QwenImageProcessor::shared_from_folder,
    )),
    tensor_parallel: false,
};

/// `<|image_pad|>` in Qwen3.5's vocabulary, when config.json omits it.
const DEFAULT_IMAGE_TOKEN_ID: u32 = 248056;

/// Qwen3.5 with its vision tower.
pub type Qwen35Vl = WithVision<Qwen35, Qwen3Vision>;

fn load(config: &Value, loader: &mut LayerLoader) -> Result<Box<dyn LanguageModel>> {
    gather_tower(loader);
    // A tower needs its patch embedding and blocks (a text-only conversion has neither).
    let has_tower = loader.weights.contains(&format!("{TOWER}.patch_embed.proj.weight"))
        && loader.weights.contains(&format!("{TOWER}.blocks.0.attn.qkv.weight"));
    let skipped: &[&str] = if has_tower { &[] } else { crate::model::qwen3_5::SKIPPED };
    keep_language_model(loader, skipped, "Qwen3.5");
    let language = Qwen35::load(config, loader)?;
    if !has_tower {
        tracing::info!("Qwen3.5: no vision tower in the checkpoint; loaded text only");
        return Ok(Box::new(language));
    }
    let hidden = language.shape_hidden();
    let vision = Qwen3Vision::load(config, TOWER, hidden, DEFAULT_IMAGE_TOKEN_ID, loader)?;
    Ok(Box::new(Qwen35Vl { language, vision }))
}
