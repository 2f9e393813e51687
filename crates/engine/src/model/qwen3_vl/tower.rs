//! The Qwen3-VL vision tower (`vision.rs`) as the engine's [`VisionTower`]:
//! shared by Qwen3.5 ([`crate::model::qwen3_5::vision`]), whose tower is the same.
//! Image placeholders are `<|image_pad|>` runs between `<|vision_start|>`
//! and `<|vision_end|>`, and their M-RoPE positions follow Qwen2-VL's rule.
use mlx_rs::Array;
use serde_json::Value;

use super::vision::{TowerEncoding, VisionConfig, VisionModel};
use crate::error::{Error, Result};
use crate::model::layers::LayerLoader;
use crate::model::qwen2_vl::positions;
use crate::model::vision_tower::VisionEncoding;
use crate::model::VisionTower;

/// The [`VisionTower`] of a Qwen3-VL or Qwen3.5 model.
pub struct Qwen3Vision {
    model: VisionModel,
    image_token_id: u32,
}

impl Qwen3Vision {
    /// Loads the tower under `prefix` from `config.json`'s `vision_config`,
    /// checking that its features fit a language model of width `hidden`.
    pub fn load(
        config: &Value,
        prefix: &str,
        hidden: i32,
        default_image_token: u32,
        loader: &mut LayerLoader,
    ) -> Result<Self> {
        let vision_json =
            config.get("vision_config").cloned().unwrap_or(Value::Object(Default::default()));
        let cfg = VisionConfig::parse(&vision_json)?;
        if cfg.out_hidden != hidden {
            return Err(Error::InvalidConfig(format!(
                "the vision tower outputs {} values per feature but the language model's hidden size is {hidden}",
                cfg.out_hidden
            )));
        }
        let model = VisionModel::load(cfg, prefix, loader)?;
        let image_token_id = ["image_token_id", "image_token_index"]
            .iter()
            .find_map(|k| config.get(*k).and_then(Value::as_u64))
            .map_or(default_image_token, |x| x as u32);
        Ok(Self { model, image_token_id })
    }

    pub fn model(&self) -> &VisionModel {
        &self.model
    }
}

impl VisionTower for Qwen3Vision {
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
        let (features, deepstack) = self.model.finish(encoding.state::<TowerEncoding>()?)?;
        if deepstack.is_empty() {
            return Ok(features);
        }
        // DeepStack levels ride beside the features, `[slots, hidden · (1 + levels)]`:
        // they are cached and spliced with them (see `VisionTower::feature_levels`).
        let mut parts = vec![features];
        parts.extend(deepstack);
        Ok(mlx_rs::ops::concatenate(&parts, -1)?)
    }

    fn feature_levels(&self) -> usize {
        1 + self.model.deepstack_levels()
    }

    fn rope_positions(&self, tokens: &[u32], grids: &[[i32; 3]]) -> Result<Option<(Array, i32)>> {
        let (axes, delta) = positions::rope_positions(tokens, self.image_token_id, grids)?;
        let flat: Vec<i32> = axes.concat();
        Ok(Some((Array::from_slice(&flat, &[3, tokens.len() as i32]), delta)))
    }
}
