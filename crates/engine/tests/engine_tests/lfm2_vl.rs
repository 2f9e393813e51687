//! LFM2-VL (`lfm2-vl`) against Python mlx-vlm 0.7.6 on the tiny seeded
//! folder (`fixtures::write_tiny_lfm2_vl`, the same one
//! `scripts/make-lfm2-vl-golden.sh` recorded the reference on): chat prompts
//! with no image, a 182×126 image (one 12 × 18 patch view), a 320×240 image
//! (3 × 2 tiles and a thumbnail) and a portrait EXIF-6 JPEG (2 × 3 tiles and
//! a thumbnail) beside the 182×126 one.
//! - the prompt: our template, the processor's text layout of each image
//!   (`<|image_start|>`, `<|img_row_r_col_c|>`, `<|img_thumbnail|>`, the
//!   `<image>` slots, `<|image_end|>`) and our tokenizer give the
//!   reference's ids exactly, and our views have its patch grids;
//! - our decoding, bicubic resizes, tiling and rescaling give the
//!   reference's pixel values bit for bit;
//! - the engine's greedy tokens equal the reference's, each request alone
//!   and all of them batched (with a text request decoding alongside);
//! - so do they with the folder as mlx-vlm saves a conversion
//!   (mlx-community's names and convolution kernels), and with such a
//!   conversion whose text model is 4-bit (`lfm2_vl/q4`, its own golden),
//!   kept quantized and dequantized.
use std::path::Path;

use engine::model::lfm2_vl::image_processor::Layout;
use engine::model::WeightFormat;
use fixtures::{write_tiny_lfm2_vl, write_tiny_lfm2_vl_q4};
use serde_json::Value;

use crate::common;

/// The seed `write_tiny_vl_model` writes `lfm2_vl/float` with.
const SEED: u64 = 6;
const MODEL: &str = "lfm2_vl/float";
const MODEL_Q4: &str = "lfm2_vl/q4";
/// The tiny folder's tile side in patches (64-pixel tiles of 8-pixel patches).
const TILE_PATCHES: i32 = 8;

fn golden() -> Value {
    common::golden_json("lfm2_vl_mlx_vlm.json")
}

fn folder() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_lfm2_vl(dir.path(), SEED).unwrap();
    dir
}

/// Each view's patch grid, the views of every image in order.
fn views(grids: &[[i32; 3]]) -> Vec<[i32; 2]> {
    let mut out = Vec::new();
    for &g in grids {
        let layout = Layout::of_grid(g);
        out.extend((0..layout.tiles()).map(|_| [TILE_PATCHES, TILE_PATCHES]));
        if layout.height > 0 {
            out.push([layout.height, layout.width]);
        }
    }
    out
}

#[test]
fn lfm2_vl_prompts_and_pixels_equal_mlx_vlm() {
    let golden = golden();
    let arrays = common::golden_arrays("lfm2_vl_mlx_vlm.safetensors");
    let table = &arrays["level_values"];
    let table: Vec<f32> = table.as_slice::<f32>().to_vec();
    let dir = folder();
    let mut checked = 0;
    common::golden_prompts(dir.path(), &golden, MODEL, |case, rec, prepared| {
        let want = common::pairs(&rec["spatial_shapes"]);
        assert_eq!(views(&common::image_grids(&prepared)), want, "{case}: views");
        let Some(images) = &prepared.images else { return };
        let ours: Vec<f32> = images.images.iter().flat_map(|i| i.patches.data.clone()).collect();
        let levels = &arrays[&format!("levels.{case}")];
        let levels: Vec<u8> = levels.as_slice::<u8>().to_vec();
        assert_eq!(ours.len(), levels.len(), "{case}: pixel values");
        let differ = ours
            .iter()
            .zip(&levels)
            .enumerate()
            .filter(|(i, (v, &level))| **v != table[level as usize * 3 + i % 3])
            .count();
        assert_eq!(differ, 0, "{case}: pixel values that differ from mlx-vlm's");
        checked += 1;
    });
    assert_eq!(checked, 3, "the image cases");
}

#[test]
fn lfm2_vl_greedy_tokens_equal_mlx_vlm_alone_and_batched() {
    let golden = golden();
    let dir = folder();
    common::golden_greedy_alone_and_batched(dir.path(), &golden, MODEL);
}

/// The tiny folder as mlx-vlm saves a conversion (what mlx-community's
/// LFM2-VL repos hold): `language_model.model.*`, `vision_tower.*`,
/// `multi_modal_projector.*`, the convolution kernels `[C, K, 1]`.
fn mlx_community_folder(hf: &Path) -> tempfile::TempDir {
    let dir = common::rewritten_folder(hf, |name, t| {
        Some(if let Some(rest) = name.strip_prefix("model.language_model.") {
            let t = if rest.ends_with("conv.conv.weight") { t.swap_axes(1, 2).unwrap() } else { t };
            (format!("language_model.model.{rest}"), t)
        } else if let Some(rest) = name.strip_prefix("model.vision_tower.vision_model.") {
            (format!("vision_tower.{rest}"), t)
        } else {
            (name.strip_prefix("model.").unwrap().to_string(), t)
        })
    });
    assert!(common::holds_tensor(dir.path(), "vision_tower.embeddings.patch_embedding.weight"));
    assert!(common::holds_tensor(dir.path(), "multi_modal_projector.linear_1.weight"));
    dir
}

#[test]
fn lfm2_vl_mlx_community_names_give_the_same_tokens() {
    let golden = golden();
    let hf = folder();
    let dir = mlx_community_folder(hf.path());
    common::golden_batched(dir.path(), WeightFormat::AsStored, &golden, MODEL, "mlx-community");
}

#[test]
fn lfm2_vl_q4_gives_mlx_vlm_s_tokens_quantized_and_dequantized() {
    let golden = golden();
    let dir = tempfile::tempdir().unwrap();
    write_tiny_lfm2_vl_q4(dir.path(), SEED).unwrap();
    // the 4-bit text model answers otherwise than the float one
    assert_ne!(golden["models"][MODEL_Q4]["text"], golden["models"][MODEL]["text"]);
    for format in [WeightFormat::AsStored, WeightFormat::Float32] {
        common::golden_batched(dir.path(), format, &golden, MODEL_Q4, &format!("{format:?}"));
    }
}
