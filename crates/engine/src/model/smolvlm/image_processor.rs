//! SmolVLM's image processor, as transformers' `SmolVLMImageProcessor` (the
//! PIL backend mlx-vlm 0.7.6 asks for) and mlx-vlm's `SmolVLMProcessor` do:
//! 1. decode, EXIF-transpose, RGB — [`crate::vision::preprocess::decode`];
//! 2. resize so the longest edge is `size.longest_edge` (up or down; the
//!    other edge keeps the aspect ratio, rounded up to even), on 8-bit pixels
//!    with PIL's filter (`resample`, Lanczos by default);
//! 3. with `do_image_splitting`: resize again so both edges are whole
//!    multiples of `max_image_size.longest_edge` (the tower's `image_size`),
//!    cut that into `rows × cols` tiles in raster order and add the whole
//!    image squashed to one tile (the global view) last — when the image is
//!    a single tile already, that tile alone; without splitting, the image
//!    squashed to one tile;
//! 4. `x · rescale_factor` in float64 then float32, `(x − mean) / std` in float32;
//! 5. each tile cut into `patch_size` patches in raster order, columns
//!    `(channel, row, col)` (the tower's Conv2d as one matmul).
//!
//! The prompt: the chat template writes `<image>` per image; the processor
//! writes the image's layout there in the *text*: per tile row, each tile as
//! `<fake_token_around_image><row_r_col_c>` and its `<image>` slots, then a
//! newline; then `\n<fake_token_around_image><global-img>`, the global
//! view's slots and `<fake_token_around_image>` (an unsplit image: only the
//! global part, without the newline). So an image's grid is
//! `[tiles, rows, cols]` (`rows = cols = 0` unsplit).
use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::model::shape::ImageViews;
use crate::vision::preprocess::resample::{resize_rgb8, Filter};
use crate::vision::preprocess::{decode, ImagePatches, Normalize, RescalePrecision};
use crate::vision::processor::{expand_placeholders, read_json_object, read_processor_settings};
use crate::vision::{ImageProcessor, SharedImageProcessor};

pub const IMAGE: &str = "<image>";
pub const FAKE: &str = "<fake_token_around_image>";
pub const GLOBAL: &str = "<global-img>";

/// transformers' bound on either edge after the first resize.
const MAX_IMAGE_SIZE: usize = 4096;

#[derive(Debug, Clone)]
pub struct SmolVlmImageProcessor {
    /// The first resize's longest edge (`size.longest_edge`); `None` without `do_resize`.
    pub longest_edge: Option<usize>,
    /// A tile's side in pixels (`max_image_size.longest_edge`, the tower's `image_size`).
    pub tile: usize,
    pub patch_size: usize,
    pub split: bool,
    /// `<image>` slots per tile (`image_seq_len`).
    pub tokens_per_tile: usize,
    pub filter: Filter,
    /// The rescale in float64 rounded to float32, then normalize in float32.
    pub normalize: Normalize,
}

fn bad(key: &str, v: &Value) -> Error {
    Error::InvalidConfig(format!("SmolVLM image processor config: bad {key}: {v}"))
}

fn longest_edge(raw: &Map<String, Value>, key: &str) -> Result<Option<usize>> {
    match raw.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.get("longest_edge").and_then(Value::as_u64) {
            Some(n) if n > 0 => Ok(Some(n as usize)),
            _ => Err(bad(key, v)),
        },
    }
}

/// transformers' `_resize_output_size_rescale_to_max_len` (min 1).
fn rescale_to_max_len(height: usize, width: usize, max_len: usize) -> (usize, usize) {
    let aspect = width as f64 / height as f64;
    let up_to_even = |x: usize| x + x % 2;
    let (h, w) = if width >= height {
        (up_to_even((max_len as f64 / aspect) as usize), max_len)
    } else {
        (max_len, up_to_even((max_len as f64 * aspect) as usize))
    };
    (h.max(1), w.max(1))
}

/// transformers' `_resize_output_size_scale_below_upper_bound`.
fn scale_below(height: usize, width: usize, max_len: usize) -> (usize, usize) {
    let aspect = width as f64 / height as f64;
    let (mut h, mut w) = (height, width);
    if width >= height && width > max_len {
        w = max_len;
        h = (w as f64 / aspect) as usize;
    } else if height > width && height > max_len {
        h = max_len;
        w = (h as f64 * aspect) as usize;
    }
    (h.max(1), w.max(1))
}

/// transformers' `resize_for_vision_encoder`: both edges up to multiples of `tile`.
fn whole_tiles(height: usize, width: usize, tile: usize) -> (usize, usize) {
    let aspect = width as f64 / height as f64;
    let up = |x: usize| x.div_ceil(tile) * tile;
    if width >= height {
        let w = up(width);
        (up((w as f64 / aspect) as usize), w)
    } else {
        let h = up(height);
        (h, up((h as f64 * aspect) as usize))
    }
}

/// An image's sizes through the processor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Plan {
    /// After the first resize.
    first: (usize, usize),
    /// After resizing to whole tiles (splitting only).
    tiled: Option<(usize, usize)>,
    /// Tile rows and columns (0 and 0: one tile, the global view only).
    rows: usize,
    cols: usize,
}

/// Idefics3's tile side when no config says (`max_image_size.longest_edge`).
const DEFAULT_TILE: usize = 364;
/// The first resize's longest edge when no config says, in tiles: 4 × 364
/// pixels is transformers' default, and SmolVLM2 keeps the ratio (2048
/// pixels for its 512-pixel tiles).
const DEFAULT_TILES_A_SIDE: usize = 4;

/// The family's [`crate::model::registry::ImageProcessing::views`]: the
/// folder's processor's; from config.json alone, the sizes its
/// `vision_config` repeats (SmolVLM2's `size` and tower `image_size`), else
/// the default tiles a side, with splitting on.
pub fn image_views(config: &Value, dir: Option<&Path>) -> Result<ImageViews> {
    if let Some(dir) = dir {
        return Ok(SmolVlmImageProcessor::from_folder(dir)?.most_views());
    }
    let vision =
        config.get("vision_config").and_then(Value::as_object).cloned().unwrap_or_default();
    let size = |key: &str, default: usize| {
        vision.get(key).and_then(Value::as_u64).map_or(default, |v| v as usize)
    };
    let tile = size("image_size", DEFAULT_TILE);
    let edge = longest_edge(&vision, "size")?.unwrap_or(DEFAULT_TILES_A_SIDE * tile);
    Ok(most_views(Some(edge), tile, size("patch_size", 14), true))
}

/// The most views one image becomes: with splitting, up to
/// `⌈longest edge / tile⌉` tiles a side plus the global view (an image of
/// one tile is that tile alone); each view a tile of `(tile / patch)²`
/// patches.
fn most_views(longest_edge: Option<usize>, tile: usize, patch: usize, split: bool) -> ImageViews {
    // without resizing, transformers' bound on the edges stands in for the
    // image's own size (no released checkpoint turns resizing off)
    let edge = longest_edge.unwrap_or(MAX_IMAGE_SIZE).min(MAX_IMAGE_SIZE);
    let side = edge.div_ceil(tile.max(1));
    let patches = tile / patch.max(1);
    ImageViews {
        views: if split && side > 1 { side * side + 1 } else { 1 },
        patches_per_view: patches * patches,
    }
}

impl SmolVlmImageProcessor {
    /// Reads `preprocessor_config.json` (overridden by `processor_config.json`'s
    /// `image_processor`), `image_seq_len` from `processor_config.json`, and
    /// the tower's sizes from config.json.
    pub fn from_folder(dir: &Path) -> Result<Self> {
        let config = read_json_object(&dir.join("config.json"))?.unwrap_or_default();
        let vision =
            config.get("vision_config").and_then(Value::as_object).cloned().unwrap_or_default();
        let (raw, processor) = read_processor_settings(dir)?;
        let int = |m: &Map<String, Value>, key: &str| {
            m.get(key).and_then(Value::as_u64).map(|v| v as usize)
        };
        let flag =
            |key: &str, default: bool| raw.get(key).and_then(Value::as_bool).unwrap_or(default);
        // Without a config, Idefics3's processor defaults: 364-pixel tiles of
        // 14-pixel patches shuffled by 2 (169 tokens), one consistent set.
        let image_size = int(&vision, "image_size").unwrap_or(DEFAULT_TILE);
        let patch_size = int(&vision, "patch_size").unwrap_or(14);
        let scale = int(&config, "scale_factor").unwrap_or(2);
        let tile = longest_edge(&raw, "max_image_size")?.unwrap_or(DEFAULT_TILE);
        if tile != image_size {
            return Err(Error::InvalidConfig(format!(
                "the image processor makes {tile}-pixel tiles but the vision tower reads {image_size}"
            )));
        }
        let side = image_size / patch_size.max(1);
        let tokens_per_tile =
            int(&processor, "image_seq_len").or_else(|| int(&raw, "image_seq_len")).unwrap_or(169);
        if patch_size == 0
            || image_size % patch_size != 0
            || scale == 0
            || side % scale != 0
            || tokens_per_tile != (side / scale) * (side / scale)
        {
            return Err(Error::InvalidConfig(format!(
                "image_seq_len {tokens_per_tile} is not a {image_size}-pixel tile in \
                 {patch_size}-pixel patches shuffled by {scale}"
            )));
        }
        let filter = match raw.get("resample") {
            None | Some(Value::Null) => Filter::Lanczos,
            Some(v) => v.as_u64().and_then(Filter::from_pil).ok_or_else(|| bad("resample", v))?,
        };
        let p = Self {
            longest_edge: if flag("do_resize", true) {
                Some(longest_edge(&raw, "size")?.unwrap_or(DEFAULT_TILES_A_SIDE * DEFAULT_TILE))
            } else {
                None
            },
            tile,
            patch_size,
            split: flag("do_image_splitting", true),
            tokens_per_tile,
            filter,
            normalize: Normalize::read(
                &raw,
                Normalize::halves(RescalePrecision::Float64),
                "SmolVLM",
            )?,
        };
        Ok(p)
    }

    /// For the family registry.
    pub fn shared_from_folder(dir: &Path) -> Result<SharedImageProcessor> {
        Ok(Arc::new(Self::from_folder(dir)?))
    }

    /// The most views one image becomes (see [`most_views`]).
    pub fn most_views(&self) -> ImageViews {
        most_views(self.longest_edge, self.tile, self.patch_size, self.split)
    }

    /// The sizes an image of `height × width` goes through.
    fn plan(&self, height: usize, width: usize) -> Plan {
        let first = match self.longest_edge {
            Some(edge) => {
                let (h, w) = rescale_to_max_len(height, width, edge);
                scale_below(h, w, MAX_IMAGE_SIZE)
            }
            None => (height, width),
        };
        if !self.split {
            return Plan { first, tiled: None, rows: 0, cols: 0 };
        }
        let tiled = whole_tiles(first.0, first.1, self.tile);
        let (rows, cols) = if tiled.0 > self.tile || tiled.1 > self.tile {
            (tiled.0 / self.tile, tiled.1 / self.tile)
        } else {
            (0, 0)
        };
        Plan { first, tiled: Some(tiled), rows, cols }
    }

    /// Appends the patches of the `tile × tile` square at (`x0`, `y0`) of
    /// `pixels` (`width` wide) to `out`.
    fn push_tile(
        &self,
        out: &mut Vec<f32>,
        lut: &[[f32; 3]],
        pixels: &[u8],
        width: usize,
        (x0, y0): (usize, usize),
    ) {
        let (s, p) = (self.tile, self.patch_size);
        let side = s / p;
        for row in 0..side * side {
            let (py, px) = (y0 + (row / side) * p, x0 + (row % side) * p);
            for c in 0..3 {
                for y in 0..p {
                    for x in 0..p {
                        out.push(lut[pixels[((py + y) * width + px + x) * 3 + c] as usize][c]);
                    }
                }
            }
        }
    }

    /// The patches of `rgb` (`width × height` interleaved 8-bit RGB): every
    /// tile's, the global view last.
    pub fn patches_rgb8(&self, rgb: &[u8], width: usize, height: usize) -> Result<ImagePatches> {
        let plan = self.plan(height, width);
        let resize = |src: &[u8], (h, w): (usize, usize), (nh, nw): (usize, usize)| {
            resize_rgb8(src, w, h, nw, nh, self.filter)
        };
        let first = resize(rgb, (height, width), plan.first);
        let t = self.tile;
        let lut = self.normalize.levels();
        let side = t / self.patch_size;
        let cols = 3 * self.patch_size * self.patch_size;
        let tiles = plan.rows * plan.cols + 1;
        let mut data = Vec::with_capacity(tiles * side * side * cols);
        let global = match plan.tiled {
            Some(tiled) => {
                let whole = resize(&first, plan.first, tiled);
                if plan.rows > 0 {
                    for r in 0..plan.rows {
                        for c in 0..plan.cols {
                            self.push_tile(&mut data, &lut, &whole, tiled.1, (c * t, r * t));
                        }
                    }
                }
                resize(&whole, tiled, (t, t))
            }
            None => resize(&first, plan.first, (t, t)),
        };
        self.push_tile(&mut data, &lut, &global, t, (0, 0));
        Ok(ImagePatches {
            data,
            rows: tiles * side * side,
            cols,
            grid: [tiles as i32, plan.rows as i32, plan.cols as i32],
        })
    }

    /// One image's text: its tiles row by row, then the global view.
    fn image_text(&self, rows: usize, cols: usize) -> String {
        let slots = IMAGE.repeat(self.tokens_per_tile);
        let global = format!("{FAKE}{GLOBAL}{slots}{FAKE}");
        if rows == 0 || cols == 0 {
            return global;
        }
        let mut text = String::new();
        for r in 1..=rows {
            for c in 1..=cols {
                text.push_str(&format!("{FAKE}<row_{r}_col_{c}>{slots}"));
            }
            text.push('\n');
        }
        text.push('\n');
        text.push_str(&global);
        text
    }
}

impl ImageProcessor for SmolVlmImageProcessor {
    fn patches_named(&self, bytes: &[u8], name: &str) -> Result<ImagePatches> {
        let img = decode::decode_named(bytes, name)?;
        self.patches_rgb8(&img.rgb, img.width, img.height)
    }

    fn num_image_tokens(&self, grid: [i32; 3]) -> usize {
        grid[0].max(0) as usize * self.tokens_per_tile
    }

    fn grid_for_size(&self, height: usize, width: usize) -> std::result::Result<[i32; 3], String> {
        if height == 0 || width == 0 {
            return Err("the image is empty".into());
        }
        let plan = self.plan(height, width);
        Ok([(plan.rows * plan.cols + 1) as i32, plan.rows as i32, plan.cols as i32])
    }

    fn cache_key(&self) -> String {
        format!("{self:?}")
    }

    fn expands_in_text(&self) -> bool {
        true
    }

    fn expand_prompt_text_for_grids(&self, rendered: &str, grids: &[[i32; 3]]) -> Option<String> {
        let text = |g: [i32; 3]| self.image_text(g[1].max(0) as usize, g[2].max(0) as usize);
        Some(expand_placeholders(rendered, IMAGE, grids, text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(split: bool) -> SmolVlmImageProcessor {
        SmolVlmImageProcessor {
            longest_edge: Some(8),
            tile: 4,
            patch_size: 2,
            split,
            tokens_per_tile: 1,
            filter: Filter::Lanczos,
            normalize: Normalize::RAW,
        }
    }

    #[test]
    fn sizes_follow_transformers() {
        // 320×240 → longest edge 2048 → 2048×1536: 3 rows of 4 tiles of 512.
        let p = SmolVlmImageProcessor { longest_edge: Some(2048), tile: 512, ..tiny(true) };
        let plan = p.plan(240, 320);
        assert_eq!(
            (plan.first, plan.tiled, plan.rows, plan.cols),
            ((1536, 2048), Some((1536, 2048)), 3, 4)
        );
        // Portrait, odd short edge rounded up to even, then up to whole tiles.
        let plan = p.plan(300, 101);
        assert_eq!(plan.first, (2048, 690));
        assert_eq!((plan.tiled, plan.rows, plan.cols), (Some((2048, 1024)), 4, 2));
        assert_eq!(p.grid_for_size(300, 101), Ok([9, 4, 2]));
        let unsplit = SmolVlmImageProcessor { split: false, ..p };
        assert_eq!(unsplit.grid_for_size(300, 101), Ok([1, 0, 0]));
    }

    #[test]
    fn the_prompt_holds_each_images_tiles_then_its_global_view() {
        let p = tiny(true);
        let out =
            p.expand_prompt_text_for_grids("a<image>b<image>", &[[3, 1, 2], [1, 0, 0]]).unwrap();
        let f = FAKE;
        assert_eq!(
            out,
            format!(
                "a{f}<row_1_col_1><image>{f}<row_1_col_2><image>\n\n{f}<global-img><image>{f}b{f}<global-img><image>{f}"
            )
        );
    }

    #[test]
    fn tiles_come_in_raster_order_then_the_global_view() {
        let p = SmolVlmImageProcessor { longest_edge: None, ..tiny(true) };
        // An 8×4 image (two tiles side by side) whose red value is its pixel index.
        let rgb: Vec<u8> = (0..32u8).flat_map(|v| [v, 100, 200]).collect();
        let out = p.patches_rgb8(&rgb, 8, 4).unwrap();
        assert_eq!((out.rows, out.cols, out.grid), (12, 12, [3, 1, 2]));
        // Tile 2's first patch is the top left 2×2 of the right half: pixels 4, 5, 12, 13.
        assert_eq!(&out.data[4 * 12..4 * 12 + 4], &[4., 5., 12., 13.]);
    }
}
