//! Mistral 3's vision half, as mlx-vlm 0.7.6 runs it: Pixtral's tower and
//! the multimodal projector.
//!
//! - The tower reads an image of any size (its sides whole patches): the
//!   patch convolution (no bias, as one matmul over the processor's
//!   patches), an RMSNorm (`ln_pre`), then pre-norm blocks of attention over
//!   all of the image's patches and a SwiGLU MLP, every norm an RMSNorm.
//! - Its RoPE is 2D: of each head's `head_dim / 2` frequencies, the even
//!   ones turn with the patch's row and the odd ones with its column
//!   (rotate-half layout), the row and column in the full grid of
//!   `image_size / patch_size` a side.
//! - The projector: an RMSNorm, the patch merger (each `s × s` block of the
//!   image's patch grid becomes one row, its states interleaved channel by
//!   channel as PyTorch's `unfold` lays them out, then one matrix back to the
//!   tower's width), then `linear_1`, GELU and `linear_2` to the text width.
//!
//! The image's tokens take ordinary positions and attend causally.
use mlx_rs::{ops, Array};
use serde_json::Value;

use super::{Ministral3, TextArgs};
use crate::cache::AttentionMask;
use crate::error::{Error, Result};
use crate::model::layers::{attention, LayerLoader, Linear, RmsNorm};
use crate::model::registry::{Family, ImageProcessing};
use crate::model::vision_tower::{VisionEncoding, VisionTower};
use crate::model::with_vision::WithVision;
use crate::model::LanguageModel;

pub const FAMILY: Family = Family {
    name: "Mistral 3",
    model_types: &["mistral3"],
    build: |_, config, loader| build(config, loader),
    layers: |config| Ok(TextArgs::parse(&text_config(config), false)?.layer_shapes()),
    gguf: None,
    image_processor: Some(ImageProcessing::one_view(
        super::image_processor::PixtralImageProcessor::shared_from_folder,
    )),
    tensor_parallel: false,
};

/// The Ministral 3 decoder with Pixtral's tower and the projector.
pub type Mistral3 = WithVision<Ministral3, PixtralVision>;

const TOWER: &str = "vision_tower.vision_model";
const PROJECTOR: &str = "multi_modal_projector";
const LANGUAGE: &str = "language_model.model";
const HEAD: &str = "language_model.lm_head";
/// `[IMG]` in Mistral's vocabulary, when config.json omits it.
const DEFAULT_IMAGE_TOKEN_ID: u32 = 10;

/// `text_config`, `ministral3` unless it says.
fn text_config(config: &Value) -> Value {
    let mut text =
        config.get("text_config").cloned().unwrap_or_else(|| Value::Object(Default::default()));
    if let Some(map) = text.as_object_mut() {
        map.entry("model_type").or_insert("ministral3".into());
    }
    text
}

/// The tower's sizes (`vision_config`, mlx-vlm's defaults).
#[derive(Debug, Clone, Copy)]
struct PixtralConfig {
    width: i32,
    layers: i32,
    heads: i32,
    /// RoPE's width (`head_dim`).
    rope_dim: i32,
    mlp: i32,
    patch: i32,
    /// Patches a side of the largest image (`image_size / patch_size`): the
    /// grid positions count in.
    side: i32,
    eps: f32,
    rope_theta: f32,
}

impl PixtralConfig {
    fn parse(v: &Value) -> Result<Self> {
        let int = |k: &str, d: i64| v.get(k).and_then(Value::as_i64).unwrap_or(d) as i32;
        let float = |k: &str, d: f64| v.get(k).and_then(Value::as_f64).unwrap_or(d) as f32;
        let c = Self {
            width: int("hidden_size", 1024),
            layers: int("num_hidden_layers", 24),
            heads: int("num_attention_heads", 16),
            rope_dim: int("head_dim", 64),
            mlp: int("intermediate_size", 4096),
            patch: int("patch_size", 14),
            side: int("image_size", 336) / int("patch_size", 14).max(1),
            eps: float("rms_norm_eps", 1e-5),
            rope_theta: float("rope_theta", 10000.0),
        };
        if c.heads < 1 || c.width % c.heads != 0 || c.rope_dim != c.width / c.heads {
            return Err(Error::InvalidConfig(format!(
                "Pixtral tower: {} wide with {} heads of head_dim {}",
                c.width, c.heads, c.rope_dim
            )));
        }
        if c.patch < 1 || c.side < 1 || c.rope_dim % 4 != 0 {
            return Err(Error::InvalidConfig("Pixtral tower: bad patch_size or image_size".into()));
        }
        Ok(c)
    }
}

struct Block {
    attention_norm: RmsNorm,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    ffn_norm: RmsNorm,
    gate: Linear,
    up: Linear,
    down: Linear,
}

/// The tower and projector as the engine's [`VisionTower`].
pub struct PixtralVision {
    cfg: PixtralConfig,
    /// `[C·P·P, width]` columns (channel, row, col), as the processor's patches.
    patch_conv: Array,
    ln_pre: RmsNorm,
    blocks: Vec<Block>,
    /// `[side · side, rope_dim / 2]`: the angle of each pair at each grid place.
    angles: Array,
    norm: RmsNorm,
    merge: i32,
    merging_layer: Linear,
    linear_1: Linear,
    linear_2: Linear,
    image_token_id: u32,
}

/// One image part-way through the tower.
struct Encoding {
    h: Array,
    cos: Array,
    sin: Array,
    /// The image's patch rows and columns.
    rows: i32,
    cols: i32,
}

/// Renames transformers' names (`model.vision_tower.*`,
/// `model.multi_modal_projector.*`, `model.language_model.*`, `lm_head`;
/// the older `vision_tower.*`, `language_model.model.*`) to mlx-vlm's.
fn gather_names(loader: &mut LayerLoader) {
    let names: Vec<String> = loader.weights.names().map(str::to_owned).collect();
    for name in names {
        if name.contains("position_ids") || name.contains("rotary_emb.inv_freq") {
            loader.weights.remove(&name);
            continue;
        }
        let bare = name.strip_prefix("model.").unwrap_or(&name);
        let renamed = if let Some(rest) = bare.strip_prefix("language_model.") {
            if name.starts_with("model.") {
                format!("{LANGUAGE}.{rest}")
            } else {
                name.clone()
            }
        } else if let Some(rest) = bare.strip_prefix("vision_tower.") {
            if rest.starts_with("vision_model.") {
                format!("vision_tower.{rest}")
            } else {
                format!("{TOWER}.{rest}")
            }
        } else if bare.starts_with("multi_modal_projector.") {
            bare.to_string()
        } else if name.starts_with("lm_head.") {
            format!("language_model.{name}")
        } else {
            name.clone()
        };
        if renamed != name {
            loader.weights.rename(&name, renamed);
        }
    }
}

/// The whole model, or its text model alone when the checkpoint has no tower
/// (mlx-lm's conversions of `mistral3` keep only the language model).
fn build(config: &Value, loader: &mut LayerLoader) -> Result<Box<dyn LanguageModel>> {
    gather_names(loader);
    let has_tower = loader.weights.contains(&format!("{TOWER}.patch_conv.weight"))
        && loader
            .weights
            .contains(&format!("{TOWER}.transformer.layers.0.attention.q_proj.weight"));
    if has_tower {
        return Ok(Box::new(load(config, loader)?));
    }
    let names: Vec<String> = loader.weights.names().map(str::to_owned).collect();
    for name in names.iter().filter(|n| n.starts_with("vision_tower.") || n.starts_with(PROJECTOR))
    {
        loader.weights.remove(name);
    }
    tracing::info!("Mistral 3: no vision tower in the checkpoint; loaded text only");
    let args = TextArgs::parse(&text_config(config), false)?;
    Ok(Box::new(Ministral3::build(args, LANGUAGE, HEAD, loader)?))
}

/// The language model, Pixtral's tower and the projector.
pub fn load(config: &Value, loader: &mut LayerLoader) -> Result<Mistral3> {
    gather_names(loader);
    let args = TextArgs::parse(&text_config(config), false)?;
    let text_width = args.hidden_size;
    let text_eps = args.rms_norm_eps;
    let language = Ministral3::build(args, LANGUAGE, HEAD, loader)?;
    let vision_config = config.get("vision_config").cloned().unwrap_or(Value::Null);
    let cfg = PixtralConfig::parse(&vision_config)?;
    let layer = config.get("vision_feature_layer").and_then(Value::as_i64).unwrap_or(-1);
    if layer != -1 && layer != i64::from(cfg.layers) {
        return Err(Error::InvalidConfig(format!(
            "Mistral 3: vision_feature_layer {layer} (only the last layer's states are read)"
        )));
    }
    let merge = config.get("spatial_merge_size").and_then(Value::as_i64).unwrap_or(2) as i32;
    let bias = config.get("multimodal_projector_bias").and_then(Value::as_bool).unwrap_or(false);
    let (w, p) = (cfg.width, cfg.patch);
    let patch_conv = patch_kernel(loader, &format!("{TOWER}.patch_conv.weight"), w, p)?;
    let ln_pre = loader.rms_norm(&format!("{TOWER}.ln_pre"), w, 1e-5)?;
    let mut blocks = Vec::with_capacity(cfg.layers as usize);
    for i in 0..cfg.layers {
        let l = format!("{TOWER}.transformer.layers.{i}");
        let (a, f) = (format!("{l}.attention"), format!("{l}.feed_forward"));
        blocks.push(Block {
            attention_norm: loader.rms_norm(&format!("{l}.attention_norm"), w, cfg.eps)?,
            q: loader.linear(&format!("{a}.q_proj"), w, w, false)?,
            k: loader.linear(&format!("{a}.k_proj"), w, w, false)?,
            v: loader.linear(&format!("{a}.v_proj"), w, w, false)?,
            o: loader.linear(&format!("{a}.o_proj"), w, w, false)?,
            ffn_norm: loader.rms_norm(&format!("{l}.ffn_norm"), w, cfg.eps)?,
            gate: loader.linear(&format!("{f}.gate_proj"), w, cfg.mlp, false)?,
            up: loader.linear(&format!("{f}.up_proj"), w, cfg.mlp, false)?,
            down: loader.linear(&format!("{f}.down_proj"), cfg.mlp, w, false)?,
        });
    }
    let m = PROJECTOR;
    let vision = PixtralVision {
        cfg,
        patch_conv,
        ln_pre,
        blocks,
        angles: angles(&cfg)?,
        norm: loader.rms_norm(&format!("{m}.norm"), w, text_eps)?,
        merge,
        merging_layer: loader.linear(
            &format!("{m}.patch_merger.merging_layer"),
            w * merge * merge,
            w,
            false,
        )?,
        linear_1: loader.linear(&format!("{m}.linear_1"), w, text_width, bias)?,
        linear_2: loader.linear(&format!("{m}.linear_2"), text_width, text_width, bias)?,
        image_token_id: ["image_token_index", "image_token_id"]
            .iter()
            .find_map(|k| config.get(*k).and_then(Value::as_u64))
            .map_or(DEFAULT_IMAGE_TOKEN_ID, |x| x as u32),
    };
    Ok(WithVision { language, vision })
}

/// The patch convolution as `[C·P·P, width]`: from PyTorch's `[out, C, P, P]`
/// or MLX's `[out, P, P, C]` (mlx-vlm's conversions).
fn patch_kernel(loader: &mut LayerLoader, name: &str, width: i32, p: i32) -> Result<Array> {
    let shape = loader.weights.shape_of(name);
    let kernel = match shape.as_deref() {
        Some([o, 3, a, b]) if *o == width && *a == p && *b == p => {
            loader.float(name, &[width, 3, p, p])?
        }
        // MLX's, or absent: asked for in MLX's layout (a missing tensor's
        // error, or what a recording of the loader notes).
        Some([o, a, b, 3]) if *o == width && *a == p && *b == p => {
            loader.float(name, &[width, p, p, 3])?.transpose_axes(&[0, 3, 1, 2])?
        }
        None => loader.float(name, &[width, p, p, 3])?.transpose_axes(&[0, 3, 1, 2])?,
        _ => {
            return Err(Error::InvalidConfig(format!(
                "{name}: expected [{width}, 3, {p}, {p}] or [{width}, {p}, {p}, 3], found {shape:?}"
            )))
        }
    };
    Ok(kernel.reshape(&[width, 3 * p * p])?.transpose()?)
}

/// Pixtral's angles: pair `j < dim / 4` turns with the row at the even
/// frequency `2j`, pair `dim / 4 + j` with the column at the odd `2j + 1`;
/// row-major over the `side × side` grid. float32 as mlx-vlm computes them.
fn angles(cfg: &PixtralConfig) -> Result<Array> {
    let dim = cfg.rope_dim;
    let exponents = ops::arange::<_, f32>(0, dim, 2)?.divide(Array::from_f32(dim as f32))?;
    let freqs =
        Array::from_f32(1.0).divide(ops::power(Array::from_f32(cfg.rope_theta), &exponents)?)?;
    let quarter = dim / 4;
    let pick = |start: i32| -> Result<Array> {
        let idx = ops::arange::<_, i32>(start, dim / 2, 2)?;
        Ok(freqs.take_axis(&idx, 0)?)
    };
    let (even, odd) = (pick(0)?, pick(1)?);
    let n = cfg.side;
    let places = ops::arange::<_, f32>(None, n, None)?.reshape(&[n, 1])?;
    let rows = places.multiply(even.reshape(&[1, quarter])?)?; // [n, quarter]
    let cols = places.multiply(odd.reshape(&[1, quarter])?)?;
    let rows = ops::broadcast_to(&rows.reshape(&[n, 1, quarter])?, &[n, n, quarter])?;
    let cols = ops::broadcast_to(&cols.reshape(&[1, n, quarter])?, &[n, n, quarter])?;
    Ok(ops::concatenate(&[rows, cols], -1)?.reshape(&[n * n, 2 * quarter])?)
}

/// `x · cos + rotate_half(x) · sin` for `[1, heads, N, d]`.
fn rotate(x: &Array, cos: &Array, sin: &Array) -> Result<Array> {
    let half = x.dim(-1) / 2;
    let parts = x.split_at_indices(&[half], -1)?;
    let rotated = ops::concatenate(&[parts[1].negative()?, parts[0].clone()], -1)?;
    Ok(x.multiply(cos)?.add(rotated.multiply(sin)?)?)
}

/// `[rows · cols, width]` → `[rows/s · cols/s, width · s²]`: each `s × s`
/// block in raster order, its states channel by channel (the block's `s²`
/// values of channel 0, then of channel 1, …), as PyTorch's `unfold`.
fn merge_patches(x: &Array, rows: i32, cols: i32, s: i32) -> Result<Array> {
    let d = x.dim(-1);
    Ok(x.reshape(&[rows / s, s, cols / s, s, d])?
        .transpose_axes(&[0, 2, 4, 1, 3])?
        .reshape(&[(rows / s) * (cols / s), d * s * s])?)
}

impl PixtralVision {
    fn block(&self, b: &Block, h: &Array, e: &Encoding) -> Result<Array> {
        let n = h.dim(1);
        let (heads, hd) = (self.cfg.heads, self.cfg.width / self.cfg.heads);
        let heads_first = |t: Array| -> Result<Array> {
            Ok(t.reshape(&[1, n, heads, hd])?.transpose_axes(&[0, 2, 1, 3])?)
        };
        let x = b.attention_norm.forward(h)?;
        let q = rotate(&heads_first(b.q.forward(&x)?)?, &e.cos, &e.sin)?;
        let k = rotate(&heads_first(b.k.forward(&x)?)?, &e.cos, &e.sin)?;
        let v = heads_first(b.v.forward(&x)?)?;
        let o = attention::sdpa(&q, &k, &v, (hd as f32).powf(-0.5), &AttentionMask::None)?;
        let o = o.transpose_axes(&[0, 2, 1, 3])?.reshape(&[1, n, self.cfg.width])?;
        let h = h.add(b.o.forward(&o)?)?;
        let x = b.ffn_norm.forward(&h)?;
        let mlp = crate::model::layers::swiglu(&b.gate.forward(&x)?, &b.up.forward(&x)?)?;
        Ok(h.add(b.down.forward(&mlp)?)?)
    }
}

impl VisionTower for PixtralVision {
    fn image_token_id(&self) -> u32 {
        self.image_token_id
    }

    /// `pixels`: `[rows · cols, 3·P·P]`; `grid`: `[1, rows, cols]` in patches.
    fn begin_encode(&self, pixels: &Array, grid: [i32; 3]) -> Result<VisionEncoding> {
        let [t, rows, cols] = grid;
        let (s, side) = (self.merge, self.cfg.side);
        if t != 1 || rows < s || cols < s || rows % s != 0 || cols % s != 0 {
            return Err(Error::InvalidRequest(format!(
                "an image of {rows} × {cols} patches is not whole {s} × {s} blocks"
            )));
        }
        if rows > side || cols > side || pixels.dim(0) != rows * cols {
            return Err(Error::InvalidRequest(format!(
                "image patches: {} rows for a grid of {rows} × {cols} (at most {side} a side)",
                pixels.dim(0)
            )));
        }
        let h = pixels.as_dtype(self.patch_conv.dtype())?.matmul(&self.patch_conv)?;
        let h = self.ln_pre.forward(&h.expand_dims(0)?)?;
        let ids: Vec<i32> = (0..rows).flat_map(|r| (0..cols).map(move |c| r * side + c)).collect();
        let angles = self.angles.take_axis(Array::from_slice(&ids, &[rows * cols]), 0)?;
        let angles = ops::concatenate(&[angles.clone(), angles], -1)?;
        let (cos, sin) =
            (ops::cos(&angles)?.as_dtype(h.dtype())?, ops::sin(&angles)?.as_dtype(h.dtype())?);
        let state = Encoding { h, cos, sin, rows, cols };
        Ok(VisionEncoding::new(state, self.blocks.len(), grid))
    }

    fn encode_blocks(&self, encoding: &mut VisionEncoding, count: usize) -> Result<Array> {
        let blocks = encoding.take_blocks(count);
        let e = encoding.state_mut::<Encoding>()?;
        for i in blocks {
            e.h = self.block(&self.blocks[i], &e.h, e)?;
        }
        Ok(e.h.clone())
    }

    fn finish_encode(&self, encoding: &VisionEncoding) -> Result<Array> {
        encoding.check_done()?;
        let e = encoding.state::<Encoding>()?;
        let x = self.norm.forward(&e.h.squeeze_axes(&[0])?)?;
        let x = self.merging_layer.forward(&merge_patches(&x, e.rows, e.cols, self.merge)?)?;
        let x = crate::model::layers::gelu(&self.linear_1.forward(&x)?)?;
        self.linear_2.forward(&x)
    }

    fn rope_positions(&self, _tokens: &[u32], _grids: &[[i32; 3]]) -> Result<Option<(Array, i32)>> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The merger's layout is PyTorch's `unfold`: block (0, 0) of a 4 × 4
    /// grid of 2-channel states holds patches 0, 1, 4, 5, channel 0's four
    /// values first.
    #[test]
    fn merged_rows_interleave_each_blocks_channels() {
        let (rows, cols, d) = (4, 4, 2);
        let x: Vec<f32> =
            (0..rows * cols).flat_map(|p| (0..d).map(move |c| (p * 10 + c) as f32)).collect();
        let x = Array::from_slice(&x, &[rows * cols, d]);
        let merged = merge_patches(&x, rows, cols, 2).unwrap();
        let first: Vec<f32> = merged.as_slice::<f32>()[..8].to_vec();
        assert_eq!(first, [0., 10., 40., 50., 1., 11., 41., 51.]);
        let second: Vec<f32> = merged.as_slice::<f32>()[8..12].to_vec();
        assert_eq!(second, [20., 30., 60., 70.]);
    }
}
