//! Gemma 3's image processor: every image becomes one square of
//! `size × size` pixels (896 in the released models) and always the same
//! number of soft tokens (`image_seq_length`, 256), as transformers'
//! `Gemma3ImageProcessor` (PIL backend, what mlx-vlm uses) does:
//! 1. decode, EXIF-transpose, RGB — [`crate::vision::preprocess::decode`];
//! 2. PIL resize to `size` with `resample` (bilinear) on 8-bit pixels,
//!    ignoring the aspect ratio — [`crate::vision::preprocess::resample`];
//! 3. `x · rescale_factor` in float64 then float32, `(x − mean) / std` in float32;
//! 4. cut into `patch_size` patches in raster order, columns `(channel, row,
//!    col)`: the SigLIP tower's Conv2d becomes one matmul.
//!
//! The prompt: the chat template writes `<start_of_image>` per image; the
//! processor turns each into `"\n\n<start_of_image>"`, the soft tokens and
//! `"<end_of_image>\n\n"` in the *text*, before tokenizing (so the blank lines
//! tokenize as the reference's do).
//!
//! Pan and scan (extra crops of very wide or tall images) is off in the
//! released configs and not supported: a config that turns it on gets the
//! whole image only (logged once at load).
use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::vision::preprocess::resample::{resize_rgb8, Filter};
use crate::vision::preprocess::{decode, ImagePatches, Normalize, RescalePrecision};
use crate::vision::processor::{read_json_object, read_processor_settings};
use crate::vision::{ImageProcessor, SharedImageProcessor};

/// Gemma 3's image markers (the tokenizer's `boi_token`, `image_token`, `eoi_token`).
pub const BOI: &str = "<start_of_image>";
pub const IMAGE: &str = "<image_soft_token>";
pub const EOI: &str = "<end_of_image>";

#[derive(Debug, Clone)]
pub struct Gemma3ImageProcessor {
    /// Output side in pixels (the tower's `image_size`).
    pub size: usize,
    pub patch_size: usize,
    /// Soft tokens per image.
    pub tokens_per_image: usize,
    pub filter: Filter,
    /// The rescale in float64 rounded to float32, then normalize in float32.
    pub normalize: Normalize,
}

fn bad(key: &str, v: &Value) -> Error {
    Error::InvalidConfig(format!("Gemma 3 image processor config: bad {key}: {v}"))
}

impl Gemma3ImageProcessor {
    /// Reads `preprocessor_config.json` (overridden by `processor_config.json`'s
    /// `image_processor` and `image_seq_length`) and the tower's sizes from
    /// config.json.
    pub fn from_folder(dir: &Path) -> Result<Self> {
        let config = read_json_object(&dir.join("config.json"))?.unwrap_or_default();
        let vision =
            config.get("vision_config").and_then(Value::as_object).cloned().unwrap_or_default();
        let text =
            config.get("text_config").and_then(Value::as_object).cloned().unwrap_or_default();
        let (raw, processor) = read_processor_settings(dir)?;
        let int = |m: &Map<String, Value>, key: &str| {
            m.get(key).and_then(Value::as_u64).map(|v| v as usize)
        };
        let image_size = int(&vision, "image_size").unwrap_or(896);
        let size = match raw.get("size") {
            Some(Value::Object(s)) => match (int(s, "height"), int(s, "width")) {
                (Some(h), Some(w)) if h == w => h,
                (h, w) => {
                    return Err(Error::InvalidConfig(format!(
                        "Gemma 3 image processor size {h:?}×{w:?}: a square is expected"
                    )))
                }
            },
            _ => image_size,
        };
        if size != image_size {
            return Err(Error::InvalidConfig(format!(
                "the image processor makes {size}-pixel images but the vision tower reads {image_size}"
            )));
        }
        let patch_size = int(&vision, "patch_size").unwrap_or(14);
        let tokens_per_image = int(&processor, "image_seq_length")
            .or_else(|| int(&raw, "image_seq_length"))
            .or_else(|| int(&text, "mm_tokens_per_image"))
            .or_else(|| int(&config, "mm_tokens_per_image"))
            .unwrap_or(256);
        let filter = match raw.get("resample") {
            None | Some(Value::Null) => Filter::Bilinear,
            Some(v) => v.as_u64().and_then(Filter::from_pil).ok_or_else(|| bad("resample", v))?,
        };
        if raw.get("do_pan_and_scan").and_then(Value::as_bool) == Some(true) {
            tracing::warn!(
                "Gemma 3: pan and scan is not supported; each image is seen whole at {size}×{size}"
            );
        }
        let p = Self {
            size,
            patch_size,
            tokens_per_image,
            filter,
            normalize: Normalize::read(
                &raw,
                Normalize::halves(RescalePrecision::Float64),
                "Gemma 3",
            )?,
        };
        p.check()?;
        Ok(p)
    }

    /// For the family registry.
    pub fn shared_from_folder(dir: &Path) -> Result<SharedImageProcessor> {
        Ok(Arc::new(Self::from_folder(dir)?))
    }

    fn check(&self) -> Result<()> {
        let side = self.size / self.patch_size.max(1);
        if self.patch_size == 0 || !self.size.is_multiple_of(self.patch_size) {
            return Err(Error::InvalidConfig(format!(
                "image size {} is not whole {}-pixel patches",
                self.size, self.patch_size
            )));
        }
        let per_side = (self.tokens_per_image as f64).sqrt() as usize;
        if per_side * per_side != self.tokens_per_image
            || per_side == 0
            || !side.is_multiple_of(per_side)
        {
            return Err(Error::InvalidConfig(format!(
                "{} soft tokens per image do not pool a {side}×{side} patch grid evenly",
                self.tokens_per_image
            )));
        }
        Ok(())
    }

    /// The patches of `rgb` (`width × height` interleaved 8-bit RGB).
    pub fn patches_rgb8(&self, rgb: &[u8], width: usize, height: usize) -> Result<ImagePatches> {
        let (s, p) = (self.size, self.patch_size);
        let resized;
        let pixels = if (width, height) == (s, s) {
            rgb
        } else {
            resized = resize_rgb8(rgb, width, height, s, s, self.filter);
            &resized[..]
        };
        let lut = self.normalize.levels();
        let side = s / p;
        let cols = 3 * p * p;
        let mut data = vec![0f32; side * side * cols];
        for (row, patch) in data.chunks_mut(cols).enumerate() {
            let (py, px) = ((row / side) * p, (row % side) * p);
            for c in 0..3 {
                for y in 0..p {
                    for x in 0..p {
                        let v = pixels[((py + y) * s + px + x) * 3 + c];
                        patch[c * p * p + y * p + x] = lut[v as usize][c];
                    }
                }
            }
        }
        Ok(ImagePatches { data, rows: side * side, cols, grid: [1, side as i32, side as i32] })
    }
}

impl ImageProcessor for Gemma3ImageProcessor {
    fn patches_named(&self, bytes: &[u8], name: &str) -> Result<ImagePatches> {
        let img = decode::decode_named(bytes, name)?;
        self.patches_rgb8(&img.rgb, img.width, img.height)
    }

    fn num_image_tokens(&self, _grid: [i32; 3]) -> usize {
        self.tokens_per_image
    }

    fn grid_for_size(
        &self,
        _height: usize,
        _width: usize,
    ) -> std::result::Result<[i32; 3], String> {
        let side = (self.size / self.patch_size) as i32;
        Ok([1, side, side])
    }

    fn cache_key(&self) -> String {
        format!("{self:?}")
    }

    fn expands_in_text(&self) -> bool {
        true
    }

    fn expand_prompt_text(&self, rendered: &str, _slots: &[usize]) -> Option<String> {
        let sequence = format!("\n\n{BOI}{}{EOI}\n\n", IMAGE.repeat(self.tokens_per_image));
        Some(rendered.replace(BOI, &sequence))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Gemma3ImageProcessor {
        Gemma3ImageProcessor {
            size: 4,
            patch_size: 2,
            tokens_per_image: 1,
            filter: Filter::Bilinear,
            normalize: Normalize::RAW,
        }
    }

    #[test]
    fn patches_are_raster_order_channel_major() {
        let p = tiny();
        // A 4×4 image whose red value is its pixel index.
        let rgb: Vec<u8> = (0..16u8).flat_map(|v| [v, 100 + v, 200]).collect();
        let out = p.patches_rgb8(&rgb, 4, 4).unwrap();
        assert_eq!((out.rows, out.cols, out.grid), (4, 12, [1, 2, 2]));
        // patch 1 is the top right 2×2: pixels 2, 3, 6, 7; red plane first
        assert_eq!(&out.data[12..16], &[2., 3., 6., 7.]);
        assert_eq!(&out.data[16..20], &[102., 103., 106., 107.]);
    }

    #[test]
    fn every_image_placeholder_becomes_its_whole_sequence() {
        let p = Gemma3ImageProcessor { tokens_per_image: 3, ..tiny() };
        let out = p.expand_prompt_text("a<start_of_image>b<start_of_image>", &[3, 3]).unwrap();
        let one = "\n\n<start_of_image><image_soft_token><image_soft_token><image_soft_token><end_of_image>\n\n";
        assert_eq!(out, format!("a{one}b{one}"));
    }
}
