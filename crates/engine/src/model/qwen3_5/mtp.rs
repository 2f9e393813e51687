//! Qwen3.5's multi-token-prediction head (the checkpoint's `mtp.*` tensors):
//! a drafter the model was trained with. For position `i` it reads the
//! target's final-normed hidden state there and the embedding of token
//! `i + 1`, each RMS-normed, joins them (`fc`, `2D → D`), runs them through
//! its own full-attention decoder layer(s) with a cache of their own, and
//! norms the result: the target's `lm_head` over it guesses token `i + 2`.
//! Fed its own output as the next hidden state it guesses further ahead.
//!
//! Hugging Face checkpoints store its norms as `w − 1` like the decoder's
//! (mlx-vlm's `qwen3_5_mtp` reads them the same way).
//!
//! The head also comes alone, in the folder mlx-vlm's splitter writes
//! (`python -m mlx_vlm.split_mtp`): config.json with `model_type:
//! "qwen3_5_mtp"` and the target's `text_config`, its tensors without the
//! `mtp.` prefix and its norms already plain ([`load_split`]).
use mlx_rs::{ops, Array};
use serde_json::Value;

use super::{Block, Norms, Qwen35Args};
use crate::cache::{BatchCache, CacheLayout, LayerCache};
use crate::error::{Error, Result};
use crate::model::layers::rope::{Positions, Rope};
use crate::model::layers::{LayerLoader, Linear, RmsNorm};
use crate::model::DraftHead;

pub struct MtpHead {
    fc: Linear,
    pre_fc_norm_embedding: RmsNorm,
    pre_fc_norm_hidden: RmsNorm,
    layers: Vec<Block>,
    norm: RmsNorm,
    rope: Rope,
}

impl MtpHead {
    /// The head, when the checkpoint has one (`{prefix}fc.weight`; the
    /// prefix is `mtp.` in the model's own checkpoint, empty in a split folder).
    pub(super) fn load(
        loader: &mut LayerLoader,
        args: &Qwen35Args,
        norms: &Norms,
        prefix: &str,
    ) -> Result<Option<Self>> {
        if !loader.weights.contains(&format!("{prefix}fc.weight")) {
            return Ok(None);
        }
        let d = args.hidden_size;
        let layers = (0..args.mtp_num_hidden_layers.max(1))
            .map(|j| Block::load(loader, args, norms, &format!("{prefix}layers.{j}"), false))
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(Self {
            fc: loader.linear(&format!("{prefix}fc"), 2 * d, d, false)?,
            pre_fc_norm_embedding: norms.load(
                loader,
                &format!("{prefix}pre_fc_norm_embedding"),
                d,
            )?,
            pre_fc_norm_hidden: norms.load(loader, &format!("{prefix}pre_fc_norm_hidden"), d)?,
            layers,
            norm: norms.load(loader, &format!("{prefix}norm"), d)?,
            rope: args.rope()?,
        }))
    }
}

/// The head of mlx-vlm's split drafter folder (`model_type: "qwen3_5_mtp"`),
/// for a target whose hidden states are `target_hidden` wide over a
/// vocabulary of `target_vocab`: refused, naming both, when it was split
/// from a model of another size.
pub fn load_split(
    config: &Value,
    loader: &mut LayerLoader,
    target_hidden: i32,
    target_vocab: i32,
) -> Result<MtpHead> {
    let args = Qwen35Args::parse(config)?;
    if (args.hidden_size, args.vocab_size) != (target_hidden, target_vocab) {
        return Err(Error::InvalidRequest(format!(
            "the multi-token-prediction head was split from a model of hidden size {} and \
             vocabulary {}, but the model has hidden size {target_hidden} and vocabulary \
             {target_vocab}: use the head split from this model",
            args.hidden_size, args.vocab_size
        )));
    }
    // The splitter writes plain norm weights (it adds 1 to Hugging Face's).
    let norms = Norms { plus_one: false, eps: args.rms_norm_eps };
    MtpHead::load(loader, &args, &norms, "")?.ok_or_else(|| {
        Error::InvalidConfig("a qwen3_5_mtp folder without fc.weight: not a split head".into())
    })
}

impl DraftHead for MtpHead {
    fn cache_layout(&self) -> CacheLayout {
        let full = vec![LayerCache::Full; self.layers.len()];
        CacheLayout::new(full).expect("full layers only")
    }

    fn forward(
        &self,
        next_embeddings: &Array,
        hidden: &Array,
        positions: &Positions,
        cache: &mut BatchCache,
    ) -> Result<Array> {
        let joined = ops::concatenate(
            &[
                self.pre_fc_norm_embedding.forward(next_embeddings)?,
                self.pre_fc_norm_hidden.forward(hidden)?,
            ],
            -1,
        )?;
        let mut h = self.fc.forward(&joined)?;
        cache.begin_step(h.dim(1))?;
        let rotation = self.rope.prepare(positions)?;
        for (j, layer) in self.layers.iter().enumerate() {
            h = layer.forward(h, j, (&self.rope, &rotation), cache)?;
        }
        cache.finish_step()?;
        self.norm.forward(&h)
    }
}
