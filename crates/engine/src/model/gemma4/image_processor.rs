//! Gemma 4's image processor: variable resolution within a soft-token
//! budget, as mlx-vlm 0.7.6's `Gemma4ImageProcessor`:
//! 1. decode, EXIF-transpose, RGB — [`crate::vision::preprocess::decode`];
//! 2. aspect-preserving resize: the largest size with at most
//!    `max_soft_tokens · pooling_kernel_size²` patches of `patch_size` and
//!    both sides multiples of `pooling_kernel_size · patch_size` (a side that
//!    would round to nothing gets one such multiple, the other its aspect
//!    ratio's whole multiples, capped); PIL bicubic on 8-bit pixels;
//! 3. `x · rescale_factor` in float32 (no normalization by default: the
//!    tower maps [0, 1] to [-1, 1] itself);
//! 4. patches in raster order, columns `(row, col, channel)` — the tower's
//!    own patchify order.
//!
//! The image takes `patches / pooling_kernel_size²` soft tokens; in the
//! prompt text each image placeholder becomes `boi`, that many image tokens
//! and `eoi` (names from the tokenizer config, Gemma 4's by default).
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::vision::preprocess::resample::{resize_rgb8, Filter};
use crate::vision::preprocess::{decode, ImagePatches, Normalize, RescalePrecision};
use crate::vision::processor::{read_json_object, read_processor_settings};
use crate::vision::{ImageProcessor, SharedImageProcessor};

#[derive(Debug, Clone)]
pub struct Gemma4ImageProcessor {
    pub patch_size: usize,
    pub max_soft_tokens: usize,
    pub pooling_kernel_size: usize,
    /// The rescale and normalization (off by default), all in float32.
    pub normalize: Normalize,
    /// The image placeholder the chat template writes, and the markers around
    /// an image's expanded tokens.
    pub image_token: String,
    pub boi_token: String,
    pub eoi_token: String,
}

/// Gemma 4's defaults: `x / 255` in float32, no normalization.
const DEFAULT_NORMALIZE: Normalize =
    Normalize { do_normalize: false, ..Normalize::halves(RescalePrecision::Float32) };

impl Gemma4ImageProcessor {
    /// Reads `preprocessor_config.json` (or `processor_config.json`'s
    /// `image_processor`) and the image tokens from `tokenizer_config.json`.
    pub fn from_folder(dir: &Path) -> Result<Self> {
        let (raw, _) = read_processor_settings(dir)?;
        let tok = read_json_object(&dir.join("tokenizer_config.json"))?.unwrap_or_default();
        let extra =
            tok.get("extra_special_tokens").and_then(Value::as_object).cloned().unwrap_or_default();
        let token = |key: &str, default: &str| -> String {
            extra
                .get(key)
                .or_else(|| tok.get(key))
                .and_then(Value::as_str)
                .unwrap_or(default)
                .to_string()
        };
        let int = |key: &str, default: usize| -> Result<usize> {
            match raw.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(v) => v.as_u64().filter(|&n| n > 0).map(|n| n as usize).ok_or_else(|| {
                    Error::InvalidConfig(format!("Gemma 4 image processor: bad {key}: {v}"))
                }),
            }
        };
        let p = Self {
            patch_size: int("patch_size", 16)?,
            max_soft_tokens: int("max_soft_tokens", 280)?,
            pooling_kernel_size: int("pooling_kernel_size", 3)?,
            normalize: Normalize::read(&raw, DEFAULT_NORMALIZE, "Gemma 4")?,
            image_token: token("image_token", "<|image|>"),
            boi_token: token("boi_token", "<|image>"),
            eoi_token: token("eoi_token", "<image|>"),
        };
        Ok(p)
    }

    pub fn shared_from_folder(dir: &Path) -> Result<SharedImageProcessor> {
        Ok(Arc::new(Self::from_folder(dir)?))
    }

    /// The size an image of `height × width` is resized to (the reference's
    /// `aspect_ratio_preserving_resize`, in the same float64 operations).
    pub fn target_size(
        &self,
        height: usize,
        width: usize,
    ) -> std::result::Result<(usize, usize), String> {
        let (p, k) = (self.patch_size, self.pooling_kernel_size);
        let max_patches = self.max_soft_tokens * k * k;
        let target_px = (max_patches * p * p) as f64;
        let factor = (target_px / (height * width) as f64).sqrt();
        let side = k * p;
        let mut th = (factor * height as f64 / side as f64).floor() as usize * side;
        let mut tw = (factor * width as f64 / side as f64).floor() as usize * side;
        if th == 0 && tw == 0 {
            return Err(format!("{width}×{height} pixels resizes to nothing"));
        }
        let max_side = (max_patches / (k * k)) * side;
        if th == 0 {
            th = side;
            tw = ((width as f64 / height as f64).floor() as usize * side).min(max_side);
        } else if tw == 0 {
            tw = side;
            th = ((height as f64 / width as f64).floor() as usize * side).min(max_side);
        }
        Ok((th, tw))
    }

    /// The patches of `rgb` (`width × height` interleaved 8-bit RGB).
    pub fn patches_rgb8(
        &self,
        rgb: &[u8],
        width: usize,
        height: usize,
    ) -> std::result::Result<ImagePatches, String> {
        let (th, tw) = self.target_size(height, width)?;
        let resized;
        let pixels = if (th, tw) == (height, width) {
            rgb
        } else {
            resized = resize_rgb8(rgb, width, height, tw, th, Filter::Bicubic);
            &resized[..]
        };
        let lut = self.normalize.levels();
        let p = self.patch_size;
        let (gh, gw) = (th / p, tw / p);
        let cols = p * p * 3;
        let mut data = vec![0f32; gh * gw * cols];
        for (row, patch) in data.chunks_mut(cols).enumerate() {
            let (py, px) = ((row / gw) * p, (row % gw) * p);
            for y in 0..p {
                for x in 0..p {
                    for c in 0..3 {
                        patch[(y * p + x) * 3 + c] =
                            lut[pixels[((py + y) * tw + px + x) * 3 + c] as usize][c];
                    }
                }
            }
        }
        Ok(ImagePatches { data, rows: gh * gw, cols, grid: [1, gh as i32, gw as i32] })
    }
}

impl ImageProcessor for Gemma4ImageProcessor {
    fn patches_named(&self, bytes: &[u8], name: &str) -> Result<ImagePatches> {
        let invalid = |reason: String| Error::InvalidImage { image: name.to_string(), reason };
        let img = decode::decode_rgb8(bytes).map_err(invalid)?;
        self.patches_rgb8(&img.rgb, img.width, img.height).map_err(invalid)
    }

    fn num_image_tokens(&self, grid: [i32; 3]) -> usize {
        (grid[1] * grid[2]) as usize / (self.pooling_kernel_size * self.pooling_kernel_size)
    }

    fn grid_for_size(&self, height: usize, width: usize) -> std::result::Result<[i32; 3], String> {
        let (th, tw) = self.target_size(height, width)?;
        Ok([1, (th / self.patch_size) as i32, (tw / self.patch_size) as i32])
    }

    fn cache_key(&self) -> String {
        format!("{self:?}")
    }

    fn expands_in_text(&self) -> bool {
        true
    }

    fn expand_prompt_text(&self, rendered: &str, slots: &[usize]) -> Option<String> {
        let mut out = String::with_capacity(rendered.len());
        let mut rest = rendered;
        let mut images = slots.iter();
        while let Some(at) = rest.find(&self.image_token) {
            out.push_str(&rest[..at]);
            match images.next() {
                Some(&n) => {
                    out.push_str(&self.boi_token);
                    out.push_str(&self.image_token.repeat(n));
                    out.push_str(&self.eoi_token);
                }
                // More placeholders than images: left for the count check to refuse.
                None => out.push_str(&self.image_token),
            }
            rest = &rest[at + self.image_token.len()..];
        }
        out.push_str(rest);
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn processor() -> Gemma4ImageProcessor {
        Gemma4ImageProcessor {
            patch_size: 16,
            max_soft_tokens: 280,
            pooling_kernel_size: 3,
            normalize: DEFAULT_NORMALIZE,
            image_token: "<|image|>".into(),
            boi_token: "<|image>".into(),
            eoi_token: "<image|>".into(),
        }
    }

    /// Values checked against the reference's Python function.
    #[test]
    fn target_sizes_match_the_reference() {
        let p = processor();
        // 2520 patches of 16 px: a square photo gets 48 × 48 patches (42 per 3-block).
        assert_eq!(p.target_size(1000, 1000).unwrap(), (768, 768));
        assert_eq!(p.target_size(480, 640).unwrap(), (672, 912));
        // A strip: the short side rounds to nothing and gets one 48-px block,
        // the long one its aspect ratio's blocks, capped at 280 blocks.
        assert_eq!(p.target_size(10, 4000).unwrap(), (48, 13440));
    }

    #[test]
    fn each_placeholder_gets_its_own_count() {
        let out = processor().expand_prompt_text("a<|image|>b<|image|>", &[2, 1]).unwrap();
        assert_eq!(out, "a<|image><|image|><|image|><image|>b<|image><|image|><image|>");
    }
}
