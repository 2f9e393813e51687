//! Gemma 4's assistant drafter (`model_type: "gemma4_assistant"`, the
//! drafter folders Google ships beside Gemma 4 and mlx-vlm loads as
//! `drafters/gemma4_assistant`): a small stack of Gemma 4 decoder layers
//! that keep no keys or values of their own. Each reads the target's: the
//! keys and values of the target's last layer of its kind (sliding or full
//! attention), what the target's KV-shared layers read too.
//!
//! One draft: the target's embedding of the row's last token (scaled as
//! the target scales it) joined with a hidden state (`pre_projection`,
//! `2·D_target → D`), the layers, the final norm; its own tied embedding
//! table (or, with `use_ordered_embeddings`, a centroid-routed head: the
//! `centroid_intermediate_top_k` best of `num_centroids` clusters of tokens,
//! scored alone) picks the token, and `post_projection` (`D → D_target`)
//! gives the hidden state of the next draft. The first draft starts from the
//! target's final-normed hidden state before the last token. Every draft's
//! query sits at that same position (the last one in the target's cache)
//! and sees every key in the target's cache (within the window for a
//! sliding layer): the drafts never enter a cache, so a row's rounds need
//! nothing undone.
use mlx_rs::{ops, ops::indexing::IndexOp, Array};
use serde::Deserialize;
use serde_json::Value;

use super::{layer_scalar, Gemma4Args, Mlp, Norms};
use crate::cache::{BatchCache, LayerCache};
use crate::error::{Error, Result};
use crate::model::layers::attention;
use crate::model::layers::rope::{Positions, Rope};
use crate::model::layers::{Embedding, LayerLoader, Linear, RmsNorm};
use crate::model::{KvDrafter, LanguageModel};

/// config.json of an assistant folder (beside `text_config`).
#[derive(Debug, Deserialize)]
struct AssistantConfig {
    backbone_hidden_size: i32,
    #[serde(default)]
    use_ordered_embeddings: bool,
    #[serde(default = "default_centroids")]
    num_centroids: i32,
    #[serde(default = "default_top_k")]
    centroid_intermediate_top_k: i32,
    #[serde(default = "default_true")]
    tie_word_embeddings: bool,
}

fn default_centroids() -> i32 {
    2048
}
fn default_top_k() -> i32 {
    32
}
fn default_true() -> bool {
    true
}

struct Layer {
    norms: Norms,
    q_proj: Linear,
    q_norm: RmsNorm,
    o_proj: Linear,
    heads: i32,
    head_dim: i32,
    global: bool,
    mlp: Mlp,
    layer_scalar: Option<Array>,
}

/// The centroid-routed head of the E2B / E4B assistants.
struct OrderedHead {
    centroids: Linear,
    /// `[num_centroids, vocab / num_centroids]`: each cluster's token ids.
    ordering: Array,
    top_k: i32,
}

pub struct Assistant {
    embed_tokens: Embedding,
    pre_projection: Linear,
    post_projection: Linear,
    layers: Vec<Layer>,
    norm: RmsNorm,
    lm_head: Option<Linear>,
    ordered: Option<OrderedHead>,
    local_rope: Rope,
    global_rope: Rope,
    /// The target's layer each kind reads: its last sliding and last full layer.
    sliding_source: Option<usize>,
    full_source: Option<usize>,
}

/// The assistant in `config` for a target of hidden size `target_hidden`,
/// vocabulary `target_vocab` and the cache layout `target_layout` (per
/// layer: full, sliding or shared): refused, saying why, when it was made
/// for another model.
pub fn load(
    config: &Value,
    loader: &mut LayerLoader,
    target_hidden: i32,
    target_vocab: i32,
    target_layout: &[LayerCache],
) -> Result<Assistant> {
    let top: AssistantConfig = serde_json::from_value(config.clone())
        .map_err(|e| Error::InvalidConfig(format!("gemma4_assistant config.json: {e}")))?;
    let text = config.get("text_config").filter(|t| t.is_object()).ok_or_else(|| {
        Error::InvalidConfig("gemma4_assistant config.json has no text_config".into())
    })?;
    // Not `Gemma4Args::parse`: every layer here reads another's keys.
    let args: Gemma4Args = serde_json::from_value(text.clone())
        .map_err(|e| Error::InvalidConfig(format!("gemma4_assistant text_config: {e}")))?;
    if (top.backbone_hidden_size, args.vocab_size) != (target_hidden, target_vocab) {
        return Err(Error::InvalidRequest(format!(
            "the assistant drafts for a model of hidden size {} and vocabulary {}, but the model \
             has hidden size {target_hidden} and vocabulary {target_vocab}: use the assistant made \
             for this model",
            top.backbone_hidden_size, args.vocab_size
        )));
    }
    // The target's last layer of each kind (a shared layer reads its source).
    let kind = |i: usize| match target_layout[i] {
        LayerCache::Shared { source } => &target_layout[source],
        ref other => other,
    };
    let last = |full: bool| {
        (0..target_layout.len()).rev().find(|&i| match kind(i) {
            LayerCache::Full => full,
            LayerCache::Sliding { .. } => !full,
            _ => false,
        })
    };
    let (sliding_source, full_source) = (last(false), last(true));
    let (d, eps) = (args.hidden_size, args.rms_norm_eps);
    let mut layers = Vec::with_capacity(args.num_hidden_layers.max(0) as usize);
    for i in 0..args.num_hidden_layers.max(0) as usize {
        let global = args.is_global(i);
        if (global && full_source.is_none()) || (!global && sliding_source.is_none()) {
            return Err(Error::InvalidRequest(format!(
                "the assistant's layer {i} reads the model's last {} layer, and the model has none",
                if global { "full-attention" } else { "sliding-window" }
            )));
        }
        let p = format!("model.layers.{i}");
        let a = format!("{p}.self_attn");
        let hd = args.head_dim_of(global);
        let heads = args.num_attention_heads;
        let m = format!("{p}.mlp");
        let ff = args.intermediate_size;
        layers.push(Layer {
            norms: Norms::load(loader, &p, d, eps)?,
            q_proj: loader.linear(&format!("{a}.q_proj"), d, heads * hd, false)?,
            q_norm: loader.rms_norm(&format!("{a}.q_norm"), hd, eps)?,
            o_proj: loader.linear(&format!("{a}.o_proj"), heads * hd, d, false)?,
            heads,
            head_dim: hd,
            global,
            mlp: Mlp::load(loader, &m, d, ff)?,
            layer_scalar: layer_scalar(loader, &p)?,
        });
    }
    let vocab = args.vocab_size;
    let ordered = if top.use_ordered_embeddings {
        let per = vocab / top.num_centroids.max(1);
        if per * top.num_centroids != vocab {
            return Err(Error::InvalidConfig(format!(
                "num_centroids {} does not divide the vocabulary {vocab}",
                top.num_centroids
            )));
        }
        let ordering = loader
            .weights
            .take("masked_embedding.token_ordering", &[vocab])?
            .as_dtype(mlx_rs::Dtype::Int32)?
            .reshape(&[top.num_centroids, per])?;
        Some(OrderedHead {
            centroids: loader.linear("masked_embedding.centroids", d, top.num_centroids, false)?,
            ordering,
            top_k: top.centroid_intermediate_top_k.min(top.num_centroids),
        })
    } else {
        None
    };
    if top.tie_word_embeddings {
        loader.weights.remove("lm_head.weight");
    }
    let lm_head = if top.tie_word_embeddings {
        None
    } else {
        Some(loader.linear("lm_head", d, vocab, false)?)
    };
    Ok(Assistant {
        embed_tokens: loader.embedding("model.embed_tokens", vocab, d)?,
        pre_projection: loader.linear("pre_projection", 2 * target_hidden, d, false)?,
        post_projection: loader.linear("post_projection", d, target_hidden, false)?,
        layers,
        norm: loader.rms_norm("model.norm", d, eps)?,
        lm_head,
        ordered,
        local_rope: args.rope(false)?,
        global_rope: args.rope(true)?,
        sliding_source,
        full_source,
    })
}

impl Assistant {
    /// One draft for every row: `[B, 1, D]` → the next token `[B, 1]` and
    /// the hidden state of the draft after it `[B, 1, D_target]`.
    fn step(
        &self,
        input: &Array,
        positions: &Positions,
        cache: &BatchCache,
    ) -> Result<(Array, Array)> {
        let mut h = self.pre_projection.forward(input)?;
        let local = self.local_rope.prepare(positions)?;
        let global = self.global_rope.prepare(positions)?;
        let b = h.dim(0);
        for layer in &self.layers {
            let (rope, rotation, source) = if layer.global {
                (&self.global_rope, &global, self.full_source)
            } else {
                (&self.local_rope, &local, self.sliding_source)
            };
            let (kv, mask) = cache.peek(source.expect("checked at load"))?;
            let x = layer.norms.input.forward(&h)?;
            let q = layer.q_proj.forward(&x)?.reshape(&[b, 1, layer.heads, layer.head_dim])?;
            let q = layer.q_norm.forward(&q)?.transpose_axes(&[0, 2, 1, 3])?;
            let q = rope.rotate(&q, rotation)?;
            let o = attention::attend(&q, kv, 1.0, &mask)?;
            let o =
                o.transpose_axes(&[0, 2, 1, 3])?.reshape(&[b, 1, layer.heads * layer.head_dim])?;
            let a = layer.o_proj.forward(&o)?;
            h = h.add(layer.norms.post_attention.forward(&a)?)?;
            let m = layer.mlp.forward(&layer.norms.pre_feedforward.forward(&h)?)?;
            h = h.add(layer.norms.post_feedforward.forward(&m)?)?;
            if let Some(s) = &layer.layer_scalar {
                h = h.multiply(s)?;
            }
        }
        let h = self.norm.forward(&h)?;
        let token = match (&self.ordered, &self.lm_head) {
            (Some(head), _) => head.argmax(&self.embed_tokens, &h)?,
            (None, Some(lm_head)) => ops::indexing::argmax_axis(&lm_head.forward(&h)?, -1, false)?,
            (None, None) => {
                ops::indexing::argmax_axis(&self.embed_tokens.as_linear(&h)?, -1, false)?
            }
        };
        Ok((token.as_dtype(mlx_rs::Dtype::Int32)?, self.post_projection.forward(&h)?))
    }
}

impl OrderedHead {
    /// The best token among the best clusters' tokens only, scored against
    /// `table` (the assistant's tied embeddings): `[B, 1, D]` → `[B, 1]`.
    /// As mlx-vlm's `MaskedEmbedder.argmax` (what its greedy drafts use):
    /// the clusters are the `top_k` best by `centroids` (MLX's
    /// argpartition, in the order it leaves them), their tokens in
    /// `ordering`'s order, and a tie between two tokens goes to the first
    /// in that order. Its sampling path, which fills the tokens left out
    /// with a score below every routed one, is not needed: every row's
    /// drafts are greedy (a sampling row verifies them as one-hot guesses).
    fn argmax(&self, table: &Embedding, h: &Array) -> Result<Array> {
        let (b, d) = (h.dim(0), h.dim(-1));
        let scores = self.centroids.forward(h)?.reshape(&[b, -1])?;
        let n = scores.dim(-1);
        let best =
            ops::argpartition_axis(&scores, n - self.top_k, -1)?.index((.., (n - self.top_k)..));
        // `[B, top_k · per]` candidate ids, their embeddings, their scores.
        let ids = self.ordering.take_axis(&best.flatten(None, None)?, 0)?.reshape(&[b, -1])?;
        let rows = table.forward(&ids)?; // [B, C, D]
        let scores = rows.matmul(&h.reshape(&[b, d, 1])?)?.reshape(&[b, -1])?;
        let pick = ops::indexing::argmax_axis(&scores, -1, true)?;
        Ok(ids.take_along_axis(&pick, -1)?.reshape(&[b, 1])?)
    }
}

impl KvDrafter for Assistant {
    fn draft(
        &self,
        target: &dyn LanguageModel,
        cache: &BatchCache,
        tokens: &Array,
        hidden: &Array,
        positions: &[i32],
        count: usize,
    ) -> Result<Array> {
        let positions = Positions::rows(positions);
        let (mut token, mut hidden) = (tokens.clone(), hidden.clone());
        let mut drafts = Vec::with_capacity(count);
        for _ in 0..count {
            let input = ops::concatenate(&[target.embed(&token)?, hidden], -1)?;
            let (next, h) = self.step(&input, &positions, cache)?;
            drafts.push(next.clone());
            token = next;
            hidden = h;
        }
        Ok(ops::concatenate(&drafts, 1)?)
    }
}

#[cfg(test)]
mod tests {
    use mlx_rs::{Array, Dtype};

    use super::OrderedHead;
    use crate::model::layers::{Embedding, Linear, Matrix};

    /// Six tokens in three clusters of two, the best two clusters routed:
    /// the draft is the best routed token, not the best of the whole table
    /// when its cluster is not routed, per row of a batch.
    #[test]
    fn the_draft_is_the_best_token_of_the_routed_clusters() {
        // Token t's score against h = [x, 0] is x · table[t][0].
        let table: [f32; 12] = [1., 0., 2., 0., 9., 0., 0., 0., 3., 0., 5., 0.];
        let table = Embedding {
            table: Matrix::Float(Array::from_slice(&table, &[6, 2])),
            dtype: Dtype::Float32,
        };
        let head = OrderedHead {
            // Cluster c's score against h = [x, 0]: x · (3, 2, 1)[c].
            centroids: Linear {
                weight: Matrix::Float(Array::from_slice(&[3f32, 0., 2., 0., 1., 0.], &[3, 2])),
                bias: None,
            },
            ordering: Array::from_slice(&[4i32, 1, 0, 5, 2, 3], &[3, 2]),
            top_k: 2,
        };
        let h = Array::from_slice(&[1f32, 0., -1., 0.], &[2, 1, 2]);
        let drafts = head.argmax(&table, &h).unwrap();
        assert_eq!(drafts.shape(), &[2, 1]);
        // Row 0: clusters 0 and 1 routed (tokens 4, 1, 0, 5): 5 scores 5,
        // where token 2 (9, cluster 2) is left out. Row 1 (scores negated):
        // clusters 2 and 1 routed (2, 3, 0, 5): 3 scores 0, the best.
        assert_eq!(drafts.as_slice::<i32>(), &[5, 3]);
    }
}
