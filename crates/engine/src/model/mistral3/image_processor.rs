//! Pixtral's image processor as mlx-vlm 0.7.6 runs it for Mistral 3
//! (`PixtralImageProcessor`, called by `Mistral3Processor` with patches of
//! `patch_size × spatial_merge_size` pixels):
//! 1. decode, EXIF-transpose, RGB — [`crate::vision::preprocess::decode`];
//! 2. no square resize: when a side exceeds `size.longest_edge`, both are
//!    divided by the larger ratio (floored); then each side is rounded *up*
//!    to whole merged patches (28 pixels for 14-pixel patches merged by 2),
//!    resized with PIL's filter (`resample`, bicubic by default) on 8-bit
//!    pixels;
//! 3. `x · rescale_factor` then `(x − mean) / std`, all in float32;
//! 4. cut into `patch_size` patches in raster order, columns
//!    `(channel, row, col)` (the tower's convolution as one matmul).
//!
//! The prompt: the chat template writes `[IMG]` per image; the processor
//! writes its layout into the text there — per merged row, one `[IMG]` per
//! merged column, `[IMG_BREAK]` between rows and `[IMG_END]` after the last.
//! An image's grid is `[1, rows, cols]` in (unmerged) patches.
use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::vision::preprocess::resample::{resize_rgb8, Filter};
use crate::vision::preprocess::{decode, ImagePatches, Normalize, RescalePrecision};
use crate::vision::processor::{expand_placeholders, read_json_object, read_processor_settings};
use crate::vision::{ImageProcessor, SharedImageProcessor};

#[derive(Debug, Clone)]
pub struct PixtralImageProcessor {
    /// The cap on either side (`size.longest_edge`); `None` without `do_resize`.
    pub longest_edge: Option<usize>,
    /// The tower's patch side in pixels.
    pub patch_size: usize,
    /// Patches merged a side into one token (`spatial_merge_size`).
    pub merge: usize,
    pub filter: Filter,
    /// The rescale and normalization, all in float32.
    pub normalize: Normalize,
    pub image_token: String,
    pub break_token: String,
    pub end_token: String,
}

fn bad(key: &str, v: &Value) -> Error {
    Error::InvalidConfig(format!("Pixtral image processor config: bad {key}: {v}"))
}

/// Pixtral's defaults: CLIP's mean and std, all in float32 (numpy on a
/// float32 image).
const CLIP: Normalize = Normalize {
    image_mean: [0.481_454_66, 0.457_827_5, 0.408_210_73],
    image_std: [0.268_629_54, 0.261_302_6, 0.275_777_1],
    ..Normalize::halves(RescalePrecision::Float32)
};

impl PixtralImageProcessor {
    /// Reads `preprocessor_config.json` (overridden by `processor_config.json`'s
    /// `image_processor`), the token names from `processor_config.json`, and
    /// the patch and merge sizes from config.json, as mlx-vlm's
    /// `Mistral3Processor` does.
    pub fn from_folder(dir: &Path) -> Result<Self> {
        let config = read_json_object(&dir.join("config.json"))?.unwrap_or_default();
        let (raw, processor) = read_processor_settings(dir)?;
        let vision =
            config.get("vision_config").and_then(Value::as_object).cloned().unwrap_or_default();
        let int = |m: &Map<String, Value>, key: &str| {
            m.get(key).and_then(Value::as_u64).map(|v| v as usize)
        };
        let patch_from = |v: Option<&Value>| match v {
            Some(Value::Object(m)) => int(m, "height"),
            Some(v) => v.as_u64().map(|v| v as usize),
            None => None,
        };
        let patch_size = int(&vision, "patch_size")
            .or_else(|| patch_from(raw.get("patch_size")))
            .or_else(|| patch_from(processor.get("patch_size")))
            .unwrap_or(16);
        let merge = int(&config, "spatial_merge_size")
            .or_else(|| int(&processor, "spatial_merge_size"))
            .unwrap_or(1);
        let flag =
            |key: &str, default: bool| raw.get(key).and_then(Value::as_bool).unwrap_or(default);
        let longest_edge = match raw.get("size") {
            None | Some(Value::Null) => 1024,
            Some(v) => v
                .get("longest_edge")
                .and_then(Value::as_u64)
                .or_else(|| v.get("height").and_then(Value::as_u64))
                .or_else(|| v.as_u64())
                .filter(|&n| n > 0)
                .ok_or_else(|| bad("size", v))? as usize,
        };
        let filter = match raw.get("resample") {
            None | Some(Value::Null) => Filter::Bicubic,
            Some(v) => v.as_u64().and_then(Filter::from_pil).ok_or_else(|| bad("resample", v))?,
        };
        let token = |key: &str, default: &str| {
            processor.get(key).and_then(Value::as_str).unwrap_or(default).to_string()
        };
        let p = Self {
            longest_edge: flag("do_resize", true).then_some(longest_edge),
            patch_size,
            merge,
            filter,
            normalize: Normalize::read(&raw, CLIP, "Pixtral")?,
            image_token: token("image_token", "[IMG]"),
            break_token: token("image_break_token", "[IMG_BREAK]"),
            end_token: token("image_end_token", "[IMG_END]"),
        };
        if patch_size == 0 || merge == 0 {
            return Err(Error::InvalidConfig(
                "Pixtral: patch and merge sizes must be positive".into(),
            ));
        }
        Ok(p)
    }

    /// For the family registry.
    pub fn shared_from_folder(dir: &Path) -> Result<SharedImageProcessor> {
        Ok(Arc::new(Self::from_folder(dir)?))
    }

    /// The pixel size an image of `height × width` is resized to.
    pub fn target_size(&self, height: usize, width: usize) -> (usize, usize) {
        let (mut h, mut w) = (height, width);
        if let Some(edge) = self.longest_edge {
            let ratio = (h as f64 / edge as f64).max(w as f64 / edge as f64);
            if ratio > 1.0 {
                h = (h as f64 / ratio).floor() as usize;
                w = (w as f64 / ratio).floor() as usize;
            }
        }
        let unit = self.patch_size * self.merge;
        let up = |x: usize| (x.max(1) - 1) / unit * unit + unit;
        (up(h), up(w))
    }

    /// The patches of `rgb` (`width × height` interleaved 8-bit RGB).
    pub fn patches_rgb8(&self, rgb: &[u8], width: usize, height: usize) -> Result<ImagePatches> {
        let (th, tw) = self.target_size(height, width);
        let pixels = resize_rgb8(rgb, width, height, tw, th, self.filter);
        let lut = self.normalize.levels();
        let p = self.patch_size;
        let (rows, cols) = (th / p, tw / p);
        let mut data = Vec::with_capacity(th * tw * 3);
        for patch in 0..rows * cols {
            let (py, px) = ((patch / cols) * p, (patch % cols) * p);
            for c in 0..3 {
                for y in 0..p {
                    for x in 0..p {
                        data.push(lut[pixels[((py + y) * tw + px + x) * 3 + c] as usize][c]);
                    }
                }
            }
        }
        Ok(ImagePatches {
            data,
            rows: rows * cols,
            cols: 3 * p * p,
            grid: [1, rows as i32, cols as i32],
        })
    }

    /// One image's text for a grid of `rows × cols` patches.
    fn image_text(&self, rows: usize, cols: usize) -> String {
        let (rows, cols) = (rows / self.merge, cols / self.merge);
        let row = self.image_token.repeat(cols);
        let mut text = vec![row; rows].join(&self.break_token);
        text.push_str(&self.end_token);
        text
    }
}

impl ImageProcessor for PixtralImageProcessor {
    fn patches_named(&self, bytes: &[u8], name: &str) -> Result<ImagePatches> {
        let img = decode::decode_named(bytes, name)?;
        self.patches_rgb8(&img.rgb, img.width, img.height)
    }

    fn num_image_tokens(&self, grid: [i32; 3]) -> usize {
        let m = self.merge as i32;
        (grid[1].max(0) / m * (grid[2].max(0) / m)) as usize
    }

    fn grid_for_size(&self, height: usize, width: usize) -> std::result::Result<[i32; 3], String> {
        if height == 0 || width == 0 {
            return Err("the image is empty".into());
        }
        let (h, w) = self.target_size(height, width);
        Ok([1, (h / self.patch_size) as i32, (w / self.patch_size) as i32])
    }

    fn cache_key(&self) -> String {
        format!("{self:?}")
    }

    fn expands_in_text(&self) -> bool {
        true
    }

    fn expand_prompt_text_for_grids(&self, rendered: &str, grids: &[[i32; 3]]) -> Option<String> {
        let text = |g: [i32; 3]| self.image_text(g[1].max(0) as usize, g[2].max(0) as usize);
        Some(expand_placeholders(rendered, &self.image_token, grids, text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> PixtralImageProcessor {
        PixtralImageProcessor {
            longest_edge: Some(64),
            patch_size: 8,
            merge: 2,
            filter: Filter::Bicubic,
            normalize: Normalize::RAW,
            image_token: "[IMG]".into(),
            break_token: "[IMG_BREAK]".into(),
            end_token: "[IMG_END]".into(),
        }
    }

    #[test]
    fn sides_are_capped_then_rounded_up_to_merged_patches() {
        let p = tiny();
        // 320×240 → ratio 5 → 64×48, both whole 16-pixel units already.
        assert_eq!(p.target_size(240, 320), (48, 64));
        // Small images grow to the next unit, each side on its own.
        assert_eq!(p.target_size(17, 5), (32, 16));
        // 126×182 → ratio 2.84 → 44×64 → 48×64.
        assert_eq!(p.target_size(126, 182), (48, 64));
        assert_eq!(p.grid_for_size(240, 320), Ok([1, 6, 8]));
        assert_eq!(p.num_image_tokens([1, 6, 8]), 12);
    }

    #[test]
    fn each_merged_row_ends_with_a_break_and_the_image_with_its_end() {
        let p = tiny();
        let out = p.expand_prompt_text_for_grids("a[IMG]b[IMG]", &[[1, 4, 6], [1, 2, 2]]).unwrap();
        assert_eq!(out, "a[IMG][IMG][IMG][IMG_BREAK][IMG][IMG][IMG][IMG_END]b[IMG][IMG_END]");
    }
}
