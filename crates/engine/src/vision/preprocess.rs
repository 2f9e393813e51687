//! Image file bytes → normalized patches, exactly as the checkpoint's
//! `preprocessor_config.json` says (Qwen2-VL / Qwen2.5-VL image processor).
//!
//! The reference is mlx-vlm 0.7.6's numpy processor (`Qwen3VLImageProcessor`, used for
//! Qwen2-VL and Qwen2.5-VL) behind `mlx_vlm.utils.load_image`:
//! 1. decode, EXIF-transpose, `convert("RGB")` — [`decode`];
//! 2. smart resize: each side to a multiple of `patch_size · merge_size`, total pixels
//!    clamped into `[min_pixels, max_pixels]` — [`smart_resize`];
//! 3. PIL bicubic resize on 8-bit pixels — [`resample`] (bit-exact with Pillow 13);
//! 4. `x · rescale_factor`, then `(x − mean) / std`, in float32 as numpy does;
//! 5. the image repeated `temporal_patch_size` times and cut into patches, rows in
//!    merge-window order (each `merge_size × merge_size` block of patches contiguous),
//!    columns `(channel, t, row, col)`.
//!
//! Goldens: `scripts/make-preprocess-goldens.sh`, checked by `tests/vision_preprocess.rs`.
use std::path::Path;

use mlx_rs::Array;
use serde_json::Value;

use crate::error::{Error, Result};

pub(crate) mod decode;
pub(crate) mod jpeg;
pub(crate) mod normalize;
pub(crate) mod resample;

pub use decode::{displayed_size, MAX_DECODE_BYTES, MAX_PIXELS, MAX_SIDE};
pub use normalize::{Normalize, RescalePrecision};

/// The image processor of a vision-language checkpoint.
///
/// `Default` is the reference's Qwen2-VL default (what mlx-vlm uses when the
/// checkpoint has no preprocessor config).
#[derive(Debug, Clone)]
pub struct QwenImageProcessor {
    pub patch_size: usize,
    pub temporal_patch_size: usize,
    pub merge_size: usize,
    pub min_pixels: usize,
    pub max_pixels: usize,
    /// The rescale (in float32, as numpy does) and normalization.
    pub normalize: Normalize,
}

impl Default for QwenImageProcessor {
    fn default() -> Self {
        QwenImageProcessor {
            patch_size: 14,
            temporal_patch_size: 2,
            merge_size: 2,
            min_pixels: 56 * 56,
            max_pixels: 14 * 14 * 4 * 1280,
            // mlx-vlm's processor: "image_mean or [0.5, 0.5, 0.5]" (not CLIP's values)
            normalize: Normalize::halves(RescalePrecision::Float32),
        }
    }
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

/// One image's patches as plain numbers, before they become an MLX array:
/// made on any thread (request preparation runs off the engine thread).
#[derive(Debug, Clone)]
pub struct ImagePatches {
    /// Row-major `[rows, cols]`, as [`PreprocessedImage::pixels`].
    pub data: Vec<f32>,
    pub rows: usize,
    pub cols: usize,
    /// `(t, h, w)` in patches.
    pub grid: [i32; 3],
}

impl ImagePatches {
    /// The patches as the array the vision tower reads (engine thread only).
    pub fn to_array(&self) -> Array {
        Array::from_slice(&self.data, &[self.rows as i32, self.cols as i32])
    }
}

fn bad(key: &str, v: &Value) -> Error {
    Error::InvalidConfig(format!("image processor config: bad {key}: {v}"))
}

fn positive(raw: &serde_json::Map<String, Value>, key: &str) -> Result<Option<usize>> {
    match raw.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n > 0 => Ok(Some(n as usize)),
            // some configs write integers as floats (3136.0)
            _ => match v.as_f64() {
                Some(f) if f > 0.0 && f.fract() == 0.0 && f < 1e15 => Ok(Some(f as usize)),
                _ => Err(bad(key, v)),
            },
        },
    }
}

/// A per-channel setting (`image_mean`, `image_std`): three numbers, or one
/// for all three; `None` when the config does not say.
pub(crate) fn triple(raw: &serde_json::Map<String, Value>, key: &str) -> Result<Option<[f32; 3]>> {
    match raw.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => {
            Ok(Some([n.as_f64().ok_or_else(|| bad(key, &raw[key]))? as f32; 3]))
        }
        Some(v @ Value::Array(items)) if items.len() == 3 => {
            let mut out = [0f32; 3];
            for (o, item) in out.iter_mut().zip(items) {
                // numpy: np.array(list, dtype=float32) rounds each f64 to nearest f32
                *o = item.as_f64().ok_or_else(|| bad(key, v))? as f32;
            }
            Ok(Some(out))
        }
        Some(v) => Err(bad(key, v)),
    }
}

fn flag(raw: &serde_json::Map<String, Value>, key: &str) -> Result<Option<bool>> {
    match raw.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(bad(key, v)),
    }
}

impl QwenImageProcessor {
    /// Reads `preprocessor_config.json` (falling back to `processor_config.json`).
    ///
    /// As the reference (`_qwen_vl_image_kwargs`): `preprocessor_config.json` is the
    /// base, the `image_processor` object of `processor_config.json` (newer
    /// transformers) overrides it, and a checkpoint with neither gets the Qwen2-VL
    /// defaults. Pixel bounds, lowest to highest precedence: `size.min_pixels` /
    /// `size.max_pixels` (older transformers; the reference ignores these, but real
    /// configs with them also carry the top-level keys, which win in both),
    /// `size.shortest_edge` / `size.longest_edge` (transformers ≥ 4.5x: pixel
    /// counts despite the names), top-level `min_pixels` / `max_pixels`.
    pub fn from_folder(dir: &Path) -> Result<Self> {
        let (raw, _) = super::processor::read_processor_settings(dir)?;
        Self::from_config(&raw)
    }

    /// [`Self::from_folder`] for the family registry.
    pub fn shared_from_folder(dir: &Path) -> Result<super::SharedImageProcessor> {
        Ok(std::sync::Arc::new(Self::from_folder(dir)?))
    }

    /// The processor from the merged config object (see [`Self::from_folder`]).
    pub fn from_config(raw: &serde_json::Map<String, Value>) -> Result<Self> {
        let mut p = Self::default();
        if let Some(v) = positive(raw, "patch_size")? {
            p.patch_size = v;
        }
        if let Some(v) = positive(raw, "temporal_patch_size")? {
            p.temporal_patch_size = v;
        }
        if let Some(v) = positive(raw, "merge_size")? {
            p.merge_size = v;
        }
        if let Some(Value::Object(size)) = raw.get("size") {
            for (key, field) in
                [("min_pixels", 0), ("max_pixels", 1), ("shortest_edge", 0), ("longest_edge", 1)]
            {
                if let Some(v) = positive(size, key)? {
                    *(if field == 0 { &mut p.min_pixels } else { &mut p.max_pixels }) = v;
                }
            }
        }
        if let Some(v) = positive(raw, "min_pixels")? {
            p.min_pixels = v;
        }
        if let Some(v) = positive(raw, "max_pixels")? {
            p.max_pixels = v;
        }
        // stricter than `Normalize::read`: a setting of the wrong type is an error
        let n = &mut p.normalize;
        if let Some(v) = triple(raw, "image_mean")? {
            n.image_mean = v;
        }
        if let Some(v) = triple(raw, "image_std")? {
            n.image_std = v;
        }
        if let Some(v) = raw.get("rescale_factor").filter(|v| !v.is_null()) {
            n.rescale_factor = v.as_f64().ok_or_else(|| bad("rescale_factor", v))?;
        }
        if let Some(v) = flag(raw, "do_rescale")? {
            n.do_rescale = v;
        }
        if let Some(v) = flag(raw, "do_normalize")? {
            n.do_normalize = v;
        }
        if n.image_std.iter().any(|&s| s == 0.0 || !s.is_finite()) {
            return Err(bad("image_std", &raw["image_std"]));
        }
        if p.min_pixels > p.max_pixels {
            return Err(Error::InvalidConfig(format!(
                "image processor config: min_pixels {} > max_pixels {}",
                p.min_pixels, p.max_pixels
            )));
        }
        Ok(p)
    }

    /// Decodes and preprocesses one image file's bytes. Bad input (empty,
    /// corrupt, not an image, too large to decode) is `Error::InvalidImage`.
    pub fn preprocess(&self, bytes: &[u8]) -> Result<PreprocessedImage> {
        self.preprocess_named(bytes, &format!("of {} bytes", bytes.len()))
    }

    /// [`Self::preprocess`] with the name the error should give the image (a file name,
    /// "#2 in the request").
    pub fn preprocess_named(&self, bytes: &[u8], name: &str) -> Result<PreprocessedImage> {
        let patches = self.patches_named(bytes, name)?;
        Ok(PreprocessedImage { pixels: patches.to_array(), grid: patches.grid })
    }

    /// [`Self::preprocess_named`] without MLX: decoding, resizing and
    /// patches only, so any thread may run it.
    pub fn patches_named(&self, bytes: &[u8], name: &str) -> Result<ImagePatches> {
        let invalid = |reason: String| Error::InvalidImage { image: name.to_string(), reason };
        let img = decode::decode_rgb8(bytes).map_err(invalid)?;
        self.patches_rgb8(&img.rgb, img.width, img.height).map_err(|e| match e {
            Error::InvalidImage { reason, .. } => invalid(reason),
            other => other,
        })
    }

    /// The pipeline after decoding: `rgb` is `width × height` interleaved 8-bit RGB.
    pub fn preprocess_rgb8(
        &self,
        rgb: &[u8],
        width: usize,
        height: usize,
    ) -> Result<PreprocessedImage> {
        let patches = self.patches_rgb8(rgb, width, height)?;
        Ok(PreprocessedImage { pixels: patches.to_array(), grid: patches.grid })
    }

    fn patches_rgb8(&self, rgb: &[u8], width: usize, height: usize) -> Result<ImagePatches> {
        let invalid = |reason: String| Error::InvalidImage { image: "image".into(), reason };
        if width == 0 || height == 0 || rgb.len() != width * height * 3 {
            return Err(invalid(format!(
                "{width}×{height} pixels with {} bytes of RGB",
                rgb.len()
            )));
        }
        let factor = self.patch_size * self.merge_size;
        let (rh, rw) = smart_resize(height, width, factor, self.min_pixels, self.max_pixels)
            .map_err(invalid)?;
        let resized;
        let pixels = if (rh, rw) == (height, width) {
            rgb
        } else {
            resized = resample::resize_bicubic_rgb8(rgb, width, height, rw, rh);
            &resized[..]
        };
        let (grid_h, grid_w) = (rh / self.patch_size, rw / self.patch_size);
        let data = self.patchify(pixels, rw, grid_h, grid_w);
        Ok(ImagePatches {
            data,
            rows: grid_h * grid_w,
            cols: 3 * self.temporal_patch_size * self.patch_size * self.patch_size,
            grid: [1, grid_h as i32, grid_w as i32],
        })
    }

    /// Normalizes and lays out the patches as the reference's
    /// `reshape(1, t, T, C, gh/m, m, p, gw/m, m, p).transpose(0, 1, 4, 7, 5, 8, 3, 2, 6, 9)`:
    /// rows (block row, block col, row in block, col in block), columns (C, T, p, p).
    fn patchify(&self, rgb: &[u8], width: usize, grid_h: usize, grid_w: usize) -> Vec<f32> {
        let (p, m, t) = (self.patch_size, self.merge_size, self.temporal_patch_size);
        // numpy: float32 array * Python float → the scalar is taken as float32 (NEP 50),
        // then (x - mean) / std elementwise in float32.
        let lut = self.normalize.levels();
        let plane = p * p;
        let cols = 3 * t * plane;
        let mut out = vec![0f32; grid_h * grid_w * cols];
        let mut row = 0;
        for bh in 0..grid_h / m {
            for bw in 0..grid_w / m {
                for mh in 0..m {
                    for mw in 0..m {
                        let (py, px) = ((bh * m + mh) * p, (bw * m + mw) * p);
                        let dst = &mut out[row * cols..(row + 1) * cols];
                        for c in 0..3 {
                            let first = &mut dst[c * t * plane..c * t * plane + plane];
                            for y in 0..p {
                                let src = &rgb
                                    [((py + y) * width + px) * 3..((py + y) * width + px + p) * 3];
                                for (x, o) in first[y * p..(y + 1) * p].iter_mut().enumerate() {
                                    *o = lut[src[x * 3 + c] as usize][c];
                                }
                            }
                            // the same frame for every temporal slot
                            for k in 1..t {
                                let base = c * t * plane;
                                dst.copy_within(base..base + plane, base + k * plane);
                            }
                        }
                        row += 1;
                    }
                }
            }
        }
        out
    }

    /// The grid an image of `height × width` pixels gets, without decoding pixels.
    pub fn grid_for(&self, height: usize, width: usize) -> std::result::Result<[i32; 3], String> {
        let (rh, rw) = smart_resize(
            height,
            width,
            self.patch_size * self.merge_size,
            self.min_pixels,
            self.max_pixels,
        )?;
        Ok([1, (rh / self.patch_size) as i32, (rw / self.patch_size) as i32])
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

impl super::ImageProcessor for QwenImageProcessor {
    fn patches_named(&self, bytes: &[u8], name: &str) -> Result<ImagePatches> {
        QwenImageProcessor::patches_named(self, bytes, name)
    }

    fn num_image_tokens(&self, grid: [i32; 3]) -> usize {
        QwenImageProcessor::num_image_tokens(self, grid)
    }

    fn grid_for_size(&self, height: usize, width: usize) -> std::result::Result<[i32; 3], String> {
        self.grid_for(height, width)
    }

    fn cache_key(&self) -> String {
        QwenImageProcessor::cache_key(self)
    }
}

/// The reference's `smart_resize` (HF Qwen2-VL's): `(height, width)` after resizing.
///
/// Each side rounds to the nearest multiple of `factor` (Python `round`: halves to
/// even — 42 / 28 = 1.5 → 2, 70 / 28 = 2.5 → 2); if that exceeds `max_pixels` both
/// sides shrink by `sqrt(h·w / max_pixels)` and floor to a multiple (at least
/// `factor`); if it is under `min_pixels` they grow by `sqrt(min_pixels / (h·w))` and
/// ceil. Same float64 operations in the same order, so the same answers. An aspect
/// ratio over 200 is refused, as the reference does.
pub fn smart_resize(
    height: usize,
    width: usize,
    factor: usize,
    min_pixels: usize,
    max_pixels: usize,
) -> std::result::Result<(usize, usize), String> {
    if height == 0 || width == 0 {
        return Err(format!("the image is {width}×{height} pixels"));
    }
    let (h, w, f) = (height as f64, width as f64, factor as f64);
    let ratio = h.max(w) / h.min(w);
    if ratio > 200.0 {
        return Err(format!(
            "the aspect ratio of {width}×{height} pixels is {ratio:.1}:1; at most 200:1 is supported"
        ));
    }
    let mut h_bar = (h / f).round_ties_even() as usize * factor;
    let mut w_bar = (w / f).round_ties_even() as usize * factor;
    // Python ints: h·w is exact (and here < 2^53, as our decode limits keep it).
    let area = (height * width) as f64;
    if h_bar * w_bar > max_pixels {
        let beta = (area / max_pixels as f64).sqrt();
        h_bar = factor.max((h / beta / f).floor() as usize * factor);
        w_bar = factor.max((w / beta / f).floor() as usize * factor);
    } else if h_bar * w_bar < min_pixels {
        let beta = (min_pixels as f64 / area).sqrt();
        h_bar = (h * beta / f).ceil() as usize * factor;
        w_bar = (w * beta / f).ceil() as usize * factor;
    }
    if h_bar == 0 || w_bar == 0 {
        // only reachable with min_pixels = 0 and an image under factor/2 a side, where
        // the reference crashes inside PIL
        return Err(format!(
            "{width}×{height} pixels resizes to nothing with min_pixels = {min_pixels}"
        ));
    }
    Ok((h_bar, w_bar))
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: usize = 28;

    #[test]
    fn rounds_half_to_even_like_python() {
        // 42/28 = 1.5 → 2 (even), 70/28 = 2.5 → 2 (even), 98/28 = 3.5 → 4
        let big = usize::MAX / 4;
        assert_eq!(smart_resize(42, 98, F, 0, big).unwrap(), (56, 112));
        assert_eq!(smart_resize(70, 70, F, 0, big).unwrap(), (56, 56));
        // 126/28 = 4.5 → 4; round-half-up would give 140
        assert_eq!(smart_resize(126, 56, F, 0, big).unwrap(), (112, 56));
        // not a half: nearest
        assert_eq!(smart_resize(43, 41, F, 0, big).unwrap(), (56, 28));
    }

    #[test]
    fn exact_multiples_are_kept() {
        assert_eq!(smart_resize(56, 84, F, 56 * 56, 28 * 28 * 100).unwrap(), (56, 84));
    }

    #[test]
    fn max_pixels_floors_to_multiples() {
        // 1000×1000 → 1008×1008 rounded, over 200704 = 448²: beta = sqrt(1e6/200704),
        // 1000/beta/28 = 16 → 448 (values checked against the Python function)
        assert_eq!(smart_resize(1000, 1000, F, 3136, 200_704).unwrap(), (448, 448));
        // 1001×999 → floor(15.99..) = 15 → 420 on the short side
        assert_eq!(smart_resize(999, 1001, F, 3136, 200_704).unwrap(), (420, 448));
        // never below one factor a side, even for a thin strip
        assert_eq!(smart_resize(30, 5000, F, 3136, 28 * 28 * 4).unwrap(), (28, 700));
    }

    #[test]
    fn min_pixels_ceils_to_multiples() {
        // 10×10: rounds to 0×0 < 3136: beta = sqrt(3136/100) = 5.6 → 56/28 = 2 → 56
        assert_eq!(smart_resize(10, 10, F, 3136, 1_003_520).unwrap(), (56, 56));
        // 1×1: the smallest possible image still gets a valid grid
        assert_eq!(smart_resize(1, 1, F, 3136, 1_003_520).unwrap(), (56, 56));
    }

    #[test]
    fn aspect_ratio_over_200_is_refused() {
        assert_eq!(smart_resize(1, 200, F, 3136, 1_003_520).unwrap(), (28, 812));
        let err = smart_resize(1, 201, F, 3136, 1_003_520).unwrap_err();
        assert!(err.contains("aspect ratio") && err.contains("200"), "{err}");
        assert!(smart_resize(10_000, 49, F, 3136, 1_003_520).is_err());
    }

    #[test]
    fn zero_sized_is_an_error_not_a_panic() {
        assert!(smart_resize(0, 10, F, 3136, 1_003_520).is_err());
        assert!(smart_resize(5, 5, F, 0, 1_003_520).is_err());
    }

    #[test]
    fn patch_layout_is_merge_window_order() {
        // A 4×4-patch image (patch 1, merge 2, T 2) whose pixel value is its patch index
        // in raster order: rows must come out block by block (2×2 windows).
        let p = QwenImageProcessor {
            patch_size: 1,
            merge_size: 2,
            temporal_patch_size: 2,
            min_pixels: 1,
            max_pixels: 1 << 20,
            normalize: Normalize::RAW,
        };
        let rgb: Vec<u8> = (0..16u8).flat_map(|v| [v, v + 100, v + 200]).collect();
        let data = p.patchify(&rgb, 4, 4, 4);
        let cols = 3 * 2;
        let firsts: Vec<f32> = (0..16).map(|r| data[r * cols]).collect();
        assert_eq!(firsts, [0., 1., 4., 5., 2., 3., 6., 7., 8., 9., 12., 13., 10., 11., 14., 15.]);
        // columns: channel-major, then the two identical temporal copies
        assert_eq!(&data[0..6], &[0., 0., 100., 100., 200., 200.]);
    }

    #[test]
    fn config_key_styles() {
        let old: serde_json::Map<String, Value> = serde_json::from_str(
            r#"{"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "image_mean": [0.48145466, 0.4578275, 0.40821073]}"#,
        )
        .unwrap();
        let p = QwenImageProcessor::from_config(&old).unwrap();
        assert_eq!((p.min_pixels, p.max_pixels), (3136, 12_845_056));
        assert_eq!(p.normalize.image_mean[0], 0.48145466f32);
        assert_eq!(p.normalize.image_std, [0.5; 3]);
        let new: serde_json::Map<String, Value> =
            serde_json::from_str(r#"{"size": {"shortest_edge": 1000, "longest_edge": 9000}}"#)
                .unwrap();
        let p = QwenImageProcessor::from_config(&new).unwrap();
        assert_eq!((p.min_pixels, p.max_pixels), (1000, 9000));
        // top-level keys beat size.*
        let both: serde_json::Map<String, Value> = serde_json::from_str(
            r#"{"min_pixels": 5, "size": {"shortest_edge": 1000, "longest_edge": 9000, "max_pixels": 7}}"#,
        )
        .unwrap();
        let p = QwenImageProcessor::from_config(&both).unwrap();
        assert_eq!((p.min_pixels, p.max_pixels), (5, 9000));
        let bad: serde_json::Map<String, Value> =
            serde_json::from_str(r#"{"patch_size": "14"}"#).unwrap();
        assert!(matches!(QwenImageProcessor::from_config(&bad), Err(Error::InvalidConfig(_))));
    }
}
