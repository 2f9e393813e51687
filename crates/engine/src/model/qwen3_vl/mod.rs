//! Qwen3-VL (`qwen3_vl`, and `qwen3_vl_moe` with Qwen3-MoE's experts): the
//! Qwen3 decoder (per-head query/key norms) with
//! interleaved M-RoPE over each whole head, the vision tower of `vision.rs`
//! (as the engine's tower in `tower.rs`, shared with Qwen3.5), and DeepStack:
//! features of inner vision blocks added to the hidden states of the first
//! decoder layers at the image's positions.
//!
//! Weight names: Hugging Face `model.language_model.*`, `model.visual.*`,
//! `lm_head`; mlx-vlm `language_model.model.*`, `vision_tower.*`,
//! `language_model.lm_head`. The text parameters live in `text_config`.
//!
//! Outside the engine only the tower's config and loader are reached
//! ([`vision::VisionConfig::parse`], [`vision::VisionModel::load`]): the
//! vision fixtures record what the tower takes.
pub(crate) mod tower;
pub mod vision;

use serde_json::{Map, Value};

use super::language_model_only::keep_language_model;
use super::layers::rope::{MRopeLayout, Rope};
use super::layers::LayerLoader;
use super::llama::{Llama, LlamaArgs};
use super::qwen3::{layout, parse_qwen3_args};
use super::registry::{Family, ImageProcessing};
use super::with_vision::WithVision;
use crate::error::{Error, Result};
pub(crate) use tower::Qwen3Vision;

pub(crate) const FAMILY: Family = Family {
    name: "Qwen3-VL",
    model_types: &["qwen3_vl", "qwen3_vl_moe"],
    build: |model_type, config, loader| {
        Ok(Box::new(Qwen3Vl::load(model_type == "qwen3_vl_moe", config, loader)?))
    },
    layers: |config| Ok(text_args(text_config(config))?.1.layer_shapes()),
    gguf: None,
    image_processor: Some(ImageProcessing::one_view(
        crate::vision::QwenImageProcessor::shared_from_folder,
    )),
    tensor_parallel: false,
};

/// `<|image_pad|>` in the Qwen vocabulary, when config.json omits it.
const DEFAULT_IMAGE_TOKEN_ID: u32 = 151655;
/// Where the tower's tensors are gathered before loading.
pub(crate) const TOWER: &str = "visual";

/// Qwen3-VL: the Qwen3 decoder with interleaved M-RoPE and DeepStack, and its tower.
pub(crate) type Qwen3Vl = WithVision<Llama, Qwen3Vision>;

impl Qwen3Vl {
    pub fn load(moe: bool, config: &Value, loader: &mut LayerLoader) -> Result<Qwen3Vl> {
        gather_tower(loader);
        keep_language_model(loader, &[], "Qwen3-VL");
        let text = text_config(config);
        let sections = mrope_sections(&text)?;
        let (text, args) = text_args(text)?;
        let rope =
            Rope::multimodal(args.head_dim(), args.rope_theta, sections, MRopeLayout::Interleaved)?;
        let hidden = args.hidden_size;
        let language = if moe {
            unfuse_experts(loader, args.num_hidden_layers)?;
            super::qwen3_moe::load_with_rope(&text, loader, rope)?
        } else {
            Llama::build(args, &layout(), rope, loader)?
        };
        let vision = Qwen3Vision::load(config, TOWER, hidden, DEFAULT_IMAGE_TOKEN_ID, loader)?;
        Ok(WithVision { language, vision })
    }
}

/// Renames the tower's tensors (any scheme) to `visual.*`.
pub(crate) fn gather_tower(loader: &mut LayerLoader) {
    const SCHEMES: &[&str] = &["model.visual.", "vision_tower.", "model.language_model.visual."];
    let names: Vec<String> = loader.weights.names().map(str::to_owned).collect();
    for name in names {
        if let Some(from) = SCHEMES.iter().find(|p| name.starts_with(*p)) {
            loader.weights.rename(&name, format!("{TOWER}.{}", &name[from.len()..]));
        }
    }
}

/// Hugging Face's Qwen3-VL-MoE experts, fused as `experts.gate_up_proj`
/// `[E, hidden, 2·mlp]` and `experts.down_proj` `[E, mlp, hidden]` (inputs
/// first, unlike Qwen3.5's), as the stacked `switch_mlp` `[E, out, in]`.
fn unfuse_experts(loader: &mut LayerLoader, layers: i32) -> Result<()> {
    for layer in 0..layers {
        let m = format!("model.layers.{layer}.mlp");
        let fused = format!("{m}.experts.gate_up_proj");
        if !loader.weights.contains(&fused) {
            continue;
        }
        let gate_up = loader.weights.take_any(&fused)?;
        let halves = gate_up.split_equal(2, -1)?;
        let down = loader.weights.take_any(&format!("{m}.experts.down_proj"))?;
        for (part, t) in [("gate_proj", &halves[0]), ("up_proj", &halves[1]), ("down_proj", &down)]
        {
            loader
                .weights
                .insert(format!("{m}.switch_mlp.{part}.weight"), t.transpose_axes(&[0, 2, 1])?);
        }
    }
    Ok(())
}

/// The decoder's config and fields, without the M-RoPE this module sets up
/// (the llama parser knows only frequency scalings).
fn text_args(mut text: Map<String, Value>) -> Result<(Value, LlamaArgs)> {
    text.remove("rope_scaling");
    text.remove("rope_parameters");
    let text = Value::Object(text);
    let args = parse_qwen3_args(&text, "qwen3_vl")?;
    Ok((text, args))
}

/// `text_config`, with the root's `tie_word_embeddings` when it has none.
fn text_config(config: &Value) -> Map<String, Value> {
    let mut text =
        config.get("text_config").and_then(Value::as_object).cloned().unwrap_or_default();
    if let Some(tie) = config.get("tie_word_embeddings") {
        text.entry("tie_word_embeddings").or_insert(tie.clone());
    }
    text
}

fn mrope_sections(text: &Map<String, Value>) -> Result<[i32; 3]> {
    let section = ["rope_scaling", "rope_parameters"]
        .iter()
        .find_map(|k| text.get(*k).and_then(|r| r.get("mrope_section")))
        .ok_or_else(|| {
            Error::InvalidConfig("text_config.rope_scaling.mrope_section is missing".into())
        })?;
    serde_json::from_value(section.clone()).map_err(|_| {
        Error::InvalidConfig(format!("mrope_section must be three integers, got {section}"))
    })
}
