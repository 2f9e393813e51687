//! The `gpt_oss` architecture (OpenAI's gpt-oss-20b and gpt-oss-120b): a
//! decoder whose every layer is attention then a sparse mixture of experts.
//!
//! - Attention has biases on every projection, an explicit `head_dim`, and
//!   a learned *sink* per query head: one more logit in the softmax with no
//!   value behind it, so a head may attend to (almost) nothing.
//! - Layers alternate between sliding-window attention (`sliding_window`
//!   tokens, a rotating cache) and full attention, as `layer_types` lists
//!   (sliding first when it is absent).
//! - RoPE is YaRN-scaled (`rope_scaling`), queries and keys multiplied by
//!   YaRN's temperature.
//! - The router (a linear layer with bias) picks the top `k` experts by
//!   logit and weighs them by a softmax over those `k` alone; each expert is
//!   a clamped SwiGLU with biases (`(up + 1) · gate · σ(1.702 · gate)`, the
//!   gate clipped above at `swiglu_limit`, up to ±`swiglu_limit`).
//!
//! Checkpoints come as OpenAI ships them (the experts' gate and up fused in
//! `experts.gate_up_proj`, their rows interleaved gate, up, gate, …; biases
//! as `gate_up_proj_bias` / `down_proj_bias`; in MXFP4 as `*_blocks` — 16
//! bytes of 32 packed values per group — and `*_scales`, with Hugging Face's
//! `quantization_config` `{"quant_method": "mxfp4"}`) or as mlx-lm converts
//! them (`experts.{gate,up,down}_proj.{weight,scales,bias}`); the first are
//! split at load. llama.cpp's GGUF (`gpt-oss`) keeps gate and up apart
//! (`ffn_{gate,up,down}_exps`, MXFP4 with float biases), the sinks as
//! `attn_sinks.weight`, the norm after attention as `post_attention_norm`.
use mlx_rs::{ops, ops::indexing::IndexOp, Array};
use serde::Deserialize;
use serde_json::Value;

use crate::cache::{BatchCache, CacheLayout, LayerCache};
use crate::distributed::StageLayers;
use crate::error::{Error, Result};
use crate::model::layers::attention::{self, ReadPositions, ReadQueries};
use crate::model::layers::moe::{Experts, GateActivation};
use crate::model::layers::rope::{Positions, Rope, RopeScaling, Rotation};
use crate::model::layers::{Embedding, LayerLoader, Linear, RmsNorm};
use crate::model::registry::Family;
use crate::model::shape::{self, LayerShape};
use crate::model::{LanguageModel, ModelShape};
use crate::weights::gguf::GgufImport;

pub const FAMILY: Family = Family {
    name: "gpt-oss",
    model_types: &["gpt_oss"],
    build: |_, config, loader| Ok(Box::new(GptOss::load(config, loader)?)),
    layers: |config| Ok(GptOssArgs::parse(config)?.layer_shapes()),
    gguf: Some(GgufImport {
        architecture: "gpt-oss",
        class_name: "GptOssForCausalLM",
        block_names: &[
            ("post_attention_norm", "post_attention_layernorm"),
            ("attn_sinks.weight", "self_attn.sinks"),
            ("ffn_gate_inp", "mlp.router"),
            ("ffn_gate_exps", "mlp.experts.gate_proj"),
            ("ffn_up_exps", "mlp.experts.up_proj"),
            ("ffn_down_exps", "mlp.experts.down_proj"),
        ],
        config_keys: &[
            ("num_local_experts", "expert_count"),
            ("num_experts_per_tok", "expert_used_count"),
            ("intermediate_size", "expert_feed_forward_length"),
            ("sliding_window", "attention.sliding_window"),
            ("original_max_position_embeddings", "rope.scaling.original_context_length"),
            ("beta_fast", "rope.scaling.yarn_beta_fast"),
            ("beta_slow", "rope.scaling.yarn_beta_slow"),
        ],
        permuted_qk: false,
        norm_plus_one: false,
        complete_config: Some(complete_gguf_config),
    }),
    image_processor: None,
    tensor_parallel: false,
};

/// llama.cpp's `gpt-oss` metadata as config.json says it: YaRN's original
/// context and betas inside `rope_scaling` (the betas llama.cpp's defaults,
/// 32 and 1, when absent), and the layers sliding and full in turn, sliding
/// first, as llama.cpp hard-codes them.
fn complete_gguf_config(c: &mut serde_json::Map<String, Value>) {
    let original = c.remove("original_max_position_embeddings");
    let fast = c.remove("beta_fast").unwrap_or(32.0.into());
    let slow = c.remove("beta_slow").unwrap_or(1.0.into());
    if let Some(Value::Object(scaling)) = c.get_mut("rope_scaling") {
        if scaling.get("rope_type").and_then(Value::as_str) == Some("yarn") {
            scaling
                .insert("original_max_position_embeddings".into(), original.unwrap_or(4096.into()));
            scaling.insert("beta_fast".into(), fast);
            scaling.insert("beta_slow".into(), slow);
        }
    }
    if let Some(layers) = c.get("num_hidden_layers").and_then(Value::as_u64) {
        let types: Vec<&str> = (0..layers)
            .map(|i| if i % 2 == 0 { "sliding_attention" } else { "full_attention" })
            .collect();
        c.insert("layer_types".into(), types.into());
    }
}

/// The gate's slope in gpt-oss's SwiGLU (fixed by the architecture, as in
/// the reference implementations; config.json does not carry it).
const SWIGLU_ALPHA: f32 = 1.702;

/// The config.json fields gpt-oss reads (mlx-lm's names and defaults).
#[derive(Debug, Clone, Deserialize)]
pub struct GptOssArgs {
    hidden_size: i32,
    num_hidden_layers: i32,
    num_attention_heads: i32,
    num_key_value_heads: i32,
    #[serde(default = "default_head_dim")]
    head_dim: i32,
    intermediate_size: i32,
    num_local_experts: i32,
    num_experts_per_tok: i32,
    vocab_size: i32,
    #[serde(default = "default_eps")]
    rms_norm_eps: f32,
    #[serde(default = "default_window")]
    sliding_window: i32,
    #[serde(default = "default_rope_theta")]
    rope_theta: f32,
    #[serde(default)]
    rope_scaling: Option<RopeScaling>,
    #[serde(default)]
    layer_types: Option<Vec<String>>,
    #[serde(default = "default_limit")]
    swiglu_limit: f32,
    #[serde(default = "default_context")]
    max_position_embeddings: i32,
    #[serde(default)]
    tie_word_embeddings: bool,
}

fn default_head_dim() -> i32 {
    64
}
fn default_eps() -> f32 {
    1e-5
}
fn default_window() -> i32 {
    128
}
fn default_rope_theta() -> f32 {
    150_000.0
}
fn default_limit() -> f32 {
    7.0
}
fn default_context() -> i32 {
    131_072
}

impl GptOssArgs {
    /// Parses config.json and checks what the layers need.
    pub fn parse(config: &Value) -> Result<Self> {
        let args: Self = serde_json::from_value(config.clone())
            .map_err(|e| Error::InvalidConfig(format!("gpt_oss config.json: {e}")))?;
        let bad = |m: String| Err(Error::InvalidConfig(m));
        let (heads, kv) = (args.num_attention_heads, args.num_key_value_heads);
        if heads < 1 || kv < 1 || heads % kv != 0 || args.head_dim < 2 {
            return bad(format!(
                "gpt_oss: num_attention_heads {heads} must be a multiple of num_key_value_heads {kv}"
            ));
        }
        if args.num_hidden_layers < 1 || args.vocab_size < 1 || args.sliding_window < 1 {
            return bad(
                "gpt_oss: num_hidden_layers, vocab_size and sliding_window must be positive".into(),
            );
        }
        let (experts, k) = (args.num_local_experts, args.num_experts_per_tok);
        if k < 1 || k > experts {
            return bad(format!("gpt_oss: num_experts_per_tok {k} must be within 1..={experts}"));
        }
        if let Some(types) = &args.layer_types {
            if types.len() != args.num_hidden_layers as usize {
                return bad(format!(
                    "gpt_oss: layer_types lists {} layers but num_hidden_layers is {}",
                    types.len(),
                    args.num_hidden_layers
                ));
            }
            if let Some(t) =
                types.iter().find(|t| !matches!(t.as_str(), "sliding_attention" | "full_attention"))
            {
                return bad(format!("gpt_oss: layer type {t:?} is not supported"));
            }
        }
        let rope = args.rope_scaling.as_ref().map(|s| s.rope_type.as_str());
        if rope.is_some_and(|r| !matches!(r, "yarn" | "default" | "linear" | "llama3")) {
            return bad(format!("gpt_oss: rope_scaling type {rope:?} is not supported"));
        }
        Ok(args)
    }

    /// Layer `i` attends within the sliding window (else to every token).
    fn is_sliding(&self, i: usize) -> bool {
        match &self.layer_types {
            Some(types) => types[i] == "sliding_attention",
            None => i.is_multiple_of(2),
        }
    }

    pub fn layer_shapes(&self) -> Vec<LayerShape> {
        (0..self.num_hidden_layers.max(0) as usize)
            .map(|i| {
                let cache = if self.is_sliding(i) {
                    LayerCache::Sliding { window: self.sliding_window as usize }
                } else {
                    LayerCache::Full
                };
                LayerShape::attention(cache, self.num_key_value_heads, self.head_dim)
            })
            .collect()
    }
}

/// Attention with biases and a learned sink per query head.
struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    /// `[heads]`: one extra logit per head.
    sinks: Array,
    heads: i32,
    kv_heads: i32,
    head_dim: i32,
}

impl Attention {
    fn load(loader: &mut LayerLoader, p: &str, args: &GptOssArgs) -> Result<Self> {
        let (d, hd) = (args.hidden_size, args.head_dim);
        let (heads, kv_heads) = (args.num_attention_heads, args.num_key_value_heads);
        Ok(Self {
            q_proj: loader.linear(&format!("{p}.q_proj"), d, heads * hd, true)?,
            k_proj: loader.linear(&format!("{p}.k_proj"), d, kv_heads * hd, true)?,
            v_proj: loader.linear(&format!("{p}.v_proj"), d, kv_heads * hd, true)?,
            o_proj: loader.linear(&format!("{p}.o_proj"), heads * hd, d, true)?,
            sinks: loader.float(&format!("{p}.sinks"), &[heads])?,
            heads,
            kv_heads,
            head_dim: hd,
        })
    }

    /// With `read`, the queries (and the output, `[B, 1, D]`) are the read
    /// positions' alone; keys and values of all go to the cache.
    fn forward(
        &self,
        x: &Array,
        layer: usize,
        rope: (&Rope, &Rotation),
        cache: &mut BatchCache,
        read: Option<&ReadQueries>,
    ) -> Result<Array> {
        let hd = self.head_dim;
        let heads_first = |t: Array, heads: i32| -> Result<Array> {
            let (b, l) = (t.dim(0), t.dim(1));
            Ok(t.reshape(&[b, l, heads, hd])?.transpose_axes(&[0, 2, 1, 3])?)
        };
        let (rope, rotation) = rope;
        let (queries, query_rotation) = match read {
            Some(read) => (read.rows(x)?, read.rotation),
            None => (x.clone(), rotation),
        };
        let (b, l) = (queries.dim(0), queries.dim(1));
        let q = heads_first(self.q_proj.forward(&queries)?, self.heads)?;
        let k = heads_first(self.k_proj.forward(x)?, self.kv_heads)?;
        let v = heads_first(self.v_proj.forward(x)?, self.kv_heads)?;
        let (q, k) = (rope.rotate(&q, query_rotation)?, rope.rotate(&k, rotation)?);
        let (kv, mask) = cache.update(layer, &k, &v)?;
        let mask = match read {
            Some(read) => read.mask(&mask, k.dim(2), &kv)?,
            None => mask,
        };
        let scale = (hd as f32).powf(-0.5);
        let o = attention::attend_with_sinks(&q, kv, scale, &mask, Some(&self.sinks))?;
        let o = o.transpose_axes(&[0, 2, 1, 3])?.reshape(&[b, l, self.heads * hd])?;
        self.o_proj.forward(&o)
    }
}

/// The router and the experts.
struct MixtureOfExperts {
    router: Linear,
    experts: Experts,
    top_k: i32,
}

impl MixtureOfExperts {
    fn load(loader: &mut LayerLoader, p: &str, args: &GptOssArgs) -> Result<Self> {
        let (d, n) = (args.hidden_size, args.num_local_experts);
        let experts = format!("{p}.experts");
        split_fused_experts(loader, &experts, args)?;
        let activation =
            GateActivation::ClampedSwiglu { alpha: SWIGLU_ALPHA, limit: args.swiglu_limit };
        Ok(Self {
            router: loader.linear(&format!("{p}.router"), d, n, true)?,
            experts: Experts::load_with_biases(
                loader,
                &experts,
                d,
                args.intermediate_size,
                n,
                activation,
            )?,
            top_k: args.num_experts_per_tok,
        })
    }

    /// `[B, L, D]` → `[B, L, D]`: the top `k` experts by router logit,
    /// weighted by a softmax over their `k` logits.
    fn forward(&self, x: &Array) -> Result<Array> {
        let logits = self.router.forward(x)?;
        let (n, k) = (logits.dim(-1), self.top_k);
        let chosen = ops::argpartition_axis(&logits, n - k, -1)?.index((.., .., (n - k)..));
        let weights = ops::softmax_axis(&logits.take_along_axis(&chosen, -1)?, -1, true)?;
        self.experts.weighted_sum(x, &chosen, &weights)
    }
}

/// OpenAI's layout → mlx-lm's: `gate_up_proj.weight` `[E, 2I, D]` with gate
/// and up rows interleaved becomes `gate_proj` and `up_proj`, and the
/// `*_proj_bias` tensors `*_proj.bias`.
fn split_fused_experts(loader: &mut LayerLoader, experts: &str, args: &GptOssArgs) -> Result<()> {
    let (e, i) = (args.num_local_experts, args.intermediate_size);
    let w = &mut *loader.weights;
    // `[..., 2I, rest]` → the even rows and the odd rows.
    let deinterleave = |t: &Array, rest: &[i32]| -> Result<(Array, Array)> {
        let mut shape = vec![e, i, 2];
        shape.extend_from_slice(rest);
        let t = t.reshape(&shape)?;
        let half =
            |j: i32| -> Result<Array> { Ok(t.take_axis(Array::from_int(j), 2)?.contiguous()?) };
        Ok((half(0)?, half(1)?))
    };
    // MXFP4 blocks `[E, rows, groups, 16]` bytes are MLX's packed uint32
    // `[E, rows, groups · 4]`.
    let packed = |t: Array| -> Result<Array> {
        let shape = t.shape().to_vec();
        let (rows, groups) = (shape[1], shape[2]);
        Ok(t.view::<u32>()?.reshape(&[e, rows, groups * 4])?)
    };
    for proj in ["gate_up_proj", "down_proj"] {
        if let Some(t) = w.remove(&format!("{experts}.{proj}_blocks")) {
            w.insert(format!("{experts}.{proj}.weight"), packed(t)?);
        }
        w.rename(&format!("{experts}.{proj}_scales"), format!("{experts}.{proj}.scales"));
    }
    for part in ["weight", "scales"] {
        if let Some(t) = w.remove(&format!("{experts}.gate_up_proj.{part}")) {
            let cols = t.dim(-1);
            let (gate, up) = deinterleave(&t, &[cols])?;
            w.insert(format!("{experts}.gate_proj.{part}"), gate);
            w.insert(format!("{experts}.up_proj.{part}"), up);
        }
    }
    if let Some(t) = w.remove(&format!("{experts}.gate_up_proj_bias")) {
        let (gate, up) = deinterleave(&t, &[])?;
        w.insert(format!("{experts}.gate_proj.bias"), gate);
        w.insert(format!("{experts}.up_proj.bias"), up);
    }
    w.rename(&format!("{experts}.down_proj_bias"), format!("{experts}.down_proj.bias"));
    Ok(())
}

struct Block {
    input_layernorm: RmsNorm,
    self_attn: Attention,
    post_attention_layernorm: RmsNorm,
    mlp: MixtureOfExperts,
}

impl Block {
    fn load(loader: &mut LayerLoader, args: &GptOssArgs, i: usize) -> Result<Self> {
        let p = format!("model.layers.{i}");
        let (d, eps) = (args.hidden_size, args.rms_norm_eps);
        Ok(Self {
            input_layernorm: loader.rms_norm(&format!("{p}.input_layernorm"), d, eps)?,
            self_attn: Attention::load(loader, &format!("{p}.self_attn"), args)?,
            post_attention_layernorm: loader.rms_norm(
                &format!("{p}.post_attention_layernorm"),
                d,
                eps,
            )?,
            mlp: MixtureOfExperts::load(loader, &format!("{p}.mlp"), args)?,
        })
    }

    /// With `read`, the output is the read positions' alone (see [`ReadQueries`]).
    fn forward(
        &self,
        h: Array,
        i: usize,
        rope: (&Rope, &Rotation),
        cache: &mut BatchCache,
        read: Option<&ReadQueries>,
    ) -> Result<Array> {
        let r = self.self_attn.forward(&self.input_layernorm.forward(&h)?, i, rope, cache, read)?;
        let h = match read {
            Some(read) => read.rows(&h)?,
            None => h,
        };
        let h = h.add(r)?;
        Ok(h.add(self.mlp.forward(&self.post_attention_layernorm.forward(&h)?)?)?)
    }
}

pub struct GptOss {
    args: GptOssArgs,
    embed_tokens: Embedding,
    /// The layers this process runs (all, or its pipeline stage), in order.
    layers: Vec<Block>,
    stage: StageLayers,
    norm: RmsNorm,
    /// The output head; `None` when tied to the embedding.
    lm_head: Option<Linear>,
    rope: Rope,
}

impl GptOss {
    pub fn load(config: &Value, loader: &mut LayerLoader) -> Result<Self> {
        let args = GptOssArgs::parse(config)?;
        let d = args.hidden_size;
        let stage = loader.layer_stage(args.num_hidden_layers as usize, None)?;
        let mut layers = Vec::with_capacity(stage.layers().len());
        for i in stage.layers() {
            layers.push(Block::load(loader, &args, i)?);
        }
        let embed_tokens = loader.embedding("model.embed_tokens", args.vocab_size, d)?;
        let norm = loader.rms_norm("model.norm", d, args.rms_norm_eps)?;
        let lm_head = if args.tie_word_embeddings {
            None
        } else {
            Some(loader.linear("lm_head", d, args.vocab_size, false)?)
        };
        let rope = Rope::new(args.head_dim, args.rope_theta, false, args.rope_scaling.as_ref())?;
        Ok(Self { args, embed_tokens, layers, stage, norm, lm_head, rope })
    }
}

impl LanguageModel for GptOss {
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
        // Where the caller reads one position per row, the last layer runs
        // its queries and experts on those alone (not in a split model:
        // the other stage runs the whole pass).
        let whole = self.stage.is_whole();
        let read = ReadPositions::of_step(cache, positions, h.dim(1), whole)?;
        let read_rotation = read.as_ref().map(|r| self.rope.prepare(&r.positions)).transpose()?;
        let read = read.as_ref().zip(read_rotation.as_ref());
        let read = read.map(|(read, rotation)| ReadQueries { at: &read.at, rotation });
        h = self.stage.enter(h, tokens)?;
        for (i, block) in self.stage.layers().zip(&self.layers) {
            let read = read.as_ref().filter(|_| i + 1 == self.stage.total());
            h = block.forward(h, i, (&self.rope, &rotation), cache, read)?;
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// gpt-oss-20b's config.json (the fields the model reads).
    fn gpt_oss_20b() -> Value {
        json!({
            "model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"],
            "hidden_size": 2880, "intermediate_size": 2880, "head_dim": 64,
            "num_attention_heads": 64, "num_key_value_heads": 8, "num_hidden_layers": 24,
            "num_local_experts": 32, "num_experts_per_tok": 4, "experts_per_token": 4,
            "vocab_size": 201088, "rms_norm_eps": 1e-05, "sliding_window": 128,
            "rope_theta": 150000, "max_position_embeddings": 131072, "swiglu_limit": 7.0,
            "tie_word_embeddings": false, "initial_context_length": 4096,
            "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                             "original_max_position_embeddings": 4096, "rope_type": "yarn",
                             "truncate": false},
            "layer_types": (0..24).map(|i| if i % 2 == 0 { "sliding_attention" } else { "full_attention" }).collect::<Vec<_>>()
        })
    }

    #[test]
    fn layers_alternate_sliding_and_full_attention() {
        let shapes = GptOssArgs::parse(&gpt_oss_20b()).unwrap().layer_shapes();
        assert_eq!(shapes.len(), 24);
        assert_eq!(shapes[0].cache, LayerCache::Sliding { window: 128 });
        assert_eq!(shapes[1].cache, LayerCache::Full);
        assert_eq!((shapes[1].kv_heads, shapes[1].key_dim), (8, 64));
        // Without `layer_types` the plan is the same (sliding first).
        let mut config = gpt_oss_20b();
        config.as_object_mut().unwrap().remove("layer_types");
        assert_eq!(GptOssArgs::parse(&config).unwrap().layer_shapes(), shapes);
    }

    #[test]
    fn configs_it_cannot_run_are_refused() {
        for (key, value) in [
            ("num_key_value_heads", json!(7)),
            ("num_experts_per_tok", json!(33)),
            ("layer_types", json!(["sliding_attention"])),
            ("rope_scaling", json!({"rope_type": "dynamic", "factor": 2.0})),
        ] {
            let mut config = gpt_oss_20b();
            config[key] = value;
            assert!(
                matches!(GptOssArgs::parse(&config), Err(Error::InvalidConfig(_))),
                "{key} accepted"
            );
        }
    }
}
