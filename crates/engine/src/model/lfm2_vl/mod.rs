//! LFM2-VL (`lfm2_vl`; Liquid AI's configs say `lfm2-vl`): the LFM2 text
//! model ([`crate::model::lfm2`], its convolution states and all), a
//! SigLIP2 NaFlex tower ([`crate::model::layers::siglip`]: a linear patch
//! layer and the learned position table resized to each view's patch grid)
//! run over each view of an image, and the projector: a pixel unshuffle
//! folding each `f × f` block of a view's patch states into one row (odd
//! grids padded with zeros), then LayerNorm, a linear layer, GELU (erf) and
//! a linear layer to the text width. Image tokens take ordinary positions
//! and attend causally, as in mlx-vlm 0.7.6.
//!
//! The image processor ([`image_processor`]) cuts a large image into tiles
//! plus a thumbnail and writes each image's layout into the prompt text;
//! the tower encodes the views in the same order.
//!
//! Weight names: mlx-vlm's `vision_tower.{embeddings,encoder,post_layernorm}.*`,
//! `multi_modal_projector.*`, `language_model.model.*`; transformers'
//! `model.vision_tower.vision_model.*`, `model.multi_modal_projector.*`,
//! `model.language_model.*` are renamed at load, and the text model's to
//! the `model.*` names [`Lfm2`] reads.
pub mod image_processor;

use mlx_rs::{ops, ops::indexing::IndexOp, Array};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::model::layers::siglip::{LayerNorm, Siglip, SiglipConfig, SiglipEncoding};
use crate::model::layers::{LayerLoader, Linear};
use crate::model::lfm2::{Lfm2, Lfm2Args};
use crate::model::registry::{Family, ImageProcessing};
use crate::model::vision_tower::VisionEncoding;
use crate::model::with_vision::WithVision;
use crate::model::VisionTower;
use image_processor::Layout;

pub const FAMILY: Family = Family {
    name: "LFM2-VL",
    model_types: &["lfm2_vl", "lfm2-vl"],
    build: |_, config, loader| Ok(Box::new(Lfm2Vl::load(config, loader)?)),
    layers: |config| Ok(Lfm2Args::parse(&with_text_defaults(config))?.layer_shapes()),
    gguf: None,
    image_processor: Some(ImageProcessing {
        read: image_processor::Lfm2VlImageProcessor::shared_from_folder,
        views: Some(image_processor::image_views),
    }),
    tensor_parallel: false,
};

const TOWER: &str = "vision_tower";
const PROJECTOR: &str = "multi_modal_projector";
/// `<image>` in LFM2-VL's vocabulary, when config.json omits it.
const DEFAULT_IMAGE_TOKEN_ID: u32 = 396;
/// The projector's LayerNorm keeps MLX's default epsilon.
const PROJECTOR_NORM_EPS: f32 = 1e-5;

/// LFM2 with LFM2-VL's tower and projector.
pub type Lfm2Vl = WithVision<Lfm2, Lfm2VlVision>;

/// The tower and projector as the engine's [`VisionTower`].
pub struct Lfm2VlVision {
    tower: Siglip,
    norm: Option<LayerNorm>,
    linear_1: Linear,
    linear_2: Linear,
    /// Each `factor × factor` block of a view's patch grid becomes one token.
    factor: i32,
    image_token_id: u32,
}

/// One image part-way through the tower: each view's encoding and patch grid.
struct Views(Vec<(SiglipEncoding, i32, i32)>);

/// config.json with mlx-vlm's defaults in `text_config` for what an
/// LFM2-VL export may leave out (its `TextConfig` adjusts the MLP width
/// unless told not to; mlx-lm's text LFM2 has no default).
fn with_text_defaults(config: &Value) -> Value {
    let mut config = config.clone();
    if let Some(text) = config.get_mut("text_config").and_then(Value::as_object_mut) {
        text.entry("block_auto_adjust_ff_dim").or_insert(true.into());
    }
    config
}

/// `vision_config` as [`SiglipConfig`] reads it, with mlx-vlm's defaults:
/// the position table's `num_patches` as a square `image_size`, and only
/// the blocks up to `vision_feature_layer` (all for -1).
fn vision_config(config: &Value) -> Result<SiglipConfig> {
    let mut v = config.get("vision_config").cloned().unwrap_or(Value::Object(Map::new()));
    let map = v
        .as_object_mut()
        .ok_or_else(|| Error::InvalidConfig("LFM2-VL: vision_config is not an object".into()))?;
    let int = |map: &Map<String, Value>, key: &str, default: i64| {
        map.get(key).and_then(Value::as_i64).unwrap_or(default)
    };
    let patch = int(map, "patch_size", 16);
    let positions = int(map, "num_patches", 256);
    let side = (positions as f64).sqrt().round() as i64;
    if side * side != positions {
        return Err(Error::InvalidConfig(format!(
            "LFM2-VL: vision_config.num_patches {positions} is not a square grid"
        )));
    }
    let mut layers = int(map, "num_hidden_layers", 12);
    let feature_layer = config.get("vision_feature_layer").and_then(Value::as_i64).unwrap_or(-1);
    if feature_layer >= 0 {
        layers = layers.min(feature_layer + 1);
    }
    for (key, value) in [
        ("hidden_size", int(map, "hidden_size", 768)),
        ("intermediate_size", int(map, "intermediate_size", 3072)),
        ("num_attention_heads", int(map, "num_attention_heads", 12)),
        ("num_hidden_layers", layers),
        ("patch_size", patch),
        ("image_size", side * patch),
    ] {
        map.insert(key.into(), value.into());
    }
    let mut cfg = SiglipConfig::parse(&v)?;
    cfg.post_norm_eps = cfg.eps;
    Ok(cfg)
}

/// Renames transformers' and mlx-vlm's tensor names to the ones loaded
/// here (see the module doc); drops the tower's blocks past
/// `vision_feature_layer` and the position ids.
fn gather_names(loader: &mut LayerLoader, tower_layers: i32) {
    let names: Vec<String> = loader.weights.names().map(str::to_owned).collect();
    for name in names {
        if name.contains("position_ids") {
            loader.weights.remove(&name);
            continue;
        }
        let renamed = if let Some(rest) = name
            .strip_prefix("model.language_model.")
            .or_else(|| name.strip_prefix("language_model.model."))
        {
            format!("model.{rest}")
        } else if let Some(rest) = name.strip_prefix("language_model.") {
            rest.to_string()
        } else if let Some(rest) = name
            .strip_prefix("model.vision_tower.vision_model.")
            .or_else(|| name.strip_prefix("vision_tower.vision_model."))
            .or_else(|| name.strip_prefix("model.vision_tower."))
        {
            format!("{TOWER}.{rest}")
        } else if let Some(rest) = name.strip_prefix("model.multi_modal_projector.") {
            format!("{PROJECTOR}.{rest}")
        } else {
            name.clone()
        };
        let block = renamed
            .strip_prefix(&format!("{TOWER}.encoder.layers."))
            .and_then(|rest| rest.split('.').next())
            .and_then(|i| i.parse::<i32>().ok());
        if block.is_some_and(|i| i >= tower_layers) {
            loader.weights.remove(&name);
        } else if renamed != name {
            loader.weights.rename(&name, renamed);
        }
    }
}

impl Lfm2Vl {
    pub fn load(config: &Value, loader: &mut LayerLoader) -> Result<Lfm2Vl> {
        let cfg = vision_config(config)?;
        gather_names(loader, cfg.layers);
        let language = Lfm2::load(&with_text_defaults(config), loader)?;
        let int =
            |key: &str, default: i64| config.get(key).and_then(Value::as_i64).unwrap_or(default);
        let flag = |key: &str| config.get(key).and_then(Value::as_bool).unwrap_or(true);
        let factor = int("downsample_factor", 2) as i32;
        if factor < 1 {
            return Err(Error::InvalidConfig(format!("LFM2-VL: downsample_factor {factor}")));
        }
        let act = config.get("projector_hidden_act").and_then(Value::as_str).unwrap_or("gelu");
        if act != "gelu" {
            return Err(Error::InvalidConfig(format!(
                "LFM2-VL: projector_hidden_act {act} is not supported"
            )));
        }
        let width = cfg.width;
        let tower = Siglip::load(cfg, TOWER, loader)?;
        let folded = width * factor * factor;
        let hidden = int("projector_hidden_size", 2560) as i32;
        let bias = flag("projector_bias");
        let norm_name = format!("{PROJECTOR}.layer_norm");
        let norm = if flag("projector_use_layernorm") {
            Some(LayerNorm::load(loader, &norm_name, folded, PROJECTOR_NORM_EPS)?)
        } else {
            for part in ["weight", "bias"] {
                loader.weights.remove(&format!("{norm_name}.{part}"));
            }
            None
        };
        let linear_1 = loader.linear(&format!("{PROJECTOR}.linear_1"), folded, hidden, bias)?;
        let linear_2 = loader.linear(
            &format!("{PROJECTOR}.linear_2"),
            hidden,
            language.hidden_size(),
            bias,
        )?;
        let image_token_id = ["image_token_index", "image_token_id"]
            .iter()
            .find_map(|k| config.get(*k).and_then(Value::as_u64))
            .map_or(DEFAULT_IMAGE_TOKEN_ID, |x| x as u32);
        let vision = Lfm2VlVision { tower, norm, linear_1, linear_2, factor, image_token_id };
        Ok(WithVision { language, vision })
    }
}

impl Lfm2VlVision {
    /// mlx-vlm's `PixelUnshuffleBlock` on one view's `[h·w, D]` states:
    /// `[⌈h/f⌉·⌈w/f⌉, D·f²]`, raster order; each row holds its block's
    /// states row by row (an odd grid padded with zero states).
    fn pixel_unshuffle(&self, x: &Array, h: i32, w: i32) -> Result<Array> {
        let (f, d) = (self.factor, x.dim(1));
        let mut x = x.reshape(&[h, w, d])?;
        let (ph, pw) = ((h + f - 1) / f * f, (w + f - 1) / f * f);
        if ph > h {
            let zeros = ops::zeros_dtype(&[ph - h, w, d], x.dtype())?;
            x = ops::concatenate(&[x, zeros], 0)?;
        }
        if pw > w {
            let zeros = ops::zeros_dtype(&[ph, pw - w, d], x.dtype())?;
            x = ops::concatenate(&[x, zeros], 1)?;
        }
        Ok(x.reshape(&[ph / f, f, pw / f, f, d])?
            .transpose_axes(&[0, 2, 1, 3, 4])?
            .reshape(&[(ph / f) * (pw / f), f * f * d])?)
    }

    fn project(&self, x: &Array) -> Result<Array> {
        let x = match &self.norm {
            Some(norm) => norm.forward(x)?,
            None => x.clone(),
        };
        let x = crate::model::layers::gelu(&self.linear_1.forward(&x)?)?;
        self.linear_2.forward(&x)
    }
}

impl VisionTower for Lfm2VlVision {
    fn image_token_id(&self) -> u32 {
        self.image_token_id
    }

    /// `pixels`: the image's views one after the other (the tiles, then the
    /// thumbnail; or the single view); `grid`: its [`Layout`].
    fn begin_encode(&self, pixels: &Array, grid: [i32; 3]) -> Result<VisionEncoding> {
        let layout = Layout::of_grid(grid);
        let (tiles, n) = (layout.tiles(), pixels.dim(0));
        let thumbnail = layout.height * layout.width;
        let tile_patches = if tiles > 0 { (n - thumbnail) / tiles } else { 0 };
        let side = (f64::from(tile_patches.max(0))).sqrt().round() as i32;
        if tiles + thumbnail == 0 || side * side * tiles + thumbnail != n {
            return Err(Error::InvalidRequest(format!(
                "image patches have {n} rows, not {tiles} square tiles and a {}×{} view",
                layout.height, layout.width
            )));
        }
        let mut views = Vec::with_capacity(tiles as usize + 1);
        let tile = side * side;
        for t in 0..tiles {
            let patches = pixels.index(t * tile..(t + 1) * tile);
            views.push((self.tower.begin_resized(&patches, side, side)?, side, side));
        }
        if thumbnail > 0 {
            let patches = pixels.index(tiles * tile..n);
            let (h, w) = (layout.height, layout.width);
            views.push((self.tower.begin_resized(&patches, h, w)?, h, w));
        }
        Ok(VisionEncoding::new(Views(views), self.tower.depth(), [1, n, 1]))
    }

    fn encode_blocks(&self, encoding: &mut VisionEncoding, count: usize) -> Result<Array> {
        let blocks = encoding.take_blocks(count);
        let views = encoding.state_mut::<Views>()?;
        let states = views
            .0
            .iter_mut()
            .map(|(view, _, _)| self.tower.run_blocks(view, blocks.clone()))
            .collect::<Result<Vec<_>>>()?;
        Ok(ops::concatenate(&states, 0)?)
    }

    fn finish_encode(&self, encoding: &VisionEncoding) -> Result<Array> {
        encoding.check_done()?;
        let views = encoding.state::<Views>()?;
        let folded = views
            .0
            .iter()
            .map(|(view, h, w)| self.pixel_unshuffle(&self.tower.finish(view)?, *h, *w))
            .collect::<Result<Vec<_>>>()?;
        self.project(&ops::concatenate(&folded, 0)?)
    }

    fn rope_positions(&self, _tokens: &[u32], _grids: &[[i32; 3]]) -> Result<Option<(Array, i32)>> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::cache::LayerCache;

    #[test]
    fn a_real_config_gives_lfm2s_layers_and_a_siglip2_tower() {
        // LFM2-VL-1.6B's (the file `fixtures::lfm2_vl_1_6b_config` reads too)
        let config = include_str!("../../../tests/fixtures/configs/lfm2_vl_1_6b.json");
        let config: Value = serde_json::from_str(config).unwrap();
        let shapes = (FAMILY.layers)(&config).unwrap();
        let attention: Vec<usize> =
            (0..16).filter(|&i| shapes[i].cache == LayerCache::Full).collect();
        assert_eq!(attention, [2, 5, 8, 10, 12, 14]);
        let cfg = vision_config(&config).unwrap();
        assert_eq!((cfg.layers, cfg.width, cfg.heads, cfg.side()), (26, 1152, 16, 16));
        // LFM2.5-VL style: layer_types, intermediate_size, no auto-adjust flag
        // (mlx-vlm then adjusts: 2/3 of 12288 = 8192)
        let mut text = config["text_config"].clone();
        let map = text.as_object_mut().unwrap();
        for key in ["block_auto_adjust_ff_dim", "block_ff_dim", "full_attn_idxs"] {
            map.remove(key);
        }
        map.insert("intermediate_size".into(), json!(12288));
        let types: Vec<&str> = (0..16)
            .map(|i| if attention.contains(&i) { "full_attention" } else { "conv" })
            .collect();
        map.insert("layer_types".into(), json!(types));
        let newer = json!({"model_type": "lfm2_vl", "text_config": text});
        assert_eq!((FAMILY.layers)(&newer).unwrap(), shapes);
        assert_eq!(Lfm2Args::parse(&with_text_defaults(&newer)).unwrap().ff_dim(), 8192);
    }

    #[test]
    fn the_tower_keeps_the_blocks_up_to_the_feature_layer() {
        let config = json!({"vision_config": {"num_hidden_layers": 27, "hidden_size": 1152,
            "intermediate_size": 4304, "num_attention_heads": 16}, "vision_feature_layer": 25});
        let cfg = vision_config(&config).unwrap();
        assert_eq!((cfg.layers, cfg.side(), cfg.patch_size), (26, 16, 16));
        assert_eq!(cfg.post_norm_eps, cfg.eps);
        let all = json!({"vision_config": {"num_hidden_layers": 12}, "vision_feature_layer": -1});
        assert_eq!(vision_config(&all).unwrap().layers, 12);
        let odd = json!({"vision_config": {"num_patches": 200}});
        assert!(vision_config(&odd).is_err());
    }
}
