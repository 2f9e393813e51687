//! The `llama` architecture (Llama 2/3.x, SmolLM2, Mistral-style dense
//! models): pre-norm decoder blocks with grouped-query attention, RoPE
//! (optionally Llama 3 frequency scaling) and a SwiGLU MLP.
//!
//! Qwen2 and the language half of Qwen2-VL / Qwen2.5-VL are this same decoder
//! with biases on the Q/K/V projections, other weight-name prefixes and (for
//! the VL models) M-RoPE; they build it through [`Llama::build`].
use mlx_rs::Array;
use serde::Deserialize;

use crate::cache::{BatchCache, CacheLayout, LayerCache};
use crate::distributed::StageLayers;
use crate::error::{Error, Result};
use crate::model::layers::attention::{ReadPositions, ReadQueries};
use crate::model::layers::moe::SparseMoe;
use crate::model::layers::rope::{Positions, Rope, RopeScaling, Rotation};
use crate::model::layers::{Embedding, LayerLoader, Linear, Projection, RmsNorm};
use crate::model::registry::Family;
use crate::model::shape::LayerShape;
use crate::model::{layers::attention, LanguageModel, ModelShape};
use crate::weights::gguf::GgufImport;

/// The registry entry: Llama 2/3.x, SmolLM2, Mistral-style dense models.
pub const FAMILY: Family = Family {
    name: "Llama",
    model_types: &["llama", "mistral"],
    build: |_, config, loader| Ok(Box::new(Llama::load(config, loader)?)),
    layers: |config| Ok(parse_args(config, "llama")?.layer_shapes()),
    gguf: Some(GgufImport {
        architecture: "llama",
        class_name: "LlamaForCausalLM",
        block_names: &[],
        config_keys: &[],
        permuted_qk: true,
        norm_plus_one: false,
        complete_config: None,
    }),
    image_processor: None,
    tensor_parallel: true,
};

/// The config.json fields this family reads (HF names and defaults).
#[derive(Debug, Clone, Deserialize)]
pub struct LlamaArgs {
    pub hidden_size: i32,
    pub num_hidden_layers: i32,
    pub intermediate_size: i32,
    pub num_attention_heads: i32,
    pub num_key_value_heads: Option<i32>,
    pub head_dim: Option<i32>,
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    #[serde(default = "default_rope_theta")]
    pub rope_theta: f32,
    #[serde(default)]
    pub rope_scaling: Option<RopeScaling>,
    #[serde(default)]
    pub rope_traditional: bool,
    #[serde(default = "default_tie")]
    pub tie_word_embeddings: bool,
    #[serde(default)]
    pub attention_bias: bool,
    #[serde(default)]
    pub mlp_bias: bool,
    #[serde(default = "default_context")]
    pub max_position_embeddings: i32,
}

/// Parses the decoder's fields, after lifting `rope_theta` and the scaling
/// out of `rope_parameters` (where transformers ≥ 5 nests them).
pub fn parse_args(config: &serde_json::Value, family: &str) -> Result<LlamaArgs> {
    let mut config = config.clone();
    if let Some(map) = config.as_object_mut() {
        if let Some(params) = map.get("rope_parameters").cloned() {
            if let Some(theta) = params.get("rope_theta") {
                map.entry("rope_theta").or_insert(theta.clone());
            }
            let kind =
                params.get("rope_type").or_else(|| params.get("type")).and_then(|t| t.as_str());
            if kind.is_some_and(|k| k != "default")
                && map.get("rope_scaling").is_none_or(|s| s.is_null())
            {
                map.insert("rope_scaling".into(), params);
            }
        }
    }
    serde_json::from_value(config)
        .map_err(|e| Error::InvalidConfig(format!("{family} config.json: {e}")))
}

fn default_rope_theta() -> f32 {
    10000.0
}
fn default_tie() -> bool {
    true
}
fn default_context() -> i32 {
    4096
}

impl LlamaArgs {
    /// Every layer attends to the whole context.
    pub fn layer_shapes(&self) -> Vec<LayerShape> {
        let layer = LayerShape::attention(LayerCache::Full, self.kv_heads(), self.head_dim());
        vec![layer; self.num_hidden_layers.max(0) as usize]
    }
    pub fn kv_heads(&self) -> i32 {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }
    pub fn head_dim(&self) -> i32 {
        self.head_dim.unwrap_or(self.hidden_size / self.num_attention_heads)
    }
    fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidConfig(m));
        if self.num_attention_heads <= 0
            || self.kv_heads() <= 0
            || self.num_attention_heads % self.kv_heads() != 0
        {
            return bad(format!(
                "num_attention_heads {} must be a positive multiple of num_key_value_heads {}",
                self.num_attention_heads,
                self.kv_heads()
            ));
        }
        if self.head_dim.is_none() && self.hidden_size % self.num_attention_heads != 0 {
            return bad(format!(
                "hidden_size {} is not divisible by num_attention_heads",
                self.hidden_size
            ));
        }
        if self.num_hidden_layers <= 0 || self.vocab_size <= 0 {
            return bad("num_hidden_layers and vocab_size must be positive".into());
        }
        Ok(())
    }
}

struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Projection,
    /// RMSNorm over each head's queries and keys before RoPE (Qwen3).
    qk_norm: Option<(RmsNorm, RmsNorm)>,
    /// The heads this process computes (all of them, or its tensor-parallel share).
    heads: i32,
    kv_heads: i32,
    head_dim: i32,
    scale: f32,
}

impl Attention {
    /// With `read`, keys and values of all `L` positions go to the cache but
    /// the queries, and so the output `[B, 1, D]`, are the read positions'.
    fn forward(
        &self,
        x: &Array,
        layer: usize,
        rope: &Rope,
        rotation: &Rotation,
        cache: &mut BatchCache,
        read: Option<&ReadQueries>,
    ) -> Result<Array> {
        let split_heads = |t: Array, heads: i32| -> Result<Array> {
            let (b, l) = (t.dim(0), t.dim(1));
            Ok(t.reshape(&[b, l, heads, self.head_dim])?.transpose_axes(&[0, 2, 1, 3])?)
        };
        let (queries, query_rotation) = match read {
            Some(read) => (read.rows(x)?, read.rotation),
            None => (x.clone(), rotation),
        };
        let (b, l) = (queries.dim(0), queries.dim(1));
        let mut q = split_heads(self.q_proj.forward(&queries)?, self.heads)?;
        let mut k = split_heads(self.k_proj.forward(x)?, self.kv_heads)?;
        let v = split_heads(self.v_proj.forward(x)?, self.kv_heads)?;
        if let Some((q_norm, k_norm)) = &self.qk_norm {
            q = q_norm.forward(&q)?;
            k = k_norm.forward(&k)?;
        }
        let q = rope.rotate(&q, query_rotation)?;
        let k = rope.rotate(&k, rotation)?;
        let (kv, mask) = cache.update(layer, &k, &v)?;
        let mask = match read {
            Some(read) => read.mask(&mask, k.dim(2), &kv)?,
            None => mask,
        };
        let o = attention::attend(&q, kv, self.scale, &mask)?;
        let o = o.transpose_axes(&[0, 2, 1, 3])?.reshape(&[b, l, self.heads * self.head_dim])?;
        self.o_proj.forward(&o)
    }
}

/// The SwiGLU MLP: `down(silu(gate(x)) · up(x))`.
/// Under tensor parallelism each rank holds a share of the intermediate
/// columns (gate and up by output, down by input, then a sum over ranks).
pub struct Mlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Projection,
}

impl Mlp {
    pub fn load(
        loader: &mut LayerLoader,
        path: &str,
        hidden: i32,
        intermediate: i32,
        bias: bool,
    ) -> Result<Self> {
        Ok(Self {
            gate_proj: loader.linear_all_to_sharded(
                &format!("{path}.gate_proj"),
                hidden,
                intermediate,
                bias,
            )?,
            up_proj: loader.linear_all_to_sharded(
                &format!("{path}.up_proj"),
                hidden,
                intermediate,
                bias,
            )?,
            down_proj: loader.linear_sharded_to_all(
                &format!("{path}.down_proj"),
                intermediate,
                hidden,
                bias,
            )?,
        })
    }

    pub fn forward(&self, x: &Array) -> Result<Array> {
        let h =
            crate::model::layers::swiglu(&self.gate_proj.forward(x)?, &self.up_proj.forward(x)?)?;
        self.down_proj.forward(&h)
    }
}

/// A block's feed-forward part: a dense MLP, or a mixture of experts.
pub enum FeedForward {
    Dense(Mlp),
    Experts(SparseMoe),
}

impl FeedForward {
    fn forward(&self, x: &Array) -> Result<Array> {
        match self {
            FeedForward::Dense(m) => m.forward(x),
            FeedForward::Experts(m) => m.forward(x),
        }
    }
}

struct Block {
    input_layernorm: RmsNorm,
    self_attn: Attention,
    post_attention_layernorm: RmsNorm,
    mlp: FeedForward,
}

/// What differs between the families that share this decoder.
pub struct DecoderLayout {
    /// Prefix of the decoder's tensors: `model` (`model.embed_tokens`,
    /// `model.layers.N`, `model.norm`).
    pub prefix: String,
    /// The untied output head (`lm_head`).
    pub lm_head: String,
    /// Biases on the Q, K and V projections (Qwen2), independent of
    /// `attention_bias`, which puts one on all four projections (Llama).
    pub qkv_bias: bool,
    /// RMSNorm of each head's queries and keys (`q_norm`, `k_norm`; Qwen3).
    pub qk_norm: bool,
}

impl DecoderLayout {
    pub fn llama() -> Self {
        Self { prefix: "model".into(), lm_head: "lm_head".into(), qkv_bias: false, qk_norm: false }
    }
}

pub struct Llama {
    args: LlamaArgs,
    /// The KV heads this process keeps (its tensor-parallel share, or all).
    local_kv_heads: i32,
    embed_tokens: Embedding,
    /// The layers this process runs (all, or its pipeline stage), in order.
    layers: Vec<Block>,
    stage: StageLayers,
    norm: RmsNorm,
    /// `None` when the output head is tied to the embedding.
    lm_head: Option<Linear>,
    rope: Rope,
    /// Split across ranks by heads: every rank must run the same positions.
    tensor_parallel: bool,
}

impl Llama {
    pub fn load(config: &serde_json::Value, loader: &mut LayerLoader) -> Result<Self> {
        let args = parse_args(config, "llama")?;
        let rope = Rope::new(
            args.head_dim(),
            args.rope_theta,
            args.rope_traditional,
            args.rope_scaling.as_ref(),
        )?;
        Self::build(args, &DecoderLayout::llama(), rope, loader)
    }

    /// The decoder from parsed arguments, a weight layout and the rotary
    /// embedding (ordinary RoPE or M-RoPE).
    pub fn build(
        args: LlamaArgs,
        layout: &DecoderLayout,
        rope: Rope,
        loader: &mut LayerLoader,
    ) -> Result<Self> {
        let intermediate = args.intermediate_size;
        let bias = args.mlp_bias;
        let dense = |loader: &mut LayerLoader, path: &str, _layer: i32, hidden: i32| {
            Ok(FeedForward::Dense(Mlp::load(loader, path, hidden, intermediate, bias)?))
        };
        Self::build_with(args, layout, rope, loader, dense)
    }

    /// [`Self::build`] with each block's feed-forward part built by
    /// `feed_forward(loader, "<prefix>.layers.N.mlp", N, hidden_size)`.
    pub fn build_with(
        args: LlamaArgs,
        layout: &DecoderLayout,
        rope: Rope,
        loader: &mut LayerLoader,
        feed_forward: impl Fn(&mut LayerLoader, &str, i32, i32) -> Result<FeedForward>,
    ) -> Result<Self> {
        args.validate()?;
        let (d, hd) = (args.hidden_size, args.head_dim());
        let (heads, kv_heads) = (args.num_attention_heads, args.kv_heads());
        // Tensor parallel: whole heads per rank (q/k/v split by heads, o_proj
        // by the same columns), so attention needs no exchange until o_proj.
        let (local_heads, local_kv_heads) = match &loader.tensor_parallel {
            Some(tp) => (
                tp.share("num_attention_heads", heads)?.len() as i32,
                tp.share("num_key_value_heads", kv_heads)?.len() as i32,
            ),
            None => (heads, kv_heads),
        };
        let m = &layout.prefix;
        let embed_tokens = loader.embedding(&format!("{m}.embed_tokens"), args.vocab_size, d)?;
        let stage = loader.layer_stage(args.num_hidden_layers as usize, None)?;
        let mut layers = Vec::with_capacity(stage.layers().len());
        for i in stage.layers().map(|i| i as i32) {
            let p = format!("{m}.layers.{i}");
            let ab = args.attention_bias;
            let qkv_b = ab || layout.qkv_bias;
            let qk_norm = if layout.qk_norm {
                Some((
                    loader.rms_norm(&format!("{p}.self_attn.q_norm"), hd, args.rms_norm_eps)?,
                    loader.rms_norm(&format!("{p}.self_attn.k_norm"), hd, args.rms_norm_eps)?,
                ))
            } else {
                None
            };
            layers.push(Block {
                input_layernorm: loader.rms_norm(
                    &format!("{p}.input_layernorm"),
                    d,
                    args.rms_norm_eps,
                )?,
                self_attn: Attention {
                    q_proj: loader.linear_all_to_sharded(
                        &format!("{p}.self_attn.q_proj"),
                        d,
                        heads * hd,
                        qkv_b,
                    )?,
                    k_proj: loader.linear_all_to_sharded(
                        &format!("{p}.self_attn.k_proj"),
                        d,
                        kv_heads * hd,
                        qkv_b,
                    )?,
                    v_proj: loader.linear_all_to_sharded(
                        &format!("{p}.self_attn.v_proj"),
                        d,
                        kv_heads * hd,
                        qkv_b,
                    )?,
                    o_proj: loader.linear_sharded_to_all(
                        &format!("{p}.self_attn.o_proj"),
                        heads * hd,
                        d,
                        ab,
                    )?,
                    qk_norm,
                    heads: local_heads,
                    kv_heads: local_kv_heads,
                    head_dim: hd,
                    scale: (hd as f32).powf(-0.5),
                },
                post_attention_layernorm: loader.rms_norm(
                    &format!("{p}.post_attention_layernorm"),
                    d,
                    args.rms_norm_eps,
                )?,
                mlp: feed_forward(loader, &format!("{p}.mlp"), i, d)?,
            });
        }
        let norm = loader.rms_norm(&format!("{m}.norm"), d, args.rms_norm_eps)?;
        // Some tied checkpoints still ship a copy of the head: use it if present.
        let head = &layout.lm_head;
        let lm_head =
            if !args.tie_word_embeddings || loader.weights.contains(&format!("{head}.weight")) {
                Some(loader.linear(head, d, args.vocab_size, false)?)
            } else {
                None
            };
        let tensor_parallel = loader.tensor_parallel.is_some();
        Ok(Self {
            args,
            local_kv_heads,
            embed_tokens,
            layers,
            stage,
            norm,
            lm_head,
            rope,
            tensor_parallel,
        })
    }
}

impl LanguageModel for Llama {
    fn shape(&self) -> ModelShape {
        ModelShape {
            num_layers: self.args.num_hidden_layers as usize,
            kv_heads: self.local_kv_heads,
            head_dim: self.args.head_dim(),
            vocab_size: self.args.vocab_size,
            max_context: self.args.max_position_embeddings as usize,
        }
    }

    fn cache_layout(&self) -> CacheLayout {
        CacheLayout::full(self.stage.total())
    }

    fn embed(&self, tokens: &Array) -> Result<Array> {
        self.embed_tokens.forward(tokens)
    }

    fn forward_embeddings(
        &self,
        h: Array,
        tokens: &Array,
        positions: &Positions,
        cache: &mut BatchCache,
    ) -> Result<Array> {
        self.forward_embeddings_adding(h, tokens, positions, cache, &[])
    }

    fn forward_embeddings_adding(
        &self,
        mut h: Array,
        tokens: &Array,
        positions: &Positions,
        cache: &mut BatchCache,
        after_layer: &[Array],
    ) -> Result<Array> {
        if after_layer.len() > self.stage.total() {
            return Err(Error::InvalidRequest(format!(
                "{} DeepStack levels for a model of {} layers",
                after_layer.len(),
                self.stage.total()
            )));
        }
        cache.begin_step(h.dim(1))?;
        // M-RoPE angles are computed once per step, not once per layer.
        let rotation = self.rope.prepare(positions)?;
        // Where the caller reads one position per row, the last layer's
        // queries and MLP run on those positions alone: its other outputs
        // reach no cache and no reader. Only in a whole model: a split one's
        // other ranks run the whole pass.
        let whole = !self.tensor_parallel && self.stage.is_whole();
        let read = ReadPositions::of_step(cache, positions, h.dim(1), whole)?;
        let read_rotation = read.as_ref().map(|r| self.rope.prepare(&r.positions)).transpose()?;
        let read = read.as_ref().zip(read_rotation.as_ref());
        let read = read.map(|(read, rotation)| ReadQueries { at: &read.at, rotation });
        h = self.stage.enter(h, tokens)?;
        for (i, block) in self.stage.layers().zip(&self.layers) {
            let read = read.as_ref().filter(|_| i + 1 == self.stage.total());
            let x = block.input_layernorm.forward(&h)?;
            let a = block.self_attn.forward(&x, i, &self.rope, &rotation, cache, read)?;
            if let Some(read) = read {
                h = read.rows(&h)?;
            }
            h = h.add(a)?;
            let m = block.mlp.forward(&block.post_attention_layernorm.forward(&h)?)?;
            h = h.add(m)?;
            if let Some(extra) = after_layer.get(i) {
                let extra = match read {
                    Some(read) => read.rows(extra)?,
                    None => extra.clone(),
                };
                h = h.add(extra.as_dtype(h.dtype())?)?;
            }
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

    fn head_rows(&self, ids: &Array) -> Option<Result<Linear>> {
        if self.tensor_parallel || !self.stage.is_whole() {
            return None;
        }
        let (weight, bias) = match &self.lm_head {
            Some(head) => (&head.weight, head.bias.as_ref()),
            None => (&self.embed_tokens.table, None),
        };
        let rows = || -> Result<Linear> {
            let bias = match bias {
                Some(b) => Some(b.take_axis(ids, 0)?),
                None => None,
            };
            Ok(Linear { weight: weight.select_rows(ids)?, bias })
        };
        Some(rows())
    }
}
