//! Qwen2-VL and Qwen2.5-VL (`model_type` `qwen2_vl`, `qwen2_5_vl`): the
//! Qwen2 decoder with M-RoPE (`language` is [`Llama`] with Q/K/V biases and
//! [`Rope::multimodal`]), the vision tower (`vision.rs`) and the prompt's
//! M-RoPE positions (`positions.rs`).
//!
//! Checkpoints come with three weight-name schemes, all mapped here onto the
//! original Hugging Face one (`visual.*`, `model.*`, `lm_head`):
//! - Hugging Face before transformers 4.52: `visual.*`, `model.*`, `lm_head`;
//! - transformers ≥ 4.52: `model.visual.*`, `model.language_model.*`, `lm_head`;
//! - mlx-vlm / mlx-community: `vision_tower.*`, `language_model.model.*`,
//!   `language_model.lm_head`.
//!
//! config.json has the text parameters at the root (older files, and what
//! mlx-vlm reads) and/or in `text_config` (newer files); the root wins.
//!
//! Outside the engine only the tower's config and loader are reached
//! ([`vision::VisionConfig::parse`], [`vision::VisionModel::load`]): the
//! vision fixtures record what the tower takes.
pub(crate) mod positions;
pub mod vision;

use mlx_rs::Array;
use serde_json::{Map, Value};

use super::layers::rope::{MRopeLayout, Rope};
use super::layers::LayerLoader;
use super::llama::{DecoderLayout, Llama, LlamaArgs};
use super::registry::{Family, ImageProcessing};
use super::vision_tower::VisionEncoding;
use super::with_vision::WithVision;
use super::VisionTower;
use crate::error::{Error, Result};
use vision::{TowerEncoding, Variant, VisionConfig, VisionModel};

/// The registry entry: Qwen2-VL and Qwen2.5-VL, with the Qwen image processor.
pub(crate) const FAMILY: Family = Family {
    name: "Qwen2-VL",
    model_types: &["qwen2_vl", "qwen2_5_vl"],
    build: |model_type, config, loader| Ok(Box::new(Qwen2Vl::load(model_type, config, loader)?)),
    layers: |config| Ok(text_args(&text_config(config))?.layer_shapes()),
    gguf: None,
    image_processor: Some(ImageProcessing::one_view(
        crate::vision::QwenImageProcessor::shared_from_folder,
    )),
    tensor_parallel: false,
};

/// Token ids of the Qwen2-VL vocabulary, used when config.json omits them.
const DEFAULT_IMAGE_TOKEN_ID: u32 = 151655;

/// Qwen2-VL: the M-RoPE Qwen2 decoder and its tower.
pub(crate) type Qwen2Vl = WithVision<Llama, QwenVision>;

/// The [`VisionTower`] of a Qwen2-VL / Qwen2.5-VL model.
pub(crate) struct QwenVision {
    model: VisionModel,
    image_token_id: u32,
}

impl Qwen2Vl {
    pub fn load(model_type: &str, config: &Value, loader: &mut LayerLoader) -> Result<Qwen2Vl> {
        let variant = match model_type {
            "qwen2_vl" => Variant::Qwen2Vl,
            "qwen2_5_vl" => Variant::Qwen25Vl,
            other => {
                return Err(Error::InvalidConfig(format!("{other} is not a Qwen2-VL model type")))
            }
        };
        rename_weights(loader);
        let text = text_config(config);
        let sections = mrope_sections(&text)?;
        let args = text_args(&text)?;
        let rope =
            Rope::multimodal(args.head_dim(), args.rope_theta, sections, MRopeLayout::Sectioned)?;
        let hidden = args.hidden_size;
        let layout = DecoderLayout { qkv_bias: true, ..DecoderLayout::llama() };
        let language = Llama::build(args, &layout, rope, loader)?;

        let vision_json = config.get("vision_config").cloned().unwrap_or(Value::Object(Map::new()));
        let vision_cfg = VisionConfig::parse(variant, &vision_json)?;
        if vision_cfg.out_hidden != hidden {
            return Err(Error::InvalidConfig(format!(
                "the vision tower outputs {} values per feature but the language model's hidden size is {hidden}",
                vision_cfg.out_hidden
            )));
        }
        let model = VisionModel::load(vision_cfg, "visual", loader)?;
        let image_token_id = token_id(config, &text, &["image_token_id", "image_token_index"])
            .unwrap_or(DEFAULT_IMAGE_TOKEN_ID);
        Ok(WithVision { language, vision: QwenVision { model, image_token_id } })
    }
}

impl VisionTower for QwenVision {
    fn image_token_id(&self) -> u32 {
        self.image_token_id
    }

    fn begin_encode(&self, pixels: &Array, grid: [i32; 3]) -> Result<VisionEncoding> {
        Ok(VisionEncoding::new(self.model.begin(pixels, grid)?, self.model.depth(), grid))
    }

    fn encode_blocks(&self, encoding: &mut VisionEncoding, count: usize) -> Result<Array> {
        let blocks = encoding.take_blocks(count);
        self.model.run_blocks(encoding.state_mut::<TowerEncoding>()?, blocks)
    }

    fn finish_encode(&self, encoding: &VisionEncoding) -> Result<Array> {
        encoding.check_done()?;
        self.model.finish(encoding.state::<TowerEncoding>()?)
    }

    fn rope_positions(&self, tokens: &[u32], grids: &[[i32; 3]]) -> Result<Option<(Array, i32)>> {
        let (axes, delta) = positions::rope_positions(tokens, self.image_token_id, grids)?;
        let flat: Vec<i32> = axes.concat();
        Ok(Some((Array::from_slice(&flat, &[3, tokens.len() as i32]), delta)))
    }
}

/// The decoder's fields, less what is set up here rather than by the llama
/// parser (M-RoPE; the head size, which the reference derives from the
/// hidden size whatever `head_dim` says).
fn text_args(text: &Map<String, Value>) -> Result<LlamaArgs> {
    let mut text = text.clone();
    text.remove("rope_scaling");
    text.remove("rope_parameters");
    text.remove("head_dim");
    super::qwen2::parse_args(&Value::Object(text))
}

/// Text parameters: `text_config` overlaid with the root's keys.
fn text_config(config: &Value) -> Map<String, Value> {
    let mut text =
        config.get("text_config").and_then(Value::as_object).cloned().unwrap_or_default();
    if let Some(root) = config.as_object() {
        for (k, v) in root {
            if k != "text_config" && k != "vision_config" {
                text.insert(k.clone(), v.clone());
            }
        }
    }
    text
}

fn mrope_sections(text: &Map<String, Value>) -> Result<[i32; 3]> {
    let section = ["rope_scaling", "rope_parameters"]
        .iter()
        .find_map(|k| text.get(*k).and_then(|r| r.get("mrope_section")))
        .ok_or_else(|| Error::InvalidConfig("rope_scaling.mrope_section is missing".into()))?;
    let parts: Vec<i32> = section
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_i64).map(|x| x as i32).collect())
        .unwrap_or_default();
    parts.try_into().map_err(|_| {
        Error::InvalidConfig(format!("mrope_section must be three integers, got {section}"))
    })
}

fn token_id(config: &Value, text: &Map<String, Value>, keys: &[&str]) -> Option<u32> {
    keys.iter()
        .find_map(|k| config.get(*k).or_else(|| text.get(*k)).and_then(Value::as_u64))
        .map(|x| x as u32)
}

/// Maps every scheme's names onto `visual.*`, `model.*`, `lm_head.*`.
fn rename_weights(loader: &mut LayerLoader) {
    const MAP: &[(&str, &str)] = &[
        ("vision_tower.", "visual."),
        ("language_model.model.", "model."),
        ("language_model.lm_head.", "lm_head."),
        ("model.visual.", "visual."),
        ("model.language_model.", "model."),
    ];
    let names: Vec<String> = loader.weights.names().map(str::to_owned).collect();
    for name in names {
        if let Some((from, to)) = MAP.iter().find(|(from, _)| name.starts_with(from)) {
            loader.weights.rename(&name, format!("{to}{}", &name[from.len()..]));
        }
    }
}
