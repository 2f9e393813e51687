//! What the engine needs from a family's image processor: image file bytes →
//! the patches its vision tower reads, how many feature slots an image takes
//! in the prompt, and a key of every parameter that changes the output (so
//! the vision-feature cache never mixes two processors' features). The
//! registry picks the implementation per family, reading the checkpoint's
//! `preprocessor_config.json` / `processor_config.json`.
use std::fmt::Debug;
use std::sync::Arc;

use super::preprocess::{ImagePatches, PreprocessedImage};
use crate::error::Result;

pub trait ImageProcessor: Debug + Send + Sync {
    /// Decodes and preprocesses one image file's bytes (no MLX: any thread).
    /// Bad input is `Error::InvalidImage` naming the image as `name`.
    fn patches_named(&self, bytes: &[u8], name: &str) -> Result<ImagePatches>;

    /// How many placeholder tokens (= features) an image of this grid takes.
    fn num_image_tokens(&self, grid: [i32; 3]) -> usize;

    /// The grid an image shown at `height × width` pixels gets, without its
    /// pixels (for counting a prompt's tokens).
    fn grid_for_size(&self, height: usize, width: usize) -> std::result::Result<[i32; 3], String>;

    /// A stable text of every parameter that changes the output.
    fn cache_key(&self) -> String;

    /// Whether this processor writes each image's whole token sequence into
    /// the prompt *text* before tokenizing ([`Self::expand_prompt_text`]);
    /// otherwise the template's single placeholder token per image is
    /// expanded after tokenizing.
    fn expands_in_text(&self) -> bool {
        false
    }

    /// The rendered prompt with every image's placeholder replaced by its
    /// whole sequence, `slots[i]` soft tokens for image `i` (Gemma 3: the
    /// template's `<start_of_image>` becomes blank lines, the marker, the soft
    /// tokens and `<end_of_image>`). `None` for processors that do not.
    fn expand_prompt_text(&self, _rendered: &str, _slots: &[usize]) -> Option<String> {
        None
    }

    /// [`Self::patches_named`] as the MLX array the tower reads (engine thread only).
    fn preprocess(&self, bytes: &[u8]) -> Result<PreprocessedImage> {
        let patches = self.patches_named(bytes, &format!("of {} bytes", bytes.len()))?;
        Ok(PreprocessedImage { pixels: patches.to_array(), grid: patches.grid })
    }
}

/// A processor shared by the threads that prepare requests.
pub type SharedImageProcessor = Arc<dyn ImageProcessor>;
