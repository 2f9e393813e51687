//! Mistral 3 (`mistral3`: Ministral 3, Mistral Small 3.1 / 3.2) and its text
//! model (`ministral3`), as mlx-lm 0.32.2 and mlx-vlm 0.7.6 run them.
//!
//! The text model is a llama-style decoder (pre-norm blocks, grouped-query
//! attention with an explicit head size, a SwiGLU MLP) with what Ministral 3
//! adds:
//! - RoPE from `rope_parameters` (YaRN in the released checkpoints: its
//!   frequencies and temperature, [`crate::model::layers::rope`]);
//! - Llama 4's attention scaling: after RoPE, each query at position `p` is
//!   multiplied by `1 + β · ln(1 + ⌊p / original_max_position_embeddings⌋)`
//!   (`llama_4_scaling_beta`), so attention sharpens past the original
//!   context; 1 within it;
//! - `layer_types` may make layers sliding-window (`sliding_window`, a
//!   rotating cache); the released checkpoints attend fully everywhere.
//!
//! A `mistral3` checkpoint whose `text_config` is plain `mistral` (Mistral
//! Small 3.1) gets the same decoder with no attention scaling.
//!
//! The vision half ([`vision`]): Pixtral's tower with its 2D RoPE over patch
//! rows and columns, and the projector that merges each 2 × 2 block of patch
//! states into one token; [`image_processor`]: Pixtral's variable-size images
//! and their `[IMG]` / `[IMG_BREAK]` / `[IMG_END]` layout.
//!
//! Weight names: a text-only checkpoint's `model.*` / `lm_head`; a
//! `mistral3` checkpoint's transformers names (`model.language_model.*`,
//! `lm_head`, or the older `language_model.model.*`,
//! `language_model.lm_head`), which mlx-vlm's conversions keep as
//! `language_model.model.*`.
pub mod image_processor;
pub mod vision;

use mlx_rs::{ops, Array};
use serde::Deserialize;
use serde_json::Value;

use crate::cache::{BatchCache, CacheLayout, LayerCache};
use crate::distributed::StageLayers;
use crate::error::{Error, Result};
use crate::model::layers::attention::{self, ReadPositions};
use crate::model::layers::rope::{Positions, Rope, RopeScaling, Rotation};
use crate::model::layers::{rows_at, Embedding, LayerLoader, Linear, RmsNorm};
use crate::model::llama::Mlp;
use crate::model::registry::Family;
use crate::model::shape::{self, LayerShape};
use crate::model::{LanguageModel, ModelShape};
use crate::weights::gguf::GgufImport;

/// The text-only checkpoints (`ministral3`, as mlx-lm runs them).
pub const FAMILY: Family = Family {
    name: "Ministral 3",
    model_types: &["ministral3"],
    build: |_, config, loader| Ok(Box::new(Ministral3::load(config, "model", loader)?)),
    layers: |config| Ok(TextArgs::parse(config, true)?.layer_shapes()),
    gguf: Some(GgufImport {
        architecture: "mistral3",
        class_name: "Ministral3ForCausalLM",
        block_names: &[],
        config_keys: &[
            ("llama_4_scaling_beta", "attention.temperature_scale"),
            ("original_max_position_embeddings", "rope.scaling.original_context_length"),
            ("beta_fast", "rope.scaling.yarn_beta_fast"),
            ("beta_slow", "rope.scaling.yarn_beta_slow"),
        ],
        permuted_qk: true,
        norm_plus_one: false,
        complete_config: Some(complete_gguf_config),
    }),
    image_processor: None,
    tensor_parallel: false,
};

/// llama.cpp's `mistral3` metadata as the `rope_parameters` Ministral 3's
/// config.json holds: YaRN's factor, original context and betas (llama.cpp
/// folds YaRN's `mscale / mscale_all_dim` into one multiplier; the released
/// checkpoints' ratio is 1) and the attention temperature's β
/// (`attention.temperature_scale`; absent, the scaling is off, as in
/// llama.cpp).
fn complete_gguf_config(c: &mut serde_json::Map<String, Value>) {
    let mut take = |k: &str| c.remove(k);
    let beta = take("llama_4_scaling_beta").unwrap_or(0.0.into());
    let original = take("original_max_position_embeddings");
    let (fast, slow) = (take("beta_fast"), take("beta_slow"));
    let scaling = take("rope_scaling");
    let theta = c.get("rope_theta").cloned().unwrap_or(1_000_000.0.into());
    let context = c.get("max_position_embeddings").cloned().unwrap_or(32_768.into());
    let mut params = serde_json::Map::new();
    params.insert("rope_theta".into(), theta);
    match scaling.as_ref().and_then(|s| s.get("rope_type")).and_then(Value::as_str) {
        Some(kind) => {
            params.insert("rope_type".into(), kind.into());
            let factor = scaling.as_ref().and_then(|s| s.get("factor")).cloned();
            params.insert("factor".into(), factor.unwrap_or(1.0.into()));
            params.insert("beta_fast".into(), fast.unwrap_or(32.0.into()));
            params.insert("beta_slow".into(), slow.unwrap_or(1.0.into()));
            params.insert("mscale".into(), 1.0.into());
            params.insert("mscale_all_dim".into(), 1.0.into());
        }
        None => {
            params.insert("rope_type".into(), "default".into());
        }
    }
    params.insert(
        "original_max_position_embeddings".into(),
        original.unwrap_or_else(|| context.clone()),
    );
    params.insert("llama_4_scaling_beta".into(), beta);
    c.insert("rope_parameters".into(), Value::Object(params));
}

/// The config.json fields of the text model (mlx-lm's names).
#[derive(Debug, Clone, Deserialize)]
pub struct TextArgs {
    #[serde(default)]
    model_type: Option<String>,
    hidden_size: i32,
    num_hidden_layers: i32,
    intermediate_size: i32,
    num_attention_heads: i32,
    #[serde(default)]
    num_key_value_heads: Option<i32>,
    #[serde(default)]
    head_dim: Option<i32>,
    rms_norm_eps: f32,
    vocab_size: i32,
    #[serde(default)]
    max_position_embeddings: Option<i32>,
    #[serde(default)]
    rope_parameters: Option<Value>,
    #[serde(default)]
    rope_theta: Option<f32>,
    #[serde(default)]
    rope_scaling: Option<RopeScaling>,
    #[serde(default)]
    tie_word_embeddings: Option<bool>,
    #[serde(default)]
    layer_types: Option<Vec<String>>,
    #[serde(default)]
    sliding_window: Option<i32>,
}

/// Llama 4's attention scaling (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq)]
struct AttentionScaling {
    beta: f32,
    original_context: f32,
}

impl TextArgs {
    /// Parses a text config; `tie_default` is what a missing
    /// `tie_word_embeddings` means (mlx-lm: tied for `ministral3`, untied
    /// inside `mistral3`).
    pub fn parse(config: &Value, tie_default: bool) -> Result<Self> {
        let mut args: Self = serde_json::from_value(config.clone())
            .map_err(|e| Error::InvalidConfig(format!("Ministral 3 config.json: {e}")))?;
        args.tie_word_embeddings.get_or_insert(tie_default);
        let bad = |m: String| Err(Error::InvalidConfig(format!("Ministral 3: {m}")));
        let (heads, kv) = (args.num_attention_heads, args.kv_heads());
        if heads < 1 || kv < 1 || heads % kv != 0 {
            return bad(format!(
                "num_attention_heads {heads} must be a multiple of num_key_value_heads {kv}"
            ));
        }
        if args.head_dim.is_none() && args.hidden_size % heads != 0 {
            return bad(format!("hidden_size {} is not divisible by the heads", args.hidden_size));
        }
        if args.num_hidden_layers < 1 || args.vocab_size < 1 {
            return bad("num_hidden_layers and vocab_size must be positive".into());
        }
        if let Some(types) = &args.layer_types {
            if types.len() != args.num_hidden_layers as usize {
                return bad(format!(
                    "layer_types lists {} layers but num_hidden_layers is {}",
                    types.len(),
                    args.num_hidden_layers
                ));
            }
            if let Some(t) =
                types.iter().find(|t| !matches!(t.as_str(), "sliding_attention" | "full_attention"))
            {
                return bad(format!("layer type {t:?} is not supported"));
            }
            if types.iter().any(|t| t == "sliding_attention")
                && args.sliding_window.is_none_or(|w| w < 1)
            {
                return bad("sliding layers need a positive sliding_window".into());
            }
        }
        args.scaling()?;
        args.rope()?;
        Ok(args)
    }

    fn kv_heads(&self) -> i32 {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    fn head_dim(&self) -> i32 {
        self.head_dim.unwrap_or(self.hidden_size / self.num_attention_heads)
    }

    fn is_ministral3(&self) -> bool {
        self.model_type.as_deref() == Some("ministral3")
    }

    fn is_sliding(&self, i: usize) -> bool {
        self.layer_types.as_ref().is_some_and(|t| t[i] == "sliding_attention")
    }

    /// Each layer's cache: full, or the sliding window.
    pub fn layer_shapes(&self) -> Vec<LayerShape> {
        (0..self.num_hidden_layers.max(0) as usize)
            .map(|i| {
                let cache = match self.sliding_window {
                    Some(w) if self.is_sliding(i) => LayerCache::Sliding { window: w as usize },
                    _ => LayerCache::Full,
                };
                LayerShape::attention(cache, self.kv_heads(), self.head_dim())
            })
            .collect()
    }

    /// Llama 4's scaling, which `ministral3` reads from `rope_parameters`
    /// (both keys required there, as in the references).
    fn scaling(&self) -> Result<Option<AttentionScaling>> {
        if !self.is_ministral3() {
            return Ok(None);
        }
        let params = self.rope_parameters.as_ref();
        let number = |key: &str| {
            params.and_then(|p| p.get(key)).and_then(Value::as_f64).ok_or_else(|| {
                Error::InvalidConfig(format!("Ministral 3: rope_parameters needs {key}"))
            })
        };
        let beta = number("llama_4_scaling_beta")? as f32;
        let original_context = number("original_max_position_embeddings")? as f32;
        if original_context <= 0.0 {
            return Err(Error::InvalidConfig(
                "Ministral 3: original_max_position_embeddings must be positive".into(),
            ));
        }
        Ok(Some(AttentionScaling { beta, original_context }))
    }

    /// RoPE from `rope_parameters` (transformers ≥ 5, `ministral3`) or the
    /// older `rope_theta` / `rope_scaling` (`mistral` text configs).
    fn rope(&self) -> Result<Rope> {
        let params = self.rope_parameters.as_ref();
        let theta = params
            .and_then(|p| p.get("rope_theta"))
            .and_then(Value::as_f64)
            .map(|t| t as f32)
            .or(self.rope_theta)
            .unwrap_or(1_000_000_000.0);
        let scaling = match params {
            Some(p) => {
                let kind = p.get("rope_type").or_else(|| p.get("type")).and_then(Value::as_str);
                if kind.is_some_and(|k| k != "default") {
                    // Released configs say both `rope_type` and its old name `type`.
                    let mut p = p.clone();
                    if let Some(map) = p.as_object_mut().filter(|m| m.contains_key("rope_type")) {
                        map.remove("type");
                    }
                    Some(serde_json::from_value::<RopeScaling>(p).map_err(|e| {
                        Error::InvalidConfig(format!("Ministral 3 rope_parameters: {e}"))
                    })?)
                } else {
                    None
                }
            }
            None => self.rope_scaling.clone(),
        };
        Rope::new(self.head_dim(), theta, false, scaling.as_ref())
    }
}

struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    heads: i32,
    kv_heads: i32,
    head_dim: i32,
}

impl Attention {
    fn load(loader: &mut LayerLoader, p: &str, args: &TextArgs) -> Result<Self> {
        let (d, hd) = (args.hidden_size, args.head_dim());
        let (heads, kv_heads) = (args.num_attention_heads, args.kv_heads());
        Ok(Self {
            q_proj: loader.linear(&format!("{p}.q_proj"), d, heads * hd, false)?,
            k_proj: loader.linear(&format!("{p}.k_proj"), d, kv_heads * hd, false)?,
            v_proj: loader.linear(&format!("{p}.v_proj"), d, kv_heads * hd, false)?,
            o_proj: loader.linear(&format!("{p}.o_proj"), heads * hd, d, false)?,
            heads,
            kv_heads,
            head_dim: hd,
        })
    }

    /// With `read` (the read positions and their own step), keys and
    /// values of all positions go to the cache but the queries, and the
    /// output `[B, 1, D]`, are the read positions' alone.
    fn forward(
        &self,
        x: &Array,
        layer: usize,
        step: &Step,
        cache: &mut BatchCache,
        read: Option<(&Array, &Step)>,
    ) -> Result<Array> {
        let hd = self.head_dim;
        let heads_first = |t: Array, heads: i32| -> Result<Array> {
            let (b, l) = (t.dim(0), t.dim(1));
            Ok(t.reshape(&[b, l, heads, hd])?.transpose_axes(&[0, 2, 1, 3])?)
        };
        let (queries, query_step) = match read {
            Some((at, read_step)) => (rows_at(x, at)?, read_step),
            None => (x.clone(), step),
        };
        let (b, l) = (queries.dim(0), queries.dim(1));
        let q = heads_first(self.q_proj.forward(&queries)?, self.heads)?;
        let k = heads_first(self.k_proj.forward(x)?, self.kv_heads)?;
        let v = heads_first(self.v_proj.forward(x)?, self.kv_heads)?;
        let q = query_step.rope.rotate(&q, &query_step.rotation)?;
        let k = step.rope.rotate(&k, &step.rotation)?;
        let (kv, mask) = cache.update(layer, &k, &v)?;
        let mask = match read {
            Some((at, _)) => mask.one_query_per_row(at, k.dim(2), kv.columns())?,
            None => mask,
        };
        let q = match &query_step.query_scale {
            Some(s) => q.multiply(s)?,
            None => q,
        };
        let o = attention::attend(&q, kv, (hd as f32).powf(-0.5), &mask)?;
        let o = o.transpose_axes(&[0, 2, 1, 3])?.reshape(&[b, l, self.heads * hd])?;
        self.o_proj.forward(&o)
    }
}

/// What every layer of one step shares.
struct Step<'a> {
    rope: &'a Rope,
    rotation: Rotation<'a>,
    /// Llama 4's per-position query scale, `[L, 1]` or `[B, 1, L, 1]`, in
    /// the input embeddings' dtype.
    query_scale: Option<Array>,
}

struct Block {
    input_layernorm: RmsNorm,
    self_attn: Attention,
    post_attention_layernorm: RmsNorm,
    mlp: Mlp,
}

/// The Ministral 3 / Mistral decoder.
pub struct Ministral3 {
    args: TextArgs,
    scaling: Option<AttentionScaling>,
    /// The dtype the embedding table's rows come out in, which the
    /// references cast the scale to: a quantized table's float16 rounds it
    /// (1.0693 for 1 + 0.1·ln 2) though the stream is float32 after the
    /// first norm (measured: 1.4e-4 logit difference on the tiny 4-bit
    /// model when kept in float32, 4.8e-7 rounded).
    scale_dtype: mlx_rs::Dtype,
    embed_tokens: Embedding,
    /// The layers this process runs (all, or its pipeline stage), in order.
    layers: Vec<Block>,
    stage: StageLayers,
    norm: RmsNorm,
    /// The output head; `None` when tied to the embedding.
    lm_head: Option<Linear>,
    rope: Rope,
}

impl Ministral3 {
    /// A text-only checkpoint (`prefix` `model`, the head `lm_head`).
    pub fn load(config: &Value, prefix: &str, loader: &mut LayerLoader) -> Result<Self> {
        let args = TextArgs::parse(config, true)?;
        Self::build(args, prefix, "lm_head", loader)
    }

    /// The decoder under `prefix` (`model`, `language_model.model`) with its
    /// head `lm_head`.
    pub fn build(
        args: TextArgs,
        prefix: &str,
        lm_head: &str,
        loader: &mut LayerLoader,
    ) -> Result<Self> {
        let (d, eps) = (args.hidden_size, args.rms_norm_eps);
        let stage = loader.layer_stage(args.num_hidden_layers as usize, None)?;
        let mut layers = Vec::with_capacity(stage.layers().len());
        for i in stage.layers() {
            let p = format!("{prefix}.layers.{i}");
            layers.push(Block {
                input_layernorm: loader.rms_norm(&format!("{p}.input_layernorm"), d, eps)?,
                self_attn: Attention::load(loader, &format!("{p}.self_attn"), &args)?,
                post_attention_layernorm: loader.rms_norm(
                    &format!("{p}.post_attention_layernorm"),
                    d,
                    eps,
                )?,
                mlp: Mlp::load(loader, &format!("{p}.mlp"), d, args.intermediate_size, false)?,
            });
        }
        let embed_tokens =
            loader.embedding(&format!("{prefix}.embed_tokens"), args.vocab_size, d)?;
        let norm = loader.rms_norm(&format!("{prefix}.norm"), d, eps)?;
        // A tied checkpoint that still ships the head's copy: mlx-lm drops it.
        let tied = args.tie_word_embeddings.unwrap_or(true);
        let lm_head = if tied {
            loader.weights.remove(&format!("{lm_head}.weight"));
            None
        } else {
            Some(loader.linear(lm_head, d, args.vocab_size, false)?)
        };
        let rope = args.rope()?;
        let scaling = args.scaling()?;
        let scale_dtype = embed_tokens.table.rows(&Array::from_slice(&[0u32], &[1]))?.dtype();
        Ok(Self { args, scaling, scale_dtype, embed_tokens, layers, stage, norm, lm_head, rope })
    }

    /// `1 + β · ln(1 + ⌊p / original context⌋)` for each query's position
    /// `p`, as the references compute it in float32.
    /// What every layer of a step of `len` tokens at `positions` shares.
    fn step<'a>(&'a self, positions: &'a Positions, len: i32) -> Result<Step<'a>> {
        Ok(Step {
            rope: &self.rope,
            rotation: self.rope.prepare(positions)?,
            query_scale: match self.query_scale(positions, len)? {
                Some(s) => Some(s.as_dtype(self.scale_dtype)?),
                None => None,
            },
        })
    }

    fn query_scale(&self, positions: &Positions, len: i32) -> Result<Option<Array>> {
        let Some(s) = self.scaling else { return Ok(None) };
        let steps = ops::arange::<_, f32>(None, len, None)?;
        let at = match positions {
            Positions::Start(o) => steps.add(Array::from_f32(*o as f32))?.reshape(&[len, 1])?,
            Positions::PerRow(starts) => {
                let b = starts.dim(0);
                starts
                    .as_dtype(mlx_rs::Dtype::Float32)?
                    .reshape(&[b, 1])?
                    .add(steps.reshape(&[1, len])?)?
                    .reshape(&[b, 1, len, 1])?
            }
            Positions::Multimodal(_) => {
                return Err(Error::InvalidRequest(
                    "Ministral 3 takes no multimodal (M-RoPE) positions".into(),
                ))
            }
        };
        let periods = ops::floor(&at.divide(Array::from_f32(s.original_context))?)?;
        let scale = ops::log(&periods.add(Array::from_f32(1.0))?)?
            .multiply(Array::from_f32(s.beta))?
            .add(Array::from_f32(1.0))?;
        Ok(Some(scale))
    }
}

impl LanguageModel for Ministral3 {
    fn shape(&self) -> ModelShape {
        ModelShape {
            num_layers: self.stage.total(),
            kv_heads: self.args.kv_heads(),
            head_dim: self.args.head_dim(),
            vocab_size: self.args.vocab_size,
            max_context: self.args.max_position_embeddings.unwrap_or(32_768) as usize,
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
        let len = h.dim(1);
        cache.begin_step(len)?;
        let step = self.step(positions, len)?;
        // Where the caller reads one position per row, the last layer's
        // queries and MLP run on those alone (see ReadPositions).
        let whole = self.stage.is_whole();
        let read = ReadPositions::of_step(cache, positions, len, whole)?;
        let read_step = read.as_ref().map(|r| self.step(&r.positions, 1)).transpose()?;
        h = self.stage.enter(h, tokens)?;
        for (i, block) in self.stage.layers().zip(&self.layers) {
            let last = i + 1 == self.stage.total();
            let read = match (&read, &read_step) {
                (Some(r), Some(s)) if last => Some((&r.at, s)),
                _ => None,
            };
            let x = block.input_layernorm.forward(&h)?;
            let a = block.self_attn.forward(&x, i, &step, cache, read)?;
            if let Some((at, _)) = read {
                h = rows_at(&h, at)?;
            }
            h = h.add(a)?;
            h = h.add(block.mlp.forward(&block.post_attention_layernorm.forward(&h)?)?)?;
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

    /// Ministral 3 3B's `text_config` (the file
    /// `fixtures::ministral3_3b_text_config` reads too).
    fn ministral3_3b_text_config() -> Value {
        let text = include_str!("../../../tests/fixtures/configs/ministral3_3b_text.json");
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn every_layer_attends_fully_without_layer_types() {
        let args = TextArgs::parse(&ministral3_3b_text_config(), true).unwrap();
        let shapes = args.layer_shapes();
        assert_eq!(shapes.len(), 26);
        assert!(shapes.iter().all(|s| s.cache == LayerCache::Full));
        assert_eq!((shapes[0].kv_heads, shapes[0].key_dim), (8, 128));
        let scaling = args.scaling().unwrap().unwrap();
        assert_eq!(scaling, AttentionScaling { beta: 0.1, original_context: 16384.0 });
    }

    #[test]
    fn a_ministral3_config_without_the_scaling_keys_is_refused() {
        let mut config = ministral3_3b_text_config();
        config["rope_parameters"].as_object_mut().unwrap().remove("llama_4_scaling_beta");
        assert!(matches!(TextArgs::parse(&config, true), Err(Error::InvalidConfig(_))));
        // A plain `mistral` text config has no scaling at all.
        let mut config = ministral3_3b_text_config();
        config["model_type"] = json!("mistral");
        config.as_object_mut().unwrap().remove("rope_parameters");
        assert_eq!(TextArgs::parse(&config, false).unwrap().scaling().unwrap(), None);
    }
}
