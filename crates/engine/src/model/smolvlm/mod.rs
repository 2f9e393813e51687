//! SmolVLM / SmolVLM2 (`smolvlm`) and Idefics3 (`idefics3`), which share the
//! architecture: a SigLIP tower ([`crate::model::layers::siglip`]) run over
//! each tile of an image, the connector — a pixel shuffle that folds each
//! `scale × scale` block of patch states into one wider row, then one matrix
//! (no bias) to the language model's width — and the llama decoder
//! ([`crate::model::llama`]). An image's soft tokens take ordinary positions
//! and attend causally, as in mlx-vlm 0.7.6 and transformers.
//!
//! The image processor ([`image_processor`]) cuts an image into tiles plus a
//! global view and writes each image's whole token layout
//! (`<fake_token_around_image>`, `<row_r_col_c>`, `<global-img>`, the
//! `<image>` slots) into the prompt text; the tower encodes the tiles in the
//! same order (row by row, the global view last).
//!
//! Weight names: mlx-vlm's `vision_model.*`, `connector.*`,
//! `language_model.{embed_tokens,layers,norm,lm_head}.*`; transformers'
//! `model.vision_model.*`, `model.connector.*`, `model.text_model.*` and
//! `lm_head.*` are renamed to those at load.
pub mod image_processor;

use mlx_rs::{ops, ops::indexing::IndexOp, Array, Dtype};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::model::layers::rope::Rope;
use crate::model::layers::siglip::{Siglip, SiglipConfig, SiglipEncoding};
use crate::model::layers::{LayerLoader, Linear};
use crate::model::llama::{parse_args, DecoderLayout, Llama, LlamaArgs};
use crate::model::registry::{Family, ImageProcessing};
use crate::model::vision_tower::VisionEncoding;
use crate::model::with_vision::WithVision;
use crate::model::VisionTower;

pub const FAMILY: Family = Family {
    name: "SmolVLM",
    model_types: &["smolvlm", "idefics3"],
    build: |_, config, loader| Ok(Box::new(SmolVlm::load(config, loader)?)),
    layers: |config| Ok(text_args(config)?.layer_shapes()),
    gguf: None,
    image_processor: Some(ImageProcessing {
        read: image_processor::SmolVlmImageProcessor::shared_from_folder,
        views: Some(image_processor::image_views),
    }),
    tensor_parallel: false,
};

const TOWER: &str = "vision_model";
const LANGUAGE: &str = "language_model";
const PROJECTION: &str = "connector.modality_projection.proj";
/// `<image>` in SmolVLM's vocabulary, when config.json omits it.
const DEFAULT_IMAGE_TOKEN_ID: u32 = 49153;

/// The llama decoder with SmolVLM's tower and connector.
pub type SmolVlm = WithVision<Llama, SmolVlmVision>;

/// The tower and connector as the engine's [`VisionTower`].
pub struct SmolVlmVision {
    tower: Siglip,
    /// `[vision width · scale², text width]`, no bias.
    projection: Linear,
    /// Each `scale × scale` block of a tile's patch grid becomes one token.
    scale: i32,
    image_token_id: u32,
}

/// One image part-way through the tower: each tile's own encoding.
struct Tiles(Vec<SiglipEncoding>);

/// The text model's arguments as mlx-vlm reads them: its head size is
/// always `hidden / heads`, it knows no RoPE scaling, and the output head
/// is its own matrix unless the checkpoint ties it.
pub(crate) fn text_args(config: &Value) -> Result<LlamaArgs> {
    let text = config.get("text_config").cloned().unwrap_or(Value::Object(Map::new()));
    let mut args = parse_args(&text, "SmolVLM text_config")?;
    args.head_dim = None;
    args.rope_scaling = None;
    Ok(args)
}

/// `vision_config` with mlx-vlm's defaults for the keys SmolVLM2 exports omit.
fn vision_config(config: &Value) -> Value {
    let mut v = config.get("vision_config").cloned().unwrap_or(Value::Object(Map::new()));
    if let Some(map) = v.as_object_mut() {
        let width = map.get("hidden_size").and_then(Value::as_i64).unwrap_or(1152);
        map.entry("hidden_size").or_insert(width.into());
        let heads = if width % 64 == 0 { width / 64 } else { 16 };
        map.entry("num_attention_heads").or_insert(heads.into());
        map.entry("num_hidden_layers").or_insert((if width <= 768 { 12 } else { 27 }).into());
        let mlp = match width {
            768 => 3072,
            1152 => 4304,
            w => 4 * w,
        };
        map.entry("intermediate_size").or_insert(mlp.into());
        map.entry("patch_size").or_insert(14.into());
        map.entry("image_size").or_insert(384.into());
    }
    v
}

/// Renames transformers' tensor names to mlx-vlm's (see the module doc).
fn gather_names(loader: &mut LayerLoader) {
    let names: Vec<String> = loader.weights.names().map(str::to_owned).collect();
    for name in names {
        if name.contains("position_ids") {
            loader.weights.remove(&name);
            continue;
        }
        let bare = name.strip_prefix("model.").unwrap_or(&name);
        let renamed = if let Some(rest) = bare.strip_prefix("text_model.") {
            format!("{LANGUAGE}.{rest}")
        } else if name.starts_with("lm_head.") {
            format!("{LANGUAGE}.{name}")
        } else {
            bare.to_string()
        };
        if renamed != name {
            loader.weights.rename(&name, renamed);
        }
    }
}

impl SmolVlm {
    pub fn load(config: &Value, loader: &mut LayerLoader) -> Result<SmolVlm> {
        gather_names(loader);
        let args = text_args(config)?;
        let rope = Rope::new(args.head_dim(), args.rope_theta, args.rope_traditional, None)?;
        let text_hidden = args.hidden_size;
        let layout = DecoderLayout {
            prefix: LANGUAGE.into(),
            lm_head: format!("{LANGUAGE}.lm_head"),
            qkv_bias: false,
            qk_norm: false,
        };
        let language = Llama::build(args, &layout, rope, loader)?;
        let cfg = SiglipConfig::parse(&vision_config(config))?;
        let scale = config.get("scale_factor").and_then(Value::as_i64).unwrap_or(2) as i32;
        if scale <= 0 || cfg.side() % scale != 0 {
            return Err(Error::InvalidConfig(format!(
                "scale_factor {scale} does not divide the tower's {0}×{0} patch grid",
                cfg.side()
            )));
        }
        let (width, side) = (cfg.width, cfg.side());
        let mut tower = Siglip::load(cfg, TOWER, loader)?;
        tower.set_position_ids(&position_ids(side)?)?;
        let projection = loader.linear(PROJECTION, width * scale * scale, text_hidden, false)?;
        let image_token_id = ["image_token_id", "image_token_index"]
            .iter()
            .find_map(|k| config.get(*k).and_then(Value::as_u64))
            .map_or(DEFAULT_IMAGE_TOKEN_ID, |x| x as u32);
        let vision = SmolVlmVision { tower, projection, scale, image_token_id };
        Ok(WithVision { language, vision })
    }
}

/// The position of each patch of a whole tile as mlx-vlm's Idefics3
/// `VisionEmbeddings` computes it: each row's and column's fractional
/// coordinate `i / side` (float32, clipped below 1) counted against the
/// float32 boundaries `arange(1/side, 1, 1/side)`; row-major. `i` itself
/// when the side is a power of two (SmolVLM2's 32); otherwise float32
/// rounding repeats and skips some (Idefics3's 26, SmolVLM's 27).
fn position_ids(side: i32) -> Result<Array> {
    let n = side as f64;
    let boundaries = Array::arange::<f64, f32>(1.0 / n, 1.0, 1.0 / n)?;
    let fractional =
        Array::arange::<f64, f32>(None, n, None)?.divide(Array::from_f32(side as f32))?;
    let fractional = ops::minimum(&fractional, Array::from_f32((1.0 - 1e-6f64) as f32))?;
    let bucket = fractional
        .expand_dims(1)?
        .ge(boundaries.expand_dims(0)?)?
        .as_dtype(Dtype::Int32)?
        .sum_axis(1, false)?;
    let ids =
        bucket.expand_dims(1)?.multiply(Array::from_int(side))?.add(bucket.expand_dims(0)?)?;
    Ok(ids.reshape(&[side * side])?.as_dtype(Dtype::Int32)?)
}

impl SmolVlmVision {
    /// Patches per tile.
    fn tile_patches(&self) -> i32 {
        let side = self.tower.config().side();
        side * side
    }

    /// mlx-vlm's pixel shuffle of one tile's `[side², width]` states →
    /// `[side² / scale², width · scale²]`: each output row holds a
    /// `scale × scale` block, its rows' states side by side.
    fn pixel_shuffle(&self, x: &Array) -> Result<Array> {
        let (side, s, d) = (self.tower.config().side(), self.scale, x.dim(1));
        Ok(x.reshape(&[side, side / s, d * s])?
            .transpose_axes(&[1, 0, 2])?
            .reshape(&[side / s, side / s, d * s * s])?
            .transpose_axes(&[1, 0, 2])?
            .reshape(&[side * side / (s * s), d * s * s])?)
    }
}

impl VisionTower for SmolVlmVision {
    fn image_token_id(&self) -> u32 {
        self.image_token_id
    }

    /// `pixels`: the image's tiles one after the other, each `side²`
    /// patches; `grid`: `[tiles, rows, cols]` (see the image processor).
    fn begin_encode(&self, pixels: &Array, grid: [i32; 3]) -> Result<VisionEncoding> {
        let (n, tiles) = (self.tile_patches(), grid[0]);
        if tiles <= 0 || pixels.dim(0) != n * tiles {
            return Err(Error::InvalidRequest(format!(
                "image patches have {} rows; {tiles} tiles of {n} patches were expected",
                pixels.dim(0)
            )));
        }
        let encodings = (0..tiles)
            .map(|t| self.tower.begin(&pixels.index(t * n..(t + 1) * n)))
            .collect::<Result<Vec<_>>>()?;
        let side = self.tower.config().side();
        Ok(VisionEncoding::new(Tiles(encodings), self.tower.depth(), [tiles, side, side]))
    }

    fn encode_blocks(&self, encoding: &mut VisionEncoding, count: usize) -> Result<Array> {
        let blocks = encoding.take_blocks(count);
        let tiles = encoding.state_mut::<Tiles>()?;
        let states = tiles
            .0
            .iter_mut()
            .map(|tile| self.tower.run_blocks(tile, blocks.clone()))
            .collect::<Result<Vec<_>>>()?;
        Ok(ops::concatenate(&states, 0)?)
    }

    fn finish_encode(&self, encoding: &VisionEncoding) -> Result<Array> {
        encoding.check_done()?;
        let tiles = encoding.state::<Tiles>()?;
        let shuffled = tiles
            .0
            .iter()
            .map(|tile| self.pixel_shuffle(&self.tower.finish(tile)?))
            .collect::<Result<Vec<_>>>()?;
        self.projection.forward(&ops::concatenate(&shuffled, 0)?)
    }

    fn rope_positions(&self, _tokens: &[u32], _grids: &[[i32; 3]]) -> Result<Option<(Array, i32)>> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(side: i32) -> Vec<i32> {
        let ids = position_ids(side).unwrap();
        ids.as_slice::<i32>().iter().take(side as usize).copied().collect()
    }

    #[test]
    fn tile_positions_are_mlx_vlms_float32_buckets() {
        // mlx-vlm 0.7.6 (MLX 0.32.2): the first row's positions.
        assert_eq!(rows(32), (0..32).collect::<Vec<_>>());
        let side_26 = [
            0, 1, 2, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 14, 15, 16, 17, 18, 19, 20, 21, 22,
            23, 24,
        ];
        assert_eq!(rows(26), side_26);
        let side_27 = [
            0, 1, 2, 3, 4, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 15, 16, 17, 18, 19, 20, 21, 22, 23,
            24, 25, 26,
        ];
        assert_eq!(rows(27), side_27);
        // Row r starts at side · bucket(r).
        let ids = position_ids(26).unwrap();
        assert_eq!(ids.as_slice::<i32>()[3 * 26 + 1], 2 * 26 + 1);
    }
}
