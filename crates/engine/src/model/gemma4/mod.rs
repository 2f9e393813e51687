//! The `gemma4_text` architecture (the language model of Gemma 4 E2B / E4B
//! and the larger dense checkpoints). Against Gemma 3 it has:
//! - sliding and global layers with different head sizes (`head_dim`,
//!   `global_head_dim`), the global ones with "proportional" partial RoPE;
//! - **KV-shared layers**: the last `num_kv_shared_layers` layers compute no
//!   keys or values; each attends to those of the last earlier layer of its
//!   kind (no cache of their own: [`LayerCache::Shared`]); their MLP may be
//!   twice as wide (`use_double_wide_mlp`);
//! - **per-layer input embeddings**: a second table gives every token a small
//!   vector per layer, mixed with a projection of the input embeddings and
//!   gated into each layer's output (why the decoder needs the token ids);
//! - plain RMSNorm weights (not Gemma 3's `1 + w`), a scale-free norm on the
//!   values, attention scale 1 (the query/key norms set the scale), a learned
//!   scalar per layer, and tanh soft-capping of the logits;
//! - `attention_k_eq_v` (the global layers' values are their un-normed keys).
//!
//! - the 26B-A4B's mixture of experts (`enable_moe_block`): beside each
//!   layer's dense MLP, a router (RMS-normed input, top-k, softmax over the
//!   chosen, a learned scale per expert) over GELU-gated experts.
//!
//! A multimodal `gemma4` checkpoint is [`crate::model::gemma4::vision`]: this language
//! model and the vision encoder.
pub mod assistant;
pub mod image_processor;
pub mod tower;
pub mod vision;
use mlx_rs::{fast, ops, ops::indexing::IndexOp, Array};
use serde::Deserialize;
use serde_json::Value;
use std::ops::Range;

use crate::cache::{BatchCache, CacheLayout, LayerCache};
use crate::distributed::StageLayers;
use crate::error::{Error, Result};
use crate::model::layers::attention::{self, ReadPositions, ReadQueries};
use crate::model::layers::moe::{unstack_gate_up, Experts, GateActivation};
use crate::model::layers::rope::{Positions, Rope, Rotation};
use crate::model::layers::{
    geglu, logit_softcap, rows_at, Embedding, LayerLoader, Linear, RmsNorm,
};
use crate::model::registry::Family;
use crate::model::shape::{self, LayerShape};
use crate::model::{LanguageModel, ModelShape};

pub const FAMILY: Family = Family {
    name: "Gemma 4 (text)",
    model_types: &["gemma4_text"],
    build: |_, config, loader| Ok(Box::new(Gemma4::load(config, loader)?)),
    layers: |config| Gemma4Args::parse(config)?.layer_shapes(),
    gguf: None,
    image_processor: None,
    tensor_parallel: false,
};

/// Tensors of the towers a text-only load skips.
pub const TOWERS: &[&str] =
    &["vision_tower.", "multi_modal_projector.", "audio_tower.", "embed_audio.", "embed_vision."];

/// One kind of layer's RoPE (`rope_parameters.full_attention` /
/// `.sliding_attention`).
#[derive(Debug, Clone, Deserialize)]
pub struct RopeParameters {
    #[serde(default = "default_sliding_theta")]
    pub rope_theta: f32,
    #[serde(default)]
    pub rope_type: Option<String>,
    #[serde(default)]
    pub partial_rotary_factor: Option<f32>,
    #[serde(default)]
    pub factor: Option<f32>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Gemma4Args {
    pub hidden_size: i32,
    pub num_hidden_layers: i32,
    pub intermediate_size: i32,
    pub num_attention_heads: i32,
    pub num_key_value_heads: i32,
    pub head_dim: i32,
    #[serde(default)]
    pub global_head_dim: Option<i32>,
    #[serde(default)]
    pub num_global_key_value_heads: Option<i32>,
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    #[serde(default)]
    pub vocab_size_per_layer_input: Option<i32>,
    #[serde(default)]
    pub num_kv_shared_layers: i32,
    #[serde(default)]
    pub hidden_size_per_layer_input: i32,
    #[serde(default)]
    pub rope_traditional: bool,
    #[serde(default)]
    pub rope_parameters: Option<std::collections::HashMap<String, RopeParameters>>,
    /// Required: a guessed window would silently change every answer.
    pub sliding_window: Option<i32>,
    #[serde(default = "default_pattern")]
    pub sliding_window_pattern: i32,
    #[serde(default)]
    pub layer_types: Option<Vec<String>>,
    #[serde(default = "default_context")]
    pub max_position_embeddings: i32,
    #[serde(default)]
    pub attention_k_eq_v: bool,
    #[serde(default)]
    pub final_logit_softcapping: Option<f32>,
    #[serde(default = "default_true")]
    pub use_double_wide_mlp: bool,
    #[serde(default)]
    pub enable_moe_block: bool,
    #[serde(default)]
    pub num_experts: Option<i32>,
    #[serde(default)]
    pub top_k_experts: Option<i32>,
    #[serde(default)]
    pub moe_intermediate_size: Option<i32>,
    #[serde(default = "default_true")]
    pub tie_word_embeddings: bool,
}

fn default_eps() -> f32 {
    1e-6
}
fn default_sliding_theta() -> f32 {
    10_000.0
}
fn default_pattern() -> i32 {
    5
}
fn default_context() -> i32 {
    131_072
}
fn default_true() -> bool {
    true
}

impl Gemma4Args {
    pub fn parse(config: &Value) -> Result<Self> {
        let text = config.get("text_config").filter(|t| t.is_object()).unwrap_or(config);
        let args: Self = serde_json::from_value(text.clone())
            .map_err(|e| Error::InvalidConfig(format!("gemma4_text config.json: {e}")))?;
        if args.sliding_window.is_none() {
            return Err(Error::InvalidConfig(
                "gemma4_text config.json has no sliding_window".into(),
            ));
        }
        if args.enable_moe_block {
            match (args.num_experts, args.top_k_experts, args.moe_intermediate_size) {
                (Some(e), Some(k), Some(i)) if e > 0 && (1..=e).contains(&k) && i > 0 => {}
                _ => {
                    return Err(Error::InvalidConfig(
                        "Gemma 4 with enable_moe_block needs num_experts, top_k_experts (1..=num_experts) and \
                         moe_intermediate_size"
                            .into(),
                    ))
                }
            }
        }
        let heads_ok =
            |kv: i32| kv > 0 && args.num_attention_heads > 0 && args.num_attention_heads % kv == 0;
        if !heads_ok(args.num_key_value_heads)
            || !args.num_global_key_value_heads.is_none_or(heads_ok)
        {
            return Err(Error::InvalidConfig(format!(
                "num_attention_heads {} must be a positive multiple of the key/value heads",
                args.num_attention_heads
            )));
        }
        let layers = args.num_hidden_layers;
        if !(0..layers).contains(&args.num_kv_shared_layers) {
            return Err(Error::InvalidConfig(format!(
                "num_kv_shared_layers {} must be below num_hidden_layers {layers}",
                args.num_kv_shared_layers
            )));
        }
        if let Some(types) = &args.layer_types {
            if types.len() != layers as usize {
                return Err(Error::InvalidConfig(format!(
                    "layer_types lists {} layers but num_hidden_layers is {layers}",
                    types.len()
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
        if args.sliding_window_pattern < 1 {
            return Err(Error::InvalidConfig("sliding_window_pattern must be at least 1".into()));
        }
        Ok(args)
    }

    pub fn is_global(&self, i: usize) -> bool {
        match &self.layer_types {
            Some(types) => types[i] == "full_attention",
            None => {
                let p = self.sliding_window_pattern as usize;
                i % p == p - 1
            }
        }
    }

    /// Global layers attend to the whole context with their own head size
    /// and heads, sliding ones to the last `sliding_window` tokens, and the
    /// last `num_kv_shared_layers` keep nothing: they read the keys and values
    /// of the last earlier layer of their kind.
    pub fn layer_shapes(&self) -> Result<Vec<LayerShape>> {
        let window = self.sliding_window.expect("checked at parse") as usize;
        (0..self.num_hidden_layers.max(0) as usize)
            .map(|i| {
                let global = self.is_global(i);
                let cache = match self.kv_source(i)? {
                    Some(source) => LayerCache::Shared { source },
                    None if global => LayerCache::Full,
                    None => LayerCache::Sliding { window },
                };
                Ok(LayerShape::attention(cache, self.kv_heads_of(global), self.head_dim_of(global)))
            })
            .collect()
    }

    /// The first layer that reads another layer's keys and values.
    fn first_shared(&self) -> usize {
        (self.num_hidden_layers - self.num_kv_shared_layers) as usize
    }

    /// For a KV-shared layer, the last non-shared layer of its kind.
    fn kv_source(&self, i: usize) -> Result<Option<usize>> {
        let first = self.first_shared();
        if i < first {
            return Ok(None);
        }
        (0..first).rev().find(|&j| self.is_global(j) == self.is_global(i)).map(Some).ok_or_else(
            || {
                Error::InvalidConfig(format!(
                    "KV-shared layer {i} has no earlier layer of its kind to read"
                ))
            },
        )
    }

    fn head_dim_of(&self, global: bool) -> i32 {
        if global {
            self.global_head_dim.filter(|&d| d > 0).unwrap_or(self.head_dim)
        } else {
            self.head_dim
        }
    }

    fn kv_heads_of(&self, global: bool) -> i32 {
        match (global && self.attention_k_eq_v, self.num_global_key_value_heads) {
            (true, Some(heads)) => heads,
            _ => self.num_key_value_heads,
        }
    }

    fn rope(&self, global: bool) -> Result<Rope> {
        let key = if global { "full_attention" } else { "sliding_attention" };
        let params = self.rope_parameters.as_ref().and_then(|p| p.get(key));
        // mlx-lm's defaults when the config has no rope_parameters.
        let (theta, kind, partial, factor) = match params {
            Some(p) => (
                p.rope_theta,
                p.rope_type.as_deref().unwrap_or("default"),
                p.partial_rotary_factor.unwrap_or(1.0),
                p.factor.unwrap_or(1.0),
            ),
            None if global => (1_000_000.0, "proportional", 0.25, 1.0),
            None => (10_000.0, "default", 1.0, 1.0),
        };
        let dims = self.head_dim_of(global);
        match kind {
            "default" => Rope::new(dims, theta, self.rope_traditional, None),
            "proportional" if !self.rope_traditional => {
                Rope::proportional(dims, (dims as f32 * partial) as i32, theta, factor)
            }
            other => Err(Error::InvalidConfig(format!(
                "Gemma 4 {key} rope_type {other:?} is not supported"
            ))),
        }
    }
}

struct Attention {
    q_proj: Linear,
    /// `None` in KV-shared layers.
    kv: Option<KeyValue>,
    o_proj: Linear,
    q_norm: RmsNorm,
    heads: i32,
    kv_heads: i32,
    head_dim: i32,
    global: bool,
}

struct KeyValue {
    k_proj: Linear,
    /// `None` when the values are the keys (`attention_k_eq_v`).
    v_proj: Option<Linear>,
    k_norm: RmsNorm,
    eps: f32,
}

struct Mlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
}

/// Gates the layer's per-layer input into its output.
struct PerLayerGate {
    input_gate: Linear,
    projection: Linear,
    norm: RmsNorm,
}

/// The four norms around a Gemma layer's attention and MLP (the model's
/// blocks and the assistant's layers alike).
struct Norms {
    input: RmsNorm,
    post_attention: RmsNorm,
    pre_feedforward: RmsNorm,
    post_feedforward: RmsNorm,
}

impl Norms {
    /// `{prefix}.{input,post_attention,pre_feedforward,post_feedforward}_layernorm`.
    fn load(loader: &mut LayerLoader, prefix: &str, hidden: i32, eps: f32) -> Result<Self> {
        let mut norm =
            |name: &str| loader.rms_norm(&format!("{prefix}.{name}_layernorm"), hidden, eps);
        Ok(Self {
            input: norm("input")?,
            post_attention: norm("post_attention")?,
            pre_feedforward: norm("pre_feedforward")?,
            post_feedforward: norm("post_feedforward")?,
        })
    }
}

struct Block {
    norms: Norms,
    self_attn: Attention,
    mlp: Mlp,
    per_layer: Option<PerLayerGate>,
    layer_scalar: Option<Array>,
    moe: Option<MoeBranch>,
}

/// The experts beside a layer's dense MLP, each branch with its own norms.
struct MoeBranch {
    router: Router,
    experts: Experts,
    pre_norm: RmsNorm,
    post_norm_dense: RmsNorm,
    post_norm_experts: RmsNorm,
}

struct Router {
    proj: Linear,
    /// Folds `hidden^-1/2` into the input norm's weight, as the reference does.
    norm_weight: Array,
    per_expert_scale: Array,
    top_k: i32,
    eps: f32,
}

impl Router {
    /// `[B, L, D]` → the chosen experts `[B, L, k]` and their weights.
    fn route(&self, x: &Array) -> Result<(Array, Array)> {
        let scores = self.proj.forward(&fast::rms_norm(x, Some(&self.norm_weight), self.eps)?)?;
        let (experts, k) = (scores.dim(-1), self.top_k);
        let chosen =
            ops::argpartition_axis(&scores, experts - k, -1)?.index((.., .., (experts - k)..));
        let weights = ops::softmax_axis(&scores.take_along_axis(&chosen, -1)?, -1, true)?;
        let weights = weights.multiply(
            self.per_expert_scale
                .take_axis(&chosen.flatten(None, None)?, 0)?
                .reshape(chosen.shape())?,
        )?;
        Ok((chosen, weights))
    }
}

impl MoeBranch {
    fn load(loader: &mut LayerLoader, p: &str, args: &Gemma4Args) -> Result<Self> {
        let (d, eps) = (args.hidden_size, args.rms_norm_eps);
        let experts = args.num_experts.expect("checked at parse");
        let scale = loader.float(&format!("{p}.router.scale"), &[d])?;
        let norm_weight =
            scale.multiply(Array::from_f32((d as f32).powf(-0.5)).as_dtype(scale.dtype())?)?;
        Ok(MoeBranch {
            router: Router {
                proj: loader.linear(&format!("{p}.router.proj"), d, experts, false)?,
                norm_weight,
                per_expert_scale: loader
                    .float(&format!("{p}.router.per_expert_scale"), &[experts])?,
                top_k: args.top_k_experts.expect("checked at parse"),
                eps,
            },
            experts: Experts::load(
                loader,
                &format!("{p}.experts.switch_glu"),
                d,
                args.moe_intermediate_size.expect("checked at parse"),
                experts,
                GateActivation::GeluApprox,
            )?,
            pre_norm: loader.rms_norm(&format!("{p}.pre_feedforward_layernorm_2"), d, eps)?,
            post_norm_dense: loader.rms_norm(
                &format!("{p}.post_feedforward_layernorm_1"),
                d,
                eps,
            )?,
            post_norm_experts: loader.rms_norm(
                &format!("{p}.post_feedforward_layernorm_2"),
                d,
                eps,
            )?,
        })
    }
}

/// The per-layer token embeddings and how they are mixed with the input:
/// the columns of this process's layers only (its pipeline stage's).
struct PerLayerInputs {
    table: Embedding,
    /// The columns still to take from the table's rows (a quantized table
    /// whose groups straddle the stage's columns is held whole).
    table_columns: Option<Range<i32>>,
    model_projection: Linear,
    projection_norm: RmsNorm,
    width: i32,
}

pub struct Gemma4 {
    args: Gemma4Args,
    embed_tokens: Embedding,
    /// The layers this process runs (all, or its pipeline stage), in order.
    layers: Vec<Block>,
    stage: StageLayers,
    norm: RmsNorm,
    lm_head: Option<Linear>,
    per_layer_inputs: Option<PerLayerInputs>,
    local_rope: Rope,
    global_rope: Rope,
}

impl Gemma4 {
    pub fn load(config: &Value, loader: &mut LayerLoader) -> Result<Self> {
        let args = Gemma4Args::parse(config)?;
        let (d, eps, heads) = (args.hidden_size, args.rms_norm_eps, args.num_attention_heads);
        let embed_tokens = loader.embedding("model.embed_tokens", args.vocab_size, d)?;
        let width = args.hidden_size_per_layer_input;
        let n = args.num_hidden_layers;
        // KV-shared layers read their sources' keys within the step: one stage.
        let mut sources = Vec::new();
        for i in 0..n as usize {
            sources.extend(args.kv_source(i)?);
        }
        let together = sources.iter().min().map(|&first| first..n as usize);
        let stage = loader.layer_stage(n as usize, together)?;
        let mut layers = Vec::with_capacity(stage.layers().len());
        for i in stage.layers() {
            let p = format!("model.layers.{i}");
            let a = format!("{p}.self_attn");
            let global = args.is_global(i);
            let (hd, kv_heads) = (args.head_dim_of(global), args.kv_heads_of(global));
            let shared = args.kv_source(i)?.is_some();
            let kv = if shared {
                None
            } else {
                let k_eq_v = args.attention_k_eq_v && global;
                Some(KeyValue {
                    k_proj: loader.linear(&format!("{a}.k_proj"), d, kv_heads * hd, false)?,
                    v_proj: if k_eq_v {
                        None
                    } else {
                        Some(loader.linear(&format!("{a}.v_proj"), d, kv_heads * hd, false)?)
                    },
                    k_norm: loader.rms_norm(&format!("{a}.k_norm"), hd, eps)?,
                    eps,
                })
            };
            let ff =
                args.intermediate_size * if shared && args.use_double_wide_mlp { 2 } else { 1 };
            let m = format!("{p}.mlp");
            let per_layer = if width > 0 {
                Some(PerLayerGate {
                    input_gate: loader.linear(
                        &format!("{p}.per_layer_input_gate"),
                        d,
                        width,
                        false,
                    )?,
                    projection: loader.linear(
                        &format!("{p}.per_layer_projection"),
                        width,
                        d,
                        false,
                    )?,
                    norm: loader.rms_norm(&format!("{p}.post_per_layer_input_norm"), d, eps)?,
                })
            } else {
                None
            };
            let moe = if args.enable_moe_block {
                unstack_gate_up(
                    loader,
                    &format!("{p}.experts"),
                    &format!("{p}.experts.switch_glu"),
                )?;
                Some(MoeBranch::load(loader, &p, &args)?)
            } else {
                None
            };
            let layer_scalar = layer_scalar(loader, &p)?;
            layers.push(Block {
                norms: Norms::load(loader, &p, d, eps)?,
                self_attn: Attention {
                    q_proj: loader.linear(&format!("{a}.q_proj"), d, heads * hd, false)?,
                    kv,
                    o_proj: loader.linear(&format!("{a}.o_proj"), heads * hd, d, false)?,
                    q_norm: loader.rms_norm(&format!("{a}.q_norm"), hd, eps)?,
                    heads,
                    kv_heads,
                    head_dim: hd,
                    global,
                },
                mlp: Mlp::load(loader, &m, d, ff)?,
                per_layer,
                layer_scalar,
                moe,
            });
        }
        let per_layer_inputs = if width > 0 {
            let vocab = args.vocab_size_per_layer_input.unwrap_or(args.vocab_size);
            // Each layer reads its own `width` columns: a pipeline stage keeps
            // its layers' columns only. The table (vocab x layers x width,
            // 262144 x layers x 256 in the E2B and E4B checkpoints) is their
            // biggest tensor, so it splits with the layers.
            let first = stage.layers().start as i32 * width;
            let columns = first..first + stage.layers().len() as i32 * width;
            let (table, table_columns) = loader.embedding_columns(
                "model.embed_tokens_per_layer",
                vocab,
                n * width,
                columns.clone(),
            )?;
            Some(PerLayerInputs {
                table,
                table_columns,
                model_projection: loader.linear_rows(
                    "model.per_layer_model_projection",
                    d,
                    n * width,
                    columns,
                )?,
                projection_norm: loader.rms_norm("model.per_layer_projection_norm", width, eps)?,
                width,
            })
        } else {
            None
        };
        let norm = loader.rms_norm("model.norm", d, eps)?;
        let lm_head = if args.tie_word_embeddings || !loader.weights.contains("lm_head.weight") {
            None
        } else {
            Some(loader.linear("lm_head", d, args.vocab_size, false)?)
        };
        let local_rope = args.rope(false)?;
        let global_rope = args.rope(true)?;
        Ok(Self {
            args,
            embed_tokens,
            layers,
            stage,
            norm,
            lm_head,
            per_layer_inputs,
            local_rope,
            global_rope,
        })
    }

    /// `[B, L, layers, width]`: each token's per-layer inputs for this
    /// process's layers, from its id and its (scaled) input embedding.
    fn per_layer_inputs(&self, p: &PerLayerInputs, tokens: &Array, h: &Array) -> Result<Array> {
        let (b, l, layers) = (h.dim(0), h.dim(1), self.stage.layers().len() as i32);
        let scaled = |x: Array, s: f32| -> Result<Array> {
            Ok(x.multiply(Array::from_f32(s).as_dtype(x.dtype())?)?)
        };
        let mut from_ids = p.table.forward_scaled(tokens, (p.width as f32).sqrt())?;
        if let Some(columns) = &p.table_columns {
            from_ids = from_ids.index((.., .., columns.clone()));
        }
        let from_ids = from_ids.reshape(&[b, l, layers, p.width])?;
        let projected =
            scaled(p.model_projection.forward(h)?, (self.args.hidden_size as f32).powf(-0.5))?
                .reshape(&[b, l, layers, p.width])?;
        let projected = p.projection_norm.forward(&projected)?;
        scaled(projected.add(from_ids)?, 0.5f32.sqrt())
    }
}

impl Attention {
    /// `x`: the layer's input, `[B, L, D]`, or already `[B, 1, D]` at the
    /// read positions in a KV-shared layer after them. With `read`, the
    /// queries (and so the output) are the read positions' alone; a layer
    /// that writes the cache still writes keys and values of all `L`.
    fn forward(
        &self,
        x: &Array,
        layer: usize,
        rope: (&Rope, &Rotation),
        cache: &mut BatchCache,
        read: Option<&ReadQueries>,
    ) -> Result<Array> {
        let (rope, rotation) = rope;
        let split_heads = |t: Array, heads: i32| -> Result<Array> {
            let (b, l) = (t.dim(0), t.dim(1));
            Ok(t.reshape(&[b, l, heads, self.head_dim])?.transpose_axes(&[0, 2, 1, 3])?)
        };
        let (kv, mask) = match &self.kv {
            None => match read {
                None => cache.shared(layer)?,
                Some(read) => cache.shared_at(layer, read.at)?,
            },
            Some(kv) => {
                let raw_k = split_heads(kv.k_proj.forward(x)?, self.kv_heads)?;
                let raw_v = match &kv.v_proj {
                    Some(v_proj) => split_heads(v_proj.forward(x)?, self.kv_heads)?,
                    None => raw_k.clone(),
                };
                let k = rope.rotate(&kv.k_norm.forward(&raw_k)?, rotation)?;
                let v = fast::rms_norm(&raw_v, None, kv.eps)?;
                let (view, mask) = cache.update(layer, &k, &v)?;
                match read {
                    None => (view, mask),
                    Some(read) => {
                        let mask = read.mask(&mask, k.dim(2), &view)?;
                        (view, mask)
                    }
                }
            }
        };
        let (x, rotation) = match read {
            Some(read) if self.kv.is_some() => (read.rows(x)?, read.rotation),
            Some(read) => (x.clone(), read.rotation),
            None => (x.clone(), rotation),
        };
        let q = rope.rotate(
            &self.q_norm.forward(&split_heads(self.q_proj.forward(&x)?, self.heads)?)?,
            rotation,
        )?;
        let (b, l) = (x.dim(0), x.dim(1));
        let o = attention::attend(&q, kv, 1.0, &mask)?;
        let o = o.transpose_axes(&[0, 2, 1, 3])?.reshape(&[b, l, self.heads * self.head_dim])?;
        self.o_proj.forward(&o)
    }
}

/// The layer's output scale, when the checkpoint has one (`{prefix}.layer_scalar`).
fn layer_scalar(loader: &mut LayerLoader, prefix: &str) -> Result<Option<Array>> {
    let name = format!("{prefix}.layer_scalar");
    if loader.weights.contains(&name) {
        Ok(Some(loader.float(&name, &[1])?))
    } else {
        Ok(None)
    }
}

impl Mlp {
    /// The gated MLP at `prefix` (`{prefix}.gate_proj`, `up_proj`, `down_proj`).
    fn load(
        loader: &mut LayerLoader,
        prefix: &str,
        hidden: i32,
        intermediate: i32,
    ) -> Result<Self> {
        Ok(Self {
            gate_proj: loader.linear(
                &format!("{prefix}.gate_proj"),
                hidden,
                intermediate,
                false,
            )?,
            up_proj: loader.linear(&format!("{prefix}.up_proj"), hidden, intermediate, false)?,
            down_proj: loader.linear(
                &format!("{prefix}.down_proj"),
                intermediate,
                hidden,
                false,
            )?,
        })
    }

    fn forward(&self, x: &Array) -> Result<Array> {
        self.down_proj.forward(&geglu(&self.gate_proj.forward(x)?, &self.up_proj.forward(x)?)?)
    }
}

impl Gemma4 {
    /// The width of the hidden states (what image features must match).
    pub fn shape_hidden(&self) -> i32 {
        self.args.hidden_size
    }
}

impl LanguageModel for Gemma4 {
    fn shape(&self) -> ModelShape {
        // KV quantization applies to the global (full-attention) layers.
        ModelShape {
            num_layers: self.stage.total(),
            kv_heads: self.args.kv_heads_of(true),
            head_dim: self.args.head_dim_of(true),
            vocab_size: self.args.vocab_size,
            max_context: self.args.max_position_embeddings as usize,
        }
    }

    fn cache_layout(&self) -> CacheLayout {
        let layers = self.args.layer_shapes().expect("checked at load");
        shape::cache_layout(&layers).expect("sources are earlier layers with keys")
    }

    fn embed(&self, tokens: &Array) -> Result<Array> {
        self.embed_tokens.forward_scaled(tokens, (self.args.hidden_size as f32).sqrt())
    }

    fn forward_embeddings(
        &self,
        mut h: Array,
        tokens: &Array,
        positions: &Positions,
        cache: &mut BatchCache,
    ) -> Result<Array> {
        let mut per_layer = match &self.per_layer_inputs {
            Some(p) => Some(self.per_layer_inputs(p, tokens, &h)?),
            None => None,
        };
        cache.begin_step(h.dim(1))?;
        let local = self.local_rope.prepare(positions)?;
        let global = self.global_rope.prepare(positions)?;
        // Where the caller reads one position per row, the layers after the
        // last one that writes the cache (the KV-shared layers: 20 of E2B's
        // 35), and that layer's queries, run on those positions alone: the
        // others' outputs reach no cache and no reader. Not in a split
        // model, whose next stage expects the whole pass.
        let last_writer = (self.layers.iter().rposition(|block| block.self_attn.kv.is_some()))
            .map(|w| w + self.stage.layers().start);
        let whole = self.stage.is_whole();
        let read_positions = ReadPositions::of_step(cache, positions, h.dim(1), whole)?;
        let read_rotations = match &read_positions {
            Some(read) => Some((
                self.local_rope.prepare(&read.positions)?,
                self.global_rope.prepare(&read.positions)?,
            )),
            None => None,
        };
        let read_at = read_positions.as_ref().map(|r| &r.at);
        h = self.stage.enter(h, tokens)?;
        for (i, block) in self.stage.layers().zip(&self.layers) {
            let global_layer = block.self_attn.global;
            let (rope, rotation) = if global_layer {
                (&self.global_rope, &global)
            } else {
                (&self.local_rope, &local)
            };
            let narrowing = read_at.is_some() && last_writer.is_some_and(|w| i >= w);
            let read = match (&read_at, &read_rotations) {
                (Some(at), Some((local, global))) if narrowing => {
                    Some(ReadQueries { at, rotation: if global_layer { global } else { local } })
                }
                _ => None,
            };
            let a = block.self_attn.forward(
                &block.norms.input.forward(&h)?,
                i,
                (rope, rotation),
                cache,
                read.as_ref(),
            )?;
            if let (Some(at), true) = (&read_at, narrowing && Some(i) == last_writer) {
                // from here on, the read positions alone
                h = rows_at(&h, at)?;
                per_layer = per_layer.map(|inputs| rows_at(&inputs, at)).transpose()?;
            }
            h = h.add(block.norms.post_attention.forward(&a)?)?;
            let mut m = block.mlp.forward(&block.norms.pre_feedforward.forward(&h)?)?;
            if let Some(moe) = &block.moe {
                let (chosen, weights) = moe.router.route(&h)?;
                let e = moe.experts.weighted_sum(&moe.pre_norm.forward(&h)?, &chosen, &weights)?;
                m = moe.post_norm_dense.forward(&m)?.add(moe.post_norm_experts.forward(&e)?)?;
            }
            h = h.add(block.norms.post_feedforward.forward(&m)?)?;
            if let (Some(gate), Some(inputs)) = (&block.per_layer, &per_layer) {
                let input = inputs.index((.., .., (i - self.stage.layers().start) as i32, ..));
                let g = geglu(&gate.input_gate.forward(&h)?, &input)?;
                h = h.add(gate.norm.forward(&gate.projection.forward(&g)?)?)?;
            }
            if let Some(s) = &block.layer_scalar {
                h = h.multiply(s)?;
            }
        }
        cache.finish_step()?;
        self.stage.leave(h, |h| self.norm.forward(h))
    }

    fn logits(&self, hidden: &Array) -> Result<Array> {
        let logits = match &self.lm_head {
            Some(head) => head.forward(hidden)?,
            None => self.embed_tokens.as_linear(hidden)?,
        };
        match self.args.final_logit_softcapping {
            Some(cap) if cap > 0.0 => logit_softcap(&logits, cap),
            _ => Ok(logits),
        }
    }
}
