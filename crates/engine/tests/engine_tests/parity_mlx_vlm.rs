//! Numerical parity of our Qwen2-VL / Qwen2.5-VL / Qwen3.5 (with its vision
//! tower) with the reference implementation, Python mlx-vlm 0.7.6, on the
//! same MLX CPU backend.
//!
//! `scripts/make-vision-goldens.sh` wrote the tiny seeded folders (the
//! `write_tiny_vl_model` example: float32 with Hugging Face names, and 4-bit
//! with mlx-community names and layout) and recorded mlx-vlm's outputs on them
//! for chat prompts with 0, 1 and 2 of the `qwen_parity_*` test images into
//! `tests/goldens/{qwen_vl,qwen3_5_vl}_mlx_vlm.{json,safetensors}`. This test writes the
//! same folders with the same code, loads them with our loader and compares:
//! - the prompt: our chat template + tokenizer + one placeholder per feature
//!   give mlx-vlm's ids exactly;
//! - our image processor under each checkpoint's config (patch 14 or 16) on
//!   the lossless test images: mlx-vlm's pixel values bit for bit;
//! - the vision tower on mlx-vlm's own pixel values (so a preprocessing
//!   difference could not hide in the tower's tolerance);
//! - M-RoPE positions and rope delta exactly;
//! - the logits of the whole prompt, run as the scheduler runs it: token
//!   embeddings with the image rows replaced by the tower's features, and the
//!   step's positions overridden with the explicit M-RoPE positions;
//! - greedy ids and every step's log-probabilities from a cached decode whose
//!   positions are cache length + rope delta.
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::common;

use engine::cache::BatchCache;
use engine::model::{load, LoadOptions, LoadedModel, Positions, WeightFormat};
use engine::tokenizer::{ChatMessage, ContentPart, MessageContent, TemplateOptions};
use engine::weights::QuantSpec;
use fixtures::{
    write_tiny_qwen2_vl, write_tiny_qwen35_vl, write_tiny_qwen3_vl, write_tiny_qwen3_vl_moe,
    QwenVlNames, QwenVlVariant, TinyQwenVl,
};
use mlx_rs::{ops, ops::indexing::IndexOp, Array, Dtype};
use serde_json::Value;

/// Float32 weights, and 4-bit weights through MLX's quantized matmul
/// (`AsStored`), are the same computations mlx-vlm does on the same libmlx,
/// up to the order of a few operations (our patch embedding is a matmul where
/// mlx-vlm runs a Conv3d; the text and decode path uses the fast RoPE kernel
/// where mlx-vlm builds cos/sin tables). float64 re-runs of the reference put
/// its own float32 rounding at ≤ 2e-6 on vision outputs and ≤ 1.3e-5 on logits.
/// Measured (max |diff| over all cases): Qwen2-VL vision 4.8e-7, logits
/// 1.9e-6, decode log-probs 1.4e-6; Qwen2.5-VL 6.0e-7, 6.4e-6, 7.6e-6. 1e-4
/// holds a wide margin while a real mistake (a wrong M-RoPE section, window
/// order, GELU variant or norm) moves outputs by 1e-2 or more.
const SAME_COMPUTATION_TOL: f32 = 1e-4;

/// 4-bit weights through MLX's quantized matmul (`AsStored`), as above, but
/// mlx-vlm's quantized embedding returns float16 rows (the checkpoint's
/// float16 scales) and mlx-vlm casts its M-RoPE cos/sin tables to the
/// embedding's dtype, so the reference rotates every layer's queries and keys
/// with float16 tables; we keep float32 activations (and the fast RoPE kernel
/// on text steps). Checked on the reference itself: casting its embedding to
/// float32 moves its Qwen2.5-VL q4 text logits by 3.15e-4 — exactly our
/// difference. Measured: 8.3e-5 (Qwen2-VL), 3.2e-4 (Qwen2.5-VL), 3.9e-4
/// (Qwen3-VL, whose tables are interleaved M-RoPE's); 1e-3 keeps a
/// 3x margin, still 10x below what a wrong quantized layout moves.
const FLOAT16_TABLES_TOL: f32 = 1e-3;

/// Qwen3.5 4-bit as stored: mlx-vlm's quantized embedding returns float16
/// rows and its Qwen3.5 keeps the whole residual stream in that dtype, so
/// the reference runs every layer in float16 where we keep float32.
/// Checked on the reference itself: casting its embedding to float32 moves
/// its own logits by 2.51e-3 on the two-image case; ours differ by 2.56e-3.
/// 5e-3 keeps a 2x margin, below the 1e-2 and more a real mistake moves.
/// (Float Qwen3.5 measured 5.6e-5: mlx-vlm's and mlx-lm's Qwen3.5 language
/// models themselves differ by 4.8e-5 on the same folder and text prompt,
/// and we match mlx-lm's to SAME_COMPUTATION_TOL in parity_mlx_lm.rs.)
const FLOAT16_ACTIVATIONS_TOL: f32 = 5e-3;

/// 4-bit weights dequantized to float32 at load against mlx-vlm's quantized
/// matmul, which carries float16 rounding of `scale · q + bias` (the same
/// effect measured at 9.2e-4 on the tiny llama). Measured: 1.4e-3 (Qwen2-VL),
/// 4.6e-3 (Qwen2.5-VL, whose tied head also multiplies by the dequantized
/// embedding), 1.3e-3 (Qwen3-VL), 8.4e-3 (Qwen3.5, on top of the reference's
/// float16 residual stream, see FLOAT16_ACTIVATIONS_TOL). 1e-2 holds them; a
/// wrong quantized layout gives unrelated logits (differences of order 1).
const DEQUANTIZED_TOL: f32 = 1e-2;

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir()
            .join(format!("parity-mlx-vlm-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Goldens {
    json: Value,
    arrays: HashMap<String, Array>,
}

/// The Qwen2-VL / Qwen2.5-VL goldens.
const QWEN2_GOLDENS: &str = "qwen_vl_mlx_vlm";
/// The Qwen3.5 goldens.
const QWEN35_GOLDENS: &str = "qwen3_5_vl_mlx_vlm";
/// The Qwen3-VL goldens.
const QWEN3_VL_GOLDENS: &str = "qwen3_vl_mlx_vlm";

fn goldens(stem: &str) -> Goldens {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens");
    let json_path = dir.join(format!("{stem}.json"));
    let text = std::fs::read_to_string(&json_path)
        .unwrap_or_else(|e| panic!("{}: {e}", json_path.display()));
    let arrays =
        Array::load_safetensors(dir.join(format!("{stem}.safetensors"))).expect("golden arrays");
    Goldens { json: serde_json::from_str(&text).expect("golden JSON"), arrays }
}

fn ints(v: &Value) -> Vec<i64> {
    v.as_array().expect("a list").iter().map(|x| x.as_i64().expect("an integer")).collect()
}

/// How a tiny folder is written and how mlx-vlm's template places images.
enum Folder {
    Qwen2(TinyQwenVl),
    /// A tiny Qwen3.5 with its tower, 4-bit (group 32) when given.
    Qwen35(Option<QuantSpec>),
    /// A tiny Qwen3-VL (DeepStack), 4-bit (group 32) when given.
    Qwen3Vl(Option<QuantSpec>),
    /// A tiny Qwen3-VL-MoE, 4-bit (group 32) when given.
    Qwen3VlMoe(Option<QuantSpec>),
}

/// The seeds `write_tiny_vl_model` writes its Qwen3.5 and Qwen3-VL folders with.
const QWEN35_SEED: u64 = 35;
const QWEN3_VL_SEED: u64 = 30;

impl Folder {
    fn write(&self, dir: &Path) {
        match self {
            Folder::Qwen2(spec) => write_tiny_qwen2_vl(dir, spec).map(drop),
            Folder::Qwen35(q) => write_tiny_qwen35_vl(dir, *q, QWEN35_SEED).map(drop),
            Folder::Qwen3Vl(q) => write_tiny_qwen3_vl(dir, *q, QWEN3_VL_SEED).map(drop),
            Folder::Qwen3VlMoe(q) => write_tiny_qwen3_vl_moe(dir, *q, QWEN3_VL_SEED).map(drop),
        }
        .expect("write tiny model");
    }

    /// mlx-vlm puts images after the text for Qwen2-VL, before it otherwise.
    fn images_first(&self) -> bool {
        !matches!(self, Folder::Qwen2(TinyQwenVl { variant: QwenVlVariant::Qwen2Vl, .. }))
    }

    fn goldens(&self) -> &'static str {
        match self {
            Folder::Qwen2(_) => QWEN2_GOLDENS,
            Folder::Qwen35(_) => QWEN35_GOLDENS,
            Folder::Qwen3Vl(_) => QWEN3_VL_GOLDENS,
            Folder::Qwen3VlMoe(_) => "qwen3_vl_moe_mlx_vlm",
        }
    }
}

/// What one golden model is and how we load it.
struct ModelUnderTest {
    /// Key in the goldens: `qwen2_vl/float`, `qwen2_5_vl/q4`, `qwen3_5/float`, ...
    golden: &'static str,
    folder: Folder,
    format: WeightFormat,
    tol: f32,
}

const Q4: QuantSpec = QuantSpec { group_size: 64, bits: 4 };

fn float(variant: QwenVlVariant, golden: &'static str) -> ModelUnderTest {
    ModelUnderTest {
        golden,
        folder: Folder::Qwen2(TinyQwenVl::new(variant)),
        format: WeightFormat::AsStored,
        tol: SAME_COMPUTATION_TOL,
    }
}

fn q4(
    variant: QwenVlVariant,
    golden: &'static str,
    format: WeightFormat,
    tol: f32,
) -> ModelUnderTest {
    let spec = TinyQwenVl {
        names: QwenVlNames::MlxCommunity,
        quantize: Some(Q4),
        ..TinyQwenVl::new(variant)
    };
    ModelUnderTest { golden, folder: Folder::Qwen2(spec), format, tol }
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

/// The user message mlx-vlm builds: the text, and the images after it for
/// Qwen2-VL, before it for the others.
fn user_message(images_first: bool, text: &str, images: usize) -> ChatMessage {
    if images == 0 {
        return ChatMessage::user(text);
    }
    let pictures = std::iter::repeat_n(ContentPart::image(), images);
    let parts: Vec<ContentPart> = if images_first {
        pictures.chain(std::iter::once(ContentPart::text(text))).collect()
    } else {
        std::iter::once(ContentPart::text(text)).chain(pictures).collect()
    };
    ChatMessage::user(MessageContent::Parts(parts))
}

/// Each image's single placeholder → one per feature.
fn expand_placeholders(tokens: &[u32], image_token: u32, features_per_image: &[usize]) -> Vec<u32> {
    let mut counts = features_per_image.iter();
    let mut out = Vec::new();
    for &t in tokens {
        if t == image_token {
            out.extend(std::iter::repeat_n(
                image_token,
                *counts.next().expect("an image per placeholder"),
            ));
        } else {
            out.push(t);
        }
    }
    assert!(counts.next().is_none(), "more images than placeholders");
    out
}

/// `[1, L, D]` token embeddings with the image rows replaced, in order, by `features` `[F, D]`.
fn splice(loaded: &LoadedModel, ids: &[u32], image_token: u32, features: Option<&Array>) -> Array {
    let l = ids.len() as i32;
    let tokens: Vec<i32> = ids.iter().map(|&t| t as i32).collect();
    let text = loaded.model.embed(&Array::from_slice(&tokens, &[1, l])).expect("embed");
    let Some(features) = features else { return text };
    splice_rows(text.reshape(&[l, -1]).unwrap(), ids, image_token, features)
}

/// `[1, L, D]`: row i of `base` `[L, D]`, or at image slots the next row of `features`.
fn splice_rows(base: Array, ids: &[u32], image_token: u32, features: &Array) -> Array {
    let l = ids.len() as i32;
    let features = features.as_dtype(base.dtype()).unwrap();
    let rows = ops::concatenate(&[&base, &features], 0).unwrap();
    let mut k = 0;
    let pick: Vec<i32> = ids
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
    assert_eq!(k, features.dim(0), "one feature per image slot");
    rows.take_axis(Array::from_slice(&pick, &[l]), 0).unwrap().reshape(&[1, l, -1]).unwrap()
}

/// Splits the tower's features `[F, D · levels]` into the input features
/// `[F, D]` and DeepStack additions `[1, L, D]` (zero at text positions).
fn split_levels(
    features: Array,
    levels: usize,
    ids: &[u32],
    image_token: u32,
) -> (Array, Vec<Array>) {
    if levels == 1 {
        return (features, Vec::new());
    }
    let d = features.dim(1) / levels as i32;
    let level = |k: i32| features.index((.., k * d..(k + 1) * d));
    let zeros = ops::zeros::<f32>(&[ids.len() as i32, d]).unwrap();
    let additions = (1..levels as i32)
        .map(|k| splice_rows(zeros.clone(), ids, image_token, &level(k)))
        .collect();
    (level(0), additions)
}

/// Runs `embeddings` (of the ids `tokens`) through the model, at explicit
/// M-RoPE positions when given, else at the cache's length plus `delta`.
fn run(
    loaded: &LoadedModel,
    embeddings: Array,
    tokens: &[u32],
    positions: Option<&Array>,
    delta: i32,
    cache: &mut BatchCache,
    deepstack: &[Array],
) -> Array {
    let model = loaded.model.as_ref();
    let positions = match positions {
        Some(p) => Positions::Multimodal(p.clone()),
        None => Positions::Start(cache.offsets()[0] + delta),
    };
    let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
    let ids = Array::from_slice(&ids, &[1, ids.len() as i32]);
    let hidden = model
        .forward_embeddings_adding(embeddings, &ids, &positions, cache, deepstack)
        .expect("forward");
    model.logits(&hidden).expect("logits").as_dtype(Dtype::Float32).unwrap()
}

fn argmax_last(logits: &Array) -> u32 {
    let l = logits.dim(1);
    ops::indexing::argmax_axis(logits.index((0, l - 1, ..)), -1, None).unwrap().item_exact::<u32>()
}

fn log_softmax(x: &Array) -> Array {
    x.subtract(ops::logsumexp_axis(x, -1, true).unwrap()).unwrap()
}

#[derive(Default, Debug)]
struct Measured {
    vision: f32,
    logits: f32,
    decode_logprobs: f32,
}

fn check(m: ModelUnderTest) {
    let goldens = goldens(m.folder.goldens());
    let golden = &goldens.json["models"][m.golden];
    assert!(golden.is_object(), "no goldens for {}", m.golden);
    let tmp = TempDir::new(&m.golden.replace('/', "-"));
    m.folder.write(&tmp.0);
    let loaded = load(&tmp.0, &LoadOptions { format: m.format }).expect("load tiny model");
    let vision = loaded.model.vision().expect("a vision tower");
    let preprocessor = loaded.preprocessor.as_ref().expect("the folder's image preprocessor");
    let image_token = vision.image_token_id();
    assert_eq!(Some(image_token), loaded.tokenizer.token_to_id("<|image_pad|>"));
    let text = goldens.json["text"].as_str().expect("prompt text");
    let names = match &m.folder {
        Folder::Qwen2(spec) => format!("{:?}", spec.names),
        Folder::Qwen35(q) | Folder::Qwen3Vl(q) | Folder::Qwen3VlMoe(q) => {
            (if q.is_some() { "mlx-community" } else { "Hugging Face" }).to_string()
        }
    };
    let tag = format!("{} ({names}, {:?})", m.golden, m.format);
    let mut measured = Measured::default();

    for (case, rec) in golden.as_object().expect("cases") {
        let grids: Vec<[i32; 3]> = rec["grids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| {
                ints(g).iter().map(|&x| x as i32).collect::<Vec<_>>().try_into().expect("t, h, w")
            })
            .collect();
        let what = |s: &str| format!("{tag} {case}: {s}");

        // The prompt, through our template, tokenizer and placeholder expansion.
        let messages = [user_message(m.folder.images_first(), text, grids.len())];
        let rendered = loaded
            .tokenizer
            .apply_chat_template(&messages, &TemplateOptions::default())
            .expect("template");
        assert_eq!(rendered, rec["prompt_text"].as_str().unwrap(), "{}", what("rendered prompt"));
        let counts: Vec<usize> = grids.iter().map(|&g| preprocessor.num_image_tokens(g)).collect();
        let ids = expand_placeholders(
            &loaded.tokenizer.encode(&rendered, false).unwrap(),
            image_token,
            &counts,
        );
        let golden_ids: Vec<u32> = ints(&rec["prompt_ids"]).iter().map(|&x| x as u32).collect();
        assert_eq!(ids, golden_ids, "{}", what("prompt ids"));

        // The vision tower, one image at a time, on mlx-vlm's pixels.
        let features = if grids.is_empty() {
            None
        } else {
            let pixels = &goldens.arrays[&format!("pixels.{case}")];
            // Our image processor with this checkpoint's config on the same
            // lossless files: the reference's pixel values bit for bit.
            let files = goldens.json["cases"][case.as_str()].as_array().expect("the case's files");
            let ours: Vec<Array> = files
                .iter()
                .map(|f| {
                    let path: PathBuf =
                        [env!("CARGO_MANIFEST_DIR"), "tests/fixtures/images", f.as_str().unwrap()]
                            .iter()
                            .collect();
                    preprocessor
                        .preprocess(&std::fs::read(path).unwrap())
                        .expect("preprocess")
                        .pixels
                })
                .collect();
            let ours = ops::concatenate(&ours, 0).unwrap();
            assert_eq!(
                max_abs_diff(&ours, pixels, &what("pixels")),
                0.0,
                "{}",
                what("pixel values bit-exact")
            );
            let mut start = 0;
            let mut parts = Vec::new();
            for &g in &grids {
                let n = g.iter().product::<i32>();
                parts.push(vision.encode(&pixels.index(start..start + n), g).expect("encode"));
                start += n;
            }
            assert_eq!(start, pixels.dim(0), "{}", what("patch count"));
            let ours = ops::concatenate(&parts, 0).unwrap();
            let key = format!("{}.{case}.vision", m.golden.replace('/', "."));
            let d = max_abs_diff(&ours, &goldens.arrays[&key], &what("vision output"));
            assert!(d <= m.tol, "{}: max |diff| {d:.3e} > {:.0e}", what("vision output"), m.tol);
            measured.vision = measured.vision.max(d);
            Some(ours)
        };

        // M-RoPE positions and delta, exactly.
        let (positions, delta) =
            vision.rope_positions(&ids, &grids).expect("positions").expect("M-RoPE positions");
        assert_eq!(delta as i64, rec["delta"].as_i64().unwrap(), "{}", what("rope delta"));
        let flat: Vec<i64> = rec["positions"].as_array().unwrap().iter().flat_map(ints).collect();
        positions.eval().unwrap();
        let ours: Vec<i64> = positions.as_slice::<i32>().iter().map(|&x| x as i64).collect();
        assert_eq!(ours, flat, "{}", what("M-RoPE positions"));
        let l = ids.len() as i32;
        let positions = features.as_ref().map(|_| positions.reshape(&[3, 1, l]).unwrap());

        // Logits of the whole prompt in one uncached pass.
        let key = format!("{}.{case}", m.golden.replace('/', "."));
        let (features, deepstack) = match features {
            Some(f) => {
                let (f, d) = split_levels(f, vision.feature_levels(), &ids, image_token);
                (Some(f), d)
            }
            None => (None, Vec::new()),
        };
        let embeddings = splice(&loaded, &ids, image_token, features.as_ref());
        let logits = run(
            &loaded,
            embeddings.clone(),
            &ids,
            positions.as_ref(),
            0,
            &mut loaded.model.new_cache(1),
            &deepstack,
        );
        let d = max_abs_diff(
            &logits.index(0),
            &goldens.arrays[&format!("{key}.logits")],
            &what("logits"),
        );
        assert!(d <= m.tol, "{}: max |diff| {d:.3e} > {:.0e}", what("logits"), m.tol);
        measured.logits = measured.logits.max(d);

        // Greedy decoding with our KV cache: prefill, then position = length + delta.
        let golden_greedy: Vec<u32> = ints(&rec["greedy_ids"]).iter().map(|&x| x as u32).collect();
        let golden_logprobs = &goldens.arrays[&format!("{key}.greedy_logprobs")];
        let mut cache = loaded.model.new_cache(1);
        let mut step_logits =
            run(&loaded, embeddings, &ids, positions.as_ref(), 0, &mut cache, &deepstack);
        let mut greedy = Vec::new();
        for step in 0..golden_greedy.len() {
            let last = step_logits.index((0, step_logits.dim(1) - 1, ..));
            let d = max_abs_diff(
                &log_softmax(&last),
                &golden_logprobs.index(step as i32),
                &what("decode log-probs"),
            );
            assert!(
                d <= m.tol,
                "{} step {step}: max |diff| {d:.3e} > {:.0e}",
                what("decode log-probs"),
                m.tol
            );
            measured.decode_logprobs = measured.decode_logprobs.max(d);
            let next = argmax_last(&step_logits);
            greedy.push(next);
            let emb = loaded.model.embed(&Array::from_slice(&[next as i32], &[1, 1])).unwrap();
            step_logits = run(&loaded, emb, &[next], None, delta, &mut cache, &[]);
        }
        assert_eq!(greedy, golden_greedy, "{}", what("greedy ids"));
    }
    println!("{tag} vs mlx-vlm: max |diff| {measured:?}, tolerance {:.0e}", m.tol);
}

#[test]
fn qwen2_vl_float_matches_mlx_vlm() {
    check(float(QwenVlVariant::Qwen2Vl, "qwen2_vl/float"));
}

#[test]
fn qwen2_vl_q4_as_stored_matches_mlx_vlm() {
    check(q4(QwenVlVariant::Qwen2Vl, "qwen2_vl/q4", WeightFormat::AsStored, FLOAT16_TABLES_TOL));
}

#[test]
fn qwen2_vl_q4_dequantized_matches_mlx_vlm() {
    check(q4(QwenVlVariant::Qwen2Vl, "qwen2_vl/q4", WeightFormat::Float32, DEQUANTIZED_TOL));
}

#[test]
fn qwen2_5_vl_float_matches_mlx_vlm() {
    check(float(QwenVlVariant::Qwen25Vl, "qwen2_5_vl/float"));
}

#[test]
fn qwen2_5_vl_q4_as_stored_matches_mlx_vlm() {
    check(q4(QwenVlVariant::Qwen25Vl, "qwen2_5_vl/q4", WeightFormat::AsStored, FLOAT16_TABLES_TOL));
}

#[test]
fn qwen2_5_vl_q4_dequantized_matches_mlx_vlm() {
    check(q4(QwenVlVariant::Qwen25Vl, "qwen2_5_vl/q4", WeightFormat::Float32, DEQUANTIZED_TOL));
}

#[test]
fn qwen3_5_float_matches_mlx_vlm() {
    check(ModelUnderTest {
        golden: "qwen3_5/float",
        folder: Folder::Qwen35(None),
        format: WeightFormat::AsStored,
        tol: SAME_COMPUTATION_TOL,
    });
}

#[test]
fn qwen3_5_q4_as_stored_matches_mlx_vlm() {
    check(ModelUnderTest {
        golden: "qwen3_5/q4",
        folder: Folder::Qwen35(Some(QuantSpec { group_size: 32, bits: 4 })),
        format: WeightFormat::AsStored,
        tol: FLOAT16_ACTIVATIONS_TOL,
    });
}

#[test]
fn qwen3_5_q4_dequantized_matches_mlx_vlm() {
    check(ModelUnderTest {
        golden: "qwen3_5/q4",
        folder: Folder::Qwen35(Some(QuantSpec { group_size: 32, bits: 4 })),
        format: WeightFormat::Float32,
        tol: DEQUANTIZED_TOL,
    });
}

#[test]
fn qwen3_vl_float_matches_mlx_vlm() {
    check(ModelUnderTest {
        golden: "qwen3_vl/float",
        folder: Folder::Qwen3Vl(None),
        format: WeightFormat::AsStored,
        tol: SAME_COMPUTATION_TOL,
    });
}

#[test]
fn qwen3_vl_q4_as_stored_matches_mlx_vlm() {
    check(ModelUnderTest {
        golden: "qwen3_vl/q4",
        folder: Folder::Qwen3Vl(Some(QuantSpec { group_size: 32, bits: 4 })),
        format: WeightFormat::AsStored,
        tol: FLOAT16_TABLES_TOL,
    });
}

#[test]
fn qwen3_vl_q4_dequantized_matches_mlx_vlm() {
    check(ModelUnderTest {
        golden: "qwen3_vl/q4",
        folder: Folder::Qwen3Vl(Some(QuantSpec { group_size: 32, bits: 4 })),
        format: WeightFormat::Float32,
        tol: DEQUANTIZED_TOL,
    });
}

/// Qwen3-VL-MoE: Hugging Face's fused experts (`[E, hidden, 2·mlp]`) in
/// float, mlx-community's stacked `switch_mlp` in 4-bit.
#[test]
fn qwen3_vl_moe_float_matches_mlx_vlm() {
    check(ModelUnderTest {
        golden: "qwen3_vl_moe/float",
        folder: Folder::Qwen3VlMoe(None),
        format: WeightFormat::AsStored,
        tol: SAME_COMPUTATION_TOL,
    });
}

#[test]
fn qwen3_vl_moe_q4_as_stored_matches_mlx_vlm() {
    check(ModelUnderTest {
        golden: "qwen3_vl_moe/q4",
        folder: Folder::Qwen3VlMoe(Some(QuantSpec { group_size: 32, bits: 4 })),
        format: WeightFormat::AsStored,
        tol: FLOAT16_TABLES_TOL,
    });
}

/// transformers ≥ 4.52 names (`model.visual.*`, `model.language_model.*`)
/// hold the same weights: the same goldens apply. mlx-vlm itself maps these
/// names wrongly, so only our loader is checked on them.
#[test]
fn transformers_452_names_load_the_same_model() {
    for (variant, golden) in
        [(QwenVlVariant::Qwen2Vl, "qwen2_vl/float"), (QwenVlVariant::Qwen25Vl, "qwen2_5_vl/float")]
    {
        let mut m = float(variant, golden);
        let Folder::Qwen2(spec) = &mut m.folder else { unreachable!() };
        spec.names = QwenVlNames::Transformers452;
        check(m);
    }
}

/// A `qwen2` text checkpoint (Qwen2 / Qwen2.5 text models) is this same
/// decoder without the tower and with ordinary RoPE, which equals M-RoPE on
/// text: the Qwen2-VL folder relabelled `qwen2` must give mlx-vlm's logits
/// for the text-only prompt.
#[test]
fn qwen2_text_model_matches_the_vl_language_model() {
    let goldens = goldens(QWEN2_GOLDENS);
    let tmp = TempDir::new("qwen2-text");
    write_tiny_qwen2_vl(&tmp.0, &TinyQwenVl::new(QwenVlVariant::Qwen2Vl))
        .expect("write tiny model");
    let config_path = tmp.0.join("config.json");
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    let root = config.as_object_mut().unwrap();
    root.insert("model_type".into(), "qwen2".into());
    root.insert("architectures".into(), serde_json::json!(["Qwen2ForCausalLM"]));
    for key in ["rope_scaling", "text_config", "vision_config"] {
        root.remove(key);
    }
    std::fs::write(&config_path, serde_json::to_string(&config).unwrap()).unwrap();
    let loaded =
        load(&tmp.0, &LoadOptions { format: WeightFormat::AsStored }).expect("load as qwen2");
    assert!(
        loaded.model.vision().is_none() && loaded.preprocessor.is_none(),
        "a text model has no tower"
    );

    let rec = &goldens.json["models"]["qwen2_vl/float"]["text"];
    let ids: Vec<u32> = ints(&rec["prompt_ids"]).iter().map(|&x| x as u32).collect();
    let logits = common::forward_fresh(loaded.model.as_ref(), &common::tokens(&ids))
        .as_dtype(Dtype::Float32)
        .unwrap();
    let d = max_abs_diff(
        &logits.index(0),
        &goldens.arrays["qwen2_vl.float.text.logits"],
        "qwen2 logits",
    );
    println!("qwen2 (text) vs mlx-vlm's Qwen2-VL language model: max |logit diff| {d:.3e}");
    assert!(d <= SAME_COMPUTATION_TOL, "qwen2 logits: max |diff| {d:.3e}");
}
