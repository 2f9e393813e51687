//! The family registry: one table maps a checkpoint's `model_type` (or a
//! GGUF's `general.architecture`) to everything its family brings — the
//! builder (config parsing included), the GGUF import (tensor names,
//! metadata keys, Q/K un-permutation), the image processor of a vision
//! family, and so the capability flags. The loader, the hub's scan and the
//! app all ask this table; there is no second list of architectures.
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use super::layers::LayerLoader;
use super::shape::{ArchitectureShape, ImageViews, LayerShape};
use super::{
    gemma3, gemma4, gpt_oss, lfm2, lfm2_moe, lfm2_vl, llama, mistral3, qwen2, qwen2_vl, qwen3,
    qwen3_5, qwen3_moe, qwen3_vl, smolvlm, Capabilities, LanguageModel,
};
use crate::error::{Error, Result};
use crate::vision::SharedImageProcessor;
use crate::weights::gguf::GgufImport;

/// Builds a family's model from config.json and the checkpoint's tensors.
pub type Builder = fn(
    model_type: &str,
    config: &Value,
    loader: &mut LayerLoader,
) -> Result<Box<dyn LanguageModel>>;

/// The most views one image becomes and their size, from config.json and,
/// when given, the checkpoint's folder (no MLX).
pub type CountViews = fn(config: &Value, dir: Option<&Path>) -> Result<ImageViews>;

/// Everything the engine knows about one model family.
pub struct Family {
    /// A display name ("Gemma 3").
    pub name: &'static str,
    /// config.json `model_type` values this family loads.
    pub model_types: &'static [&'static str],
    pub build: Builder,
    /// Its decoder layers from config.json alone (no weights, no MLX): the
    /// cache kind and sizes of each, for the cache layout and the fit estimate.
    pub layers: fn(config: &Value) -> Result<Vec<LayerShape>>,
    /// How llama.cpp exports the family, when it does.
    pub gguf: Option<GgufImport>,
    /// How it reads images; `Some` for families that see images.
    pub image_processor: Option<ImageProcessing>,
    /// Its layers load through the tensor-parallel loaders (heads and MLP
    /// columns split across processes); every family can run pipeline parallel.
    pub tensor_parallel: bool,
}

impl Family {
    pub fn vision(&self) -> bool {
        self.image_processor.is_some()
    }
}

/// A vision family's image processor: reading the checkpoint's, and how
/// many views of an image its tower encodes at once.
#[derive(Clone, Copy)]
pub struct ImageProcessing {
    /// Reads the checkpoint's image processor from its folder.
    pub read: fn(&Path) -> Result<SharedImageProcessor>,
    /// For a processor that cuts an image into several views (tiles and a
    /// whole-image view), the most views one image becomes and their size:
    /// from config.json, and the processor files when the checkpoint's
    /// folder is given (no MLX). `None`: an image is one view.
    pub views: Option<CountViews>,
}

impl ImageProcessing {
    /// A processor that makes one view of an image.
    pub const fn one_view(read: fn(&Path) -> Result<SharedImageProcessor>) -> Self {
        Self { read, views: None }
    }
}

/// Every family the engine runs.
pub static FAMILIES: &[Family] = &[
    llama::FAMILY,
    qwen2::FAMILY,
    qwen2_vl::FAMILY,
    qwen3::FAMILY,
    qwen3_moe::FAMILY,
    gemma3::FAMILY,
    gemma3::vision::FAMILY,
    gemma4::FAMILY,
    gemma4::vision::FAMILY,
    qwen3_5::vision::FAMILY,
    qwen3_5::FAMILY,
    qwen3_vl::FAMILY,
    lfm2::FAMILY,
    lfm2_moe::FAMILY,
    lfm2_vl::FAMILY,
    smolvlm::FAMILY,
    gpt_oss::FAMILY,
    mistral3::FAMILY,
    mistral3::vision::FAMILY,
];

/// The family of a config.json `model_type`.
pub fn family(model_type: &str) -> Option<&'static Family> {
    FAMILIES.iter().find(|f| f.model_types.contains(&model_type))
}

/// The family of a GGUF `general.architecture`.
pub fn family_for_gguf(architecture: &str) -> Option<&'static Family> {
    FAMILIES.iter().find(|f| f.gguf.as_ref().is_some_and(|g| g.architecture == architecture))
}

/// Every supported `model_type`, for messages and the app.
pub fn supported_model_types() -> Vec<&'static str> {
    FAMILIES.iter().flat_map(|f| f.model_types.iter().copied()).collect()
}

/// The error for a `model_type` no family loads.
pub fn unsupported(model_type: &str) -> Error {
    Error::UnsupportedArchitecture {
        architecture: model_type.to_string(),
        supported: supported_model_types().join(", "),
    }
}

/// config.json's `model_type`, or one derived from its `architectures`
/// (older exports only list the Hugging Face class name).
pub fn model_type(config: &Value) -> Result<String> {
    if let Some(t) = config.get("model_type").and_then(Value::as_str) {
        return Ok(t.to_string());
    }
    let arch =
        config.get("architectures").and_then(|a| a.get(0)).and_then(Value::as_str).ok_or_else(
            || Error::InvalidConfig("config.json has neither model_type nor architectures".into()),
        )?;
    Ok(arch.trim_end_matches("ForCausalLM").to_ascii_lowercase())
}

/// A model's shape from its config.json alone, as its family describes it
/// (an image's views as config.json and the processor's defaults give them).
pub fn shape_of(config: &Value) -> Result<ArchitectureShape> {
    shape_with_processor(config, None)
}

/// [`shape_of`] for the checkpoint in `dir`: a family whose processor cuts
/// an image into views reads how many from its processor files too.
pub fn shape_of_checkpoint(config: &Value, dir: &Path) -> Result<ArchitectureShape> {
    shape_with_processor(config, Some(dir))
}

fn shape_with_processor(config: &Value, dir: Option<&Path>) -> Result<ArchitectureShape> {
    let model_type = model_type(config)?;
    let family = family(&model_type).ok_or_else(|| unsupported(&model_type))?;
    let mut shape = ArchitectureShape::new(config, (family.layers)(config)?);
    let views = family.image_processor.and_then(|p| p.views);
    if let (Some(vision), Some(views)) = (shape.vision.as_mut(), views) {
        vision.views = Some(views(config, dir)?);
    }
    Ok(shape)
}

/// What the registry says about a model folder without loading its
/// weights: for the gallery's badges and the hub's scan.
#[derive(Debug, Clone, Serialize)]
pub struct FolderInfo {
    /// config.json `model_type`.
    pub architecture: String,
    /// The family's display name, when the engine runs it.
    pub family: Option<String>,
    /// Why the engine cannot run it, when it cannot.
    pub unsupported_reason: Option<String>,
    pub capabilities: Capabilities,
    /// `max_position_embeddings` (of the text model), when config.json says.
    pub context_length: Option<usize>,
}

/// What the registry says about a model folder or a `.gguf` file.
pub fn describe(path: &Path) -> Result<FolderInfo> {
    if path.is_file() {
        describe_gguf(path)
    } else {
        describe_folder(path)
    }
}

/// Reads a GGUF file's metadata (no tensor data).
fn describe_gguf(path: &Path) -> Result<FolderInfo> {
    use crate::weights::gguf::{GgufFile, MetaValue};
    let file = GgufFile::open(path)?;
    let arch = file
        .get("general.architecture")
        .and_then(MetaValue::as_str)
        .unwrap_or_default()
        .to_string();
    let family = family_for_gguf(&arch);
    let template = file.get("tokenizer.chat_template").and_then(MetaValue::as_str);
    Ok(FolderInfo {
        family: family.map(|f| f.name.to_string()),
        unsupported_reason: family
            .is_none()
            .then(|| format!("GGUF architecture {arch} is not supported")),
        capabilities: Capabilities::of(template, false),
        architecture: family.map_or(arch.clone(), |f| f.model_types[0].to_string()),
        context_length: file
            .get(&format!("{arch}.context_length"))
            .and_then(MetaValue::as_f64)
            .map(|n| n as usize),
    })
}

/// Reads config.json and the chat template of a model folder.
pub fn describe_folder(dir: &Path) -> Result<FolderInfo> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    let config: Value = serde_json::from_str(&text)
        .map_err(|e| Error::InvalidConfig(format!("{}: {e}", path.display())))?;
    let architecture = model_type(&config)?;
    let family = family(&architecture);
    let template = crate::tokenizer::folder_chat_template_source(dir).unwrap_or(None);
    let context_length = config
        .get("max_position_embeddings")
        .or_else(|| config.get("text_config").and_then(|t| t.get("max_position_embeddings")))
        .and_then(Value::as_u64)
        .map(|n| n as usize);
    Ok(FolderInfo {
        family: family.map(|f| f.name.to_string()),
        unsupported_reason: family.is_none().then(|| unsupported(&architecture).to_string()),
        capabilities: Capabilities::of(template.as_deref(), family.is_some_and(Family::vision)),
        architecture,
        context_length,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_model_type_and_gguf_architecture_belongs_to_one_family() {
        let types = supported_model_types();
        let mut unique = types.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), types.len(), "a model_type listed twice: {types:?}");
        let archs: Vec<&str> =
            FAMILIES.iter().filter_map(|f| f.gguf.as_ref().map(|g| g.architecture)).collect();
        for a in &archs {
            assert_eq!(
                archs.iter().filter(|b| *b == a).count(),
                1,
                "GGUF architecture {a} listed twice"
            );
            assert!(family_for_gguf(a).is_some());
        }
        for t in
            ["llama", "qwen2", "qwen2_5_vl", "qwen3", "qwen3_moe", "gemma3_text", "gemma4_text"]
        {
            assert!(family(t).is_some(), "{t}");
        }
        assert!(family("qwen2_vl").unwrap().vision());
        assert!(!family("qwen3").unwrap().vision());
        assert!(matches!(unsupported("mamba"), Error::UnsupportedArchitecture { .. }));
    }

    #[test]
    fn only_the_tiling_families_make_several_views_of_an_image() {
        let tiling: Vec<&str> = FAMILIES
            .iter()
            .filter(|f| f.image_processor.is_some_and(|p| p.views.is_some()))
            .map(|f| f.name)
            .collect();
        assert_eq!(tiling, ["LFM2-VL", "SmolVLM"]);
        // a config of a one-view family leaves the views unsaid
        let qwen2_vl = serde_json::json!({"model_type": "qwen2_vl", "hidden_size": 64,
            "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 128,
            "vocab_size": 100, "rms_norm_eps": 1e-6,
            "vision_config": {"embed_dim": 32, "num_heads": 2}});
        let vision = shape_of(&qwen2_vl).unwrap().vision.unwrap();
        assert_eq!((vision.hidden_size, vision.heads, vision.views), (32, 2, None));
    }
}
