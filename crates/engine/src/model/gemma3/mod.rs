//! The `gemma3_text` architecture (Gemma 3 270M / 1B, and the language model
//! of the larger, multimodal Gemma 3): sliding-window layers (window
//! `sliding_window`, RoPE base `rope_local_base_freq`) interleaved with global
//! layers (RoPE base `rope_theta`, with `rope_scaling` in the larger
//! checkpoints), one global layer per `sliding_window_pattern` (or as
//! `layer_types` lists them). Against llama it adds per-head query/key norms,
//! the `(1 + w)` RMSNorm, four norms per block (before and after attention and
//! MLP), a GELU-tanh MLP, embeddings scaled by √hidden (rounded to bfloat16,
//! as the reference does), and `query_pre_attn_scalar` for the attention scale.
pub mod image_processor;
pub mod vision;
use mlx_rs::{ops, Array, Dtype};
use serde::Deserialize;
use serde_json::Value;

use crate::cache::{BatchCache, CacheLayout, LayerCache};
use crate::distributed::StageLayers;
use crate::error::{Error, Result};
use crate::model::layers::attention;
use crate::model::layers::rope::{Positions, Rope, RopeScaling, Rotation};
use crate::model::layers::{geglu, Embedding, LayerLoader, Linear, RmsNorm};
use crate::model::registry::Family;
use crate::model::shape::{self, LayerShape};
use crate::model::{LanguageModel, ModelShape};
use crate::weights::gguf::GgufImport;

pub const FAMILY: Family = Family {
    name: "Gemma 3",
    model_types: &["gemma3_text"],
    build: |_, config, loader| Ok(Box::new(Gemma3::load(config, loader)?)),
    layers: |config| Ok(Gemma3Args::parse(config)?.layer_shapes()),
    gguf: Some(GgufImport {
        architecture: "gemma3",
        class_name: "Gemma3ForCausalLM",
        block_names: &[
            ("attn_q_norm", "self_attn.q_norm"),
            ("attn_k_norm", "self_attn.k_norm"),
            ("post_attention_norm", "post_attention_layernorm"),
            ("ffn_norm", "pre_feedforward_layernorm"),
            ("post_ffw_norm", "post_feedforward_layernorm"),
        ],
        config_keys: &[("sliding_window", "attention.sliding_window")],
        permuted_qk: false,
        norm_plus_one: true,
        complete_config: Some(complete_gguf_config),
    }),
    image_processor: None,
    tensor_parallel: false,
};

/// What llama.cpp assumes for Gemma 3 instead of storing it: a global layer
/// every 6, local RoPE base 10000, attention scaled by the head size.
fn complete_gguf_config(config: &mut serde_json::Map<String, Value>) {
    config.entry("sliding_window_pattern").or_insert(6.into());
    config.entry("rope_local_base_freq").or_insert(10_000.0.into());
    if let Some(head_dim) = config.get("head_dim").cloned() {
        config.entry("query_pre_attn_scalar").or_insert(head_dim);
    }
}

/// The config.json fields this family reads.
#[derive(Debug, Clone, Deserialize)]
pub struct Gemma3Args {
    pub hidden_size: i32,
    pub num_hidden_layers: i32,
    pub intermediate_size: i32,
    pub num_attention_heads: i32,
    pub num_key_value_heads: i32,
    pub head_dim: i32,
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    #[serde(default = "default_theta")]
    pub rope_theta: f32,
    #[serde(default = "default_local_theta")]
    pub rope_local_base_freq: f32,
    /// Defaults to `head_dim` (what llama.cpp assumes for GGUF files, which
    /// do not carry it).
    pub query_pre_attn_scalar: Option<f32>,
    /// Required: a guessed window would silently change every answer.
    pub sliding_window: Option<i32>,
    #[serde(default = "default_pattern", alias = "_sliding_window_pattern")]
    pub sliding_window_pattern: i32,
    /// `"sliding_attention"` / `"full_attention"` per layer (newer configs).
    #[serde(default)]
    pub layer_types: Option<Vec<String>>,
    #[serde(default)]
    pub rope_scaling: Option<RopeScaling>,
    #[serde(default = "default_context")]
    pub max_position_embeddings: i32,
}

fn default_eps() -> f32 {
    1e-6
}
fn default_theta() -> f32 {
    1_000_000.0
}
fn default_local_theta() -> f32 {
    10_000.0
}
fn default_pattern() -> i32 {
    6
}
fn default_context() -> i32 {
    32768
}

impl Gemma3Args {
    pub fn parse(config: &Value) -> Result<Self> {
        // The multimodal Gemma 3 nests its language model under `text_config`.
        let text = config.get("text_config").filter(|t| t.is_object()).unwrap_or(config);
        let args: Self = serde_json::from_value(text.clone())
            .map_err(|e| Error::InvalidConfig(format!("gemma3_text config.json: {e}")))?;
        if args.sliding_window.is_none() {
            return Err(Error::InvalidConfig(
                "gemma3_text config.json has no sliding_window".into(),
            ));
        }
        if args.num_attention_heads <= 0
            || args.num_key_value_heads <= 0
            || args.num_attention_heads % args.num_key_value_heads != 0
        {
            return Err(Error::InvalidConfig(format!(
                "num_attention_heads {} must be a positive multiple of num_key_value_heads {}",
                args.num_attention_heads, args.num_key_value_heads
            )));
        }
        if args.sliding_window_pattern < 1 {
            return Err(Error::InvalidConfig("sliding_window_pattern must be at least 1".into()));
        }
        if let Some(types) = &args.layer_types {
            if types.len() != args.num_hidden_layers as usize {
                return Err(Error::InvalidConfig(format!(
                    "layer_types lists {} layers but num_hidden_layers is {}",
                    types.len(),
                    args.num_hidden_layers
                )));
            }
            if let Some(bad) = types
                .iter()
                .find(|t| !["sliding_attention", "full_attention"].contains(&t.as_str()))
            {
                return Err(Error::InvalidConfig(format!(
                    "unknown layer type {bad:?} in layer_types"
                )));
            }
        }
        Ok(args)
    }

    /// Global layers attend to the whole context, the others to the last
    /// `sliding_window` tokens.
    pub fn layer_shapes(&self) -> Vec<LayerShape> {
        let window = self.sliding_window.expect("checked at parse") as usize;
        (0..self.num_hidden_layers.max(0) as usize)
            .map(|i| {
                let cache = if self.is_global(i) {
                    LayerCache::Full
                } else {
                    LayerCache::Sliding { window }
                };
                LayerShape::attention(cache, self.num_key_value_heads, self.head_dim)
            })
            .collect()
    }

    /// Whether layer `i` attends globally.
    pub fn is_global(&self, i: usize) -> bool {
        match &self.layer_types {
            Some(types) => types[i] == "full_attention",
            None => {
                let p = self.sliding_window_pattern as usize;
                i % p == p - 1
            }
        }
    }
}

/// Gemma's RMSNorm scales by `1 + w` (the weight is stored centred on 0).
pub(crate) fn gemma_norm(
    loader: &mut LayerLoader,
    path: &str,
    dim: i32,
    eps: f32,
) -> Result<RmsNorm> {
    let mut norm = loader.rms_norm(path, dim, eps)?;
    norm.weight = norm.weight.add(Array::from_f32(1.0).as_dtype(norm.weight.dtype())?)?;
    Ok(norm)
}

struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    q_norm: RmsNorm,
    k_norm: RmsNorm,
    heads: i32,
    kv_heads: i32,
    head_dim: i32,
    scale: f32,
    global: bool,
}

struct Mlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
}

struct Block {
    input_layernorm: RmsNorm,
    self_attn: Attention,
    post_attention_layernorm: RmsNorm,
    pre_feedforward_layernorm: RmsNorm,
    mlp: Mlp,
    post_feedforward_layernorm: RmsNorm,
}

pub struct Gemma3 {
    args: Gemma3Args,
    embed_tokens: Embedding,
    /// √hidden, as a bfloat16 value (what the reference multiplies by).
    embed_scale: f32,
    /// The layers this process runs (all, or its pipeline stage), in order.
    layers: Vec<Block>,
    stage: StageLayers,
    norm: RmsNorm,
    lm_head: Option<Linear>,
    local_rope: Rope,
    global_rope: Rope,
}

impl Gemma3 {
    pub fn load(config: &Value, loader: &mut LayerLoader) -> Result<Self> {
        let args = Gemma3Args::parse(config)?;
        let (d, hd, eps) = (args.hidden_size, args.head_dim, args.rms_norm_eps);
        let (heads, kv_heads) = (args.num_attention_heads, args.num_key_value_heads);
        let scale = args.query_pre_attn_scalar.unwrap_or(hd as f32).powf(-0.5);
        let embed_tokens = loader.embedding("model.embed_tokens", args.vocab_size, d)?;
        let stage = loader.layer_stage(args.num_hidden_layers as usize, None)?;
        let mut layers = Vec::with_capacity(stage.layers().len());
        for i in stage.layers() {
            let p = format!("model.layers.{i}");
            let a = format!("{p}.self_attn");
            let m = format!("{p}.mlp");
            let ff = args.intermediate_size;
            layers.push(Block {
                input_layernorm: gemma_norm(loader, &format!("{p}.input_layernorm"), d, eps)?,
                self_attn: Attention {
                    q_proj: loader.linear(&format!("{a}.q_proj"), d, heads * hd, false)?,
                    k_proj: loader.linear(&format!("{a}.k_proj"), d, kv_heads * hd, false)?,
                    v_proj: loader.linear(&format!("{a}.v_proj"), d, kv_heads * hd, false)?,
                    o_proj: loader.linear(&format!("{a}.o_proj"), heads * hd, d, false)?,
                    q_norm: gemma_norm(loader, &format!("{a}.q_norm"), hd, eps)?,
                    k_norm: gemma_norm(loader, &format!("{a}.k_norm"), hd, eps)?,
                    heads,
                    kv_heads,
                    head_dim: hd,
                    scale,
                    global: args.is_global(i),
                },
                post_attention_layernorm: gemma_norm(
                    loader,
                    &format!("{p}.post_attention_layernorm"),
                    d,
                    eps,
                )?,
                pre_feedforward_layernorm: gemma_norm(
                    loader,
                    &format!("{p}.pre_feedforward_layernorm"),
                    d,
                    eps,
                )?,
                mlp: Mlp {
                    gate_proj: loader.linear(&format!("{m}.gate_proj"), d, ff, false)?,
                    up_proj: loader.linear(&format!("{m}.up_proj"), d, ff, false)?,
                    down_proj: loader.linear(&format!("{m}.down_proj"), ff, d, false)?,
                },
                post_feedforward_layernorm: gemma_norm(
                    loader,
                    &format!("{p}.post_feedforward_layernorm"),
                    d,
                    eps,
                )?,
            });
        }
        let norm = gemma_norm(loader, "model.norm", d, eps)?;
        let lm_head = if loader.weights.contains("lm_head.weight") {
            Some(loader.linear("lm_head", d, args.vocab_size, false)?)
        } else {
            None
        };
        let local_rope = Rope::new(hd, args.rope_local_base_freq, false, None)?;
        let global_rope = Rope::new(hd, args.rope_theta, false, args.rope_scaling.as_ref())?;
        let embed_scale = half::bf16::from_f32((d as f32).sqrt()).to_f32();
        Ok(Self {
            args,
            embed_tokens,
            embed_scale,
            layers,
            stage,
            norm,
            lm_head,
            local_rope,
            global_rope,
        })
    }
}

impl Gemma3 {
    /// The width of the hidden states (what image features must match).
    pub fn shape_hidden(&self) -> i32 {
        self.args.hidden_size
    }
}

impl Attention {
    fn forward(
        &self,
        x: &Array,
        layer: usize,
        rope: (&Rope, &Rotation),
        cache: &mut BatchCache,
    ) -> Result<Array> {
        let (b, l) = (x.dim(0), x.dim(1));
        let split_heads = |t: Array, heads: i32| -> Result<Array> {
            Ok(t.reshape(&[b, l, heads, self.head_dim])?.transpose_axes(&[0, 2, 1, 3])?)
        };
        let q = self.q_norm.forward(&split_heads(self.q_proj.forward(x)?, self.heads)?)?;
        let k = self.k_norm.forward(&split_heads(self.k_proj.forward(x)?, self.kv_heads)?)?;
        let v = split_heads(self.v_proj.forward(x)?, self.kv_heads)?;
        let (rope, rotation) = rope;
        let q = rope.rotate(&q, rotation)?;
        let k = rope.rotate(&k, rotation)?;
        let (kv, mask) = cache.update(layer, &k, &v)?;
        let o = attention::attend(&q, kv, self.scale, &mask)?;
        let o = o.transpose_axes(&[0, 2, 1, 3])?.reshape(&[b, l, self.heads * self.head_dim])?;
        self.o_proj.forward(&o)
    }
}

impl Mlp {
    fn forward(&self, x: &Array) -> Result<Array> {
        self.down_proj.forward(&geglu(&self.gate_proj.forward(x)?, &self.up_proj.forward(x)?)?)
    }
}

/// `x + y`; in float16, summed in float32 and clipped to float16's range
/// (Gemma's activations overflow float16 otherwise).
fn residual(x: &Array, y: &Array) -> Result<Array> {
    if x.dtype() != Dtype::Float16 {
        return Ok(x.add(y)?);
    }
    let bound = 65504.0f32;
    let sum = x.as_dtype(Dtype::Float32)?.add(y.as_dtype(Dtype::Float32)?)?;
    Ok(ops::clip(&sum, (-bound, bound))?.as_dtype(Dtype::Float16)?)
}

impl LanguageModel for Gemma3 {
    fn shape(&self) -> ModelShape {
        ModelShape {
            num_layers: self.stage.total(),
            kv_heads: self.args.num_key_value_heads,
            head_dim: self.args.head_dim,
            vocab_size: self.args.vocab_size,
            max_context: self.args.max_position_embeddings as usize,
        }
    }

    fn cache_layout(&self) -> CacheLayout {
        shape::cache_layout(&self.args.layer_shapes()).expect("no shared layers")
    }

    fn embed(&self, tokens: &Array) -> Result<Array> {
        let h = self.embed_tokens.forward(tokens)?;
        Ok(h.multiply(Array::from_f32(self.embed_scale).as_dtype(h.dtype())?)?)
    }

    fn forward_embeddings(
        &self,
        mut h: Array,
        tokens: &Array,
        positions: &Positions,
        cache: &mut BatchCache,
    ) -> Result<Array> {
        cache.begin_step(h.dim(1))?;
        let local = self.local_rope.prepare(positions)?;
        let global = self.global_rope.prepare(positions)?;
        h = self.stage.enter(h, tokens)?;
        for (i, block) in self.stage.layers().zip(&self.layers) {
            let rope = if block.self_attn.global {
                (&self.global_rope, &global)
            } else {
                (&self.local_rope, &local)
            };
            let a = block.self_attn.forward(&block.input_layernorm.forward(&h)?, i, rope, cache)?;
            h = residual(&h, &block.post_attention_layernorm.forward(&a)?)?;
            let m = block.mlp.forward(&block.pre_feedforward_layernorm.forward(&h)?)?;
            h = residual(&h, &block.post_feedforward_layernorm.forward(&m)?)?;
        }
        cache.finish_step()?;
        self.stage.leave(h, |h| self.norm.forward(h))
    }

    fn logits(&self, hidden: &Array) -> Result<Array> {
        match &self.lm_head {
            Some(head) => head.forward(hidden),
            None => self.embed_tokens.as_linear(hidden),
        }
    }
}
