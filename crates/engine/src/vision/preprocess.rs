//! Image file bytes → normalized patches, exactly as the checkpoint's
//! `preprocessor_config.json` says (Qwen2-VL / Qwen2.5-VL image processor).
//!
//! INTERFACE SKELETON: the signatures are fixed; the bodies are being written.
use std::path::Path;

use mlx_rs::Array;

use crate::error::Result;

/// The image processor of a vision-language checkpoint.
#[derive(Debug, Clone)]
pub struct ImagePreprocessor {
    pub patch_size: usize,
    pub temporal_patch_size: usize,
    pub merge_size: usize,
    pub min_pixels: usize,
    pub max_pixels: usize,
    pub image_mean: [f32; 3],
    pub image_std: [f32; 3],
}

/// One image ready for the vision tower.
#[derive(Debug, Clone)]
pub struct PreprocessedImage {
    /// `[grid_t * grid_h * grid_w, channels * temporal_patch * patch * patch]`, float32,
    /// in the patch order the reference processor produces.
    pub pixels: Array,
    /// `(t, h, w)` in patches.
    pub grid: [i32; 3],
}

impl ImagePreprocessor {
    /// Reads `preprocessor_config.json` (falling back to `processor_config.json`).
    pub fn from_folder(_dir: &Path) -> Result<Self> {
        todo!("vision preprocessing: being written")
    }

    /// Decodes and preprocesses one image file's bytes. Bad input (empty,
    /// corrupt, not an image, too large to decode) is `Error::InvalidImage`.
    pub fn preprocess(&self, _bytes: &[u8]) -> Result<PreprocessedImage> {
        todo!("vision preprocessing: being written")
    }

    /// How many placeholder tokens (= vision features) an image of this grid takes.
    pub fn num_image_tokens(&self, grid: [i32; 3]) -> usize {
        (grid[0] * grid[1] * grid[2]) as usize / (self.merge_size * self.merge_size)
    }

    /// A stable text of every parameter that changes the output, for the
    /// vision-feature cache key.
    pub fn cache_key(&self) -> String {
        format!("{self:?}")
    }
}
