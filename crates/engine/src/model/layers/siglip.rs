//! The SigLIP vision tower (Gemma 3's): a square image's patches → one
//! hidden state per patch.
//!
//! patches `[N, C·P·P]` (raster order) → patch embedding (a Conv2d whose
//! stride equals its kernel: one matmul, with bias) + a learned position per
//! patch → `num_hidden_layers` pre-norm blocks (LayerNorm, attention over all
//! patches with biased projections, LayerNorm, MLP with the tanh GELU —
//! the reference's `GELU(approx="precise")`, which in MLX is the tanh form) →
//! the final LayerNorm (epsilon 1e-5, the reference's default, whatever the
//! config says for the blocks; [`SiglipConfig::post_norm_eps`]).
//!
//! SigLIP2 NaFlex (LFM2-VL's tower) differs in two places: its patch
//! embedding is a linear layer over columns (row, col, channel) — a 2-D
//! `patch_embedding.weight` says so — and an image of any `h × w` patches
//! takes the learned `side × side` position table resized to its grid
//! ([`Siglip::begin_resized`]: bilinear with PyTorch's antialias, as
//! mlx-vlm 0.7.6's `resize_bilinear_nhwc` computes it).
use mlx_rs::{fast, ops, Array, Dtype};
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
    /// The final LayerNorm's epsilon: MLX's default 1e-5 in Gemma 3's and
    /// SmolVLM's references, `eps` in LFM2-VL's.
    pub post_norm_eps: f32,
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
            post_norm_eps: POST_NORM_EPS,
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

/// LayerNorm with weight and bias.
pub struct LayerNorm {
    weight: Array,
    bias: Array,
    eps: f32,
}

impl LayerNorm {
    pub fn load(loader: &mut LayerLoader, path: &str, dim: i32, eps: f32) -> Result<Self> {
        Ok(Self {
            weight: loader.float(&format!("{path}.weight"), &[dim])?,
            bias: loader.float(&format!("{path}.bias"), &[dim])?,
            eps,
        })
    }

    pub fn forward(&self, x: &Array) -> Result<Array> {
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

/// How a patch's pixels become its embedding.
enum PatchEmbedding {
    /// A Conv2d whose stride is its kernel, as one matmul: `[width, C·P·P]`
    /// over columns (channel, row, col).
    Conv { kernel: Array, bias: Array },
    /// NaFlex's linear layer over columns (row, col, channel).
    Linear(Linear),
}

pub struct Siglip {
    cfg: SiglipConfig,
    patch_embedding: PatchEmbedding,
    /// The activation dtype.
    dtype: Dtype,
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
        let w = cfg.width;
        let kernel_name = format!("{prefix}.embeddings.patch_embedding.weight");
        let linear = loader.weights.shape_of(&kernel_name).is_some_and(|s| s.len() == 2)
            || loader.weights.contains(&format!("{prefix}.embeddings.patch_embedding.scales"));
        let patch_embedding = if linear {
            let path = format!("{prefix}.embeddings.patch_embedding");
            PatchEmbedding::Linear(loader.linear(&path, cfg.patch_values(), w, true)?)
        } else {
            Self::load_conv(&cfg, &kernel_name, loader)?
        };
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
            LayerNorm::load(loader, &format!("{prefix}.post_layernorm"), w, cfg.post_norm_eps)?;
        let dtype = loader.dtype;
        Ok(Self { cfg, patch_embedding, dtype, positions, blocks, post_norm })
    }

    /// The Conv2d patch kernel: PyTorch `[out, C, P, P]` or MLX `[out, P, P, C]`.
    fn load_conv(
        cfg: &SiglipConfig,
        kernel_name: &str,
        loader: &mut LayerLoader,
    ) -> Result<PatchEmbedding> {
        let (w, c, p) = (cfg.width, cfg.channels, cfg.patch_size);
        let kernel = match loader.weights.shape_of(kernel_name).as_deref() {
            Some(s) if s == [w, c, p, p] => loader.float(kernel_name, &[w, c, p, p])?,
            Some(s) if s != [w, p, p, c] => {
                return Err(Error::TensorShape {
                    name: kernel_name.to_string(),
                    expected: vec![w, c, p, p],
                    actual: s.to_vec(),
                })
            }
            // MLX's, or absent: asked for in MLX's layout (a missing
            // tensor's error, or what a recording of the loader notes).
            _ => loader.float(kernel_name, &[w, p, p, c])?.transpose_axes(&[0, 3, 1, 2])?,
        }
        .reshape(&[w, cfg.patch_values()])?;
        let bias_name = kernel_name.replace(".weight", ".bias");
        let bias = loader.float(&bias_name, &[w])?;
        Ok(PatchEmbedding::Conv { kernel, bias })
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
        self.check_patches(pixels, n)?;
        Ok(SiglipEncoding { hidden: self.embed_patches(pixels)?.add(&self.positions)? })
    }

    /// [`Self::begin`] for an image of `height × width` patches (raster
    /// order), whatever its shape: the position table, a `side × side` grid,
    /// resized to the image's grid (SigLIP2 NaFlex).
    pub fn begin_resized(&self, pixels: &Array, height: i32, width: i32) -> Result<SiglipEncoding> {
        self.check_patches(pixels, height * width)?;
        let side = self.cfg.side();
        let table = self.positions.as_dtype(Dtype::Float32)?.reshape(&[1, side, side, -1])?;
        let positions = resize_bilinear_antialiased(&table, height, width)?
            .reshape(&[height * width, self.cfg.width])?
            .as_dtype(self.positions.dtype())?;
        let x = self.embed_patches(pixels)?.add(&positions)?;
        Ok(SiglipEncoding { hidden: x.as_dtype(self.dtype)? })
    }

    fn check_patches(&self, pixels: &Array, n: i32) -> Result<()> {
        if pixels.shape() != [n, self.cfg.patch_values()] {
            return Err(Error::InvalidRequest(format!(
                "image patches have shape {:?}; the tower reads [{n}, {}]",
                pixels.shape(),
                self.cfg.patch_values()
            )));
        }
        Ok(())
    }

    fn embed_patches(&self, pixels: &Array) -> Result<Array> {
        let pixels = pixels.as_dtype(self.dtype)?;
        match &self.patch_embedding {
            PatchEmbedding::Conv { kernel, bias } => {
                Ok(ops::matmul(pixels, kernel.t())?.add(bias)?)
            }
            PatchEmbedding::Linear(linear) => linear.forward(&pixels),
        }
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

/// mlx-vlm 0.7.6's `_bilinear_weights_1d(input, output, align_corners=False,
/// antialias=True)` in float32: for each output index its source indices
/// `[output, taps]` (int32) and weights. A downscale spreads the triangle
/// over `scale` source pixels each side (PyTorch's antialias), normalized;
/// an upscale reads the two neighbours.
fn bilinear_taps(input: i32, output: i32) -> Result<(Array, Array)> {
    let f = Array::from_f32;
    let scale = f64::from(input) / f64::from(output);
    let s = f(scale as f32);
    let last = f((input - 1) as f32);
    let src = Array::arange::<f64, f32>(None, f64::from(output), None)?
        .add(f(0.5))?
        .multiply(&s)?
        .subtract(f(0.5))?;
    if scale > 1.0 {
        let lo = ops::maximum(&src.subtract(&s)?.add(f(1.0))?.floor()?, f(0.0))?;
        let hi = ops::minimum(&src.add(&s)?.floor()?, &last)?;
        let taps = (2.0 * scale).ceil();
        let pos =
            lo.expand_dims(1)?.add(Array::arange::<f64, f32>(None, taps, None)?.expand_dims(0)?)?;
        let distance = pos.subtract(src.expand_dims(1)?)?.abs()?.divide(&s)?;
        let w = ops::maximum(f(0.0), f(1.0).subtract(distance)?)?;
        let w = ops::select(&pos.le(hi.expand_dims(1)?)?, &w, f(0.0))?;
        let w = w.divide(w.sum_axis(1, true)?)?;
        let idx = ops::minimum(&pos, &last)?.as_dtype(Dtype::Int32)?;
        Ok((idx, w))
    } else {
        let src = ops::maximum(&src, f(0.0))?;
        let base = src.floor()?;
        let frac = src.subtract(&base)?;
        let pos = base.expand_dims(1)?.add(Array::arange::<f64, f32>(None, 2.0, None)?)?;
        let idx = ops::clip(&pos.as_dtype(Dtype::Int32)?, (0, input - 1))?;
        let w = ops::stack(&[f(1.0).subtract(&frac)?, frac], 1)?;
        Ok((idx, w))
    }
}

/// One axis of the separable resize: `x [N, S, M]` → `[N, out, M]`.
fn interpolate_axis(x: &Array, idx: &Array, w: &Array) -> Result<Array> {
    let (n, m, out, taps) = (x.dim(0), x.dim(2), idx.dim(0), idx.dim(1));
    let g = x.take_axis(&idx.reshape(&[-1])?, 1)?.reshape(&[n, out, taps, m])?;
    Ok(g.multiply(w.reshape(&[1, out, taps, 1])?)?.sum_axis(2, false)?)
}

/// `x [N, H, W, C]` (float32) resized to `[N, height, width, C]` as
/// mlx-vlm's `resize_bilinear_nhwc(…, align_corners=False, antialias=True)`
/// does on the CPU (`_separable_interpolate_mlx`: the cheaper axis order,
/// the same gathers and sums).
pub fn resize_bilinear_antialiased(x: &Array, height: i32, width: i32) -> Result<Array> {
    let (n, h, w, c) = (x.dim(0), x.dim(1), x.dim(2), x.dim(3));
    if (h, w) == (height, width) {
        return Ok(x.clone());
    }
    let (iy, wy) = bilinear_taps(h, height)?;
    let (ix, wx) = bilinear_taps(w, width)?;
    let (ty, tx) = (i64::from(iy.dim(1)), i64::from(ix.dim(1)));
    let (h64, w64, oh, ow) = (i64::from(h), i64::from(w), i64::from(height), i64::from(width));
    let rows_first = oh * w64 * (ty + 1) + oh * ow * (tx + 1);
    let cols_first = h64 * w64 + h64 * ow * (tx + 1) + oh * ow * ty;
    if rows_first <= cols_first {
        let y = interpolate_axis(&x.reshape(&[n, h, w * c])?, &iy, &wy)?;
        let y = y.reshape(&[n, height, w, c])?.transpose_axes(&[0, 2, 1, 3])?.reshape(&[
            n,
            w,
            height * c,
        ])?;
        let out = interpolate_axis(&y, &ix, &wx)?.reshape(&[n, width, height, c])?;
        Ok(out.transpose_axes(&[0, 2, 1, 3])?)
    } else {
        let y = x.transpose_axes(&[0, 2, 1, 3])?.reshape(&[n, w, h * c])?;
        let y = interpolate_axis(&y, &ix, &wx)?;
        let y = y.reshape(&[n, width, h, c])?.transpose_axes(&[0, 2, 1, 3])?.reshape(&[
            n,
            h,
            width * c,
        ])?;
        Ok(interpolate_axis(&y, &iy, &wy)?.reshape(&[n, height, width, c])?)
    }
}
