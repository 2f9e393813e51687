//! Model families behind one trait, the registry that maps a checkpoint's
//! `model_type` to its family, and loading a model from what users download
//! (a Hugging Face / mlx-community folder or a `.gguf` file).
//!
//! A new family is one folder (its text model, vision tower, `Family` rows with
//! their layer shapes) plus one line in [`registry::FAMILIES`]; what families
//! share lives in [`layers`].
pub(crate) mod gemma3;
pub(crate) mod gemma4;
pub(crate) mod gpt_oss;
pub(crate) mod language_model_only;
pub mod layers;
pub mod lfm2;
pub mod lfm2_moe;
pub mod lfm2_vl;
pub(crate) mod llama;
pub mod loading;
pub(crate) mod mistral3;
pub(crate) mod prompt_images;
pub(crate) mod prompt_inputs;
pub(crate) mod qwen2;
pub mod qwen2_vl;
pub(crate) mod qwen3;
pub(crate) mod qwen3_5;
pub(crate) mod qwen3_moe;
pub mod qwen3_vl;
pub mod registry;
pub mod shape;
pub(crate) mod smolvlm;
pub(crate) mod split_group;
pub(crate) mod vision_tower;
pub mod with_vision;

use std::path::PathBuf;

use mlx_rs::Array;

use crate::cache::{BatchCache, CacheLayout, KvQuantization};
use crate::error::Result;
use crate::tokenizer::Tokenizer;
pub use layers::rope::Positions;
pub use layers::WeightFormat;
pub use loading::{
    load, load_assistant, load_draft_head, load_pipeline, load_share, load_tensor_parallel,
    load_with_draft_head, LoadOptions, Share,
};
pub use prompt_images::PromptImages;
pub use prompt_inputs::{ModelInputs, PromptChunk};
pub use registry::{describe, describe_folder, shape_of, Family, FolderInfo};
pub use shape::{ArchitectureShape, LayerShape};
pub use split_group::SplitGroup;
pub use vision_tower::{VisionEncoding, VisionTower};

/// Sizes the engine needs to plan caches and validate requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelShape {
    pub num_layers: usize,
    pub kv_heads: i32,
    /// The head size of the layers KV quantization applies to.
    pub head_dim: i32,
    pub vocab_size: i32,
    /// The longest context the model was trained for (`max_position_embeddings`).
    pub max_context: usize,
}

/// A model's own draft head: from the target's final-normed hidden state
/// at position `i` (`[B, L, D]`) and the embeddings of the tokens at `i + 1`,
/// a hidden state whose logits ([`LanguageModel::logits`]) guess the token at
/// `i + 2`; fed its own output as the next hidden state, it guesses on. It
/// keeps a cache of its own, one entry per position it read.
pub trait DraftHead {
    fn cache_layout(&self) -> CacheLayout;

    fn forward(
        &self,
        next_embeddings: &Array,
        hidden: &Array,
        positions: &Positions,
        cache: &mut BatchCache,
    ) -> Result<Array>;
}

/// A drafter that keeps no cache of its own and reads the target's (Gemma
/// 4's assistant): from each row's last token `tokens` `[B, 1]` and the
/// target's final-normed hidden state before it `hidden` `[B, 1, D]`, at
/// `positions` (per row, the position of that hidden state), it guesses
/// `count` tokens `[B, count]` (int32), one pass each, attending to the
/// target's `cache` (read only, [`BatchCache::peek`]).
pub trait KvDrafter {
    fn draft(
        &self,
        target: &dyn LanguageModel,
        cache: &BatchCache,
        tokens: &Array,
        hidden: &Array,
        positions: &[i32],
        count: usize,
    ) -> Result<Array>;
}

/// A decoder-only language model. Per-sequence state (positions, caches)
/// is passed in, never kept on the model, so one model serves any number of
/// sequences.
///
/// The engine's batch layer sees one forward: it asks the model for a pass's
/// inputs ([`Self::prompt_inputs`], [`Self::token_inputs`]) and runs them
/// over the batch cache ([`Self::forward_inputs`]); what the inputs hold
/// (spliced image features, the family's kind of positions, per-layer
/// additions) is the model's business.
pub trait LanguageModel {
    fn shape(&self) -> ModelShape;

    /// Which cache each layer keeps.
    fn cache_layout(&self) -> CacheLayout;

    /// Token ids `[B, L]` → input embeddings `[B, L, D]`. Vision models
    /// splice image features into these before [`Self::forward_embeddings`].
    fn embed(&self, tokens: &Array) -> Result<Array>;

    /// Runs the decoder over `[B, L, D]` embeddings at `positions`,
    /// appending to `cache`; returns the final-normed hidden states `[B, L, D]`.
    /// `tokens` are the step's ids `[B, L]` the embeddings came from (image
    /// placeholders where features were spliced in): a family with per-layer
    /// token embeddings (Gemma 4) reads them, the others ignore them.
    /// Where the cache declares one read position per row
    /// ([`BatchCache::set_read_positions`]), a family may return only
    /// those, `[B, 1, D]`, having computed what no cache needs for them alone.
    fn forward_embeddings(
        &self,
        embeddings: Array,
        tokens: &Array,
        positions: &Positions,
        cache: &mut BatchCache,
    ) -> Result<Array>;

    /// [`Self::forward_embeddings`] with `after_layer[k]` `[B, L, D]` added to
    /// the hidden states after layer `k` (Qwen3-VL's DeepStack: image
    /// features of the vision tower's inner blocks, zero at text positions).
    /// Families without DeepStack accept only an empty list.
    fn forward_embeddings_adding(
        &self,
        embeddings: Array,
        tokens: &Array,
        positions: &Positions,
        cache: &mut BatchCache,
        after_layer: &[Array],
    ) -> Result<Array> {
        if !after_layer.is_empty() {
            return Err(crate::Error::InvalidRequest(
                "this model takes no DeepStack features".into(),
            ));
        }
        self.forward_embeddings(embeddings, tokens, positions, cache)
    }

    /// The inputs of a prompt pass over `chunks`, one per row, right-padded
    /// to the longest: embeddings with the rows' image features spliced in,
    /// positions of the family's kind, any per-layer additions.
    fn prompt_inputs(&self, chunks: &[PromptChunk<'_>]) -> Result<ModelInputs> {
        ModelInputs::prompt(self, chunks)
    }

    /// The inputs of a pass over token ids `[B, L]` whose row `b` starts at
    /// position `starts[b]` (decoding: the row's cache length plus its
    /// images' [`PromptImages::rope_delta`]).
    fn token_inputs(&self, tokens: &Array, starts: &[i32]) -> Result<ModelInputs> {
        ModelInputs::tokens(self, tokens, starts)
    }

    /// Runs the decoder over prepared `inputs`, appending to `cache`; returns
    /// the final-normed hidden states `[B, L, D]` (or `[B, 1, D]` at the
    /// read positions, as [`Self::forward_embeddings`] says).
    fn forward_inputs(&self, inputs: ModelInputs, cache: &mut BatchCache) -> Result<Array> {
        inputs.forward(self, cache)
    }

    /// Hidden states → logits over the vocabulary.
    fn logits(&self, hidden: &Array) -> Result<Array>;

    /// The output head cut to the rows of tokens `ids` `[N]`: its logits
    /// are [`Self::logits`]' at those tokens alone, `[.., N]`. A draft model
    /// guesses with it among the frequent tokens only (a fraction of a small
    /// model's head, which is a large part of its weights; see
    /// `batch::speculation::draft_vocabulary`). `None` where the logits are
    /// more than one linear map of the hidden state (soft-capped, scaled)
    /// or the head is split across processes.
    fn head_rows(&self, _ids: &Array) -> Option<Result<layers::Linear>> {
        None
    }

    /// The vision tower, for models that see images.
    fn vision(&self) -> Option<&dyn VisionTower> {
        None
    }

    /// The draft head the checkpoint ships (Qwen3.5's multi-token
    /// prediction), for speculative decoding; `None` for most models.
    fn draft_head(&self) -> Option<&dyn DraftHead> {
        None
    }

    /// Token ids `[B, L]` → logits `[B, L, vocab]`.
    fn forward(
        &self,
        tokens: &Array,
        positions: &Positions,
        cache: &mut BatchCache,
    ) -> Result<Array> {
        let h = self.forward_embeddings(self.embed(tokens)?, tokens, positions, cache)?;
        self.logits(&h)
    }

    /// For a model split across processes: its group's part (heartbeats,
    /// every rank's memory, failure). `None` for a whole model.
    fn split(&self) -> Option<&dyn SplitGroup> {
        None
    }

    /// A new cache for `rows` sequences.
    fn new_cache(&self, rows: usize) -> BatchCache {
        self.new_cache_with(rows, None)
    }

    /// A new cache for `rows` sequences, its keys and values quantized as
    /// `quantization` says (the decode batch's).
    fn new_cache_with(&self, rows: usize, quantization: Option<KvQuantization>) -> BatchCache {
        BatchCache::new(&self.cache_layout(), rows, quantization)
    }
}

/// What was loaded, for the UI and the stats line.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    /// A display name (folder name, or GGUF `general.name`).
    pub name: String,
    pub path: PathBuf,
    pub architecture: String,
    /// The family's display name ("Gemma 3").
    pub family: String,
    /// How the checkpoint is quantized, e.g. "4-bit (group 32)"; `None` for float.
    pub stored_quantization: Option<String>,
    /// The same in plain words for people ("4-bit, embeddings 8-bit",
    /// "4.9 bits per weight on average, embeddings 8-bit"); `None` for float.
    pub quantization_words: Option<String>,
    /// How the weights are held once loaded, in words (kept quantized,
    /// dequantized to float32, ...).
    pub loaded_as: String,
    pub format: WeightFormat,
    pub shape: ModelShape,
    /// The layers' cache kinds in words ("3 full, 15 sliding-window (512)").
    pub cache_layout: String,
    /// Token ids that end generation.
    pub eos_token_ids: Vec<u32>,
    /// What the model can do, for the UI (badges, which settings apply).
    pub capabilities: Capabilities,
    /// It has a chat template; a base model without one takes raw text.
    pub has_chat_template: bool,
    /// This process's part of a model split across processes, in words
    /// ("layers 4..8 of 8, pipeline rank 0 of 2"); `None` for a whole model.
    pub share: Option<String>,
}

impl ModelInfo {
    /// The context a request may use (`max_position_embeddings`).
    pub fn context_length(&self) -> usize {
        self.shape.max_context
    }
}

/// What a loaded model can do.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, ts_rs::TS,
)]
pub struct Capabilities {
    /// It has a vision tower: it sees images.
    pub vision: bool,
    /// Its chat template reasons in a thinking block (`<think>`, `enable_thinking`).
    pub thinking: bool,
    /// Its chat template renders tool definitions and tool calls.
    pub tools: bool,
}

impl Capabilities {
    /// The template-derived flags of a model, plus `vision` from its tower.
    pub fn of(template_source: Option<&str>, vision: bool) -> Self {
        let t = template_source.unwrap_or_default();
        Self {
            vision,
            thinking: crate::stop::thinking_tags_for_template(t).is_some()
                || t.contains("enable_thinking"),
            tools: crate::stop::tool_call_tags_for_template(t).is_some(),
        }
    }
}

pub struct LoadedModel {
    pub model: Box<dyn LanguageModel>,
    /// Shared with the threads that prepare requests.
    pub tokenizer: std::sync::Arc<Tokenizer>,
    /// The image processor of a vision-language model (`preprocessor_config.json`).
    pub preprocessor: Option<crate::vision::SharedImageProcessor>,
    pub info: ModelInfo,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::{ChatMessage, ChatTemplate, SpecialTokenStrings, TemplateOptions};

    const QWEN3: &str = include_str!("../../tests/fixtures/templates/qwen3.jinja");
    const SMOLLM2: &str = include_str!("../../tests/fixtures/templates/smollm2.jinja");

    /// Qwen3's template thinks and calls tools; SmolLM2's plain ChatML does neither.
    #[test]
    fn capabilities_come_from_the_template() {
        assert_eq!(
            Capabilities::of(Some(QWEN3), false),
            Capabilities { vision: false, thinking: true, tools: true }
        );
        assert_eq!(
            Capabilities::of(Some(SMOLLM2), true),
            Capabilities { vision: true, thinking: false, tools: false }
        );
        assert_eq!(Capabilities::of(None, false), Capabilities::default());
    }

    /// `/think` and `/no_think` are Qwen3's soft switches: the template keeps
    /// them in the user's text and the model answers with (or without) an
    /// empty thinking block, which the stream matcher then routes; only
    /// `enable_thinking` is the template's own switch.
    #[test]
    fn qwen3_soft_switches_stay_in_the_message() {
        let t = ChatTemplate::new(QWEN3).unwrap();
        let sp = SpecialTokenStrings { eos_token: Some("<|im_end|>".into()), ..Default::default() };
        let out = t
            .render(&[ChatMessage::user("Hi /no_think")], &TemplateOptions::default(), &sp)
            .unwrap();
        assert_eq!(out, "<|im_start|>user\nHi /no_think<|im_end|>\n<|im_start|>assistant\n");
    }
}
