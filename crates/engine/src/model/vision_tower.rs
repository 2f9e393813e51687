//! What the engine needs from the vision half of a vision-language model.
//! The language half is an ordinary [`super::LanguageModel`]; a model that
//! sees images returns its tower from [`super::LanguageModel::vision`].
use std::any::Any;

use mlx_rs::Array;

use crate::error::{Error, Result};

/// One image part-way through a vision tower: the engine runs a tower's
/// blocks a few at a time between decode steps, so encoding a big image (or
/// a queue of them) never stalls the streams that are decoding.
pub struct VisionEncoding {
    /// Blocks run so far, of `blocks_total`.
    pub blocks_done: usize,
    pub blocks_total: usize,
    /// Rows through the blocks (patches): what a block costs, in the step
    /// budget's units.
    pub patches: usize,
    /// The tower's own state between blocks.
    pub state: Box<dyn Any>,
}

impl VisionEncoding {
    /// An image before its first block: the tower's `state`, `blocks` blocks
    /// to run over its `t·h·w` patches.
    pub fn new(state: impl Any, blocks: usize, grid: [i32; 3]) -> Self {
        let patches = (grid[0] * grid[1] * grid[2]) as usize;
        Self { blocks_done: 0, blocks_total: blocks, patches, state: Box::new(state) }
    }

    /// The next (up to) `count` blocks to run, counted as done.
    pub fn take_blocks(&mut self, count: usize) -> std::ops::Range<usize> {
        let (start, end) = (self.blocks_done, (self.blocks_done + count).min(self.blocks_total));
        self.blocks_done = end;
        start..end
    }

    pub fn is_done(&self) -> bool {
        self.blocks_done >= self.blocks_total
    }

    /// For [`VisionTower::finish_encode`]: every block ran.
    pub fn check_done(&self) -> Result<()> {
        if self.is_done() {
            return Ok(());
        }
        Err(Error::Mlx(format!(
            "an image encoding finished after {} of {} blocks",
            self.blocks_done, self.blocks_total
        )))
    }

    /// The tower's state, as the tower that began it made it.
    pub fn state_mut<T: 'static>(&mut self) -> Result<&mut T> {
        self.state.downcast_mut().ok_or_else(other_tower)
    }

    pub fn state<T: 'static>(&self) -> Result<&T> {
        self.state.downcast_ref().ok_or_else(other_tower)
    }
}

fn other_tower() -> Error {
    Error::Mlx("an image encoding went to another vision tower".into())
}

pub trait VisionTower {
    /// The placeholder token that marks one image-feature slot in a prompt
    /// (`<|image_pad|>` for Qwen2-VL); the chat template's single placeholder
    /// per image is expanded to one per feature before prefill.
    fn image_token_id(&self) -> u32;

    /// Patches `[N, C*T*P*P]` of one image with grid `(t, h, w)` → features
    /// `[N / merge², hidden]` in the language model's embedding space.
    fn encode(&self, pixels: &Array, grid: [i32; 3]) -> Result<Array> {
        let mut encoding = self.begin_encode(pixels, grid)?;
        let all = encoding.blocks_total;
        self.encode_blocks(&mut encoding, all)?;
        self.finish_encode(&encoding)
    }

    /// [`Self::encode`] in pieces: the state before the first block.
    fn begin_encode(&self, pixels: &Array, grid: [i32; 3]) -> Result<VisionEncoding>;

    /// Queues up to `count` more blocks (lazily); returns the array to
    /// evaluate so the work is done now rather than all at the end.
    fn encode_blocks(&self, encoding: &mut VisionEncoding, count: usize) -> Result<Array>;

    /// The features, once every block ran.
    fn finish_encode(&self, encoding: &VisionEncoding) -> Result<Array>;

    /// How many hidden-size blocks each feature row holds: 1, or 1 + the
    /// DeepStack levels (Qwen3-VL), whose features ride beside the input
    /// features (`[slots, hidden · levels]`) through the vision-feature cache
    /// and are added after the language model's first layers.
    fn feature_levels(&self) -> usize {
        1
    }

    /// An image's tokens attend to each other both ways inside the causal
    /// mask (Gemma 3, Gemma 4), so a prefill chunk never cuts an image.
    fn bidirectional_images(&self) -> bool {
        false
    }

    /// A prompt's token ids (image slots included) as the language model
    /// should read them where it reads ids beside the embeddings (Gemma 4's
    /// per-layer inputs take the padding token's at image slots). Applied to
    /// prefill passes with images only: decode steps hold sampled tokens.
    /// Unchanged by default.
    fn tokens_for_language(&self, tokens: &Array) -> Result<Array> {
        Ok(tokens.clone())
    }

    /// M-RoPE positions for a whole prompt (placeholders already expanded):
    /// `[3, L]` int32 (temporal, height, width) and the rope delta that
    /// decoding adds to the cache length (`max position + 1 - L`).
    /// `grids` holds the grid of each image in prompt order. `None` for a
    /// family whose image tokens take ordinary positions (Gemma).
    fn rope_positions(&self, tokens: &[u32], grids: &[[i32; 3]]) -> Result<Option<(Array, i32)>>;
}
