//! What the engine needs from the vision half of a vision-language model.
//! The language half is an ordinary [`super::LanguageModel`]; a model that
//! sees images returns its tower from [`super::LanguageModel::vision`].
use mlx_rs::Array;

use crate::error::Result;

pub trait VisionTower {
    /// The placeholder token that marks one image-feature slot in a prompt
    /// (`<|image_pad|>` for Qwen2-VL); the chat template's single placeholder
    /// per image is expanded to one per feature before prefill.
    fn image_token_id(&self) -> u32;

    /// Patches `[N, C*T*P*P]` of one image with grid `(t, h, w)` → features
    /// `[N / merge², hidden]` in the language model's embedding space.
    fn encode(&self, pixels: &Array, grid: [i32; 3]) -> Result<Array>;

    /// M-RoPE positions for a whole prompt (placeholders already expanded):
    /// `[3, L]` int32 (temporal, height, width) and the rope delta that
    /// decoding adds to the cache length (`max position + 1 - L`).
    /// `grids` holds the grid of each image in prompt order.
    fn rope_positions(&self, tokens: &[u32], grids: &[[i32; 3]]) -> Result<(Array, i32)>;
}
