//! The SigLIP vision tower (Gemma 3's): a square image's patches → one
//! hidden state per patch.
//!
//! patches `[N, C·P·P]` (raster order) → patch embedding (a Conv2d whose
//! stride equals its kernel: one matmul, with bias) + a learned position per
//! patch → `num_hidden_layers` pre-norm blocks (LayerNorm, attention over all
//! patches with biased projections, LayerNorm, MLP with the tanh GELU —
//! the reference's `GELU(approx="precise")`, which in MLX is the tanh form) →
//! the final LayerNorm (epsilon 1e-5, the reference's default, whatever the
//! config says for the blocks).
use mlx_rs::{fast, ops, Array};
use serde_json::Value;

use crate::cache::AttentionMask;
use crate::error::{Error, Result};
use crate::model::layers::attention;
use crate::model::layers::{gelu_tanh, LayerLoader, Linear};

/// `vision_config` of config.json.
#[derive(Debug, Clone)]
pub struct SiglipConfig {
    pub layers: i32,
    pub width: i32,
    pub mlp_hidden: i32,
    pub heads: i32,
    pub patch_size: i32,
    pub image_size: i32,
    pub channels: i32,
    pub eps: f32,
}

impl SiglipConfig {
    pub fn parse(v: &Value) -> Result<Self> {
        let int = |key: &str, default: Option<i64>| -> Result<i32> {
            match v.get(key).and_then(Value::as_i64).or(default) {
                Some(x) if x > 0 => Ok(x as i32),
                _ => Err(Error::InvalidConfig(format!(
                    "vision_config.{key} is missing or not positive"
                ))),
            }
        };
        let cfg = Self {
            layers: int("num_hidden_layers", None)?,
            width: int("hidden_size", None)?,
            mlp_hidden: int("intermediate_size", None)?,
            heads: int("num_attention_heads", None)?,
            patch_size: int("patch_size", None)?,
            image_size: int("image_size", Some(224))?,
            channels: int("num_channels", Some(3))?,
            eps: v.get("layer_norm_eps").and_then(Value::as_f64).unwrap_or(1e-6) as f32,
        };
        if cfg.width % cfg.heads != 0 || cfg.image_size % cfg.patch_size != 0 {
            return Err(Error::InvalidConfig(format!(
                "vision tower: width {} over {} heads, image {} in {}-pixel patches",
                cfg.width, cfg.heads, cfg.image_size, cfg.patch_size
            )));
        }
        Ok(cfg)
    }

    /// Patches per side.
    pub fn side(&self) -> i32 {
        self.image_size / self.patch_size
    }

    fn patch_values(&self) -> i32 {
        self.channels * self.patch_size * self.patch_size
    }
}

struct LayerNorm {
    weight: Array,
    bias: Array,
    eps: f32,
}

impl LayerNorm {
    fn load(loader: &mut LayerLoader, path: &str, dim: i32, eps: f32) -> Result<Self> {
        Ok(Self {
            weight: loader.float(&format!("{path}.weight"), &[dim])?,
            bias: loader.float(&format!("{path}.bias"), &[dim])?,
            eps,
        })
    }

    fn forward(&self, x: &Array) -> Result<Array> {
        Ok(fast::layer_norm(x, Some(&self.weight), Some(&self.bias), self.eps)?)
    }
}

struct Block {
    norm1: LayerNorm,
    q: Linear,
    k: Linear,
    v: Linear,
    out: Linear,
    norm2: LayerNorm,
    fc1: Linear,
    fc2: Linear,
}

/// One image part-way through the tower.
pub struct SiglipEncoding {
    hidden: Array,
}

pub struct Siglip {
    cfg: SiglipConfig,
    /// `[width, C·P·P]`.
    patch_kernel: Array,
    patch_bias: Array,
    /// `[patches, width]`.
    positions: Array,
    blocks: Vec<Block>,
    post_norm: LayerNorm,
}

/// The reference's final LayerNorm keeps MLX's default epsilon.
const POST_NORM_EPS: f32 = 1e-5;

impl Siglip {
    /// Loads from `{prefix}.embeddings.*`, `{prefix}.encoder.layers.N.*`,
    /// `{prefix}.post_layernorm`.
    pub fn load(cfg: SiglipConfig, prefix: &str, loader: &mut LayerLoader) -> Result<Self> {
        let (w, c, p) = (cfg.width, cfg.channels, cfg.patch_size);
        let kernel_name = format!("{prefix}.embeddings.patch_embedding.weight");
        // PyTorch `[out, C, P, P]`, or MLX `[out, P, P, C]`.
        let patch_kernel = match loader.weights.shape_of(&kernel_name).as_deref() {
            Some(s) if s == [w, c, p, p] => loader.float(&kernel_name, &[w, c, p, p])?,
            Some(s) if s == [w, p, p, c] => {
                loader.float(&kernel_name, &[w, p, p, c])?.transpose_axes(&[0, 3, 1, 2])?
            }
            Some(s) => {
                return Err(Error::TensorShape {
                    name: kernel_name,
                    expected: vec![w, c, p, p],
                    actual: s.to_vec(),
                })
            }
            None => return Err(loader.weights.take_any(&kernel_name).expect_err("absent tensor")),
        }
        .reshape(&[w, cfg.patch_values()])?;
        let patch_bias =
            loader.float(&format!("{prefix}.embeddings.patch_embedding.bias"), &[w])?;
        let n = cfg.side() * cfg.side();
        let positions =
            loader.float(&format!("{prefix}.embeddings.position_embedding.weight"), &[n, w])?;
        let mut blocks = Vec::with_capacity(cfg.layers as usize);
        for i in 0..cfg.layers {
            let l = format!("{prefix}.encoder.layers.{i}");
            let a = format!("{l}.self_attn");
            blocks.push(Block {
                norm1: LayerNorm::load(loader, &format!("{l}.layer_norm1"), w, cfg.eps)?,
                q: loader.linear(&format!("{a}.q_proj"), w, w, true)?,
                k: loader.linear(&format!("{a}.k_proj"), w, w, true)?,
                v: loader.linear(&format!("{a}.v_proj"), w, w, true)?,
                out: loader.linear(&format!("{a}.out_proj"), w, w, true)?,
                norm2: LayerNorm::load(loader, &format!("{l}.layer_norm2"), w, cfg.eps)?,
                fc1: loader.linear(&format!("{l}.mlp.fc1"), w, cfg.mlp_hidden, true)?,
                fc2: loader.linear(&format!("{l}.mlp.fc2"), cfg.mlp_hidden, w, true)?,
            });
        }
        let post_norm =
            LayerNorm::load(loader, &format!("{prefix}.post_layernorm"), w, POST_NORM_EPS)?;
        Ok(Self { cfg, patch_kernel, patch_bias, positions, blocks, post_norm })
    }

    pub fn config(&self) -> &SiglipConfig {
        &self.cfg
    }

    /// Patch `i` takes the learned position `ids[i]` (`[patches]` int32)
    /// instead of position `i`: Idefics3 / SmolVLM's tower buckets patch
    /// coordinates in float32, which repeats and skips positions when the
    /// side is not a power of two.
    pub fn set_position_ids(&mut self, ids: &Array) -> Result<()> {
        self.positions = self.positions.take_axis(ids, 0)?;
        Ok(())
    }

    pub fn depth(&self) -> usize {
        self.blocks.len()
    }

    /// The patch and position embeddings of one image's patches.
    pub fn begin(&self, pixels: &Array) -> Result<SiglipEncoding> {
        let n = self.cfg.side() * self.cfg.side();
        if pixels.shape() != [n, self.cfg.patch_values()] {
            return Err(Error::InvalidRequest(format!(
                "image patches have shape {:?}; the tower reads [{n}, {}]",
                pixels.shape(),
                self.cfg.patch_values()
            )));
        }
        let dtype = self.patch_kernel.dtype();
        let x =
            ops::matmul(pixels.as_dtype(dtype)?, self.patch_kernel.t())?.add(&self.patch_bias)?;
        Ok(SiglipEncoding { hidden: x.add(&self.positions)? })
    }

    /// Queues `blocks` (lazily); returns the hidden state to evaluate.
    pub fn run_blocks(
        &self,
        encoding: &mut SiglipEncoding,
        blocks: std::ops::Range<usize>,
    ) -> Result<Array> {
        let (heads, hd) = (self.cfg.heads, self.cfg.width / self.cfg.heads);
        for block in &self.blocks[blocks] {
            let x = &encoding.hidden;
            let n = x.dim(0);
            let h = block.norm1.forward(x)?;
            let split = |t: Array| -> Result<Array> {
                Ok(t.reshape(&[1, n, heads, hd])?.transpose_axes(&[0, 2, 1, 3])?)
            };
            let (q, k, v) = (
                split(block.q.forward(&h)?)?,
                split(block.k.forward(&h)?)?,
                split(block.v.forward(&h)?)?,
            );
            let o = attention::sdpa(&q, &k, &v, (hd as f32).powf(-0.5), &AttentionMask::None)?;
            let o = o.transpose_axes(&[0, 2, 1, 3])?.reshape(&[n, heads * hd])?;
            let x = x.add(block.out.forward(&o)?)?;
            let m =
                block.fc2.forward(&gelu_tanh(&block.fc1.forward(&block.norm2.forward(&x)?)?)?)?;
            encoding.hidden = x.add(m)?;
        }
        Ok(encoding.hidden.clone())
    }

    /// The final LayerNorm: `[patches, width]`, raster order.
    pub fn finish(&self, encoding: &SiglipEncoding) -> Result<Array> {
        self.post_norm.forward(&encoding.hidden)
    }
}
