//! Mistral 3 (`mistral3`: Ministral 3 text, Pixtral tower) against Python
//! mlx-vlm 0.7.6 on the tiny seeded folder (`fixtures::write_tiny_mistral3`,
//! the one `scripts/make-mistral3-golden.sh` recorded the reference on):
//! chat prompts with no image, a 320×240 image (64×48 pixels after the
//! processor: 8 × 6 patches, 4 × 3 tokens in three rows), and a portrait
//! EXIF-6 JPEG (turned upright: 48×64) beside a 182×126 image.
//! - the prompt: our template, the processor's `[IMG]` rows with
//!   `[IMG_BREAK]` between them and `[IMG_END]` after the last, and our
//!   tokenizer give the reference's ids exactly;
//! - our decoding, bicubic resizes and normalization give the reference's
//!   pixel values bit for bit, image by image;
//! - the engine's greedy tokens equal the reference's, each request alone
//!   and all of them batched (with a text request decoding alongside);
//! - so do they with the folder as mlx-vlm saves a conversion
//!   (mlx-community's names and its patch-kernel layout).
use std::path::Path;

use engine::batch::SchedulerConfig;
use engine::handle::{EngineConfig, EngineHandle};
use engine::model::{LoadOptions, WeightFormat};
use fixtures::write_tiny_mistral3;
use mlx_rs::{Array, Dtype};
use serde_json::Value;

use crate::common;

/// The seed `write_tiny_vl_model` writes `mistral3/float` with.
const SEED: u64 = 7;
const MODEL: &str = "mistral3/float";
/// The tiny tower's patch side.
const PATCH: i32 = 8;

fn golden() -> Value {
    common::golden_json("mistral3_mlx_vlm.json")
}

/// `[3, H, W]` → our patches: `p`-pixel patches in raster order, columns
/// (channel, row, col).
fn as_patches(pixels: &Array, p: i32) -> Array {
    let (rows, cols) = (pixels.dim(1) / p, pixels.dim(2) / p);
    pixels
        .reshape(&[3, rows, p, cols, p])
        .unwrap()
        .transpose_axes(&[1, 3, 0, 2, 4])
        .unwrap()
        .reshape(&[rows * cols, 3 * p * p])
        .unwrap()
}

fn folder() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_mistral3(dir.path(), SEED).unwrap();
    dir
}

fn start(dir: &Path, scheduler: SchedulerConfig) -> EngineHandle {
    let config = EngineConfig { load: LoadOptions { format: WeightFormat::AsStored }, scheduler };
    EngineHandle::start(dir, config).unwrap()
}

#[test]
fn mistral3_prompts_and_pixels_equal_mlx_vlm() {
    let golden = golden();
    let pixels = common::golden_arrays("mistral3_mlx_vlm.safetensors");
    let dir = folder();
    let mut images_checked = 0;
    common::golden_prompts(dir.path(), &golden, MODEL, |case, rec, prepared| {
        let sizes: Vec<[i32; 3]> = common::pairs(&rec["image_sizes"])
            .iter()
            .map(|[h, w]| [1, h / PATCH, w / PATCH])
            .collect();
        let grids = common::image_grids(&prepared);
        assert_eq!(grids, sizes, "{case}: each image's patch rows and columns");
        let Some(images) = &prepared.images else { return };
        for (i, image) in images.images.iter().enumerate() {
            let ours = image.patches.to_array();
            let theirs = as_patches(&pixels[&format!("pixels.{case}.{i}")], PATCH);
            assert_eq!(ours.shape(), theirs.shape(), "{case} image {i}: patches");
            let diff = ours.subtract(&theirs).unwrap().abs().unwrap().max(None).unwrap();
            let diff = diff.as_dtype(Dtype::Float32).unwrap().item_exact::<f32>();
            println!("{case} image {i}: max |pixel diff| {diff:e}");
            assert_eq!(diff, 0.0, "{case} image {i}: pixel values");
            images_checked += 1;
        }
    });
    assert_eq!(images_checked, 3);
}

#[test]
fn mistral3_greedy_tokens_equal_mlx_vlm_alone_and_batched() {
    let golden = golden();
    let dir = folder();
    common::golden_greedy_alone_and_batched(dir.path(), &golden, MODEL);
}

/// The language model's tensors as mlx-vlm and mlx-lm save them.
fn mlx_language_name(name: &str) -> Option<String> {
    if let Some(rest) = name.strip_prefix("model.language_model.") {
        Some(format!("language_model.model.{rest}"))
    } else if name.starts_with("lm_head.") {
        Some(format!("language_model.{name}"))
    } else {
        None
    }
}

/// The tiny folder as mlx-vlm saves a conversion (what mlx-community's
/// Mistral 3 repos hold): `language_model.model.*`, `language_model.lm_head`,
/// `vision_tower.vision_model.*`, `multi_modal_projector.*`, the patch
/// kernel in MLX's `[out, P, P, C]`.
#[test]
fn mistral3_mlx_community_names_give_the_same_tokens() {
    let golden = golden();
    let hf = folder();
    let dir = common::rewritten_folder(hf.path(), |name, t| {
        if let Some(renamed) = mlx_language_name(&name) {
            return Some((renamed, t));
        }
        if let Some(rest) = name.strip_prefix("model.vision_tower.") {
            let t = if rest == "patch_conv.weight" {
                t.transpose_axes(&[0, 2, 3, 1]).unwrap()
            } else {
                t
            };
            return Some((format!("vision_tower.vision_model.{rest}"), t));
        }
        Some((name.strip_prefix("model.").unwrap_or(&name).to_string(), t))
    });
    common::golden_batched(dir.path(), WeightFormat::AsStored, &golden, MODEL, "mlx-community");
}

/// mlx-lm's conversion of a `mistral3` checkpoint keeps the language model
/// alone (its config still describes the tower): it loads text only and
/// answers the text case as the whole model does.
#[test]
fn mistral3_without_its_tower_loads_the_text_model() {
    let golden = golden();
    let hf = folder();
    let dir =
        common::rewritten_folder(hf.path(), |name, t| mlx_language_name(&name).map(|n| (n, t)));
    let engine = start(dir.path(), SchedulerConfig::default());
    let eos = engine.model_info().eos_token_ids.clone();
    let (case, request) = common::golden_requests(&golden, MODEL)
        .into_iter()
        .find(|(case, _)| case == "text")
        .unwrap();
    let got = engine.submit(request).collect_blocking();
    assert_eq!(
        common::generated_ids(&got, &eos),
        common::golden_greedy_ids(&golden, MODEL, &case, &eos)
    );
    engine.shutdown();
}

/// The registry says the tiny Mistral 3 sees images and calls tools (its
/// template writes Mistral's v11 calls); decoding that skips specials keeps
/// `[TOOL_CALLS]` and `[ARGS]`, which the stream router and the parser read,
/// and drops the others.
#[test]
fn mistral3_sees_images_and_calls_tools_in_mistrals_format() {
    let dir = folder();
    let info = engine::model::describe(dir.path()).unwrap();
    assert_eq!(
        (info.family.as_deref(), info.architecture.as_str()),
        (Some("Mistral 3"), "mistral3")
    );
    let caps = info.capabilities;
    assert!(caps.vision && caps.tools && !caps.thinking, "{caps:?}");
    let tok = engine::tokenizer::Tokenizer::from_folder(dir.path()).unwrap();
    let id = |t: &str| tok.token_to_id(t).unwrap();
    let mut pieces = vec![id("[TOOL_CALLS]")];
    pieces.extend(tok.encode("f", false).unwrap());
    pieces.push(id("[ARGS]"));
    pieces.extend(tok.encode("{}", false).unwrap());
    pieces.push(id("[INST]"));
    assert_eq!(tok.decode(&pieces, true).unwrap(), "[TOOL_CALLS]f[ARGS]{}");
}
