//! Gemma 3 as released with vision (`gemma3`: 4B, 12B, 27B): the language
//! model of [`crate::model::gemma3`], the SigLIP tower ([`crate::model::layers::siglip`]) and the
//! projector — the tower's `side × side` patch states average-pooled to
//! `mm_tokens_per_image` soft tokens, Gemma's RMSNorm, one matrix to the
//! language model's width. An image's soft tokens attend to each other both
//! ways inside the causal mask (as Gemma 3 was trained, and as transformers
//! runs it; mlx-vlm 0.7.6 keeps them causal, see `parity_mlx_vlm.rs`), and
//! take ordinary positions.
//!
//! Weight names: mlx-vlm / transformers < 4.52 `vision_tower.vision_model.*`,
//! `multi_modal_projector.*`, `language_model.model.*`; transformers ≥ 4.52
//! the same under `model.` (`model.language_model.*`).
use mlx_rs::{ops, Array};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::model::gemma3::{gemma_norm, Gemma3};
use crate::model::language_model_only::keep_language_model;
use crate::model::layers::siglip::{Siglip, SiglipConfig, SiglipEncoding};
use crate::model::layers::{LayerLoader, RmsNorm};
use crate::model::registry::{Family, ImageProcessing};
use crate::model::vision_tower::VisionEncoding;
use crate::model::with_vision::WithVision;
use crate::model::VisionTower;

pub const FAMILY: Family = Family {
    name: "Gemma 3",
    model_types: &["gemma3"],
    build: |_, config, loader| Ok(Box::new(Gemma3Vl::load(config, loader)?)),
    layers: crate::model::gemma3::FAMILY.layers,
    gguf: None,
    image_processor: Some(ImageProcessing::one_view(
        super::image_processor::Gemma3ImageProcessor::shared_from_folder,
    )),
    tensor_parallel: false,
};

/// `<image_soft_token>` in Gemma 3's vocabulary, when config.json omits it.
const DEFAULT_IMAGE_TOKEN_ID: u32 = 262144;
const TOWER: &str = "vision_tower.vision_model";
const PROJECTOR: &str = "multi_modal_projector";

/// Gemma 3 with its SigLIP tower and projector.
pub type Gemma3Vl = WithVision<Gemma3, Gemma3Vision>;

/// The tower and projector as the engine's [`VisionTower`].
pub struct Gemma3Vision {
    tower: Siglip,
    norm: RmsNorm,
    /// `[vision width, text width]`.
    projection: Array,
    /// Soft tokens per side of the pooled grid.
    tokens_per_side: i32,
    /// Image features are spliced after the text embedding's √hidden scaling
    /// (bfloat16-rounded): they get `√hidden_bf16 / √hidden`, as the
    /// reference's divide-then-scale does.
    text_hidden: i32,
    image_token_id: u32,
}

impl Gemma3Vl {
    pub fn load(config: &Value, loader: &mut LayerLoader) -> Result<Gemma3Vl> {
        gather_names(loader);
        keep_language_model(loader, &[], "Gemma 3");
        let language = Gemma3::load(config, loader)?;
        let text_hidden = language.shape_hidden();
        let vision_json = config.get("vision_config").cloned().unwrap_or(Value::Null);
        let cfg = SiglipConfig::parse(&vision_json)?;
        let tokens = config
            .get("text_config")
            .and_then(|t| t.get("mm_tokens_per_image"))
            .or_else(|| config.get("mm_tokens_per_image"))
            .and_then(Value::as_i64)
            .unwrap_or(256) as i32;
        let tokens_per_side = (tokens as f64).sqrt() as i32;
        if tokens_per_side * tokens_per_side != tokens || cfg.side() % tokens_per_side != 0 {
            return Err(Error::InvalidConfig(format!(
                "mm_tokens_per_image {tokens} does not pool a {0}×{0} patch grid evenly",
                cfg.side()
            )));
        }
        let (width, eps) = (cfg.width, cfg.eps);
        let tower = Siglip::load(cfg, TOWER, loader)?;
        let norm = gemma_norm(loader, &format!("{PROJECTOR}.mm_soft_emb_norm"), width, eps)?;
        let projection = loader
            .float(&format!("{PROJECTOR}.mm_input_projection_weight"), &[width, text_hidden])?;
        let image_token_id = ["image_token_index", "image_token_id"]
            .iter()
            .find_map(|k| config.get(*k).and_then(Value::as_u64))
            .map_or(DEFAULT_IMAGE_TOKEN_ID, |x| x as u32);
        let vision =
            Gemma3Vision { tower, norm, projection, tokens_per_side, text_hidden, image_token_id };
        Ok(WithVision { language, vision })
    }
}

/// Renames the tower's and projector's tensors from any scheme to
/// `vision_tower.vision_model.*` and `multi_modal_projector.*`.
fn gather_names(loader: &mut LayerLoader) {
    let names: Vec<String> = loader.weights.names().map(str::to_owned).collect();
    for name in names {
        if let Some(rest) = name.strip_prefix("model.") {
            if rest.starts_with("vision_tower.") || rest.starts_with("multi_modal_projector.") {
                loader.weights.rename(&name, rest);
            }
        }
    }
}

impl VisionTower for Gemma3Vision {
    fn image_token_id(&self) -> u32 {
        self.image_token_id
    }

    fn begin_encode(&self, pixels: &Array, grid: [i32; 3]) -> Result<VisionEncoding> {
        Ok(VisionEncoding::new(self.tower.begin(pixels)?, self.tower.depth(), grid))
    }

    fn encode_blocks(&self, encoding: &mut VisionEncoding, count: usize) -> Result<Array> {
        let blocks = encoding.take_blocks(count);
        self.tower.run_blocks(encoding.state_mut::<SiglipEncoding>()?, blocks)
    }

    fn finish_encode(&self, encoding: &VisionEncoding) -> Result<Array> {
        encoding.check_done()?;
        let hidden = self.tower.finish(encoding.state::<SiglipEncoding>()?)?;
        let (side, t) = (self.tower.config().side(), self.tokens_per_side);
        let (k, width) = (side / t, hidden.dim(1));
        // Average pooling over k×k windows of the raster-ordered patch grid.
        let pooled = hidden
            .reshape(&[t, k, t, k, width])?
            .mean_axes(&[1, 3], false)?
            .reshape(&[t * t, width])?;
        let projected = ops::matmul(&self.norm.forward(&pooled)?, &self.projection)?;
        let h = self.text_hidden as f32;
        let scaled = projected
            .divide(Array::from_f32(h.sqrt()))?
            .multiply(Array::from_f32(half::bf16::from_f32(h.sqrt()).to_f32()))?;
        Ok(scaled)
    }

    fn rope_positions(&self, _tokens: &[u32], _grids: &[[i32; 3]]) -> Result<Option<(Array, i32)>> {
        Ok(None)
    }

    fn bidirectional_images(&self) -> bool {
        true
    }
}
