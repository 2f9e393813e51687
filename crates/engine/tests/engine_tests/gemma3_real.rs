//! The second real model: Gemma 3 270M from its Q4_K_M GGUF (K-quants, Q5_0
//! and Q8_0 blocks; `scripts/fetch-gemma3-270m.sh` puts it in models/).
//! Against goldens from `scripts/make-goldens.sh`
//! (`tests/goldens/gemma3_270m_mlx_lm.json`):
//! - our tokenizer, rebuilt from the GGUF vocabulary, encodes like the
//!   SentencePiece library itself;
//! - `vlm convert` writes a folder that Python mlx-lm loaded; on that folder
//!   our engine's greedy continuations of five prompts are token-identical to
//!   mlx-lm's, one request at a time and all five batched (rows of different
//!   lengths, decoding across each other's padding); the GGUF itself gives
//!   the same tokens.
use std::path::{Path, PathBuf};

use engine::batch::{Prompt, Request, SchedulerConfig};
use engine::handle::{EngineConfig, EngineHandle};
use engine::model::{LoadOptions, WeightFormat};
use engine::sample::SamplingParams;
use engine::tokenizer::Tokenizer;
use serde_json::Value;

const EOS: u32 = 1;

fn gguf() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/gemma-3-270m-q4_k_m.gguf");
    assert!(path.is_file(), "{} is missing: run scripts/setup.sh", path.display());
    path
}

fn golden() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens/gemma3_270m_mlx_lm.json");
    serde_json::from_str(&std::fs::read_to_string(&path).expect("golden file"))
        .expect("golden JSON")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().expect("ids").iter().map(|x| x.as_u64().expect("id") as u32).collect()
}

#[test]
fn the_gguf_tokenizer_encodes_like_sentencepiece() {
    let tokenizer = engine::weights::gguf::load_tokenizer(&gguf()).unwrap();
    for case in golden()["tokenizer"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        assert_eq!(tokenizer.encode(text, false).unwrap(), ids(&case["ids"]), "{text:?}");
    }
    assert_eq!(tokenizer.encode("Hi", true).unwrap()[0], 2, "the GGUF asks for <bos>");
}

/// Every block type in the file (F32, Q8_0, Q5_0, Q4_K, Q6_K) dequantizes as
/// gguf-py's numpy ports of ggml's code do: values at block and super-block
/// edges, and sums over whole tensors. (The greedy parity below runs mlx-lm
/// on weights we dequantized, so it cannot catch a wrong block layout; this
/// does.)
#[test]
fn every_block_type_dequantizes_as_ggml_does() {
    use engine::weights::gguf::{dequantize, GgufFile};
    let file = GgufFile::open(&gguf()).unwrap();
    for case in golden()["dequantized"].as_array().unwrap() {
        let name = case["tensor"].as_str().unwrap();
        let t = file.tensors.iter().find(|t| t.name == name).unwrap();
        assert_eq!(t.kind.name(), case["type"].as_str().unwrap());
        let values = dequantize(t.kind, &file.read(t).unwrap()).unwrap();
        for (at, want) in
            case["at"].as_array().unwrap().iter().zip(case["values"].as_array().unwrap())
        {
            let (at, want) = (at.as_u64().unwrap() as usize, want.as_f64().unwrap());
            // Float32 arithmetic in another order than numpy's: an ulp or so.
            let got = values[at] as f64;
            assert!((got - want).abs() <= 1e-6 * want.abs(), "{name} value {at}: {got} vs {want}");
        }
        let sum: f64 = values.iter().map(|&v| v as f64).sum();
        let squares: f64 = values.iter().map(|&v| (v as f64) * (v as f64)).sum();
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 * b.abs().max(1.0);
        assert!(close(sum, case["sum"].as_f64().unwrap()), "{name}: sum {sum}");
        assert!(
            close(squares, case["sum_of_squares"].as_f64().unwrap()),
            "{name}: sum of squares {squares}"
        );
    }
}

/// The golden continuation as text: the ids up to EOS, as the engine streams them.
fn expected_text(tokenizer: &Tokenizer, greedy: &[u32]) -> String {
    let end = greedy.iter().position(|&t| t == EOS).unwrap_or(greedy.len());
    tokenizer.decode(&greedy[..end], true).unwrap()
}

fn answers(model: &Path, max_running: usize, prompts: &[(Vec<u32>, usize)]) -> Vec<String> {
    let scheduler = SchedulerConfig { max_running, prefix_cache_bytes: 0, ..Default::default() };
    let config = EngineConfig { load: LoadOptions { format: WeightFormat::Float32 }, scheduler };
    let engine = EngineHandle::start(model, config).unwrap();
    let greedy = SamplingParams { temperature: 0.0, ..Default::default() };
    let streams: Vec<_> = prompts
        .iter()
        .map(|(ids, n)| {
            engine.submit(
                Request::new(Prompt::Tokens(ids.clone()))
                    .with_max_tokens(*n)
                    .with_sampling(greedy.clone()),
            )
        })
        .collect();
    let out = streams
        .into_iter()
        .map(|s| {
            let c = s.collect_blocking();
            assert!(c.error.is_none(), "{:?}", c.error);
            c.content
        })
        .collect();
    engine.shutdown();
    out
}

#[test]
fn greedy_continuations_match_mlx_lm_on_the_converted_folder_single_and_batched() {
    let golden = golden();
    let tokenizer = engine::weights::gguf::load_tokenizer(&gguf()).unwrap();
    let cases: Vec<(Vec<u32>, Vec<u32>)> = golden["greedy"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (ids(&c["prompt_ids"]), ids(&c["greedy_ids"])))
        .collect();
    let prompts: Vec<(Vec<u32>, usize)> = cases.iter().map(|(p, g)| (p.clone(), g.len())).collect();
    let want: Vec<String> = cases.iter().map(|(_, g)| expected_text(&tokenizer, g)).collect();

    let folder = tempfile::tempdir().unwrap();
    engine::convert::gguf_to_folder(&gguf(), folder.path(), WeightFormat::Float32).unwrap();
    // With one running sequence, the five queue and each decodes alone.
    assert_eq!(answers(folder.path(), 1, &prompts), want, "single requests vs mlx-lm");
    let batched = answers(folder.path(), 8, &prompts);
    assert_eq!(batched, want, "five batched requests vs mlx-lm");
    println!("five prompts, {} tokens each: identical to mlx-lm, single and batched", prompts[0].1);

    // The GGUF (K-quants dequantized at load) is the same model.
    let info =
        engine::model::load(&gguf(), &LoadOptions { format: WeightFormat::Float32 }).unwrap().info;
    assert_eq!(info.family, "Gemma 3");
    assert_eq!(info.cache_layout, "3 full, 15 sliding-window (512)");
    assert_eq!(info.loaded_as, "dequantized to float32");
    let words = info.quantization_words.unwrap();
    assert!(words.ends_with("bits per weight on average, embeddings 8-bit"), "{words}");
    println!("{}: {words}; {}", info.name, info.loaded_as);
    assert_eq!(answers(&gguf(), 8, &prompts), want, "the GGUF, batched");
}
