//! The vision tower of Qwen3-VL and Qwen3.5: image patches → features in
//! the language model's embedding space, plus Qwen3-VL's DeepStack features.
//!
//! patches `[N, C·T·P·P]` → patch embedding (with bias) + a learned position
//! embedding for a `side × side` grid, bilinearly interpolated to the
//! image's grid → `depth` blocks (LayerNorm, attention over the whole frame
//! with the 2-D rotary embedding, MLP with the tanh GELU) → merger (LayerNorm,
//! each 2×2 group of patches concatenated, fc1, exact GELU, fc2) →
//! `[N / 4, out_hidden]`.
//!
//! DeepStack (Qwen3-VL): after each block listed in
//! `deepstack_visual_indexes`, its own merger (LayerNorm after the 2×2
//! concatenation) turns the hidden state into features that the language
//! model adds to its hidden states at the image's positions after its first
//! layers. Qwen3.5 has none.
use mlx_rs::{fast, ops, ops::indexing::IndexOp, Array};
use serde_json::Value;

use super::super::layers::qwen_vit::{
    self, gelu_exact, PatchShape, SegmentAttention, MERGE, MERGE_UNIT,
};
use super::super::layers::{gelu_tanh, LayerLoader, Linear};
use crate::error::{Error, Result};

const NORM_EPS: f32 = 1e-6;

/// `vision_config` of config.json.
#[derive(Debug, Clone)]
pub struct VisionConfig {
    pub(crate) depth: i32,
    pub(crate) width: i32,
    pub(crate) heads: i32,
    pub(crate) mlp_hidden: i32,
    /// Width of the merged features = the language model's hidden size.
    pub(crate) out_hidden: i32,
    pub(crate) in_channels: i32,
    pub(crate) patch_size: i32,
    pub(crate) temporal_patch_size: i32,
    /// Rows of the learned position table (a square grid).
    pub(crate) position_embeddings: i32,
    /// Blocks after which a DeepStack merger taps the hidden state.
    pub(crate) deepstack: Vec<usize>,
}

impl VisionConfig {
    pub fn parse(v: &Value) -> Result<Self> {
        let int = |key: &str, default: i64| -> Result<i32> {
            match v.get(key) {
                None | Some(Value::Null) => Ok(default as i32),
                Some(x) => x.as_i64().filter(|&x| x > 0).map(|x| x as i32).ok_or_else(|| {
                    Error::InvalidConfig(format!(
                        "vision_config.{key} must be a positive integer, got {x}"
                    ))
                }),
            }
        };
        let merge = int("spatial_merge_size", 2)?;
        if merge != MERGE {
            return Err(Error::InvalidConfig(format!(
                "vision_config.spatial_merge_size {merge} is not supported (only 2)"
            )));
        }
        let deepstack = match v.get("deepstack_visual_indexes") {
            None | Some(Value::Null) => Vec::new(),
            Some(list) => list
                .as_array()
                .and_then(|a| {
                    a.iter().map(|x| x.as_u64().map(|x| x as usize)).collect::<Option<Vec<_>>>()
                })
                .ok_or_else(|| {
                    Error::InvalidConfig(
                        "vision_config.deepstack_visual_indexes must be a list of integers".into(),
                    )
                })?,
        };
        let cfg = VisionConfig {
            depth: int("depth", 32)?,
            width: int("hidden_size", 1280)?,
            heads: int("num_heads", 16)?,
            mlp_hidden: int("intermediate_size", 3420)?,
            out_hidden: int("out_hidden_size", 1536)?,
            in_channels: int("in_channels", 3)?,
            patch_size: int("patch_size", 16)?,
            temporal_patch_size: int("temporal_patch_size", 2)?,
            position_embeddings: int("num_position_embeddings", 2304)?,
            deepstack,
        };
        if cfg.width % cfg.heads != 0 || (cfg.width / cfg.heads) % 4 != 0 {
            return Err(Error::InvalidConfig(format!(
                "vision width {} must split into num_heads {} heads of a multiple of 4",
                cfg.width, cfg.heads
            )));
        }
        let side = (cfg.position_embeddings as f64).sqrt() as i32;
        if side * side != cfg.position_embeddings {
            return Err(Error::InvalidConfig(format!(
                "vision_config.num_position_embeddings {} is not a square grid",
                cfg.position_embeddings
            )));
        }
        if let Some(&bad) = cfg.deepstack.iter().find(|&&i| i >= cfg.depth as usize) {
            return Err(Error::InvalidConfig(format!(
                "deepstack_visual_indexes names block {bad} of {}",
                cfg.depth
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

    /// Side of the learned position grid.
    fn position_side(&self) -> i32 {
        (self.position_embeddings as f64).sqrt() as i32
    }
}

struct LayerNorm {
    weight: Array,
    bias: Array,
}

impl LayerNorm {
    fn load(loader: &mut LayerLoader, path: &str, dim: i32) -> Result<Self> {
        Ok(Self {
            weight: loader.float(&format!("{path}.weight"), &[dim])?,
            bias: loader.float(&format!("{path}.bias"), &[dim])?,
        })
    }

    fn forward(&self, x: &Array) -> Result<Array> {
        Ok(fast::layer_norm(x, Some(&self.weight), Some(&self.bias), NORM_EPS)?)
    }
}

struct Block {
    norm1: LayerNorm,
    norm2: LayerNorm,
    qkv: Linear,
    proj: Linear,
    fc1: Linear,
    fc2: Linear,
}

/// A merger: the main one normalizes each patch before the 2×2 groups are
/// concatenated, DeepStack's normalize the concatenation.
struct Merger {
    norm: LayerNorm,
    after_shuffle: bool,
    fc1: Linear,
    fc2: Linear,
}

impl Merger {
    fn load(
        loader: &mut LayerLoader,
        path: &str,
        cfg: &VisionConfig,
        after_shuffle: bool,
    ) -> Result<Self> {
        let merged = cfg.width * MERGE_UNIT;
        Ok(Self {
            norm: LayerNorm::load(
                loader,
                &format!("{path}.norm"),
                if after_shuffle { merged } else { cfg.width },
            )?,
            after_shuffle,
            fc1: loader.linear(&format!("{path}.linear_fc1"), merged, merged, true)?,
            fc2: loader.linear(&format!("{path}.linear_fc2"), merged, cfg.out_hidden, true)?,
        })
    }

    /// `[N, width]` → `[N / 4, out_hidden]`.
    fn forward(&self, x: &Array) -> Result<Array> {
        let n = x.dim(0);
        let merged = x.dim(1) * MERGE_UNIT;
        let x = if self.after_shuffle {
            self.norm.forward(&x.reshape(&[n / MERGE_UNIT, merged])?)?
        } else {
            self.norm.forward(x)?.reshape(&[n / MERGE_UNIT, merged])?
        };
        self.fc2.forward(&gelu_exact(&self.fc1.forward(&x)?)?)
    }
}

/// One image part-way through the tower.
pub(crate) struct TowerEncoding {
    hidden: Array,
    cos: Array,
    sin: Array,
    /// Attention segments (one per frame).
    frames: Vec<i32>,
    /// DeepStack features made so far, in block order.
    deepstack: Vec<Array>,
}

pub struct VisionModel {
    cfg: VisionConfig,
    /// `[width, C·T·P·P]`.
    patch_kernel: Array,
    patch_bias: Array,
    /// `[side², width]`: the learned position table.
    pos_embed: Array,
    blocks: Vec<Block>,
    merger: Merger,
    deepstack_mergers: Vec<Merger>,
    rotary_inv_freq: Array,
}

impl VisionModel {
    /// Loads from tensors under `{prefix}.` (`patch_embed.proj`, `pos_embed`,
    /// `blocks.N`, `merger`, `deepstack_merger_list.N`).
    pub fn load(cfg: VisionConfig, prefix: &str, loader: &mut LayerLoader) -> Result<Self> {
        let w = cfg.width;
        let patch_kernel = qwen_vit::load_patch_kernel(
            cfg.patch_shape(),
            &format!("{prefix}.patch_embed.proj.weight"),
            loader,
        )?;
        let patch_bias = loader.float(&format!("{prefix}.patch_embed.proj.bias"), &[w])?;
        let pos_embed =
            loader.float(&format!("{prefix}.pos_embed.weight"), &[cfg.position_embeddings, w])?;
        let mut blocks = Vec::with_capacity(cfg.depth as usize);
        for i in 0..cfg.depth {
            let p = format!("{prefix}.blocks.{i}");
            blocks.push(Block {
                norm1: LayerNorm::load(loader, &format!("{p}.norm1"), w)?,
                norm2: LayerNorm::load(loader, &format!("{p}.norm2"), w)?,
                qkv: loader.linear(&format!("{p}.attn.qkv"), w, 3 * w, true)?,
                proj: loader.linear(&format!("{p}.attn.proj"), w, w, true)?,
                fc1: loader.linear(&format!("{p}.mlp.linear_fc1"), w, cfg.mlp_hidden, true)?,
                fc2: loader.linear(&format!("{p}.mlp.linear_fc2"), cfg.mlp_hidden, w, true)?,
            });
        }
        let merger = Merger::load(loader, &format!("{prefix}.merger"), &cfg, false)?;
        let deepstack_mergers = (0..cfg.deepstack.len())
            .map(|i| {
                Merger::load(loader, &format!("{prefix}.deepstack_merger_list.{i}"), &cfg, true)
            })
            .collect::<Result<Vec<_>>>()?;
        let rotary_inv_freq = qwen_vit::rotary_inv_freq(cfg.head_dim())?;
        Ok(Self {
            cfg,
            patch_kernel,
            patch_bias,
            pos_embed,
            blocks,
            merger,
            deepstack_mergers,
            rotary_inv_freq,
        })
    }

    pub(crate) fn depth(&self) -> usize {
        self.blocks.len()
    }

    /// DeepStack feature sets per image (0 for Qwen3.5).
    pub(crate) fn deepstack_levels(&self) -> usize {
        self.deepstack_mergers.len()
    }

    /// The patch embedding, position embedding and rotary tables of one
    /// image: the state before its first block.
    pub(crate) fn begin(&self, pixels: &Array, grid: [i32; 3]) -> Result<TowerEncoding> {
        let n = qwen_vit::check_patches(pixels, grid, self.cfg.patch_shape().values())?;
        let dtype = self.patch_kernel.dtype();
        let x =
            ops::matmul(pixels.as_dtype(dtype)?, self.patch_kernel.t())?.add(&self.patch_bias)?;
        let x = x.add(self.interpolated_positions(grid)?)?;
        let angles = qwen_vit::rotary_angles(&self.rotary_inv_freq, grid)?;
        let (cos, sin) = qwen_vit::rotary_tables(&angles, dtype)?;
        let frame = grid[1] * grid[2];
        let frames = (0..=grid[0]).map(|i| i * frame).collect();
        debug_assert_eq!(x.dim(0), n);
        Ok(TowerEncoding { hidden: x, cos, sin, frames, deepstack: Vec::new() })
    }

    /// Queues `blocks` (lazily); returns the hidden state to evaluate.
    pub(crate) fn run_blocks(
        &self,
        encoding: &mut TowerEncoding,
        blocks: std::ops::Range<usize>,
    ) -> Result<Array> {
        let (heads, head_dim) = (self.cfg.heads, self.cfg.head_dim());
        for i in blocks {
            let block = &self.blocks[i];
            let attention =
                SegmentAttention { qkv: &block.qkv, proj: &block.proj, heads, head_dim };
            let x = &encoding.hidden;
            let a = attention.forward(
                &block.norm1.forward(x)?,
                &encoding.cos,
                &encoding.sin,
                &encoding.frames,
            )?;
            let x = x.add(a)?;
            let m =
                block.fc2.forward(&gelu_tanh(&block.fc1.forward(&block.norm2.forward(&x)?)?)?)?;
            encoding.hidden = x.add(m)?;
            if let Some(level) = self.cfg.deepstack.iter().position(|&b| b == i) {
                encoding.deepstack.push(self.deepstack_mergers[level].forward(&encoding.hidden)?);
            }
        }
        Ok(encoding.hidden.clone())
    }

    /// The merger after the last block: the image's features `[N / 4,
    /// out_hidden]` and its DeepStack features (one such array per level).
    pub(crate) fn finish(&self, encoding: &TowerEncoding) -> Result<(Array, Vec<Array>)> {
        Ok((self.merger.forward(&encoding.hidden)?, encoding.deepstack.clone()))
    }

    /// The learned `side × side` position table, bilinearly interpolated to
    /// the image's `h × w` grid (corners aligned, as `linspace(0, side − 1, n)`),
    /// in the processor's patch order; every frame gets the same.
    fn interpolated_positions(&self, grid: [i32; 3]) -> Result<Array> {
        let side = self.cfg.position_side();
        let (rows, cols) = qwen_vit::patch_coordinates(grid);
        let along = |n: i32| -> Vec<f32> {
            // mx.linspace in float32: start + i · (stop − start) / (n − 1)
            if n == 1 {
                return vec![0.0];
            }
            let step = (side - 1) as f32 / (n - 1) as f32;
            (0..n).map(|i| i as f32 * step).collect()
        };
        let (hs, ws) = (along(grid[1]), along(grid[2]));
        let n = rows.len();
        let mut index = vec![0i32; 4 * n];
        let mut weight = vec![0f32; 4 * n];
        for (k, (&r, &c)) in rows.iter().zip(&cols).enumerate() {
            let (h, w) = (hs[r as usize], ws[c as usize]);
            let (h0, w0) = (h as i32, w as i32);
            let (h1, w1) = ((h0 + 1).min(side - 1), (w0 + 1).min(side - 1));
            let (dh, dw) = (h - h0 as f32, w - w0 as f32);
            let corners = [
                (h0, w0, (1.0 - dh) * (1.0 - dw)),
                (h0, w1, (1.0 - dh) * dw),
                (h1, w0, dh * (1.0 - dw)),
                (h1, w1, dh * dw),
            ];
            for (j, (y, x, wt)) in corners.into_iter().enumerate() {
                index[j * n + k] = y * side + x;
                weight[j * n + k] = wt;
            }
        }
        let n = n as i32;
        let picked = self.pos_embed.take_axis(Array::from_slice(&index, &[4, n]), 0)?; // [4, N, width]
        let weights = Array::from_slice(&weight, &[4, n, 1]).as_dtype(picked.dtype())?;
        let parts = picked.multiply(&weights)?;
        let part = |j: i32| parts.index(j);
        Ok(part(0).add(part(1))?.add(part(2))?.add(part(3))?)
    }
}
