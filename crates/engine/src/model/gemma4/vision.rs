//! Gemma 4 as released (`gemma4`: E2B, E4B, 26B-A4B, 31B): the language
//! model of [`crate::model::gemma4`] and the vision encoder of
//! [`crate::model::gemma4::tower`]. Images are variable-resolution (up to a
//! soft-token budget); their soft tokens take ordinary positions, attend to
//! each other both ways when the config says `use_bidirectional_attention:
//! "vision"`, and look up the padding token's per-layer input embedding (the
//! reference's rule). The audio tower is not loaded: audio input is refused.
//!
//! Weight names: Hugging Face `model.language_model.*`, `model.vision_tower.*`,
//! `model.embed_vision.*`; mlx-vlm the same without `model.`
//! (`language_model.model.*`).
use mlx_rs::{ops, Array};
use serde_json::Value;

use crate::error::Result;
use crate::model::gemma4::tower::{Gemma4Encoding, Gemma4VisionConfig, Gemma4VisionTower};
use crate::model::gemma4::{Gemma4, TOWERS};
use crate::model::language_model_only::keep_language_model;
use crate::model::layers::LayerLoader;
use crate::model::registry::{Family, ImageProcessing};
use crate::model::vision_tower::VisionEncoding;
use crate::model::with_vision::WithVision;
use crate::model::{LanguageModel, VisionTower};

pub const FAMILY: Family = Family {
    name: "Gemma 4",
    model_types: &["gemma4"],
    build: |_, config, loader| load(config, loader),
    layers: crate::model::gemma4::FAMILY.layers,
    gguf: None,
    image_processor: Some(ImageProcessing::one_view(
        super::image_processor::Gemma4ImageProcessor::shared_from_folder,
    )),
    tensor_parallel: false,
};

/// `<|image|>` in Gemma 4's vocabulary, when config.json omits it.
const DEFAULT_IMAGE_TOKEN_ID: u32 = 258880;

/// Gemma 4 with its vision encoder.
pub type Gemma4Vl = WithVision<Gemma4, Gemma4Vision>;

/// The encoder as the engine's [`VisionTower`].
pub struct Gemma4Vision {
    tower: Gemma4VisionTower,
    image_token_id: u32,
    bidirectional: bool,
}

fn load(config: &Value, loader: &mut LayerLoader) -> Result<Box<dyn LanguageModel>> {
    // mlx-vlm's names are Hugging Face's without the leading `model.`.
    let names: Vec<String> = loader.weights.names().map(str::to_owned).collect();
    for name in names {
        if let Some(rest) = name.strip_prefix("model.") {
            if ["vision_tower.", "embed_vision.", "audio_tower.", "embed_audio."]
                .iter()
                .any(|t| rest.starts_with(t))
            {
                loader.weights.rename(&name, rest);
            }
        }
    }
    let has_tower = loader.weights.contains("vision_tower.patch_embedder.input_proj.weight");
    let skipped: &[&str] = if has_tower { &["audio_tower.", "embed_audio."] } else { TOWERS };
    keep_language_model(loader, skipped, "Gemma 4");
    let language = Gemma4::load(config, loader)?;
    if !has_tower {
        tracing::info!("Gemma 4: no vision tower in the checkpoint; loaded text only");
        return Ok(Box::new(language));
    }
    let vision_json = config.get("vision_config").cloned().unwrap_or(Value::Null);
    let cfg = Gemma4VisionConfig::parse(&vision_json)?;
    let tower = Gemma4VisionTower::load(cfg, language.shape_hidden(), loader)?;
    let image_token_id = config
        .get("image_token_id")
        .and_then(Value::as_u64)
        .map_or(DEFAULT_IMAGE_TOKEN_ID, |x| x as u32);
    let bidirectional = config
        .get("text_config")
        .and_then(|t| t.get("use_bidirectional_attention"))
        .and_then(Value::as_str)
        == Some("vision");
    Ok(Box::new(Gemma4Vl {
        language,
        vision: Gemma4Vision { tower, image_token_id, bidirectional },
    }))
}

impl VisionTower for Gemma4Vision {
    fn image_token_id(&self) -> u32 {
        self.image_token_id
    }

    fn begin_encode(&self, pixels: &Array, grid: [i32; 3]) -> Result<VisionEncoding> {
        Ok(VisionEncoding::new(self.tower.begin(pixels, grid)?, self.tower.depth(), grid))
    }

    fn encode_blocks(&self, encoding: &mut VisionEncoding, count: usize) -> Result<Array> {
        let blocks = encoding.take_blocks(count);
        self.tower.run_blocks(encoding.state_mut::<Gemma4Encoding>()?, blocks)
    }

    fn finish_encode(&self, encoding: &VisionEncoding) -> Result<Array> {
        encoding.check_done()?;
        self.tower.finish(encoding.state::<Gemma4Encoding>()?)
    }

    fn rope_positions(&self, _tokens: &[u32], _grids: &[[i32; 3]]) -> Result<Option<(Array, i32)>> {
        Ok(None)
    }

    fn bidirectional_images(&self) -> bool {
        self.bidirectional
    }

    /// Image slots read the padding token's per-layer inputs.
    fn tokens_for_language(&self, tokens: &Array) -> Result<Array> {
        let image = Array::from_int(self.image_token_id as i32).as_dtype(tokens.dtype())?;
        Ok(ops::select(&tokens.eq(&image)?, &ops::zeros_like(tokens)?, tokens)?)
    }
}
