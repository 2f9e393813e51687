//! Gemma 4's vision encoder: variable-resolution patches → soft tokens in
//! the language model's embedding space.
//!
//! patches `[N, P·P·3]` (values in [0, 1]) → `2x − 1` → `input_proj` (no
//! bias) + a learned embedding of the patch's column and of its row (two
//! tables) → blocks (Gemma norms around attention and MLP; RMS-normed
//! queries and keys, scale-free normed values, a 2-D RoPE rotating the first
//! half of each head by the column and the second by the row, attention
//! scale 1; a GELU-gated MLP) → average pooling over `k × k` patches →
//! `× √width` → optional standardization → the multimodal embedder (a
//! scale-free RMSNorm, then a projection to the text width).
//!
//! Linear layers may carry clip bounds (`use_clipped_linears`): inputs and
//! outputs are clamped to the checkpoint's stored ranges.
use mlx_rs::{fast, ops, ops::indexing::IndexOp, Array};
use serde_json::Value;

use crate::cache::AttentionMask;
use crate::error::{Error, Result};
use crate::model::layers::attention;
use crate::model::layers::{geglu, LayerLoader, Linear, RmsNorm};

/// `vision_config` of config.json.
#[derive(Debug, Clone)]
pub struct Gemma4VisionConfig {
    pub width: i32,
    pub mlp_hidden: i32,
    pub layers: i32,
    pub heads: i32,
    pub kv_heads: i32,
    pub head_dim: i32,
    pub eps: f32,
    pub patch_size: i32,
    pub position_table: i32,
    pub pooling_kernel: i32,
    pub rope_theta: f32,
    pub standardize: bool,
}

impl Gemma4VisionConfig {
    pub fn parse(v: &Value) -> Result<Self> {
        let int = |key: &str, default: i64| -> Result<i32> {
            match v.get(key).and_then(Value::as_i64).unwrap_or(default) {
                x if x > 0 => Ok(x as i32),
                x => Err(Error::InvalidConfig(format!(
                    "vision_config.{key} must be positive, got {x}"
                ))),
            }
        };
        let heads = int("num_attention_heads", 12)?;
        let cfg = Self {
            width: int("hidden_size", 768)?,
            mlp_hidden: int("intermediate_size", 3072)?,
            layers: int("num_hidden_layers", 16)?,
            heads,
            kv_heads: v
                .get("num_key_value_heads")
                .and_then(Value::as_i64)
                .map_or(heads, |x| x as i32),
            head_dim: int("head_dim", 64)?,
            eps: v.get("rms_norm_eps").and_then(Value::as_f64).unwrap_or(1e-6) as f32,
            patch_size: int("patch_size", 16)?,
            position_table: int("position_embedding_size", 10240)?,
            pooling_kernel: int("pooling_kernel_size", 3)?,
            rope_theta: v
                .get("rope_parameters")
                .and_then(|r| r.get("rope_theta"))
                .and_then(Value::as_f64)
                .unwrap_or(100.0) as f32,
            standardize: v.get("standardize").and_then(Value::as_bool).unwrap_or(false),
        };
        if cfg.kv_heads < 1 || cfg.heads % cfg.kv_heads != 0 || cfg.head_dim % 4 != 0 {
            return Err(Error::InvalidConfig(format!(
                "vision tower: {} heads over {} KV heads of {} features",
                cfg.heads, cfg.kv_heads, cfg.head_dim
            )));
        }
        Ok(cfg)
    }
}

/// A linear layer with optional clamps on its input and output.
struct ClippedLinear {
    linear: Linear,
    input: Option<(Array, Array)>,
    output: Option<(Array, Array)>,
}

impl ClippedLinear {
    /// `{path}.linear.*`, and the bounds `{path}.{input,output}_{min,max}` when stored.
    fn load(loader: &mut LayerLoader, path: &str, input: i32, output: i32) -> Result<Self> {
        let linear = loader.linear(&format!("{path}.linear"), input, output, false)?;
        let mut bounds = |which: &str| -> Result<Option<(Array, Array)>> {
            let (lo, hi) = (format!("{path}.{which}_min"), format!("{path}.{which}_max"));
            if !loader.weights.contains(&lo) {
                return Ok(None);
            }
            Ok(Some((loader.weights.take_any(&lo)?, loader.weights.take_any(&hi)?)))
        };
        let (input, output) = (bounds("input")?, bounds("output")?);
        Ok(Self { linear, input, output })
    }

    fn forward(&self, x: &Array) -> Result<Array> {
        let clamp = |x: Array, b: &Option<(Array, Array)>| -> Result<Array> {
            Ok(match b {
                Some((lo, hi)) => ops::minimum(&ops::maximum(&x, lo)?, hi)?,
                None => x,
            })
        };
        let x = clamp(x.clone(), &self.input)?;
        clamp(self.linear.forward(&x)?, &self.output)
    }
}

struct Block {
    input_norm: RmsNorm,
    q: ClippedLinear,
    k: ClippedLinear,
    v: ClippedLinear,
    o: ClippedLinear,
    q_norm: RmsNorm,
    k_norm: RmsNorm,
    post_attention_norm: RmsNorm,
    pre_mlp_norm: RmsNorm,
    gate: ClippedLinear,
    up: ClippedLinear,
    down: ClippedLinear,
    post_mlp_norm: RmsNorm,
}

/// One image part-way through the tower.
pub struct Gemma4Encoding {
    hidden: Array,
    /// cos and sin `[1, N, 1, head_dim]` of the 2-D RoPE.
    cos: Array,
    sin: Array,
    grid: [i32; 2],
}

pub struct Gemma4VisionTower {
    cfg: Gemma4VisionConfig,
    /// `[width, P·P·3]`.
    input_proj: Linear,
    /// `[2, table, width]`: column embeddings, then row embeddings.
    positions: Array,
    blocks: Vec<Block>,
    standardize: Option<(Array, Array)>,
    /// The multimodal embedder's projection to the text width.
    projection: Linear,
}

impl Gemma4VisionTower {
    /// Loads from `vision_tower.*` and `embed_vision.*`.
    pub fn load(
        cfg: Gemma4VisionConfig,
        text_width: i32,
        loader: &mut LayerLoader,
    ) -> Result<Self> {
        let (w, p) = (cfg.width, cfg.patch_size);
        let input_proj =
            loader.linear("vision_tower.patch_embedder.input_proj", 3 * p * p, w, false)?;
        let positions = loader.float(
            "vision_tower.patch_embedder.position_embedding_table",
            &[2, cfg.position_table, w],
        )?;
        let (q_out, kv_out) = (cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim);
        let mut blocks = Vec::with_capacity(cfg.layers as usize);
        for i in 0..cfg.layers {
            let l = format!("vision_tower.encoder.layers.{i}");
            let a = format!("{l}.self_attn");
            let m = format!("{l}.mlp");
            let norm = |loader: &mut LayerLoader, name: &str, dim: i32| {
                loader.rms_norm(name, dim, cfg.eps)
            };
            blocks.push(Block {
                input_norm: norm(loader, &format!("{l}.input_layernorm"), w)?,
                q: ClippedLinear::load(loader, &format!("{a}.q_proj"), w, q_out)?,
                k: ClippedLinear::load(loader, &format!("{a}.k_proj"), w, kv_out)?,
                v: ClippedLinear::load(loader, &format!("{a}.v_proj"), w, kv_out)?,
                o: ClippedLinear::load(loader, &format!("{a}.o_proj"), q_out, w)?,
                q_norm: norm(loader, &format!("{a}.q_norm"), cfg.head_dim)?,
                k_norm: norm(loader, &format!("{a}.k_norm"), cfg.head_dim)?,
                post_attention_norm: norm(loader, &format!("{l}.post_attention_layernorm"), w)?,
                pre_mlp_norm: norm(loader, &format!("{l}.pre_feedforward_layernorm"), w)?,
                gate: ClippedLinear::load(loader, &format!("{m}.gate_proj"), w, cfg.mlp_hidden)?,
                up: ClippedLinear::load(loader, &format!("{m}.up_proj"), w, cfg.mlp_hidden)?,
                down: ClippedLinear::load(loader, &format!("{m}.down_proj"), cfg.mlp_hidden, w)?,
                post_mlp_norm: norm(loader, &format!("{l}.post_feedforward_layernorm"), w)?,
            });
        }
        let standardize = if cfg.standardize {
            Some((
                loader.float("vision_tower.std_bias", &[w])?,
                loader.float("vision_tower.std_scale", &[w])?,
            ))
        } else {
            None
        };
        let projection =
            loader.linear("embed_vision.embedding_projection", w, text_width, false)?;
        Ok(Self { cfg, input_proj, positions, blocks, standardize, projection })
    }

    pub fn depth(&self) -> usize {
        self.blocks.len()
    }

    /// The patch and position embeddings and the RoPE tables of one image of
    /// `grid` (`[1, rows, cols]` patches).
    pub fn begin(&self, pixels: &Array, grid: [i32; 3]) -> Result<Gemma4Encoding> {
        let (gh, gw) = (grid[1], grid[2]);
        let (p, k) = (self.cfg.patch_size, self.cfg.pooling_kernel);
        let n = gh * gw;
        if grid[0] != 1 || gh % k != 0 || gw % k != 0 || pixels.shape() != [n, 3 * p * p] {
            return Err(Error::InvalidRequest(format!(
                "image patches {:?} with grid {grid:?}: the tower reads [rows·cols, {}] in whole {k}×{k} blocks",
                pixels.shape(),
                3 * p * p
            )));
        }
        if gh.max(gw) > self.cfg.position_table {
            return Err(Error::InvalidRequest(format!(
                "an image of {gh}×{gw} patches is past the tower's position table"
            )));
        }
        let dtype = self.positions.dtype();
        let x = pixels
            .as_dtype(dtype)?
            .subtract(Array::from_f32(0.5))?
            .multiply(Array::from_f32(2.0))?;
        let x = self.input_proj.forward(&x)?;
        let cols: Vec<i32> = (0..n).map(|i| i % gw).collect();
        let rows: Vec<i32> = (0..n).map(|i| i / gw).collect();
        let col_emb = self.positions.index(0).take_axis(Array::from_slice(&cols, &[n]), 0)?;
        let row_emb = self.positions.index(1).take_axis(Array::from_slice(&rows, &[n]), 0)?;
        let hidden = x.add(col_emb.add(row_emb)?)?;
        let (cos, sin) = self.rope_tables(&cols, &rows, dtype)?;
        Ok(Gemma4Encoding { hidden, cos, sin, grid: [gh, gw] })
    }

    /// `[1, N, 1, head_dim]` cos and sin: the first half of each head turns
    /// with the column, the second with the row, each half as its own
    /// rotate-half RoPE (`base^(2i / half)`).
    fn rope_tables(
        &self,
        cols: &[i32],
        rows: &[i32],
        dtype: mlx_rs::Dtype,
    ) -> Result<(Array, Array)> {
        let half = self.cfg.head_dim / 2;
        let quarter = half / 2;
        let n = cols.len() as i32;
        let exponents =
            ops::arange::<_, f32>(0, quarter, 1)?.multiply(Array::from_f32(2.0 / half as f32))?;
        let timescale = ops::power(Array::from_f32(self.cfg.rope_theta), exponents)?;
        let angles = |pos: &[i32]| -> Result<Array> {
            let pos = Array::from_slice(pos, &[n, 1]).as_dtype(mlx_rs::Dtype::Float32)?;
            let a = pos.divide(&timescale)?;
            Ok(ops::concatenate(&[&a, &a], -1)?)
        };
        let (ac, ar) = (angles(cols)?, angles(rows)?);
        let all = ops::concatenate(&[ac, ar], -1)?.reshape(&[1, n, 1, self.cfg.head_dim])?;
        Ok((ops::cos(&all)?.as_dtype(dtype)?, ops::sin(&all)?.as_dtype(dtype)?))
    }

    /// `x` `[1, N, heads, head_dim]` rotated half by half.
    fn rotate(&self, x: &Array, enc: &Gemma4Encoding) -> Result<Array> {
        let half = self.cfg.head_dim / 2;
        let parts = x.split_equal(2, -1)?;
        let rotate_half = |t: &Array| -> Result<Array> {
            let h = t.split_equal(2, -1)?;
            Ok(ops::concatenate(&[&h[1].negative()?, &h[0]], -1)?)
        };
        let rotated = ops::concatenate(&[rotate_half(&parts[0])?, rotate_half(&parts[1])?], -1)?;
        debug_assert_eq!(parts[0].dim(-1), half);
        Ok(x.multiply(&enc.cos)?.add(rotated.multiply(&enc.sin)?)?)
    }

    /// Queues `blocks` (lazily); returns the hidden state to evaluate.
    pub fn run_blocks(
        &self,
        enc: &mut Gemma4Encoding,
        blocks: std::ops::Range<usize>,
    ) -> Result<Array> {
        let (heads, kv_heads, hd) = (self.cfg.heads, self.cfg.kv_heads, self.cfg.head_dim);
        for block in &self.blocks[blocks] {
            let x = &enc.hidden;
            let n = x.dim(0);
            let h = block.input_norm.forward(x)?.reshape(&[1, n, -1])?;
            let q = block.q_norm.forward(&block.q.forward(&h)?.reshape(&[1, n, heads, hd])?)?;
            let k = block.k_norm.forward(&block.k.forward(&h)?.reshape(&[1, n, kv_heads, hd])?)?;
            let v = fast::rms_norm(
                &block.v.forward(&h)?.reshape(&[1, n, kv_heads, hd])?,
                None,
                self.cfg.eps,
            )?;
            let q = self.rotate(&q, enc)?.transpose_axes(&[0, 2, 1, 3])?;
            let k = self.rotate(&k, enc)?.transpose_axes(&[0, 2, 1, 3])?;
            let v = v.transpose_axes(&[0, 2, 1, 3])?;
            let o = attention::sdpa(&q, &k, &v, 1.0, &AttentionMask::None)?;
            let o =
                block.o.forward(&o.transpose_axes(&[0, 2, 1, 3])?.reshape(&[n, heads * hd])?)?;
            let x = x.add(block.post_attention_norm.forward(&o)?)?;
            let m = block.pre_mlp_norm.forward(&x)?;
            let m =
                block.down.forward(&geglu(&block.gate.forward(&m)?, &block.up.forward(&m)?)?)?;
            enc.hidden = x.add(block.post_mlp_norm.forward(&m)?)?;
        }
        Ok(enc.hidden.clone())
    }

    /// Pooling, scaling, standardization and the multimodal embedder: the
    /// image's soft tokens `[N / k², text width]`, pooled blocks in raster order.
    pub fn finish(&self, enc: &Gemma4Encoding) -> Result<Array> {
        let [gh, gw] = enc.grid;
        let k = self.cfg.pooling_kernel;
        let w = self.cfg.width;
        let pooled = enc
            .hidden
            .reshape(&[gh / k, k, gw / k, k, w])?
            .transpose_axes(&[0, 2, 1, 3, 4])?
            .reshape(&[gh / k * (gw / k), k * k, w])?
            .sum_axis(1, false)?
            .divide(Array::from_f32((k * k) as f32))?;
        let mut h = pooled.multiply(Array::from_f32((w as f32).sqrt()))?;
        if let Some((bias, scale)) = &self.standardize {
            h = h.subtract(bias)?.multiply(scale)?;
        }
        let normed = fast::rms_norm(&h, None, self.cfg.eps)?;
        self.projection.forward(&normed)
    }
}
