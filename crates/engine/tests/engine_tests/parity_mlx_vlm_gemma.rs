//! Numerical parity of our Gemma 3 and Gemma 4 with vision (`gemma3`,
//! `gemma4`) with Python mlx-vlm 0.7.6 on the same MLX CPU backend. Both
//! run each image's soft tokens bidirectionally, as the models were trained:
//! mlx-vlm does so itself for Gemma 4; for Gemma 3 (which it keeps causal) the
//! golden script wraps its mask, see `scripts/goldens/gemma3_vl.py`.
//!
//! `scripts/make-vision-goldens.sh gemma3 gemma4` wrote the tiny seeded folders (the
//! `write_tiny_vl_model` example) and recorded the reference on chat prompts
//! with 0, 1 and 2 images. This test writes the same folders with the same
//! code, loads them with our loader and compares:
//! - the prompt: our template, the processor's text expansion of each image
//!   placeholder and our tokenizer give the reference's ids exactly;
//! - our image preprocessing (decode, PIL-exact resize — bilinear to a square
//!   for Gemma 3, bicubic within a token budget for Gemma 4 — and rescaling)
//!   on the lossless fixture PNGs and, for Gemma 4, a phone-style JPEG that
//!   EXIF orientation 6 turns to portrait (the `exif6` case: decoded as
//!   Pillow's libjpeg-turbo decodes it, then turned): the reference's pixel
//!   values bit for bit;
//! - the image features (tower, pooling, projector, scaling) on the
//!   reference's pixels;
//! - the logits of the whole prompt (the images' spans bidirectional);
//! - greedy ids and every step's log-probabilities of a cached decode.
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use engine::cache::BatchCache;
use engine::model::{load, LoadOptions, LoadedModel, Positions, WeightFormat};
use engine::tokenizer::{ChatMessage, ContentPart, MessageContent, TemplateOptions};
use engine::weights::QuantSpec;
use fixtures::{write_tiny_gemma3_vl, write_tiny_gemma4_vl};
use mlx_rs::{ops, ops::indexing::IndexOp, Array, Dtype};
use serde_json::Value;

/// Float32 weights: the same computations as the reference up to the order
/// of a few operations (our patch embedding is a matmul where mlx-vlm runs a
/// Conv2d, our pooling a mean over reshaped axes). 1e-4 holds a wide margin
/// (measured values are printed) while a real mistake (a norm's epsilon, the
/// GELU variant, the feature scale, a causal image span) moves logits by 1e-2
/// or more.
const SAME_COMPUTATION_TOL: f32 = 1e-4;

/// 4-bit weights against mlx-vlm's. Gemma 3: its quantized embedding returns
/// float16 rows, so the reference runs the whole residual stream in float16
/// (the effect measured at 7.5e-4 on the text Gemma 3 against mlx-lm, see
/// parity_mlx_lm.rs) where we keep float32. Dequantized at load, the
/// reference's quantized matmuls also round `scale · q + bias` in float16
/// (see parity_mlx_vlm.rs). Measured on logits: Gemma 3 1.0e-3 as stored,
/// 2.6e-3 dequantized; Gemma 4 2.2e-6 as stored, 5.8e-3 dequantized (7.3e-3
/// on a decode step's log-probs); the image features, float32 on both sides,
/// agree to 8e-7. 1e-2 stays well below what a wrong quantized layout moves
/// (order 1).
const FLOAT16_RESIDUAL_TOL: f32 = 1e-2;

/// The seeds `write_tiny_vl_model` writes its folders with.
const GEMMA3_SEED: u64 = 3;
const GEMMA4_SEED: u64 = 4;

/// What differs between the two families in this test.
struct Family {
    goldens: &'static str,
    write: fn(&Path, Option<QuantSpec>),
    /// mlx-vlm's message puts the images before the text (else after it).
    images_first: bool,
    /// The reference's pixels of image `i` of a case, as our patches and grid.
    patches: fn(&Goldens, &str, usize) -> (Array, [i32; 3]),
    /// Soft tokens per image of `grid`.
    slots: fn([i32; 3]) -> usize,
}

const GEMMA3: Family = Family {
    goldens: "gemma3_vl_mlx_vlm",
    write: |dir, q| {
        write_tiny_gemma3_vl(dir, q, GEMMA3_SEED).unwrap();
    },
    images_first: false,
    // `pixels.<case>` `[n, 3, 56, 56]`, 14-px patches, columns (channel, row, col).
    patches: |g, case, i| {
        let pixels = g.arrays[&format!("pixels.{case}")].index(i as i32..i as i32 + 1);
        (as_patches(&pixels, 14), [1, 4, 4])
    },
    slots: |_| 4,
};

const GEMMA4: Family = Family {
    goldens: "gemma4_vl_mlx_vlm",
    write: |dir, q| {
        write_tiny_gemma4_vl(dir, q, GEMMA4_SEED).unwrap();
    },
    images_first: true,
    // `pixels.<case>.<i>` `[3, H, W]`, 16-px patches, columns (row, col, channel).
    patches: |g, case, i| {
        let pixels = &g.arrays[&format!("pixels.{case}.{i}")];
        let (p, gh, gw) = (16, pixels.dim(1) / 16, pixels.dim(2) / 16);
        let patches = pixels
            .reshape(&[3, gh, p, gw, p])
            .unwrap()
            .transpose_axes(&[1, 3, 2, 4, 0])
            .unwrap()
            .reshape(&[gh * gw, p * p * 3])
            .unwrap();
        (patches, [1, gh, gw])
    },
    slots: |grid| (grid[1] * grid[2] / 9) as usize,
};

struct Goldens {
    json: Value,
    arrays: HashMap<String, Array>,
}

fn goldens(stem: &str) -> Goldens {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens");
    let text = std::fs::read_to_string(dir.join(format!("{stem}.json"))).expect("golden JSON");
    let arrays =
        Array::load_safetensors(dir.join(format!("{stem}.safetensors"))).expect("golden arrays");
    Goldens { json: serde_json::from_str(&text).unwrap(), arrays }
}

fn fixture(name: &str) -> Vec<u8> {
    let path: PathBuf =
        [env!("CARGO_MANIFEST_DIR"), "tests", "fixtures", "images", name].iter().collect();
    std::fs::read(path).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn max_abs_diff(ours: &Array, theirs: &Array, what: &str) -> f32 {
    assert_eq!(ours.shape(), theirs.shape(), "{what}: shape");
    let d = ours
        .as_dtype(Dtype::Float32)
        .unwrap()
        .subtract(theirs)
        .unwrap()
        .abs()
        .unwrap()
        .max(None)
        .unwrap();
    let d = d.item_exact::<f32>();
    assert!(d.is_finite(), "{what}: non-finite difference");
    d
}

/// Reference pixels `[n, 3, S, S]` as our patches `[n · (S/P)², 3·P·P]`.
fn as_patches(pixels: &Array, patch: i32) -> Array {
    let (n, s) = (pixels.dim(0), pixels.dim(2));
    let g = s / patch;
    pixels
        .reshape(&[n, 3, g, patch, g, patch])
        .unwrap()
        .transpose_axes(&[0, 2, 4, 1, 3, 5])
        .unwrap()
        .reshape(&[n * g * g, 3 * patch * patch])
        .unwrap()
}

/// Runs of `token` in `tokens`.
fn runs(tokens: &[u32], token: u32) -> Vec<(i32, i32)> {
    let mut out: Vec<(i32, i32)> = Vec::new();
    for (i, &t) in tokens.iter().enumerate() {
        if t != token {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.1 == i as i32 => last.1 += 1,
            _ => out.push((i as i32, i as i32 + 1)),
        }
    }
    out
}

fn splice(
    loaded: &LoadedModel,
    tokens: &[u32],
    image_token: u32,
    features: Option<&Array>,
) -> Array {
    let l = tokens.len() as i32;
    let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
    let text = loaded.model.embed(&Array::from_slice(&ids, &[1, l])).unwrap();
    let Some(features) = features else { return text };
    let rows = ops::concatenate(
        &[text.reshape(&[l, -1]).unwrap(), features.as_dtype(text.dtype()).unwrap()],
        0,
    )
    .unwrap();
    let mut k = 0;
    let pick: Vec<i32> = tokens
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            if t == image_token {
                k += 1;
                l + k - 1
            } else {
                i as i32
            }
        })
        .collect();
    assert_eq!(k, features.dim(0), "one feature per soft token");
    rows.take_axis(Array::from_slice(&pick, &[l]), 0).unwrap().reshape(&[1, l, -1]).unwrap()
}

/// Runs a step as the engine does: a prompt pass (`spans` given) declares its
/// images' spans and gives the model its ids as the tower says.
fn run(
    loaded: &LoadedModel,
    embeddings: Array,
    tokens: &[u32],
    spans: Option<Vec<(i32, i32)>>,
    cache: &mut BatchCache,
) -> Array {
    let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
    let mut ids = Array::from_slice(&ids, &[1, ids.len() as i32]);
    if let Some(spans) = spans {
        cache.set_bidirectional_spans(vec![spans]);
        ids = loaded.model.vision().unwrap().tokens_for_language(&ids).unwrap();
    }
    let positions = Positions::Start(cache.offsets()[0]);
    let hidden = loaded.model.forward_embeddings(embeddings, &ids, &positions, cache).unwrap();
    loaded.model.logits(&hidden).unwrap().as_dtype(Dtype::Float32).unwrap()
}

fn log_softmax(x: &Array) -> Array {
    x.subtract(ops::logsumexp_axis(x, -1, true).unwrap()).unwrap()
}

fn check(
    family: &Family,
    golden_key: &str,
    quantize: Option<QuantSpec>,
    format: WeightFormat,
    tol: f32,
) {
    let goldens = goldens(family.goldens);
    let golden = &goldens.json["models"][golden_key];
    assert!(golden.is_object(), "no goldens for {golden_key}");
    let dir = tempfile::tempdir().unwrap();
    (family.write)(dir.path(), quantize);
    let loaded = load(dir.path(), &LoadOptions { format }).expect("load the tiny model");
    let vision = loaded.model.vision().expect("a vision tower");
    let processor = loaded.preprocessor.clone().expect("an image processor");
    let image_token = vision.image_token_id();
    let text = goldens.json["text"].as_str().unwrap();
    let (mut vision_diff, mut logits_diff, mut decode_diff) = (0f32, 0f32, 0f32);
    for (case, rec) in golden.as_object().unwrap() {
        let what = |s: &str| format!("{golden_key} ({format:?}) {case}: {s}");
        let files: Vec<String> = goldens.json["cases"][case]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap().to_string())
            .collect();

        let mut parts: Vec<ContentPart> = files.iter().map(|_| ContentPart::image()).collect();
        if family.images_first {
            parts.push(ContentPart::text(text));
        } else {
            parts.insert(0, ContentPart::text(text));
        }
        let message = if files.is_empty() {
            ChatMessage::user(text)
        } else {
            ChatMessage::user(MessageContent::Parts(parts))
        };
        let rendered =
            loaded.tokenizer.apply_chat_template(&[message], &TemplateOptions::default()).unwrap();
        assert_eq!(rendered, rec["prompt_text"].as_str().unwrap(), "{}", what("rendered prompt"));
        let reference: Vec<(Array, [i32; 3])> =
            (0..files.len()).map(|i| (family.patches)(&goldens, case, i)).collect();
        let slots: Vec<usize> = reference.iter().map(|(_, grid)| (family.slots)(*grid)).collect();
        let expanded = processor
            .expand_prompt_text(&rendered, &slots)
            .expect("Gemma expands images in the text");
        let tokens = loaded.tokenizer.encode(&expanded, false).unwrap();
        assert_eq!(tokens, ids(&rec["prompt_ids"]), "{}", what("prompt ids"));

        let features = if files.is_empty() {
            None
        } else {
            // Our preprocessing, bit for bit; the tower on the reference's pixels.
            let mut parts = Vec::new();
            for (file, (theirs, grid)) in files.iter().zip(&reference) {
                let ours = processor.preprocess(&fixture(file)).unwrap();
                assert_eq!(ours.grid, *grid, "{}", what("grid"));
                assert_eq!(
                    max_abs_diff(&ours.pixels, theirs, &what("pixels")),
                    0.0,
                    "{}",
                    what("pixel values bit-exact")
                );
                parts.push(vision.encode(theirs, *grid).unwrap());
            }
            let ours = ops::concatenate(&parts, 0).unwrap();
            let d = max_abs_diff(
                &ours,
                &goldens.arrays[&format!("{}.{case}.vision", golden_key.replace('/', "."))],
                &what("features"),
            );
            assert!(d <= tol, "{}: {d:.3e} > {tol:.0e}", what("features"));
            vision_diff = vision_diff.max(d);
            Some(ours)
        };

        let key = format!("{}.{case}", golden_key.replace('/', "."));
        let spans = runs(&tokens, image_token);
        let embeddings = splice(&loaded, &tokens, image_token, features.as_ref());
        let logits = run(
            &loaded,
            embeddings.clone(),
            &tokens,
            Some(spans.clone()),
            &mut loaded.model.new_cache(1),
        );
        let d = max_abs_diff(
            &logits.index(0),
            &goldens.arrays[&format!("{key}.logits")],
            &what("logits"),
        );
        assert!(d <= tol, "{}: {d:.3e} > {tol:.0e}", what("logits"));
        logits_diff = logits_diff.max(d);

        // Cached greedy decode: the reference prefilled all but the last token, then stepped.
        let want = ids(&rec["greedy_ids"]);
        let golden_logprobs = &goldens.arrays[&format!("{key}.greedy_logprobs")];
        let mut cache = loaded.model.new_cache(1);
        let mut step = run(&loaded, embeddings, &tokens, Some(spans), &mut cache);
        let mut greedy = Vec::new();
        for i in 0..want.len() {
            let last = step.index((0, step.dim(1) - 1, ..));
            let d = max_abs_diff(
                &log_softmax(&last),
                &golden_logprobs.index(i as i32),
                &what("decode log-probs"),
            );
            assert!(d <= tol, "{} step {i}: {d:.3e} > {tol:.0e}", what("decode log-probs"));
            decode_diff = decode_diff.max(d);
            let next = ops::indexing::argmax_axis(&last, -1, None).unwrap().item_exact::<u32>();
            greedy.push(next);
            let emb = loaded.model.embed(&Array::from_slice(&[next as i32], &[1, 1])).unwrap();
            step = run(&loaded, emb, &[next], None, &mut cache);
        }
        assert_eq!(greedy, want, "{}", what("greedy ids"));
    }
    println!(
        "{golden_key} ({format:?}) vs mlx-vlm: max |diff| features {vision_diff:.3e}, logits {logits_diff:.3e}, decode log-probs {decode_diff:.3e}; tolerance {tol:.0e}"
    );
}

const Q4: Option<QuantSpec> = Some(QuantSpec { group_size: 32, bits: 4 });

#[test]
fn gemma3_float_matches_mlx_vlm() {
    check(&GEMMA3, "gemma3/float", None, WeightFormat::AsStored, SAME_COMPUTATION_TOL);
}

#[test]
fn gemma3_q4_as_stored_matches_mlx_vlm() {
    check(&GEMMA3, "gemma3/q4", Q4, WeightFormat::AsStored, FLOAT16_RESIDUAL_TOL);
}

#[test]
fn gemma3_q4_dequantized_matches_mlx_vlm() {
    check(&GEMMA3, "gemma3/q4", Q4, WeightFormat::Float32, FLOAT16_RESIDUAL_TOL);
}

#[test]
fn gemma4_float_matches_mlx_vlm() {
    check(&GEMMA4, "gemma4/float", None, WeightFormat::AsStored, SAME_COMPUTATION_TOL);
}

#[test]
fn gemma4_q4_as_stored_matches_mlx_vlm() {
    check(&GEMMA4, "gemma4/q4", Q4, WeightFormat::AsStored, FLOAT16_RESIDUAL_TOL);
}

#[test]
fn gemma4_q4_dequantized_matches_mlx_vlm() {
    check(&GEMMA4, "gemma4/q4", Q4, WeightFormat::Float32, FLOAT16_RESIDUAL_TOL);
}

/// The image spans matter: the same prompt with the images' tokens causal
/// gives other logits (so the bidirectional mask is what the goldens check).
#[test]
fn causal_image_tokens_would_not_match() {
    let goldens = goldens(GEMMA3.goldens);
    let rec = &goldens.json["models"]["gemma3/float"]["large"];
    let dir = tempfile::tempdir().unwrap();
    write_tiny_gemma3_vl(dir.path(), None, GEMMA3_SEED).unwrap();
    let loaded = load(dir.path(), &LoadOptions { format: WeightFormat::AsStored }).unwrap();
    let tokens = ids(&rec["prompt_ids"]);
    let features = goldens.arrays["gemma3.float.large.vision"].clone();
    let image_token = loaded.model.vision().unwrap().image_token_id();
    let embeddings = splice(&loaded, &tokens, image_token, Some(&features));
    let causal = run(&loaded, embeddings, &tokens, None, &mut loaded.model.new_cache(1));
    let d = max_abs_diff(
        &causal.index(0),
        &goldens.arrays["gemma3.float.large.logits"],
        "causal logits",
    );
    assert!(d > 1e-3, "causal image tokens gave the bidirectional logits ({d:.3e})");
}
