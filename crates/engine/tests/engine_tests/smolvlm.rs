//! SmolVLM2 (`smolvlm`) against Python mlx-vlm 0.7.6 on the tiny seeded
//! folder (`fixtures::write_tiny_smolvlm`, the same one
//! `scripts/make-smolvlm-golden.sh` recorded the reference on): chat prompts
//! with no image, one image cut into 3 × 4 tiles, and a portrait image
//! (an EXIF-6 JPEG, 4 × 3 tiles) beside a landscape one (3 × 4), each plus
//! its global view; and the same weights labelled `idefics3`, which mlx-vlm
//! runs through its Idefics3 classes (`fixtures::write_tiny_idefics3`).
//! - the prompt: our template, the processor's text layout of each image
//!   (`<fake_token_around_image>`, `<row_r_col_c>`, `<global-img>`, the
//!   `<image>` slots) and our tokenizer give the reference's ids exactly;
//! - our decoding, Lanczos resizes, tiling and rescaling give the
//!   reference's pixel values bit for bit, tile by tile;
//! - the engine's greedy tokens equal the reference's, each request alone
//!   and all of them batched (with a text request decoding alongside);
//! - so do they with the folder as mlx-vlm saves a conversion
//!   (mlx-community's names and its patch-kernel layout).
use std::path::Path;

use engine::model::WeightFormat;
use fixtures::{write_tiny_idefics3, write_tiny_smolvlm};
use mlx_rs::{Array, Dtype};
use serde_json::Value;

use crate::common;

/// The seed `write_tiny_vl_model` writes `smolvlm/float` with.
const SEED: u64 = 5;
/// A model's folder name in the golden, and how its folder is written.
type ModelWriter = (&'static str, fn(&Path));

/// The golden's models and how each folder is written.
const MODELS: &[ModelWriter] = &[
    ("smolvlm/float", |dir| {
        write_tiny_smolvlm(dir, SEED).unwrap();
    }),
    ("idefics3/float", |dir| {
        write_tiny_idefics3(dir, SEED).unwrap();
    }),
];

fn golden() -> Value {
    common::golden_json("smolvlm_mlx_vlm.json")
}

/// `[tiles, 3, S, S]` → our patches: each tile's `p`-pixel patches in
/// raster order, columns (channel, row, col).
fn as_patches(pixels: &Array, p: i32) -> Array {
    let (n, side) = (pixels.dim(0), pixels.dim(2) / p);
    pixels
        .reshape(&[n, 3, side, p, side, p])
        .unwrap()
        .transpose_axes(&[0, 2, 4, 1, 3, 5])
        .unwrap()
        .reshape(&[n * side * side, 3 * p * p])
        .unwrap()
}

fn folder(write: fn(&Path)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path());
    dir
}

#[test]
fn smolvlm_prompts_equal_mlx_vlm_ids() {
    let golden = golden();
    let pixels = common::golden_arrays("smolvlm_mlx_vlm.safetensors");
    for &(model, write) in MODELS {
        prompts_equal(&golden, &pixels, model, write);
    }
}

fn prompts_equal(
    golden: &Value,
    pixels: &std::collections::HashMap<String, Array>,
    model: &str,
    write: fn(&Path),
) {
    let dir = folder(write);
    common::golden_prompts(dir.path(), golden, model, |case, rec, prepared| {
        let what = format!("{model} {case}");
        let layouts: Vec<[i32; 3]> =
            common::pairs(&rec["rows_cols"]).iter().map(|&[r, c]| [r * c + 1, r, c]).collect();
        let grids = common::image_grids(&prepared);
        assert_eq!(grids, layouts, "{what}: tiles, rows and columns");
        let tiles: i32 = grids.iter().map(|g| g[0]).sum();
        assert_eq!(tiles as i64, rec["tiles"].as_i64().unwrap_or(0), "{what}: tiles");
        let Some(images) = &prepared.images else { return };
        let ours: Vec<Array> = images.images.iter().map(|i| i.patches.to_array()).collect();
        let ours = mlx_rs::ops::concatenate(&ours, 0).unwrap();
        let theirs = as_patches(&pixels[&format!("pixels.{case}")], 8);
        assert_eq!(ours.shape(), theirs.shape(), "{what}: patches");
        let diff = ours.subtract(&theirs).unwrap().abs().unwrap().max(None).unwrap();
        let diff = diff.as_dtype(Dtype::Float32).unwrap().item_exact::<f32>();
        println!("{what}: max |pixel diff| {diff:e}");
        assert_eq!(diff, 0.0, "{what}: pixel values");
    });
}

#[test]
fn smolvlm_greedy_tokens_equal_mlx_vlm_alone_and_batched() {
    let golden = golden();
    for &(model, write) in MODELS {
        greedy_equal(&golden, model, write);
    }
}

fn greedy_equal(golden: &Value, model: &str, write: fn(&Path)) {
    let dir = folder(write);
    common::golden_greedy_alone_and_batched(dir.path(), golden, model);
}

/// The tiny folder as mlx-vlm saves a conversion (what mlx-community's
/// SmolVLM2 repos hold): `language_model.*` with its head as
/// `language_model.lm_head`, `vision_model.*`, `connector.*`, the patch
/// kernel in MLX's `[out, P, P, C]`.
fn mlx_community_folder(hf: &Path) -> tempfile::TempDir {
    let dir = common::rewritten_folder(hf, |name, t| {
        let bare = name.strip_prefix("model.").unwrap_or(&name).to_string();
        Some(if let Some(rest) = bare.strip_prefix("text_model.") {
            (format!("language_model.{rest}"), t)
        } else if name.starts_with("lm_head.") {
            (format!("language_model.{name}"), t)
        } else if bare.ends_with("patch_embedding.weight") {
            (bare, t.transpose_axes(&[0, 2, 3, 1]).unwrap())
        } else {
            (bare, t)
        })
    });
    assert!(common::holds_tensor(dir.path(), "language_model.lm_head.weight"));
    assert!(common::holds_tensor(dir.path(), "connector.modality_projection.proj.weight"));
    dir
}

#[test]
fn smolvlm_mlx_community_names_give_the_same_tokens() {
    let golden = golden();
    let (model, write) = MODELS[0];
    let hf = folder(write);
    let dir = mlx_community_folder(hf.path());
    common::golden_batched(dir.path(), WeightFormat::AsStored, &golden, model, "mlx-community");
}
