//! The `qwen3_5` and `qwen3_5_moe` architectures (Qwen3.5 0.8B–27B, the
//! 35B-A3B / 122B-A10B mixtures of experts), text part. A hybrid decoder:
//! three of every four layers (`full_attention_interval`) are Gated DeltaNet
//! linear attention with a fixed-size recurrent state per row
//! ([`crate::model::layers::gated_delta`]); the others are full attention with
//! - a sigmoid output gate (`q_proj` yields each head's queries and gate),
//! - RMSNorm over each head's queries and keys,
//! - RoPE over the first quarter of each head (`partial_rotary_factor`),
//!   interleaved M-RoPE (`mrope_section`) for image positions; text
//!   positions are equal on every axis, where M-RoPE is plain RoPE.
//!
//! The mixture of experts (every layer) adds a shared expert gated by a
//! sigmoid beside Qwen3-MoE's router.
//!
//! Checkpoints come in two layouts: Hugging Face's (the depthwise conv kernel
//! `[C, 1, K]`, decoder norms stored as `w − 1`, experts fused as
//! `experts.gate_up_proj`) and mlx-community's (`[C, K, 1]`, plain norm
//! weights, `switch_mlp`). The kernel's shape tells which, as in mlx-lm.
//! `qwen3_5_text` / `qwen3_5_moe_text` load here text only, with the
//! multi-token-prediction head when the checkpoint has one ([`mtp`]: a
//! draft head for speculative decoding); `qwen3_5` / `qwen3_5_moe`, which
//! see images, are [`crate::model::qwen3_5::vision`]: this language model plus the
//! Qwen3-VL vision tower.
pub mod mtp;
pub mod vision;
use mlx_rs::{ops, Array};
use serde::Deserialize;
use serde_json::Value;

use crate::cache::{BatchCache, CacheLayout, LayerCache};
use crate::distributed::StageLayers;
use crate::error::{Error, Result};
use crate::model::language_model_only::keep_language_model;
use crate::model::layers::gated_delta::{GatedDeltaDims, GatedDeltaNet};
use crate::model::layers::moe::{unstack_gate_up, SparseMoe};
use crate::model::layers::rope::{MRopeLayout, Positions, Rope, Rotation};
use crate::model::layers::{Embedding, LayerLoader, Linear, RmsNorm};
use crate::model::llama::Mlp;
use crate::model::registry::Family;
use crate::model::shape::{self, LayerShape};
use crate::model::{layers::attention, DraftHead, LanguageModel, ModelShape};

pub const FAMILY: Family = Family {
    name: "Qwen3.5 (text)",
    model_types: &["qwen3_5_text", "qwen3_5_moe_text"],
    build: |_, config, loader| {
        keep_language_model(loader, SKIPPED, "Qwen3.5");
        Ok(Box::new(Qwen35::load(config, loader)?))
    },
    layers: |config| Ok(Qwen35Args::parse(config)?.layer_shapes()),
    gguf: None,
    image_processor: None,
    tensor_parallel: false,
};

/// Tensors a text-only load skips: a vision tower (Hugging Face `visual.`,
/// mlx-vlm `vision_tower.`).
pub const SKIPPED: &[&str] = &["visual.", "vision_tower."];

#[derive(Debug, Clone, Deserialize)]
struct RopeParameters {
    #[serde(default, alias = "type")]
    rope_type: Option<String>,
    #[serde(default)]
    rope_theta: Option<f32>,
    #[serde(default)]
    partial_rotary_factor: Option<f32>,
    #[serde(default)]
    mrope_section: Option<[i32; 3]>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Qwen35Args {
    hidden_size: i32,
    num_hidden_layers: i32,
    #[serde(default)]
    intermediate_size: i32,
    num_attention_heads: i32,
    num_key_value_heads: i32,
    #[serde(default)]
    head_dim: Option<i32>,
    #[serde(default = "default_eps")]
    rms_norm_eps: f32,
    vocab_size: i32,
    #[serde(default = "default_context")]
    max_position_embeddings: i32,
    linear_num_value_heads: i32,
    linear_num_key_heads: i32,
    linear_key_head_dim: i32,
    linear_value_head_dim: i32,
    #[serde(default = "default_kernel")]
    linear_conv_kernel_dim: i32,
    #[serde(default)]
    tie_word_embeddings: bool,
    #[serde(default)]
    attention_bias: bool,
    #[serde(default = "default_interval")]
    full_attention_interval: i32,
    #[serde(default)]
    layer_types: Option<Vec<String>>,
    #[serde(default)]
    num_experts: i32,
    #[serde(default)]
    num_experts_per_tok: i32,
    #[serde(default)]
    moe_intermediate_size: i32,
    #[serde(default)]
    shared_expert_intermediate_size: i32,
    #[serde(default = "default_true")]
    norm_topk_prob: bool,
    #[serde(default)]
    rope_parameters: Option<RopeParameters>,
    #[serde(default)]
    rope_theta: Option<f32>,
    #[serde(default)]
    partial_rotary_factor: Option<f32>,
    /// Decoder layers of the multi-token-prediction head (when it has `mtp.*` tensors).
    #[serde(default = "default_mtp_layers")]
    mtp_num_hidden_layers: i32,
}

fn default_mtp_layers() -> i32 {
    1
}

fn default_eps() -> f32 {
    1e-6
}
fn default_context() -> i32 {
    262_144
}
fn default_kernel() -> i32 {
    4
}
fn default_interval() -> i32 {
    4
}
fn default_true() -> bool {
    true
}

impl Qwen35Args {
    pub fn parse(config: &Value) -> Result<Self> {
        let text = config.get("text_config").filter(|t| t.is_object()).unwrap_or(config);
        let args: Self = serde_json::from_value(text.clone())
            .map_err(|e| Error::InvalidConfig(format!("qwen3_5 config.json: {e}")))?;
        let layers = args.num_hidden_layers as usize;
        if let Some(types) = &args.layer_types {
            if types.len() != layers {
                return Err(Error::InvalidConfig(format!(
                    "layer_types lists {} layers but num_hidden_layers is {layers}",
                    types.len()
                )));
            }
            if let Some(bad) =
                types.iter().find(|t| !["linear_attention", "full_attention"].contains(&t.as_str()))
            {
                return Err(Error::InvalidConfig(format!(
                    "unknown layer type {bad:?} in layer_types"
                )));
            }
        } else if args.full_attention_interval < 1 {
            return Err(Error::InvalidConfig("full_attention_interval must be at least 1".into()));
        }
        let kv = args.num_key_value_heads;
        if kv < 1 || args.num_attention_heads % kv != 0 {
            return Err(Error::InvalidConfig(format!(
                "num_attention_heads {} must be a positive multiple of num_key_value_heads {kv}",
                args.num_attention_heads
            )));
        }
        if args.num_experts > 0 {
            if !(1..=args.num_experts).contains(&args.num_experts_per_tok)
                || args.moe_intermediate_size < 1
            {
                return Err(Error::InvalidConfig(
                    "qwen3_5_moe needs num_experts_per_tok (1..=num_experts) and moe_intermediate_size".into(),
                ));
            }
        } else if args.intermediate_size < 1 {
            return Err(Error::InvalidConfig(
                "qwen3_5 config.json has no intermediate_size".into(),
            ));
        }
        if !(0..layers).any(|i| !args.is_linear(i)) {
            return Err(Error::InvalidConfig(
                "Qwen3.5 needs at least one full-attention layer".into(),
            ));
        }
        let rope =
            args.rope_parameters.as_ref().and_then(|p| p.rope_type.as_deref()).unwrap_or("default");
        if rope != "default" {
            return Err(Error::InvalidConfig(format!(
                "Qwen3.5 rope_type {rope:?} is not supported"
            )));
        }
        Ok(args)
    }

    /// Linear-attention layers keep a fixed-size state; every
    /// `full_attention_interval`-th layer attends to the whole context.
    pub fn layer_shapes(&self) -> Vec<LayerShape> {
        (0..self.num_hidden_layers.max(0) as usize)
            .map(|i| {
                if self.is_linear(i) {
                    self.gated_delta_dims().layer_shape()
                } else {
                    LayerShape::attention(
                        LayerCache::Full,
                        self.num_key_value_heads,
                        self.head_dim(),
                    )
                }
            })
            .collect()
    }

    fn is_linear(&self, i: usize) -> bool {
        match &self.layer_types {
            Some(types) => types[i] == "linear_attention",
            None => !(i + 1).is_multiple_of(self.full_attention_interval as usize),
        }
    }

    fn head_dim(&self) -> i32 {
        self.head_dim.unwrap_or(self.hidden_size / self.num_attention_heads)
    }

    /// mlx-lm's defaults where the config says nothing.
    fn rope(&self) -> Result<Rope> {
        let p = self.rope_parameters.as_ref();
        let theta = p.and_then(|p| p.rope_theta).or(self.rope_theta).unwrap_or(100_000.0);
        let partial =
            p.and_then(|p| p.partial_rotary_factor).or(self.partial_rotary_factor).unwrap_or(0.25);
        let dims = (self.head_dim() as f32 * partial) as i32;
        match p.and_then(|p| p.mrope_section) {
            // mlx-vlm's Qwen3.5 always interleaves its sections.
            Some(sections) => Rope::multimodal(dims, theta, sections, MRopeLayout::Interleaved),
            None => Rope::new(dims, theta, false, None),
        }
    }

    fn gated_delta_dims(&self) -> GatedDeltaDims {
        GatedDeltaDims {
            hidden: self.hidden_size,
            key_heads: self.linear_num_key_heads,
            value_heads: self.linear_num_value_heads,
            key_dim: self.linear_key_head_dim,
            value_dim: self.linear_value_head_dim,
            conv_kernel: self.linear_conv_kernel_dim,
            eps: self.rms_norm_eps,
        }
    }
}

/// Full attention with a sigmoid gate on its output.
struct GatedAttention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    q_norm: RmsNorm,
    k_norm: RmsNorm,
    heads: i32,
    kv_heads: i32,
    head_dim: i32,
}

enum Mixer {
    Linear(GatedDeltaNet),
    Attention(GatedAttention),
}

/// Qwen3-MoE's router and experts, plus a shared expert every token goes
/// through, scaled by `sigmoid(shared_expert_gate(x))`.
struct MoeWithShared {
    routed: SparseMoe,
    shared_expert: Mlp,
    shared_expert_gate: Linear,
}

// One per layer: a few hundred bytes more or less per layer matter nothing.
#[allow(clippy::large_enum_variant)]
enum FeedForward {
    Dense(Mlp),
    Experts(MoeWithShared),
}

struct Block {
    input_layernorm: RmsNorm,
    mixer: Mixer,
    post_attention_layernorm: RmsNorm,
    feed_forward: FeedForward,
}

pub struct Qwen35 {
    args: Qwen35Args,
    embed_tokens: Embedding,
    /// The layers this process runs (all, or its pipeline stage), in order.
    layers: Vec<Block>,
    stage: StageLayers,
    norm: RmsNorm,
    lm_head: Option<Linear>,
    rope: Rope,
    /// The checkpoint's own draft head, for a whole model that has one.
    mtp: Option<mtp::MtpHead>,
}

/// Loads norms, adding 1 to the decoder norms of a Hugging Face checkpoint
/// (stored as `w − 1`).
struct Norms {
    plus_one: bool,
    eps: f32,
}

impl Norms {
    fn load(&self, loader: &mut LayerLoader, path: &str, dim: i32) -> Result<RmsNorm> {
        let mut norm = loader.rms_norm(path, dim, self.eps)?;
        if self.plus_one {
            norm.weight = norm.weight.add(Array::from_f32(1.0).as_dtype(norm.weight.dtype())?)?;
        }
        Ok(norm)
    }
}

impl Block {
    /// Decoder layer `p` (`model.layers.{i}`, or `mtp.layers.{j}`): Gated
    /// DeltaNet when `linear`, else gated full attention; dense or experts
    /// as the config says.
    fn load(
        loader: &mut LayerLoader,
        args: &Qwen35Args,
        norms: &Norms,
        p: &str,
        linear: bool,
    ) -> Result<Self> {
        let (d, heads, kv_heads, hd) =
            (args.hidden_size, args.num_attention_heads, args.num_key_value_heads, args.head_dim());
        let mixer = if linear {
            Mixer::Linear(GatedDeltaNet::load(
                loader,
                &format!("{p}.linear_attn"),
                args.gated_delta_dims(),
                norms.plus_one,
            )?)
        } else {
            let a = format!("{p}.self_attn");
            let bias = args.attention_bias;
            Mixer::Attention(GatedAttention {
                q_proj: loader.linear(&format!("{a}.q_proj"), d, 2 * heads * hd, bias)?,
                k_proj: loader.linear(&format!("{a}.k_proj"), d, kv_heads * hd, bias)?,
                v_proj: loader.linear(&format!("{a}.v_proj"), d, kv_heads * hd, bias)?,
                o_proj: loader.linear(&format!("{a}.o_proj"), heads * hd, d, bias)?,
                q_norm: norms.load(loader, &format!("{a}.q_norm"), hd)?,
                k_norm: norms.load(loader, &format!("{a}.k_norm"), hd)?,
                heads,
                kv_heads,
                head_dim: hd,
            })
        };
        let m = format!("{p}.mlp");
        let feed_forward = if args.num_experts > 0 {
            unstack_gate_up(loader, &format!("{m}.experts"), &format!("{m}.switch_mlp"))?;
            FeedForward::Experts(MoeWithShared {
                routed: SparseMoe::load(
                    loader,
                    &m,
                    d,
                    args.moe_intermediate_size,
                    args.num_experts,
                    args.num_experts_per_tok,
                    args.norm_topk_prob,
                )?,
                shared_expert: Mlp::load(
                    loader,
                    &format!("{m}.shared_expert"),
                    d,
                    args.shared_expert_intermediate_size,
                    false,
                )?,
                shared_expert_gate: loader.linear(
                    &format!("{m}.shared_expert_gate"),
                    d,
                    1,
                    false,
                )?,
            })
        } else {
            FeedForward::Dense(Mlp::load(loader, &m, d, args.intermediate_size, false)?)
        };
        Ok(Block {
            input_layernorm: norms.load(loader, &format!("{p}.input_layernorm"), d)?,
            mixer,
            post_attention_layernorm: norms.load(
                loader,
                &format!("{p}.post_attention_layernorm"),
                d,
            )?,
            feed_forward,
        })
    }

    /// `h` through this layer (layer `i` of `cache`).
    fn forward(
        &self,
        h: Array,
        i: usize,
        rope: (&Rope, &Rotation),
        cache: &mut BatchCache,
    ) -> Result<Array> {
        let x = self.input_layernorm.forward(&h)?;
        let r = match &self.mixer {
            Mixer::Linear(net) => net.forward(&x, i, cache)?,
            Mixer::Attention(attn) => attn.forward(&x, i, rope, cache)?,
        };
        let h = h.add(r)?;
        Ok(h.add(self.feed_forward.forward(&self.post_attention_layernorm.forward(&h)?)?)?)
    }
}

impl Qwen35 {
    pub fn load(config: &Value, loader: &mut LayerLoader) -> Result<Self> {
        let args = Qwen35Args::parse(config)?;
        let n = args.num_hidden_layers as usize;
        let d = args.hidden_size;
        // Hugging Face's layout stores the conv kernel `[C, 1, K]`: K ≠ 1.
        let hf_layout = (0..n)
            .filter(|&i| args.is_linear(i))
            .find_map(|i| {
                loader.weights.shape_of(&format!("model.layers.{i}.linear_attn.conv1d.weight"))
            })
            .is_some_and(|shape| shape.last() != Some(&1));
        let norms = Norms { plus_one: hf_layout, eps: args.rms_norm_eps };
        // After the layout is read: it may come from another stage's layers.
        let stage = loader.layer_stage(n, None)?;
        let mut layers = Vec::with_capacity(stage.layers().len());
        for i in stage.layers() {
            layers.push(Block::load(
                loader,
                &args,
                &norms,
                &format!("model.layers.{i}"),
                args.is_linear(i),
            )?);
        }
        let embed_tokens = loader.embedding("model.embed_tokens", args.vocab_size, d)?;
        let norm = norms.load(loader, "model.norm", d)?;
        if args.tie_word_embeddings {
            loader.weights.remove("lm_head.weight");
        }
        let lm_head = if args.tie_word_embeddings {
            None
        } else {
            Some(loader.linear("lm_head", d, args.vocab_size, false)?)
        };
        let rope = args.rope()?;
        let mtp = if stage.layers().len() == stage.total() && loader.draft_head {
            mtp::MtpHead::load(loader, &args, &norms, "mtp.")?
        } else {
            // Not asked for, or a split model (which does not speculate): left unread.
            let names: Vec<String> = loader
                .weights
                .names()
                .filter(|n| n.starts_with("mtp."))
                .map(str::to_owned)
                .collect();
            for name in names {
                loader.weights.remove(&name);
            }
            None
        };
        Ok(Self { args, embed_tokens, layers, stage, norm, lm_head, rope, mtp })
    }
}

impl Qwen35 {
    /// The width of the hidden states (what image features must match).
    pub fn shape_hidden(&self) -> i32 {
        self.args.hidden_size
    }
}

impl GatedAttention {
    fn forward(
        &self,
        x: &Array,
        layer: usize,
        rope: (&Rope, &Rotation),
        cache: &mut BatchCache,
    ) -> Result<Array> {
        let (b, l) = (x.dim(0), x.dim(1));
        let hd = self.head_dim;
        // Per head: its queries, then its gate.
        let q_and_gate = self.q_proj.forward(x)?.reshape(&[b, l, self.heads, 2 * hd])?;
        let halves = ops::split_equal(&q_and_gate, 2, -1)?;
        let gate = halves[1].reshape(&[b, l, self.heads * hd])?;
        let heads_first = |t: Array| -> Result<Array> { Ok(t.transpose_axes(&[0, 2, 1, 3])?) };
        let q = heads_first(self.q_norm.forward(&halves[0])?)?;
        let k = heads_first(self.k_norm.forward(&self.k_proj.forward(x)?.reshape(&[
            b,
            l,
            self.kv_heads,
            hd,
        ])?)?)?;
        let v = heads_first(self.v_proj.forward(x)?.reshape(&[b, l, self.kv_heads, hd])?)?;
        let (rope, rotation) = rope;
        let (q, k) = (rope.rotate(&q, rotation)?, rope.rotate(&k, rotation)?);
        let (kv, mask) = cache.update(layer, &k, &v)?;
        let o = attention::attend(&q, kv, (hd as f32).powf(-0.5), &mask)?;
        let o = o.transpose_axes(&[0, 2, 1, 3])?.reshape(&[b, l, self.heads * hd])?;
        self.o_proj.forward(&o.multiply(ops::sigmoid(&gate)?)?)
    }
}

impl FeedForward {
    fn forward(&self, x: &Array) -> Result<Array> {
        match self {
            FeedForward::Dense(mlp) => mlp.forward(x),
            FeedForward::Experts(moe) => {
                let shared = moe
                    .shared_expert
                    .forward(x)?
                    .multiply(ops::sigmoid(moe.shared_expert_gate.forward(x)?)?)?;
                Ok(moe.routed.forward(x)?.add(shared)?)
            }
        }
    }
}

impl LanguageModel for Qwen35 {
    fn shape(&self) -> ModelShape {
        // KV quantization applies to the full-attention layers (the others keep states).
        ModelShape {
            num_layers: self.stage.total(),
            kv_heads: self.args.num_key_value_heads,
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
        h = self.stage.enter(h, tokens)?;
        for (i, block) in self.stage.layers().zip(&self.layers) {
            h = block.forward(h, i, (&self.rope, &rotation), cache)?;
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

    fn draft_head(&self) -> Option<&dyn DraftHead> {
        self.mtp.as_ref().map(|h| h as &dyn DraftHead)
    }
}
