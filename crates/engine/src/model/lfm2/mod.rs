//! The `lfm2` architecture (Liquid AI's LFM2 and LFM2.5, 350M–2.6B): a
//! hybrid decoder of short gated convolutions and grouped-query attention.
//! Most layers are a *short convolution*:
//!
//! ```text
//! B, C, x = in_proj(h);   y = C · conv(B · x);   out_proj(y)
//! ```
//!
//! where `conv` is a causal depthwise convolution over the last
//! `conv_L_cache` tokens, so each row keeps only the last `conv_L_cache − 1`
//! inputs `B · x` between steps (a recurrent state of fixed size, kept in
//! the batch's recurrent cache like the Gated DeltaNet's conv state). The
//! others (`full_attn_idxs`, or `layer_types` naming `full_attention`) are
//! attention with an RMSNorm over each head's queries and keys before RoPE.
//! Every layer has a SwiGLU MLP (`w2(silu(w1 x) · w3 x)`) whose width
//! `block_auto_adjust_ff_dim` derives from `block_ff_dim`; the output head
//! is always the embedding; the final norm is named `embedding_norm`.
//!
//! Checkpoints store the convolution kernel as Hugging Face does,
//! `[C, 1, K]`, or as MLX does, `[C, K, 1]` (mlx-community's); the shape
//! tells which. A right-padded prefill pass must leave each row's state at
//! its real end: padded inputs are zeroed and the state is read there.
use mlx_rs::{ops, ops::indexing::IndexOp, Array, Dtype};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::cache::{BatchCache, CacheLayout, LayerCache};
use crate::distributed::StageLayers;
use crate::error::{Error, Result};
use crate::model::layers::rope::{Positions, Rope, Rotation};
use crate::model::layers::{attention, rows_at, Embedding, LayerLoader, Linear, RmsNorm};
use crate::model::registry::Family;
use crate::model::shape::{self, LayerShape};
use crate::model::{LanguageModel, ModelShape};
use crate::weights::gguf::GgufImport;

pub const FAMILY: Family = Family {
    name: "LFM2",
    model_types: &["lfm2"],
    build: |_, config, loader| Ok(Box::new(Lfm2::load(config, loader)?)),
    layers: |config| Ok(Lfm2Args::parse(config)?.layer_shapes()),
    gguf: Some(GgufImport {
        architecture: "lfm2",
        class_name: "Lfm2ForCausalLM",
        block_names: &GGUF_BLOCK_NAMES,
        config_keys: &[("conv_L_cache", "shortconv.l_cache")],
        permuted_qk: false,
        norm_plus_one: false,
        complete_config: Some(complete_gguf_config),
    }),
    image_processor: None,
    tensor_parallel: false,
};

/// llama.cpp's names for LFM2's block tensors.
pub(crate) const GGUF_BLOCK_NAMES: [(&str, &str); 11] = [
    ("attn_norm", "operator_norm"),
    ("ffn_norm", "ffn_norm"),
    ("ffn_gate", "feed_forward.w1"),
    ("ffn_up", "feed_forward.w3"),
    ("ffn_down", "feed_forward.w2"),
    ("attn_output", "self_attn.out_proj"),
    ("attn_q_norm", "self_attn.q_layernorm"),
    ("attn_k_norm", "self_attn.k_layernorm"),
    ("shortconv.conv", "conv.conv"),
    ("shortconv.in_proj", "conv.in_proj"),
    ("shortconv.out_proj", "conv.out_proj"),
];

/// A GGUF's metadata as LFM2's config.json says it: llama.cpp stores the MLP
/// width already adjusted, and the attention layers as the layers with KV
/// heads.
pub(crate) fn complete_gguf_config(c: &mut Map<String, Value>) {
    if let Some(eps) = c.get("rms_norm_eps").cloned() {
        c.insert("norm_eps".into(), eps);
    }
    if let Some(ff) = c.get("intermediate_size").cloned() {
        c.insert("block_ff_dim".into(), ff);
        c.insert("block_auto_adjust_ff_dim".into(), false.into());
    }
    let attention: Option<Vec<usize>> =
        c.get("num_key_value_heads_per_layer").and_then(Value::as_array).map(|heads| {
            heads
                .iter()
                .enumerate()
                .filter(|(_, h)| h.as_i64().is_some_and(|h| h > 0))
                .map(|(i, _)| i)
                .collect()
        });
    if let Some(attention) = attention {
        c.insert("full_attn_idxs".into(), attention.into());
    }
}

#[derive(Debug, Clone, Deserialize)]
struct RopeParameters {
    #[serde(default)]
    rope_theta: Option<f32>,
    #[serde(default, alias = "type")]
    rope_type: Option<String>,
}

/// The config.json fields LFM2 reads (mlx-lm's names and defaults).
#[derive(Debug, Clone, Deserialize)]
pub struct Lfm2Args {
    hidden_size: i32,
    num_hidden_layers: i32,
    num_attention_heads: i32,
    #[serde(default)]
    num_key_value_heads: Option<i32>,
    vocab_size: i32,
    #[serde(default = "default_context")]
    max_position_embeddings: i32,
    #[serde(default = "default_eps")]
    norm_eps: f32,
    #[serde(default)]
    conv_bias: bool,
    #[serde(rename = "conv_L_cache", default = "default_conv_cache")]
    conv_cache: i32,
    #[serde(default)]
    block_dim: Option<i32>,
    #[serde(default)]
    block_ff_dim: Option<i32>,
    #[serde(default)]
    intermediate_size: Option<i32>,
    #[serde(default = "default_multiple_of")]
    block_multiple_of: i32,
    #[serde(default)]
    block_ffn_dim_multiplier: Option<f64>,
    #[serde(default)]
    block_auto_adjust_ff_dim: bool,
    #[serde(default = "default_rope_theta")]
    rope_theta: f32,
    #[serde(default)]
    rope_parameters: Option<RopeParameters>,
    #[serde(default)]
    full_attn_idxs: Option<Vec<usize>>,
    #[serde(default)]
    layer_types: Option<Vec<String>>,
}

fn default_context() -> i32 {
    128_000
}
fn default_eps() -> f32 {
    1e-5
}
fn default_conv_cache() -> i32 {
    3
}
fn default_multiple_of() -> i32 {
    256
}
fn default_rope_theta() -> f32 {
    1_000_000.0
}

impl Lfm2Args {
    /// Parses config.json (or a vision-language config's `text_config`) and
    /// checks what the layers need.
    pub fn parse(config: &Value) -> Result<Self> {
        let text = config.get("text_config").filter(|t| t.is_object()).unwrap_or(config);
        let args: Self = serde_json::from_value(text.clone())
            .map_err(|e| Error::InvalidConfig(format!("lfm2 config.json: {e}")))?;
        let bad = |m: String| Err(Error::InvalidConfig(m));
        let (heads, kv) = (args.num_attention_heads, args.kv_heads());
        if heads < 1 || kv < 1 || heads % kv != 0 || args.hidden_size % heads != 0 {
            return bad(format!(
                "lfm2: num_attention_heads {heads} must divide hidden_size {} and be a multiple of num_key_value_heads {kv}",
                args.hidden_size
            ));
        }
        if args.num_hidden_layers < 1 || args.vocab_size < 1 {
            return bad("lfm2: num_hidden_layers and vocab_size must be positive".into());
        }
        if args.conv_cache < 2 {
            return bad(format!("lfm2: conv_L_cache {} must be at least 2", args.conv_cache));
        }
        if args.block_dim.is_some_and(|d| d != args.hidden_size) {
            return bad(format!(
                "lfm2: block_dim {:?} differs from hidden_size {}",
                args.block_dim, args.hidden_size
            ));
        }
        if args.block_ff_dim.or(args.intermediate_size).is_none_or(|d| d < 1) {
            return bad("lfm2 config.json has neither block_ff_dim nor intermediate_size".into());
        }
        if args.block_multiple_of < 1 {
            return bad("lfm2: block_multiple_of must be positive".into());
        }
        let rope = args.rope_parameters.as_ref().and_then(|p| p.rope_type.as_deref());
        if rope.is_some_and(|r| r != "default") {
            return bad(format!("lfm2: rope_type {rope:?} is not supported"));
        }
        let n = args.num_hidden_layers as usize;
        match (&args.full_attn_idxs, &args.layer_types) {
            (Some(idxs), _) => {
                if let Some(bad_idx) = idxs.iter().find(|&&i| i >= n) {
                    return bad(format!("lfm2: full_attn_idxs names layer {bad_idx} of {n}"));
                }
            }
            (None, Some(types)) if types.len() != n => {
                return bad(format!(
                    "lfm2: layer_types lists {} layers but num_hidden_layers is {n}",
                    types.len()
                ));
            }
            (None, Some(_)) => {}
            (None, None) => {
                return bad("lfm2 config.json has neither full_attn_idxs nor layer_types".into())
            }
        }
        Ok(args)
    }

    fn kv_heads(&self) -> i32 {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// The width of the hidden states.
    pub fn hidden_size(&self) -> i32 {
        self.hidden_size
    }

    fn head_dim(&self) -> i32 {
        self.hidden_size / self.num_attention_heads
    }

    fn is_attention(&self, layer: usize) -> bool {
        match (&self.full_attn_idxs, &self.layer_types) {
            (Some(idxs), _) => idxs.contains(&layer),
            (None, Some(types)) => types[layer] == "full_attention",
            (None, None) => false,
        }
    }

    fn rope_theta(&self) -> f32 {
        self.rope_parameters.as_ref().and_then(|p| p.rope_theta).unwrap_or(self.rope_theta)
    }

    /// The MLP's width: `block_ff_dim`, or with `block_auto_adjust_ff_dim`
    /// two thirds of it, times the multiplier, rounded up to a multiple of
    /// `block_multiple_of` (truncations as Python's `int`).
    pub fn ff_dim(&self) -> i32 {
        let ff = self.block_ff_dim.or(self.intermediate_size).unwrap_or(0);
        if !self.block_auto_adjust_ff_dim {
            return ff;
        }
        let mut ff = (2.0 * f64::from(ff) / 3.0) as i32;
        if let Some(m) = self.block_ffn_dim_multiplier {
            ff = (m * f64::from(ff)) as i32;
        }
        let k = self.block_multiple_of;
        k * ((ff + k - 1) / k)
    }

    /// Values one short convolution keeps per row: its last `conv_L_cache − 1` inputs.
    fn conv_state_elements(&self) -> usize {
        ((self.conv_cache - 1) * self.hidden_size).max(0) as usize
    }

    /// Attention layers keep every token's keys; convolution layers a fixed
    /// state in the activation type.
    pub fn layer_shapes(&self) -> Vec<LayerShape> {
        (0..self.num_hidden_layers.max(0) as usize)
            .map(|i| {
                if self.is_attention(i) {
                    LayerShape::attention(LayerCache::Full, self.kv_heads(), self.head_dim())
                } else {
                    LayerShape::recurrent(self.conv_state_elements(), 0)
                }
            })
            .collect()
    }
}

/// Attention with RMSNorm over each head's queries and keys.
struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    out_proj: Linear,
    q_layernorm: RmsNorm,
    k_layernorm: RmsNorm,
    heads: i32,
    kv_heads: i32,
    head_dim: i32,
}

impl Attention {
    fn load(loader: &mut LayerLoader, p: &str, args: &Lfm2Args) -> Result<Self> {
        let (d, hd) = (args.hidden_size, args.head_dim());
        let (heads, kv_heads) = (args.num_attention_heads, args.kv_heads());
        Ok(Self {
            q_proj: loader.linear(&format!("{p}.q_proj"), d, heads * hd, false)?,
            k_proj: loader.linear(&format!("{p}.k_proj"), d, kv_heads * hd, false)?,
            v_proj: loader.linear(&format!("{p}.v_proj"), d, kv_heads * hd, false)?,
            out_proj: loader.linear(&format!("{p}.out_proj"), heads * hd, d, false)?,
            q_layernorm: loader.rms_norm(&format!("{p}.q_layernorm"), hd, args.norm_eps)?,
            k_layernorm: loader.rms_norm(&format!("{p}.k_layernorm"), hd, args.norm_eps)?,
            heads,
            kv_heads,
            head_dim: hd,
        })
    }

    fn forward(
        &self,
        x: &Array,
        layer: usize,
        rope: (&Rope, &Rotation),
        cache: &mut BatchCache,
    ) -> Result<Array> {
        let (b, l) = (x.dim(0), x.dim(1));
        let hd = self.head_dim;
        let heads_first = |t: Array, heads: i32, norm: Option<&RmsNorm>| -> Result<Array> {
            let t = t.reshape(&[b, l, heads, hd])?;
            let t = match norm {
                Some(n) => n.forward(&t)?,
                None => t,
            };
            Ok(t.transpose_axes(&[0, 2, 1, 3])?)
        };
        let q = heads_first(self.q_proj.forward(x)?, self.heads, Some(&self.q_layernorm))?;
        let k = heads_first(self.k_proj.forward(x)?, self.kv_heads, Some(&self.k_layernorm))?;
        let v = heads_first(self.v_proj.forward(x)?, self.kv_heads, None)?;
        let (rope, rotation) = rope;
        let (q, k) = (rope.rotate(&q, rotation)?, rope.rotate(&k, rotation)?);
        let (kv, mask) = cache.update(layer, &k, &v)?;
        let o = attention::attend(&q, kv, (hd as f32).powf(-0.5), &mask)?;
        let o = o.transpose_axes(&[0, 2, 1, 3])?.reshape(&[b, l, self.heads * hd])?;
        self.out_proj.forward(&o)
    }
}

/// The gated short convolution.
struct ShortConv {
    in_proj: Linear,
    out_proj: Linear,
    /// Depthwise kernel `[C, K, 1]` (MLX's conv1d layout).
    kernel: Array,
    bias: Option<Array>,
    channels: i32,
    /// `K`: the tokens one output reads (`conv_L_cache`).
    width: i32,
}

impl ShortConv {
    fn load(loader: &mut LayerLoader, p: &str, args: &Lfm2Args) -> Result<Self> {
        let (c, k, bias) = (args.hidden_size, args.conv_cache, args.conv_bias);
        let name = format!("{p}.conv.weight");
        // Hugging Face's `[C, 1, K]`, MLX's `[C, K, 1]`, or llama.cpp's `[C, K]`.
        let stored = loader.weights.shape_of(&name).unwrap_or_default();
        let kernel = match stored.as_slice() {
            [_, _] => loader.float(&name, &[c, k])?.reshape(&[c, k, 1])?,
            [_, 1, _] => loader.float(&name, &[c, 1, k])?.swap_axes(1, 2)?,
            _ => loader.float(&name, &[c, k, 1])?,
        };
        Ok(Self {
            in_proj: loader.linear(&format!("{p}.in_proj"), c, 3 * c, bias)?,
            out_proj: loader.linear(&format!("{p}.out_proj"), c, c, bias)?,
            kernel,
            bias: if bias { Some(loader.float(&format!("{p}.conv.bias"), &[c])?) } else { None },
            channels: c,
            width: k,
        })
    }

    /// `[B, L, C]` → `[B, L, C]`, reading and writing layer `layer`'s state.
    fn forward(&self, x: &Array, layer: usize, cache: &mut BatchCache) -> Result<Array> {
        let (b, l) = (x.dim(0), x.dim(1));
        let keep = self.width - 1;
        let parts = ops::split_equal(&self.in_proj.forward(x)?, 3, -1)?;
        let (gate_in, gate_out, input) = (&parts[0], &parts[1], &parts[2]);
        let mut gated = gate_in.multiply(input)?;
        // `[B, L]`: which tokens are real, in a right-padded pass.
        let real = cache.real_tokens()?;
        if let Some(real) = &real {
            let zero = ops::zeros_dtype(&[1], gated.dtype())?;
            gated = ops::select(&real.expand_dims(-1)?, &gated, &zero)?;
        }
        let state = match cache.recurrent_state(layer)? {
            Some([state]) => state.clone(),
            Some(_) => {
                return Err(Error::Mlx(format!(
                    "layer {layer}: a recurrent state of another shape"
                )))
            }
            None => ops::zeros_dtype(&[b, keep, self.channels], gated.dtype())?,
        };
        let window = ops::concatenate(&[state, gated], 1)?;
        // The next state: the last `K − 1` inputs up to each row's real end.
        let next = match &real {
            Some(real) => {
                let ends = real.as_dtype(Dtype::Int32)?.sum_axis(1, true)?;
                let cols =
                    ends.add(ops::arange::<_, i32>(None, keep, None)?.reshape(&[1, keep])?)?;
                window.take_along_axis(&cols.expand_dims(-1)?, 1)?
            }
            None => window.index((.., l..l + keep, ..)),
        };
        if cache.records_recurrent_steps() {
            // After token t the state is the `K − 1` inputs ending at t.
            let steps: Vec<Array> = (1..=l).map(|t| window.index((.., t..t + keep, ..))).collect();
            cache.set_recurrent_steps(layer, vec![ops::stack(&steps, 1)?])?;
        }
        let mut conv = ops::conv1d(&window, &self.kernel, 1, 0, 1, self.channels)?;
        if let Some(bias) = &self.bias {
            conv = conv.add(bias)?;
        }
        cache.set_recurrent_state(layer, vec![next.contiguous()?])?;
        self.out_proj.forward(&gate_out.multiply(conv)?)
    }
}

/// The part of a block after its operator: LFM2's dense MLP, or what a
/// neighbour family puts there (LFM2-MoE's mixture of experts).
pub trait FeedForward {
    /// `[B, L, D]` → `[B, L, D]`.
    fn forward(&self, x: &Array) -> Result<Array>;
}

/// Loads layer `i`'s feed-forward part from `path`
/// (`model.layers.{i}.feed_forward`).
pub type LoadFeedForward<'a> =
    &'a dyn Fn(&mut LayerLoader, &Lfm2Args, &str, usize) -> Result<Box<dyn FeedForward>>;

/// LFM2's MLP: `w2(silu(w1 x) · w3 x)`.
struct SwiGlu {
    w1: Linear,
    w2: Linear,
    w3: Linear,
}

impl SwiGlu {
    fn load(loader: &mut LayerLoader, f: &str, args: &Lfm2Args) -> Result<Self> {
        let (d, ff) = (args.hidden_size, args.ff_dim());
        Ok(Self {
            w1: loader.linear(&format!("{f}.w1"), d, ff, false)?,
            w2: loader.linear(&format!("{f}.w2"), ff, d, false)?,
            w3: loader.linear(&format!("{f}.w3"), d, ff, false)?,
        })
    }
}

impl FeedForward for SwiGlu {
    fn forward(&self, x: &Array) -> Result<Array> {
        self.w2.forward(&crate::model::layers::swiglu(&self.w1.forward(x)?, &self.w3.forward(x)?)?)
    }
}

enum Operator {
    Conv(ShortConv),
    Attention(Attention),
}

struct Block {
    operator_norm: RmsNorm,
    operator: Operator,
    ffn_norm: RmsNorm,
    feed_forward: Box<dyn FeedForward>,
}

impl Block {
    fn load(
        loader: &mut LayerLoader,
        args: &Lfm2Args,
        i: usize,
        feed_forward: LoadFeedForward,
    ) -> Result<Self> {
        let p = format!("model.layers.{i}");
        let (d, eps) = (args.hidden_size, args.norm_eps);
        let operator = if args.is_attention(i) {
            Operator::Attention(Attention::load(loader, &format!("{p}.self_attn"), args)?)
        } else {
            Operator::Conv(ShortConv::load(loader, &format!("{p}.conv"), args)?)
        };
        let f = format!("{p}.feed_forward");
        Ok(Self {
            operator_norm: loader.rms_norm(&format!("{p}.operator_norm"), d, eps)?,
            operator,
            ffn_norm: loader.rms_norm(&format!("{p}.ffn_norm"), d, eps)?,
            feed_forward: feed_forward(loader, args, &f, i)?,
        })
    }

    /// With `read` (`[B]`, one position per row), the operator still runs
    /// over every position (it writes the cache), and the rest of the block
    /// on the read positions alone: `[B, 1, D]` out.
    fn forward(
        &self,
        h: Array,
        i: usize,
        rope: (&Rope, &Rotation),
        cache: &mut BatchCache,
        read: Option<&Array>,
    ) -> Result<Array> {
        let x = self.operator_norm.forward(&h)?;
        let r = match &self.operator {
            Operator::Conv(conv) => conv.forward(&x, i, cache)?,
            Operator::Attention(attn) => attn.forward(&x, i, rope, cache)?,
        };
        let (h, r) = match read {
            Some(at) => (rows_at(&h, at)?, rows_at(&r, at)?),
            None => (h, r),
        };
        let h = h.add(r)?;
        Ok(h.add(self.feed_forward.forward(&self.ffn_norm.forward(&h)?)?)?)
    }
}

pub struct Lfm2 {
    args: Lfm2Args,
    embed_tokens: Embedding,
    /// The layers this process runs (all, or its pipeline stage), in order.
    layers: Vec<Block>,
    stage: StageLayers,
    /// The final norm (named so in every LFM2 checkpoint).
    embedding_norm: RmsNorm,
    rope: Rope,
}

impl Lfm2 {
    pub fn load(config: &Value, loader: &mut LayerLoader) -> Result<Self> {
        Self::load_with(config, loader, &|loader, args, path, _| {
            Ok(Box::new(SwiGlu::load(loader, path, args)?))
        })
    }

    /// [`Self::load`] with each block's feed-forward part loaded by
    /// `feed_forward` (LFM2-MoE's experts).
    pub fn load_with(
        config: &Value,
        loader: &mut LayerLoader,
        feed_forward: LoadFeedForward,
    ) -> Result<Self> {
        let args = Lfm2Args::parse(config)?;
        let d = args.hidden_size;
        let stage = loader.layer_stage(args.num_hidden_layers as usize, None)?;
        let mut layers = Vec::with_capacity(stage.layers().len());
        for i in stage.layers() {
            layers.push(Block::load(loader, &args, i, feed_forward)?);
        }
        let embed_tokens = loader.embedding("model.embed_tokens", args.vocab_size, d)?;
        // A GGUF converted by other tools may name the final norm `output_norm`.
        if !loader.weights.contains("model.embedding_norm.weight") {
            loader.weights.rename("model.norm.weight", "model.embedding_norm.weight");
        }
        let embedding_norm = loader.rms_norm("model.embedding_norm", d, args.norm_eps)?;
        // The head is the embedding, whatever a checkpoint ships beside it.
        for part in ["weight", "scales", "biases"] {
            loader.weights.remove(&format!("lm_head.{part}"));
        }
        let rope = Rope::new(args.head_dim(), args.rope_theta(), false, None)?;
        Ok(Self { args, embed_tokens, layers, stage, embedding_norm, rope })
    }

    /// The width of the hidden states (what image features must match).
    pub fn hidden_size(&self) -> i32 {
        self.args.hidden_size
    }
}

impl LanguageModel for Lfm2 {
    fn shape(&self) -> ModelShape {
        // KV quantization applies to the attention layers (the others keep states).
        ModelShape {
            num_layers: self.stage.total(),
            kv_heads: self.args.kv_heads(),
            head_dim: self.args.head_dim(),
            vocab_size: self.args.vocab_size,
            max_context: self.args.max_position_embeddings as usize,
        }
    }

    fn cache_layout(&self) -> CacheLayout {
        shape::cache_layout(&self.args.layer_shapes()).expect("no shared layers")
    }

    fn embed(&self, tokens: &Array) -> Result<Array> {
        self.embed_tokens.forward(tokens)
    }

    fn forward_embeddings(
        &self,
        mut h: Array,
        tokens: &Array,
        positions: &Positions,
        cache: &mut BatchCache,
    ) -> Result<Array> {
        cache.begin_step(h.dim(1))?;
        let rotation = self.rope.prepare(positions)?;
        // Where the caller reads one position per row, the last block's
        // feed-forward part runs on those alone: its other outputs reach no
        // cache and no reader (the reference's prefill never computes them).
        // Only in a whole model: a split one's other ranks run the whole pass.
        let read = cache.read_positions().filter(|_| h.dim(1) > 1 && self.stage.is_whole());
        h = self.stage.enter(h, tokens)?;
        for (i, block) in self.stage.layers().zip(&self.layers) {
            let read = read.as_ref().filter(|_| i + 1 == self.stage.total());
            h = block.forward(h, i, (&self.rope, &rotation), cache, read)?;
        }
        cache.finish_step()?;
        self.stage.leave(h, |h| self.embedding_norm.forward(h))
    }

    fn logits(&self, hidden: &Array) -> Result<Array> {
        self.embed_tokens.as_linear(hidden)
    }
}

/// A bench-size LFM2 (LFM2-350M's plan scaled down: hidden 1024 → 512, 16
/// blocks → 8 with attention in two, GQA 4:1), for scripts/bench-models.sh.
/// `vocab`: the tokenizer's size.
pub fn bench_config(vocab: i32) -> Value {
    serde_json::json!({
        "model_type": "lfm2", "architectures": ["Lfm2ForCausalLM"], "vocab_size": vocab,
        "hidden_size": 512, "num_hidden_layers": 8, "full_attn_idxs": [2, 5],
        "num_attention_heads": 8, "num_key_value_heads": 2, "conv_L_cache": 3,
        "conv_bias": false, "norm_eps": 1e-5, "rope_theta": 1000000.0,
        "block_dim": 512, "block_ff_dim": 1536, "block_auto_adjust_ff_dim": false,
        "block_multiple_of": 256, "block_ffn_dim_multiplier": 1.0,
        "max_position_embeddings": 32768, "tie_word_embeddings": true,
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// LFM2-1.2B's config.json (the fields the model reads).
    fn lfm2_1_2b() -> Value {
        json!({
            "model_type": "lfm2", "architectures": ["Lfm2ForCausalLM"], "block_auto_adjust_ff_dim": true,
            "block_dim": 2048, "block_ff_dim": 12288, "block_ffn_dim_multiplier": 1.0,
            "block_multiple_of": 256, "conv_L_cache": 3, "conv_bias": false, "hidden_size": 2048,
            "full_attn_idxs": [2, 5, 8, 10, 12, 14], "max_position_embeddings": 128000,
            "norm_eps": 1e-5, "num_attention_heads": 32, "num_hidden_layers": 16,
            "num_key_value_heads": 8, "rope_theta": 1000000.0, "vocab_size": 65536,
            "intermediate_size": 12288, "torch_dtype": "bfloat16"
        })
    }

    #[test]
    fn the_mlp_width_is_adjusted_as_the_reference_does() {
        let args = Lfm2Args::parse(&lfm2_1_2b()).unwrap();
        // int(2 · 12288 / 3) = 8192, × 1.0, already a multiple of 256
        assert_eq!(args.ff_dim(), 8192);
        let mut config = lfm2_1_2b();
        config["block_ff_dim"] = json!(100);
        config["block_ffn_dim_multiplier"] = json!(1.5);
        config["block_multiple_of"] = json!(32);
        // int(200 / 3) = 66, int(1.5 · 66) = 99, rounded up to 128
        assert_eq!(Lfm2Args::parse(&config).unwrap().ff_dim(), 128);
        config["block_auto_adjust_ff_dim"] = json!(false);
        assert_eq!(Lfm2Args::parse(&config).unwrap().ff_dim(), 100);
    }

    #[test]
    fn convolution_layers_keep_a_fixed_state() {
        let shapes = Lfm2Args::parse(&lfm2_1_2b()).unwrap().layer_shapes();
        let attention: Vec<usize> =
            (0..16).filter(|&i| shapes[i].cache == LayerCache::Full).collect();
        assert_eq!(attention, [2, 5, 8, 10, 12, 14]);
        assert_eq!((shapes[2].kv_heads, shapes[2].key_dim), (8, 64));
        // the last two inputs of 2048 channels
        assert_eq!(shapes[0], LayerShape::recurrent(2 * 2048, 0));
        // `layer_types` instead of `full_attn_idxs` says the same
        let mut config = lfm2_1_2b();
        let types: Vec<&str> = (0..16)
            .map(|i| if attention.contains(&i) { "full_attention" } else { "conv" })
            .collect();
        config["layer_types"] = json!(types);
        config.as_object_mut().unwrap().remove("full_attn_idxs");
        assert_eq!(Lfm2Args::parse(&config).unwrap().layer_shapes(), shapes);
    }

    #[test]
    fn the_bench_size_is_a_config_it_runs() {
        let args = Lfm2Args::parse(&bench_config(300)).unwrap();
        assert_eq!(args.ff_dim(), 1536);
        let attention = args.layer_shapes().iter().filter(|s| s.cache == LayerCache::Full).count();
        assert_eq!(attention, 2);
    }

    #[test]
    fn configs_it_cannot_run_are_refused() {
        for (key, value) in [
            ("conv_L_cache", json!(1)),
            ("block_dim", json!(1024)),
            ("num_key_value_heads", json!(5)),
            ("full_attn_idxs", json!([16])),
            ("rope_parameters", json!({"rope_type": "yarn", "factor": 4.0})),
        ] {
            let mut config = lfm2_1_2b();
            config[key] = value;
            assert!(
                matches!(Lfm2Args::parse(&config), Err(Error::InvalidConfig(_))),
                "{key} accepted"
            );
        }
        let mut config = lfm2_1_2b();
        config.as_object_mut().unwrap().remove("full_attn_idxs");
        assert!(Lfm2Args::parse(&config).is_err(), "no attention plan");
    }
}
