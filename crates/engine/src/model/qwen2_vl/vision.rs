//! The vision tower of Qwen2-VL and Qwen2.5-VL: image patches → features in
//! the language model's embedding space.
//!
//! patches `[N, C·T·P·P]` → patch embedding (a Conv3d whose stride equals its
//! kernel, so one matmul over each flattened patch) → `depth` transformer
//! blocks with a 2-D rotary embedding (row and column of each patch) →
//! patch merger (each 2×2 patch group, which the processor already made
//! consecutive rows, becomes one feature) → `[N / 4, out]`.
//!
//! Qwen2-VL blocks: LayerNorm, full attention within each frame, MLP with
//! the fast GELU `x·σ(1.702x)`. Qwen2.5-VL blocks: RMSNorm, SwiGLU MLP, and
//! attention within windows of merged patches except in the
//! `fullatt_block_indexes` blocks; its patches are reordered window by window
//! for the blocks and put back in raster order after the merger. Both
//! mergers use the exact (erf) GELU.
use mlx_rs::{fast, ops, Array};
use serde_json::Value;

use super::super::layers::qwen_vit::{self, gelu_exact, PatchShape, SegmentAttention, MERGE_UNIT};
use super::super::layers::{LayerLoader, Linear, RmsNorm};
use crate::error::{Error, Result};

pub(crate) use super::super::layers::qwen_vit::MERGE;
/// Both towers' norms use this epsilon whatever the config says.
const NORM_EPS: f32 = 1e-6;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    Qwen2Vl,
    Qwen25Vl,
}

/// `vision_config` of config.json, in the names of each variant.
#[derive(Debug, Clone)]
pub struct VisionConfig {
    pub(crate) variant: Variant,
    pub(crate) depth: i32,
    /// Width of the blocks (`embed_dim` in Qwen2-VL, `hidden_size` in Qwen2.5-VL).
    pub(crate) width: i32,
    pub(crate) heads: i32,
    pub(crate) mlp_hidden: i32,
    /// Width of the merged features = the language model's hidden size.
    pub(crate) out_hidden: i32,
    pub(crate) in_channels: i32,
    pub(crate) patch_size: i32,
    pub(crate) temporal_patch_size: i32,
    /// Qwen2.5-VL: window side in pixels (`window_size`), and the blocks that
    /// attend over the whole frame instead.
    pub(crate) window_size: i32,
    pub(crate) fullatt_blocks: Vec<usize>,
}

impl VisionConfig {
    pub fn parse(variant: Variant, v: &Value) -> Result<Self> {
        let int = |key: &str, default: Option<i64>| -> Result<i32> {
            v.get(key)
                .and_then(Value::as_i64)
                .or(default)
                .map(|x| x as i32)
                .ok_or_else(|| Error::InvalidConfig(format!("vision_config.{key} is missing")))
        };
        let merge = int("spatial_merge_size", Some(2))?;
        if merge != MERGE {
            return Err(Error::InvalidConfig(format!(
                "vision_config.spatial_merge_size {merge} is not supported (only 2)"
            )));
        }
        let cfg = match variant {
            Variant::Qwen2Vl => {
                let width = int("embed_dim", Some(1280))?;
                let ratio = v.get("mlp_ratio").and_then(Value::as_f64).unwrap_or(4.0);
                VisionConfig {
                    variant,
                    depth: int("depth", Some(32))?,
                    width,
                    heads: int("num_heads", Some(16))?,
                    mlp_hidden: (width as f64 * ratio) as i32,
                    out_hidden: int("hidden_size", Some(1536))?,
                    in_channels: int("in_channels", Some(3))?,
                    patch_size: int("patch_size", Some(14))?,
                    temporal_patch_size: int("temporal_patch_size", Some(2))?,
                    window_size: 0,
                    fullatt_blocks: Vec::new(),
                }
            }
            Variant::Qwen25Vl => VisionConfig {
                variant,
                depth: int("depth", Some(32))?,
                width: int("hidden_size", Some(1280))?,
                heads: int("num_heads", Some(16))?,
                mlp_hidden: int("intermediate_size", Some(3420))?,
                out_hidden: int("out_hidden_size", Some(1536))?,
                in_channels: int("in_channels", Some(3))?,
                patch_size: int("patch_size", Some(14))?,
                temporal_patch_size: int("temporal_patch_size", Some(2))?,
                window_size: int("window_size", Some(112))?,
                fullatt_blocks: match v.get("fullatt_block_indexes") {
                    Some(list) => list
                        .as_array()
                        .ok_or_else(|| {
                            Error::InvalidConfig(
                                "vision_config.fullatt_block_indexes must be a list".into(),
                            )
                        })?
                        .iter()
                        .map(|x| x.as_u64().map(|x| x as usize))
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| {
                            Error::InvalidConfig(
                                "vision_config.fullatt_block_indexes must hold integers".into(),
                            )
                        })?,
                    None => vec![7, 15, 23, 31],
                },
            },
        };
        if cfg.heads <= 0 || cfg.width % cfg.heads != 0 || (cfg.width / cfg.heads) % 4 != 0 {
            return Err(Error::InvalidConfig(format!(
                "vision width {} must split into num_heads {} heads of a multiple of 4",
                cfg.width, cfg.heads
            )));
        }
        if cfg.variant == Variant::Qwen25Vl && cfg.window_units() <= 0 {
            return Err(Error::InvalidConfig(format!(
                "vision_config.window_size {} is too small",
                cfg.window_size
            )));
        }
        Ok(cfg)
    }

    fn head_dim(&self) -> i32 {
        self.width / self.heads
    }

    pub(crate) fn patch_shape(&self) -> PatchShape {
        PatchShape {
            width: self.width,
            channels: self.in_channels,
            temporal: self.temporal_patch_size,
            size: self.patch_size,
        }
    }

    /// Values in one flattened patch: `C · T · P · P`.
    pub(crate) fn patch_values(&self) -> i32 {
        self.patch_shape().values()
    }

    /// Window side in merged patches.
    fn window_units(&self) -> i32 {
        self.window_size / MERGE / self.patch_size
    }
}

enum Norm {
    Layer { weight: Array, bias: Array },
    Rms(RmsNorm),
}

impl Norm {
    fn load(variant: Variant, loader: &mut LayerLoader, path: &str, dim: i32) -> Result<Self> {
        Ok(match variant {
            Variant::Qwen2Vl => Norm::Layer {
                weight: loader.float(&format!("{path}.weight"), &[dim])?,
                bias: loader.float(&format!("{path}.bias"), &[dim])?,
            },
            Variant::Qwen25Vl => Norm::Rms(loader.rms_norm(path, dim, NORM_EPS)?),
        })
    }

    fn forward(&self, x: &Array) -> Result<Array> {
        match self {
            Norm::Layer { weight, bias } => {
                Ok(fast::layer_norm(x, Some(weight), Some(bias), NORM_EPS)?)
            }
            Norm::Rms(n) => n.forward(x),
        }
    }
}

enum Mlp {
    /// Qwen2-VL: fc1 → fast GELU → fc2.
    FastGelu { fc1: Linear, fc2: Linear },
    /// Qwen2.5-VL: down(silu(gate(x)) · up(x)).
    SwiGlu { gate: Linear, up: Linear, down: Linear },
}

impl Mlp {
    fn forward(&self, x: &Array) -> Result<Array> {
        match self {
            Mlp::FastGelu { fc1, fc2 } => fc2.forward(&gelu_fast(&fc1.forward(x)?)?),
            Mlp::SwiGlu { gate, up, down } => {
                down.forward(&crate::model::layers::swiglu(&gate.forward(x)?, &up.forward(x)?)?)
            }
        }
    }
}

/// `x · σ(1.702 x)` (MLX's `gelu_fast_approx`; mlx-rs' own constant differs).
fn gelu_fast(x: &Array) -> Result<Array> {
    Ok(x.multiply(ops::sigmoid(x.multiply(Array::from_f32(1.702))?)?)?)
}

struct Block {
    norm1: Norm,
    norm2: Norm,
    qkv: Linear,
    proj: Linear,
    mlp: Mlp,
}

/// One image part-way through the tower: its hidden state after the blocks
/// run so far (the caller counts them), and what the remaining blocks need.
pub(crate) struct TowerEncoding {
    hidden: Array,
    cos: Array,
    sin: Array,
    /// Attention segments of the full-attention blocks (one per frame).
    frames: Vec<i32>,
    /// Qwen2.5-VL's windows (`None` for Qwen2-VL).
    windows: Option<Windows>,
    patches: i32,
}

pub struct VisionModel {
    cfg: VisionConfig,
    /// `[width, C·T·P·P]`: the Conv3d kernel flattened in the patches' order.
    patch_embed: Array,
    blocks: Vec<Block>,
    merger_norm: Norm,
    merger_fc1: Linear,
    merger_fc2: Linear,
    /// `[head_dim / 4]`: the frequencies of each of the two spatial axes.
    rotary_inv_freq: Array,
}

impl VisionModel {
    /// Loads from tensors named `{prefix}.patch_embed.proj.weight`,
    /// `{prefix}.blocks.N.…`, `{prefix}.merger.…`.
    pub fn load(cfg: VisionConfig, prefix: &str, loader: &mut LayerLoader) -> Result<Self> {
        let (w, v) = (cfg.width, cfg.variant);
        let patch_embed = qwen_vit::load_patch_kernel(
            cfg.patch_shape(),
            &format!("{prefix}.patch_embed.proj.weight"),
            loader,
        )?;
        let mut blocks = Vec::with_capacity(cfg.depth as usize);
        for i in 0..cfg.depth {
            let p = format!("{prefix}.blocks.{i}");
            let h = cfg.mlp_hidden;
            blocks.push(Block {
                norm1: Norm::load(v, loader, &format!("{p}.norm1"), w)?,
                norm2: Norm::load(v, loader, &format!("{p}.norm2"), w)?,
                qkv: loader.linear(&format!("{p}.attn.qkv"), w, 3 * w, true)?,
                proj: loader.linear(&format!("{p}.attn.proj"), w, w, true)?,
                mlp: match v {
                    Variant::Qwen2Vl => Mlp::FastGelu {
                        fc1: loader.linear(&format!("{p}.mlp.fc1"), w, h, true)?,
                        fc2: loader.linear(&format!("{p}.mlp.fc2"), h, w, true)?,
                    },
                    Variant::Qwen25Vl => Mlp::SwiGlu {
                        gate: loader.linear(&format!("{p}.mlp.gate_proj"), w, h, true)?,
                        up: loader.linear(&format!("{p}.mlp.up_proj"), w, h, true)?,
                        down: loader.linear(&format!("{p}.mlp.down_proj"), h, w, true)?,
                    },
                },
            });
        }
        let merged = w * MERGE_UNIT;
        let merger_norm = Norm::load(v, loader, &format!("{prefix}.merger.ln_q"), w)?;
        let merger_fc1 = loader.linear(&format!("{prefix}.merger.mlp.0"), merged, merged, true)?;
        let merger_fc2 =
            loader.linear(&format!("{prefix}.merger.mlp.2"), merged, cfg.out_hidden, true)?;
        let rotary_inv_freq = qwen_vit::rotary_inv_freq(cfg.head_dim())?;
        Ok(Self { cfg, patch_embed, blocks, merger_norm, merger_fc1, merger_fc2, rotary_inv_freq })
    }

    /// The patch embedding and rotary tables of one image: the state before
    /// its first block. The engine runs the blocks a few at a time between
    /// decode steps ([`Self::run_blocks`]), so a big image never stalls the
    /// running streams for its whole encode.
    pub(crate) fn begin(&self, pixels: &Array, grid: [i32; 3]) -> Result<TowerEncoding> {
        let [t, h, w] = grid;
        let n = qwen_vit::check_patches(pixels, grid, self.cfg.patch_values())?;
        let dtype = self.patch_embed.dtype();
        let mut x = ops::matmul(pixels.as_dtype(dtype)?, self.patch_embed.t())?;
        let mut rotary = qwen_vit::rotary_angles(&self.rotary_inv_freq, grid)?;

        let frame = h * w;
        let frames: Vec<i32> = (0..=t).map(|i| i * frame).collect();
        let windows = match self.cfg.variant {
            Variant::Qwen2Vl => None,
            Variant::Qwen25Vl => {
                let win = window_partition(grid, self.cfg.window_units());
                let order = Array::from_slice(&win.order, &[win.order.len() as i32]);
                x = regroup(&x, &order)?;
                rotary = regroup(&rotary, &order)?;
                Some(win)
            }
        };
        let (cos, sin) = qwen_vit::rotary_tables(&rotary, dtype)?;
        Ok(TowerEncoding { hidden: x, cos, sin, frames, windows, patches: n })
    }

    /// Queues `blocks` of `encoding`, the ones after those already run
    /// (lazily: nothing is evaluated here); returns the hidden state to evaluate.
    pub(crate) fn run_blocks(
        &self,
        encoding: &mut TowerEncoding,
        blocks: std::ops::Range<usize>,
    ) -> Result<Array> {
        for i in blocks {
            let block = &self.blocks[i];
            let bounds = match &encoding.windows {
                Some(win) if !self.cfg.fullatt_blocks.contains(&i) => &win.bounds,
                _ => &encoding.frames,
            };
            let x = &encoding.hidden;
            let attention = SegmentAttention {
                qkv: &block.qkv,
                proj: &block.proj,
                heads: self.cfg.heads,
                head_dim: self.cfg.head_dim(),
            };
            let a = attention.forward(
                &block.norm1.forward(x)?,
                &encoding.cos,
                &encoding.sin,
                bounds,
            )?;
            let x = x.add(a)?;
            let m = block.mlp.forward(&block.norm2.forward(&x)?)?;
            encoding.hidden = x.add(m)?;
        }
        Ok(encoding.hidden.clone())
    }

    /// The merger after the last block: the image's features.
    pub(crate) fn finish(&self, encoding: &TowerEncoding) -> Result<Array> {
        let n = encoding.patches;
        let merged = self
            .merger_norm
            .forward(&encoding.hidden)?
            .reshape(&[n / MERGE_UNIT, self.cfg.width * MERGE_UNIT])?;
        let merged = self.merger_fc2.forward(&gelu_exact(&self.merger_fc1.forward(&merged)?)?)?;
        match &encoding.windows {
            None => Ok(merged),
            Some(win) => {
                let mut back = vec![0i32; win.order.len()];
                for (pos, &group) in win.order.iter().enumerate() {
                    back[group as usize] = pos as i32;
                }
                Ok(merged.take_axis(Array::from_slice(&back, &[back.len() as i32]), 0)?)
            }
        }
    }

    pub(crate) fn depth(&self) -> usize {
        self.blocks.len()
    }
}

/// Rows `[N, D]` in groups of 4 (one merged patch each), taken in `order`.
fn regroup(x: &Array, order: &Array) -> Result<Array> {
    let (n, d) = (x.dim(0), x.dim(1));
    Ok(x.reshape(&[n / MERGE_UNIT, MERGE_UNIT, d])?.take_axis(order, 0)?.reshape(&[n, d])?)
}

/// Qwen2.5-VL's windows over one image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Windows {
    /// Merged-patch indices (raster order within each frame) listed window by
    /// window, each window in raster order.
    pub order: Vec<i32>,
    /// Row boundaries of the windows in patch rows (4 per merged patch),
    /// starting at 0; empty windows leave no boundary.
    pub bounds: Vec<i32>,
}

/// Splits each frame's grid of merged patches into `units`×`units` windows
/// (the last row and column of windows may be smaller).
pub(crate) fn window_partition(grid: [i32; 3], units: i32) -> Windows {
    let [t, h, w] = grid;
    let (mh, mw) = (h / MERGE, w / MERGE);
    let mut order = Vec::with_capacity((t * mh * mw) as usize);
    let mut bounds = vec![0];
    for frame in 0..t {
        for wr in (0..mh).step_by(units as usize) {
            for wc in (0..mw).step_by(units as usize) {
                for r in wr..(wr + units).min(mh) {
                    for c in wc..(wc + units).min(mw) {
                        order.push(frame * mh * mw + r * mw + c);
                    }
                }
                bounds.push(order.len() as i32 * MERGE_UNIT);
            }
        }
    }
    Windows { order, bounds }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference's order for a 4×8 patch grid with 2×2-merged-patch
    /// windows (window 56 px, patch 14).
    #[test]
    fn windows_of_a_4x8_grid() {
        let win = window_partition([1, 4, 8], 2);
        assert_eq!(win.order, vec![0, 1, 4, 5, 2, 3, 6, 7]);
        assert_eq!(win.bounds, vec![0, 16, 32]);
    }

    /// A grid that does not divide: partial windows at the right and bottom,
    /// and every merged patch exactly once.
    #[test]
    fn partial_windows_cover_every_patch_once() {
        let win = window_partition([2, 6, 10], 2); // 3×5 merged per frame
        assert_eq!(win.bounds.len(), 1 + 2 * 2 * 3);
        assert_eq!(&win.order[..4], &[0, 1, 5, 6]);
        let mut seen = win.order.clone();
        seen.sort();
        assert_eq!(seen, (0..30).collect::<Vec<_>>());
        assert_eq!(*win.bounds.last().unwrap(), 30 * 4);
    }

    #[test]
    fn gelus_match_their_definitions() {
        let x = Array::from_slice(&[-2.0f32, -0.5, 0.0, 0.7, 3.0], &[5]);
        let fast = gelu_fast(&x).unwrap();
        let exact = gelu_exact(&x).unwrap();
        fast.eval().unwrap();
        exact.eval().unwrap();
        let xs = [-2.0f32, -0.5, 0.0, 0.7, 3.0];
        for (i, &v) in xs.iter().enumerate() {
            let want_fast = v / (1.0 + (-1.702 * v).exp());
            assert!((fast.as_slice::<f32>()[i] - want_fast).abs() < 1e-6);
        }
        // erf-GELU(0.7) = 0.7·Φ(0.7) = 0.530625; the sigmoid form gives 0.537.
        assert!((exact.as_slice::<f32>()[3] - 0.530625).abs() < 1e-5);
    }
}
