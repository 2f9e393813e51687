//! A vision-language model as the engine sees it: a language model and a
//! vision tower side by side. Every family's multimodal model is one of
//! these; the language model answers everything about text, the tower
//! encodes images.
use mlx_rs::Array;

use super::layers::rope::Positions;
use super::{DraftHead, LanguageModel, ModelShape, VisionTower};
use crate::cache::{BatchCache, CacheLayout};
use crate::error::Result;

pub struct WithVision<L, V> {
    pub language: L,
    pub vision: V,
}

impl<L: LanguageModel, V: VisionTower> LanguageModel for WithVision<L, V> {
    fn shape(&self) -> ModelShape {
        self.language.shape()
    }

    fn cache_layout(&self) -> CacheLayout {
        self.language.cache_layout()
    }

    fn embed(&self, tokens: &Array) -> Result<Array> {
        self.language.embed(tokens)
    }

    fn forward_embeddings(
        &self,
        embeddings: Array,
        tokens: &Array,
        positions: &Positions,
        cache: &mut BatchCache,
    ) -> Result<Array> {
        self.forward_embeddings_adding(embeddings, tokens, positions, cache, &[])
    }

    fn forward_embeddings_adding(
        &self,
        embeddings: Array,
        tokens: &Array,
        positions: &Positions,
        cache: &mut BatchCache,
        after_layer: &[Array],
    ) -> Result<Array> {
        self.language.forward_embeddings_adding(embeddings, tokens, positions, cache, after_layer)
    }

    fn logits(&self, hidden: &Array) -> Result<Array> {
        self.language.logits(hidden)
    }

    fn vision(&self) -> Option<&dyn VisionTower> {
        Some(&self.vision)
    }

    fn draft_head(&self) -> Option<&dyn DraftHead> {
        self.language.draft_head()
    }
}
