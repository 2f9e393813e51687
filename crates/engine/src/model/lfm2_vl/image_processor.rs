//! LFM2-VL's image processor, as mlx-vlm 0.7.6 runs it (its NumPy
//! `Lfm2VlNumpyImageProcessor` and patched `Lfm2VlProcessor.__call__`, which
//! follow transformers' official tiling):
//! 1. decode, EXIF-transpose, RGB — [`crate::vision::preprocess::decode`];
//! 2. *smart resize*: both edges to multiples of `encoder_patch_size ·
//!    downsample_factor` (Python's half-to-even rounding), scaled down into
//!    `max_image_tokens` or up to `min_image_tokens` worth of pixels;
//! 3. an image too large for one view (its rounded size above
//!    `max_pixels_tolerance · max_image_tokens` tokens' pixels) is resized
//!    whole to a grid of `tile_size` tiles — the grid of `min_tiles` to
//!    `max_tiles` tiles closest to its aspect ratio — cut into tiles row by
//!    row, and followed by a thumbnail (the smart-resized image); a smaller
//!    image is the smart-resized view alone. PIL resizes on 8-bit pixels
//!    with the checkpoint's `resample` (bicubic by default);
//! 4. `x · rescale_factor` then `(x − mean) / std`, all in float32;
//! 5. each view cut into `encoder_patch_size` patches in raster order,
//!    columns (row, col, channel) — the NaFlex tower's linear patch layer.
//!
//! mlx-vlm re-applies the official splitting defaults whatever the
//! checkpoint's processor config says (splitting on, 2 to 10 tiles, the
//! thumbnail on: LiquidAI's MLX repos ship them off), and so do we.
//!
//! The prompt: the template writes `<image>` per image; the processor
//! writes the image's layout there in the *text*: `<|image_start|>`, then
//! each tile as `<|img_row_r_col_c|>` and its `<image>` slots and the
//! thumbnail as `<|img_thumbnail|>` and its slots — or, unsplit, the view's
//! slots alone — then `<|image_end|>` (the markers only with
//! `use_image_special_tokens`). A view of `h × w` patches gives
//! `⌈h/f⌉ · ⌈w/f⌉` slots (the pixel unshuffle pads odd grids).
use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::model::shape::ImageViews;
use crate::vision::preprocess::resample::{resize_rgb8, Filter};
use crate::vision::preprocess::{decode, ImagePatches, Normalize, RescalePrecision};
use crate::vision::processor::{expand_placeholders, read_json_object};
use crate::vision::{ImageProcessor, SharedImageProcessor};

pub const IMAGE: &str = "<image>";
pub const IMAGE_START: &str = "<|image_start|>";
pub const IMAGE_END: &str = "<|image_end|>";
pub const THUMBNAIL: &str = "<|img_thumbnail|>";

/// One image's views as the processor cuts them, carried to the tower in
/// the engine's `[i32; 3]` grid as `[rows · 1000 + cols, height, width]`:
/// the tile grid (`0 × 0` when the image is one view) and the patch grid of
/// the single view or the thumbnail (`0 × 0` for no thumbnail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub rows: i32,
    pub cols: i32,
    pub height: i32,
    pub width: i32,
}

/// The tile counts mlx-vlm's processor allows an image, whatever the
/// checkpoint's files say (see the module doc).
const MIN_TILES: usize = 2;
const MAX_TILES: usize = 10;

/// How `rows` and `cols` share the grid's first number.
const TILE_GRID_BASE: i32 = 1000;

impl Layout {
    pub fn grid(self) -> [i32; 3] {
        [self.rows * TILE_GRID_BASE + self.cols, self.height, self.width]
    }

    pub fn of_grid(grid: [i32; 3]) -> Self {
        let tiles = grid[0].max(0);
        Self {
            rows: tiles / TILE_GRID_BASE,
            cols: tiles % TILE_GRID_BASE,
            height: grid[1].max(0),
            width: grid[2].max(0),
        }
    }

    pub fn tiles(self) -> i32 {
        self.rows * self.cols
    }
}

/// `⌈h/f⌉ · ⌈w/f⌉`: the tokens of an `h × w` patch grid after the pixel
/// unshuffle (which pads odd grids with zeros).
pub fn unshuffled_tokens(height: usize, width: usize, factor: usize) -> usize {
    height.div_ceil(factor) * width.div_ceil(factor)
}

#[derive(Debug, Clone)]
pub struct Lfm2VlImageProcessor {
    /// `encoder_patch_size`: the tower's patch side in pixels.
    pub patch_size: usize,
    /// `downsample_factor`: the pixel unshuffle's block side.
    pub factor: usize,
    pub min_image_tokens: usize,
    pub max_image_tokens: usize,
    /// A tile's side in pixels.
    pub tile_size: usize,
    pub max_pixels_tolerance: f64,
    pub split: bool,
    pub min_tiles: usize,
    pub max_tiles: usize,
    pub use_thumbnail: bool,
    /// `<|image_start|>`, `<|image_end|>` and the tile markers in the prompt.
    pub special_tokens: bool,
    pub filter: Filter,
    /// The rescale and normalization, all in float32.
    pub normalize: Normalize,
}

fn bad(key: &str, v: &Value) -> Error {
    Error::InvalidConfig(format!("LFM2-VL image processor config: bad {key}: {v}"))
}

/// A processor file's settings, `image_processor` unnested (LFM2.5's repos
/// nest them; older ones keep them at the top).
fn settings_of(file: Option<Map<String, Value>>) -> Map<String, Value> {
    let file = file.unwrap_or_default();
    match file.get("image_processor") {
        Some(Value::Object(inner)) => inner.clone(),
        _ => file,
    }
}

/// The family's [`crate::model::registry::ImageProcessing::views`]: those
/// of the processor config.json and the folder's processor files give
/// (LFM2-VL's config.json holds the tile and token sizes too, so config.json
/// alone gives them before a download).
pub fn image_views(config: &Value, dir: Option<&Path>) -> Result<ImageViews> {
    let config = config.as_object().cloned().unwrap_or_default();
    Ok(Lfm2VlImageProcessor::from_config_and_folder(&config, dir)?.most_views())
}

/// Python's `round(x)`: halves to even.
fn round_half_even(x: f64) -> f64 {
    x.round_ties_even()
}

impl Lfm2VlImageProcessor {
    /// Reads `preprocessor_config.json` overlaid by `processor_config.json`
    /// (as mlx-vlm merges them), config.json for what they omit.
    pub fn from_folder(dir: &Path) -> Result<Self> {
        let config = read_json_object(&dir.join("config.json"))?.unwrap_or_default();
        Self::from_config_and_folder(&config, Some(dir))
    }

    /// [`Self::from_folder`] with config.json already read; without a
    /// folder, as if the processor files were absent.
    fn from_config_and_folder(config: &Map<String, Value>, dir: Option<&Path>) -> Result<Self> {
        let file = |name: &str| dir.map_or(Ok(None), |dir| read_json_object(&dir.join(name)));
        let mut raw = settings_of(file("preprocessor_config.json")?);
        let processor = file("processor_config.json")?;
        raw.extend(settings_of(processor.clone()));
        let int = |key: &str, default: usize| -> Result<usize> {
            match raw.get(key).or_else(|| config.get(key)) {
                None | Some(Value::Null) => Ok(default),
                Some(v) => match v.as_u64() {
                    Some(n) if n > 0 => Ok(n as usize),
                    _ => Err(bad(key, v)),
                },
            }
        };
        let patch_size = match raw.get("encoder_patch_size") {
            Some(_) => int("encoder_patch_size", 16)?,
            None if raw.contains_key("patch_size") => int("patch_size", 16)?,
            None => int("encoder_patch_size", 16)?,
        };
        let filter = match raw.get("resample") {
            None | Some(Value::Null) => Filter::Bicubic,
            Some(v) => v.as_u64().and_then(Filter::from_pil).ok_or_else(|| bad("resample", v))?,
        };
        let special_tokens = processor
            .as_ref()
            .and_then(|p| p.get("use_image_special_tokens"))
            .or_else(|| config.get("use_image_special_tokens"))
            .and_then(Value::as_bool)
            .unwrap_or(true);
        let p = Self {
            patch_size,
            factor: int("downsample_factor", 2)?,
            min_image_tokens: int("min_image_tokens", 64)?,
            max_image_tokens: int("max_image_tokens", 256)?,
            tile_size: int("tile_size", 512)?,
            max_pixels_tolerance: raw
                .get("max_pixels_tolerance")
                .and_then(Value::as_f64)
                .unwrap_or(2.0),
            // mlx-vlm's official splitting defaults, whatever the files say.
            split: true,
            min_tiles: MIN_TILES,
            max_tiles: MAX_TILES,
            use_thumbnail: true,
            special_tokens,
            filter,
            normalize: Normalize::read(
                &raw,
                Normalize::halves(RescalePrecision::Float32),
                "LFM2-VL",
            )?,
        };
        if !p.tile_size.is_multiple_of(p.patch_size) {
            return Err(Error::InvalidConfig(format!(
                "LFM2-VL: tile_size {} is not a whole number of {}-pixel patches",
                p.tile_size, p.patch_size
            )));
        }
        Ok(p)
    }

    /// For the family registry.
    pub fn shared_from_folder(dir: &Path) -> Result<SharedImageProcessor> {
        Ok(Arc::new(Self::from_folder(dir)?))
    }

    /// The most views one image becomes: `max_tiles` tiles and the
    /// thumbnail (a small image is one view). A tile holds
    /// `(tile_size / patch_size)²` patches; a single view or the thumbnail
    /// at most `max_image_tokens` tokens of `factor²` patches each (the
    /// smart resize's pixel cap).
    pub fn most_views(&self) -> ImageViews {
        let view = self.max_image_tokens * self.factor * self.factor;
        if !self.split {
            return ImageViews { views: 1, patches_per_view: view };
        }
        ImageViews {
            views: self.max_tiles + usize::from(self.use_thumbnail),
            patches_per_view: view.max(self.tile_patches() * self.tile_patches()),
        }
    }

    /// A tile's side in patches.
    fn tile_patches(&self) -> usize {
        self.tile_size / self.patch_size
    }

    /// The reference's `_smart_resize`: `(height, width)` in pixels.
    fn smart_resize(&self, height: usize, width: usize) -> (usize, usize) {
        let (p, f) = (self.patch_size, self.factor);
        let total = (p * f) as f64;
        let min_pixels = (self.min_image_tokens * p * p * f * f) as f64;
        let max_pixels = (self.max_image_tokens * p * p * f * f) as f64;
        let (h, w) = (height as f64, width as f64);
        let mut h_bar = total.max(round_half_even(h / total) * total);
        let mut w_bar = total.max(round_half_even(w / total) * total);
        if h_bar * w_bar > max_pixels {
            let beta = (h * w / max_pixels).sqrt();
            h_bar = total.max((h / beta / total).floor() * total);
            w_bar = total.max((w / beta / total).floor() * total);
        } else if h_bar * w_bar < min_pixels {
            let beta = (min_pixels / (h * w)).sqrt();
            h_bar = (h * beta / total).ceil() * total;
            w_bar = (w * beta / total).ceil() * total;
        }
        (h_bar as usize, w_bar as usize)
    }

    /// The reference's `_is_image_too_large` (for one view).
    fn too_large(&self, height: usize, width: usize) -> bool {
        let (p, f) = (self.patch_size as f64, self.factor as f64);
        let total = p * f;
        let h_bar = p.max(round_half_even(height as f64 / total) * total);
        let w_bar = p.max(round_half_even(width as f64 / total) * total);
        h_bar * w_bar > self.max_image_tokens as f64 * p * p * f * f * self.max_pixels_tolerance
    }

    /// The tile grid `(cols, rows)` closest to the image's aspect ratio:
    /// every grid of `min_tiles` to `max_tiles` tiles by tile count, a tie
    /// going to the later grid when the image covers over half its area.
    /// The reference orders grids of one tile count as CPython's set
    /// iterates them, ours by columns; for 2 to 10 tiles no such pair is
    /// ever the closest at once (an aspect ratio halfway between two of
    /// them is nearer another grid), so the choice is the same.
    fn tile_grid(&self, height: usize, width: usize) -> (usize, usize) {
        let aspect = width as f64 / height as f64;
        let mut ratios: Vec<(usize, usize)> = Vec::new();
        for n in self.min_tiles..=self.max_tiles {
            for w in 1..=n {
                for h in 1..=n {
                    let tiles = w * h;
                    if (self.min_tiles..=self.max_tiles).contains(&tiles)
                        && !ratios.contains(&(w, h))
                    {
                        ratios.push((w, h));
                    }
                }
            }
        }
        ratios.sort_by_key(|&(w, h)| w * h);
        let (mut best, mut best_diff) = ((1, 1), f64::INFINITY);
        let area = (width * height) as f64;
        for (w, h) in ratios {
            let diff = (aspect - w as f64 / h as f64).abs();
            if diff < best_diff {
                (best, best_diff) = ((w, h), diff);
            } else if diff == best_diff {
                let target = (self.tile_size * self.tile_size * w * h) as f64;
                if area > 0.5 * target {
                    best = (w, h);
                }
            }
        }
        best
    }

    /// An image of `height × width` pixels: its layout and, when tiled, the
    /// whole image's size before cutting; the single view's or thumbnail's
    /// pixel size.
    fn plan(
        &self,
        height: usize,
        width: usize,
    ) -> (Layout, Option<(usize, usize)>, (usize, usize)) {
        let resized = self.smart_resize(height, width);
        let p = self.patch_size;
        let view = |(h, w): (usize, usize)| ((h / p) as i32, (w / p) as i32);
        if self.split && self.too_large(height, width) {
            let (cols, rows) = self.tile_grid(height, width);
            let whole = (rows * self.tile_size, cols * self.tile_size);
            let (vh, vw) =
                if self.use_thumbnail && rows * cols > 1 { view(resized) } else { (0, 0) };
            let layout = Layout { rows: rows as i32, cols: cols as i32, height: vh, width: vw };
            return (layout, Some(whole), resized);
        }
        let (vh, vw) = view(resized);
        (Layout { rows: 0, cols: 0, height: vh, width: vw }, None, resized)
    }

    /// Appends the patches of the `h × w` pixel window at (`x0`, `y0`) of
    /// `pixels` (`stride` wide) to `out`, columns (row, col, channel).
    #[allow(clippy::too_many_arguments)]
    fn push_view(
        &self,
        out: &mut Vec<f32>,
        lut: &[[f32; 3]],
        pixels: &[u8],
        stride: usize,
        (x0, y0): (usize, usize),
        (h, w): (usize, usize),
    ) {
        let p = self.patch_size;
        for py in 0..h / p {
            for px in 0..w / p {
                for y in 0..p {
                    let row = (y0 + py * p + y) * stride;
                    for x in 0..p {
                        let at = (row + x0 + px * p + x) * 3;
                        for c in 0..3 {
                            out.push(lut[pixels[at + c] as usize][c]);
                        }
                    }
                }
            }
        }
    }

    /// The patches of `rgb` (`width × height` interleaved 8-bit RGB): each
    /// tile's row by row, then the thumbnail; or the single view's.
    pub fn patches_rgb8(&self, rgb: &[u8], width: usize, height: usize) -> Result<ImagePatches> {
        let (layout, whole, resized) = self.plan(height, width);
        let lut = self.normalize.levels();
        let p = self.patch_size;
        let cols = 3 * p * p;
        let mut data = Vec::new();
        if let Some((wh, ww)) = whole {
            let big = resize_rgb8(rgb, width, height, ww, wh, self.filter);
            let t = self.tile_size;
            for r in 0..layout.rows as usize {
                for c in 0..layout.cols as usize {
                    self.push_view(&mut data, &lut, &big, ww, (c * t, r * t), (t, t));
                }
            }
        }
        if layout.height > 0 {
            let (rh, rw) = resized;
            let view = resize_rgb8(rgb, width, height, rw, rh, self.filter);
            self.push_view(&mut data, &lut, &view, rw, (0, 0), (rh, rw));
        }
        let rows = data.len() / cols;
        Ok(ImagePatches { data, rows, cols, grid: layout.grid() })
    }

    /// One image's text (see the module doc).
    fn image_text(&self, layout: Layout) -> String {
        let mut text = String::new();
        if self.special_tokens {
            text.push_str(IMAGE_START);
        }
        let slots = |h: usize, w: usize| IMAGE.repeat(unshuffled_tokens(h, w, self.factor));
        let (vh, vw) = (layout.height as usize, layout.width as usize);
        if layout.tiles() > 0 {
            let t = self.tile_patches();
            for r in 1..=layout.rows {
                for c in 1..=layout.cols {
                    if self.special_tokens {
                        text.push_str(&format!("<|img_row_{r}_col_{c}|>"));
                    }
                    text.push_str(&slots(t, t));
                }
            }
            if vh > 0 {
                if self.special_tokens {
                    text.push_str(THUMBNAIL);
                }
                text.push_str(&slots(vh, vw));
            }
        } else {
            text.push_str(&slots(vh, vw));
        }
        if self.special_tokens {
            text.push_str(IMAGE_END);
        }
        text
    }
}

impl ImageProcessor for Lfm2VlImageProcessor {
    fn patches_named(&self, bytes: &[u8], name: &str) -> Result<ImagePatches> {
        let img = decode::decode_named(bytes, name)?;
        self.patches_rgb8(&img.rgb, img.width, img.height)
    }

    fn num_image_tokens(&self, grid: [i32; 3]) -> usize {
        let layout = Layout::of_grid(grid);
        let t = self.tile_patches();
        layout.tiles() as usize * unshuffled_tokens(t, t, self.factor)
            + unshuffled_tokens(layout.height as usize, layout.width as usize, self.factor)
    }

    fn grid_for_size(&self, height: usize, width: usize) -> std::result::Result<[i32; 3], String> {
        if height == 0 || width == 0 {
            return Err("the image is empty".into());
        }
        Ok(self.plan(height, width).0.grid())
    }

    fn cache_key(&self) -> String {
        format!("{self:?}")
    }

    fn expands_in_text(&self) -> bool {
        true
    }

    fn expand_prompt_text_for_grids(&self, rendered: &str, grids: &[[i32; 3]]) -> Option<String> {
        let text = |g| self.image_text(Layout::of_grid(g));
        Some(expand_placeholders(rendered, IMAGE, grids, text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// LFM2-VL's defaults (as with no processor config).
    fn real() -> Lfm2VlImageProcessor {
        Lfm2VlImageProcessor::from_folder(Path::new("/nonexistent")).unwrap()
    }

    #[test]
    fn smart_resize_follows_the_reference() {
        let p = real();
        // 240 × 180 (a phone photo turned): below 64 tokens' pixels → scaled up
        // (β = √(65536 / 43200)), both edges whole multiples of 32.
        assert_eq!(p.smart_resize(240, 180), (320, 224));
        // 1000 × 1000: above 256 tokens → scaled down to 512 × 512.
        assert_eq!(p.smart_resize(1000, 1000), (512, 512));
        // Python's round: 48 / 32 = 1.5 rounds to 2, 80 / 32 = 2.5 to 2.
        assert_eq!(round_half_even(1.5), 2.0);
        assert_eq!(round_half_even(2.5), 2.0);
    }

    #[test]
    fn large_images_are_tiled_with_a_thumbnail() {
        let p = real();
        // 2000 × 1500 (4:3): 3 × 2 tiles is the closest grid of 2 to 10
        // (4 × 3 has 12), plus the thumbnail as smart resize gives it.
        let (layout, whole, resized) = p.plan(1500, 2000);
        assert_eq!((layout.rows, layout.cols), (2, 3));
        assert_eq!(whole, Some((1024, 1536)));
        assert_eq!(resized, (416, 576));
        assert_eq!((layout.height, layout.width), (26, 36));
        assert_eq!(Layout::of_grid(layout.grid()), layout);
        // 6 tiles of 16 × 16 tokens, the thumbnail 13 × 18
        assert_eq!(p.num_image_tokens(layout.grid()), 6 * 256 + 13 * 18);
        // a small image: one view
        let (layout, whole, _) = p.plan(240, 180);
        assert_eq!((layout.tiles(), whole), (0, None));
    }

    #[test]
    fn the_prompt_holds_the_tiles_then_the_thumbnail() {
        let p = Lfm2VlImageProcessor { patch_size: 2, factor: 2, tile_size: 4, ..real() };
        let tiled = Layout { rows: 1, cols: 2, height: 2, width: 4 }.grid();
        let single = Layout { rows: 0, cols: 0, height: 3, width: 2 }.grid();
        let out = p.expand_prompt_text_for_grids("a<image>b<image>", &[tiled, single]).unwrap();
        assert_eq!(
            out,
            "a<|image_start|><|img_row_1_col_1|><image><|img_row_1_col_2|><image>\
             <|img_thumbnail|><image><image><|image_end|>b<|image_start|><image><image><|image_end|>"
        );
        let plain = Lfm2VlImageProcessor { special_tokens: false, ..p };
        assert_eq!(
            plain.expand_prompt_text_for_grids("<image>", &[single]).unwrap(),
            IMAGE.repeat(2)
        );
    }

    #[test]
    fn patches_are_row_col_channel_tiles_first() {
        let p = Lfm2VlImageProcessor {
            patch_size: 2,
            tile_size: 2,
            normalize: Normalize::RAW,
            ..real()
        };
        // A 4 × 2 image whose red value is its pixel index.
        let rgb: Vec<u8> = (0..8u8).flat_map(|v| [v, 100, 200]).collect();
        let mut out = Vec::new();
        p.push_view(&mut out, &p.normalize.levels(), &rgb, 4, (2, 0), (2, 2));
        // the right 2 × 2 block: pixels 2, 3, 6, 7, each (r, g, b)
        assert_eq!(out, [2., 100., 200., 3., 100., 200., 6., 100., 200., 7., 100., 200.]);
    }
}
