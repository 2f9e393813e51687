//! Checkpoints recorded from each family's own loader
//! (`fixtures::write_recorded`): for every tiny family, the tensors
//! its `load` takes for the hand-written fixture's config.json, written with
//! seeded values, load again from disk through the normal loader with no
//! tensor left over, float and 4-bit, and are the tensors the hand-written
//! mlx-community (4-bit) fixture holds, with the same shapes.
use std::collections::HashMap;
use std::path::Path;

use engine::batch::{Prompt, Request, SchedulerConfig};
use engine::generate::{generate, GenerateParams};
use engine::model::{self, Positions};
use engine::sample::SamplingParams;
use engine::weights::QuantSpec;
use fixtures::{
    leftover_after_load, record, write_recorded, write_tiny_family, write_tiny_from_config,
    write_tiny_gemma3_vl, write_tiny_gemma4_vl, write_tiny_idefics3, write_tiny_lfm2_vl,
    write_tiny_llama, write_tiny_mistral3, write_tiny_qwen2, write_tiny_qwen2_vl,
    write_tiny_qwen35_vl, write_tiny_qwen3_vl, write_tiny_qwen3_vl_moe, write_tiny_smolvlm,
    QwenVlVariant, TinyFamily, TinyLlama, TinyQwenVl, Values,
};
use mlx_rs::Array;

use crate::common::{max_abs_diff, salted_prompt as prompt, Driver, LOAD};

const SEED: u64 = 11;
const Q4: QuantSpec = QuantSpec { group_size: 32, bits: 4 };

/// Writes a hand-written tiny text checkpoint: float, or quantized with
/// mlx-community's names.
type TextWriter = Box<dyn Fn(&Path, Option<QuantSpec>) -> engine::Result<i32>>;

/// A hand-written tiny text checkpoint: what it is, its writer, where its
/// norms centre (Gemma 3's scale by `1 + w`), and whether it comes in 4-bit.
struct TextFixture {
    what: String,
    write: TextWriter,
    norm_center: f32,
    q4: bool,
}

fn text_fixtures() -> Vec<TextFixture> {
    let mut all = vec![
        TextFixture {
            what: "llama".into(),
            write: Box::new(|d, quantize| {
                write_tiny_llama(d, &TinyLlama { quantize, ..TinyLlama::default() })
            }),
            norm_center: 1.0,
            q4: true,
        },
        TextFixture {
            what: "qwen2".into(),
            write: Box::new(|d, _| write_tiny_qwen2(d, &TinyLlama::default())),
            norm_center: 1.0,
            q4: false,
        },
    ];
    for family in TinyFamily::ALL {
        all.push(TextFixture {
            what: family.name().into(),
            write: Box::new(move |d, q| write_tiny_family(d, family, q, SEED)),
            norm_center: if family == TinyFamily::Gemma3 { 0.0 } else { 1.0 },
            q4: true,
        });
    }
    all
}

/// The hand-written tiny float folder of `family` (its config, tokenizer).
fn hand_written(family: TinyFamily) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_family(dir.path(), family, None, SEED).unwrap();
    dir
}

/// Optional tensors the hand-written fixtures carry (Gemma 4's layer scalars).
fn present(name: &str) -> bool {
    name.ends_with(".layer_scalar")
}

/// `from`'s config.json without its quantization block, and its other
/// files but the tensors (tokenizer, image processor) copied into `to`.
fn float_config_and_tokenizer(from: &Path, to: &Path) -> serde_json::Value {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !["config.json", "model.safetensors"].contains(&name.as_str()) {
            std::fs::copy(entry.path(), to.join(&name)).unwrap();
        }
    }
    let text = std::fs::read_to_string(from.join("config.json")).unwrap();
    let mut config: serde_json::Value = serde_json::from_str(&text).unwrap();
    config.as_object_mut().unwrap().remove("quantization");
    config
}

/// The tensors of the folder `dir` by the text model's names (a
/// multimodal checkpoint's `language_model.` dropped), with the shapes of
/// their float values (a quantized matrix's stored columns are 32 / bits
/// to the 32-bit word); no scales or biases.
fn float_shapes(dir: &Path) -> HashMap<String, Vec<i32>> {
    let stored = Array::load_safetensors(dir.join("model.safetensors")).unwrap();
    let mut shapes = HashMap::new();
    for (name, t) in &stored {
        if name.ends_with(".scales") || name.ends_with(".biases") {
            continue;
        }
        let mut shape = t.shape().to_vec();
        let module = name.strip_suffix(".weight").unwrap_or(name);
        if stored.contains_key(&format!("{module}.scales")) {
            *shape.last_mut().unwrap() *= 32 / Q4.bits;
        }
        let name = name.strip_prefix("language_model.").unwrap_or(name);
        shapes.insert(name.to_string(), shape);
    }
    shapes
}

#[test]
fn every_family_records_a_checkpoint_its_loader_takes_whole() {
    for fixture in text_fixtures() {
        let what = &fixture.what;
        let hand = tempfile::tempdir().unwrap();
        let quantize = if fixture.q4 { Some(Q4) } else { None };
        (fixture.write)(hand.path(), quantize).unwrap();
        let work = tempfile::tempdir().unwrap();
        let values = Values { seed: SEED, norm_center: fixture.norm_center };
        for quantize in [None, Some(Q4)] {
            let dir = work.path().join(if quantize.is_some() { "q4" } else { "float" });
            let config = float_config_and_tokenizer(hand.path(), &dir);
            let asked = write_recorded(&dir, config, quantize, values, present).unwrap();
            assert!(!asked.is_empty());
            let leftover = leftover_after_load(&dir).unwrap();
            assert!(leftover.is_empty(), "{what} {quantize:?}: left over {leftover:?}");
            // The normal load, its forward pass included; then logits that are numbers.
            let loaded = model::load(&dir, &LOAD).unwrap();
            let mut cache = loaded.model.new_cache(1);
            let ids = Array::from_slice(&[5i32, 9, 17, 3], &[1, 4]);
            let logits = loaded.model.forward(&ids, &Positions::Start(0), &mut cache).unwrap();
            let zeros = Array::zeros::<f32>(logits.shape()).unwrap();
            let largest = max_abs_diff(&logits, &zeros);
            assert!(largest.is_finite() && largest > 0.0, "{what} {quantize:?}: {largest}");
        }

        // The tensors the hand-written fixture holds, with the same shapes:
        // its mlx-community folder where it has one (the layout the
        // loader's own names are).
        let expected = float_shapes(hand.path());
        let config = float_config_and_tokenizer(hand.path(), &work.path().join("again"));
        let recorded: HashMap<String, Vec<i32>> =
            record(&config, present).unwrap().into_iter().map(|a| (a.name, a.shape)).collect();
        let mut not_written: Vec<&String> =
            recorded.keys().filter(|n| !expected.contains_key(*n)).collect();
        not_written.sort();
        assert!(not_written.is_empty(), "{what}: the fixture lacks {not_written:?}");
        let mut unread: Vec<&String> =
            expected.keys().filter(|n| !recorded.contains_key(*n)).collect();
        unread.sort();
        // Qwen3.5's fixture carries one vision tensor that the text model skips.
        let skipped = |n: &str| n.starts_with("vision_tower.");
        assert!(unread.iter().all(|n| skipped(n)), "{what}: the loader skips {unread:?}");
        for (name, shape) in &recorded {
            assert_eq!(&expected[name], shape, "{what}: {name}");
        }
    }
}

/// A hand-written tiny vision checkpoint's writer.
type Writer = fn(&Path) -> engine::Result<i32>;

/// The vision families: their towers recorded too. A tower whose loader
/// first asks whether it is there (a text-only conversion has none) is
/// said to be, by the names it asks about.
#[test]
fn every_vision_family_records_a_checkpoint_its_loader_takes_whole() {
    let writers: [(&str, Writer, f32); 11] = [
        ("qwen2_vl", |d| write_tiny_qwen2_vl(d, &TinyQwenVl::new(QwenVlVariant::Qwen2Vl)), 1.0),
        ("qwen2_5_vl", |d| write_tiny_qwen2_vl(d, &TinyQwenVl::new(QwenVlVariant::Qwen25Vl)), 1.0),
        ("qwen3_vl", |d| write_tiny_qwen3_vl(d, None, SEED), 1.0),
        ("qwen3_vl_moe", |d| write_tiny_qwen3_vl_moe(d, None, SEED), 1.0),
        ("qwen3_5 vl", |d| write_tiny_qwen35_vl(d, None, SEED), 1.0),
        ("gemma3 vl", |d| write_tiny_gemma3_vl(d, None, SEED), 0.0),
        ("gemma4 vl", |d| write_tiny_gemma4_vl(d, None, SEED), 1.0),
        ("smolvlm", |d| write_tiny_smolvlm(d, SEED), 1.0),
        ("idefics3", |d| write_tiny_idefics3(d, SEED), 1.0),
        ("lfm2_vl", |d| write_tiny_lfm2_vl(d, SEED), 1.0),
        ("mistral3", |d| write_tiny_mistral3(d, SEED), 1.0),
    ];
    for (what, write, norm_center) in writers {
        let hand = tempfile::tempdir().unwrap();
        write(hand.path()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let config = float_config_and_tokenizer(hand.path(), dir.path());
        let values = Values { seed: SEED, norm_center };
        let asked = write_recorded(dir.path(), config, None, values, tower_is_there).unwrap();
        assert!(
            asked.iter().any(|a| a.name.contains("patch")),
            "{what}: a patch embedding was recorded"
        );
        let leftover = leftover_after_load(dir.path()).unwrap();
        assert!(leftover.is_empty(), "{what}: left over {leftover:?}");
        let loaded = model::load(dir.path(), &LOAD).unwrap();
        assert!(loaded.model.vision().is_some(), "{what}: loaded with its tower");
    }
}

/// The tensors a vision loader asks about to tell a tower is there.
fn tower_is_there(name: &str) -> bool {
    name.contains("patch_embed")
        || name.contains("patch_conv")
        || name.contains(".blocks.0.")
        || name.contains(".transformer.layers.0.")
}

/// What a config says a family has is what is recorded: a llama with
/// biases on its attention and MLP projections takes them, one without
/// does not; a tied one has no head. Each folder loads with nothing left over.
#[test]
fn the_config_decides_what_is_recorded() {
    let config = |biases: bool, tied: bool| {
        move |vocab: i32| {
            serde_json::json!({
                "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1,
                "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
                "rms_norm_eps": 1e-5, "vocab_size": vocab, "rope_theta": 10000.0,
                "attention_bias": biases, "mlp_bias": biases, "tie_word_embeddings": tied,
                "max_position_embeddings": 256,
            })
        }
    };
    for (biases, tied) in [(false, false), (true, false), (false, true)] {
        let dir = tempfile::tempdir().unwrap();
        write_tiny_from_config(dir.path(), config(biases, tied), None, Values::seeded(SEED))
            .unwrap();
        let names = float_shapes(dir.path());
        let bias_count = names.keys().filter(|n| n.ends_with(".bias")).count();
        // q, k, v, o and the MLP's gate, up, down.
        assert_eq!(bias_count, if biases { 7 } else { 0 }, "biases {biases}");
        assert_eq!(names.contains_key("lm_head.weight"), !tied, "tied {tied}");
        assert!(leftover_after_load(dir.path()).unwrap().is_empty());
        model::load(dir.path(), &LOAD).unwrap();
    }
}

/// The engine's backbone test on recorded checkpoints: for every tiny
/// family, rows of different lengths prefilled in small chunks (across
/// Gemma's window) and one joining mid-decode give, batched, what each
/// gives alone; so recorded fixtures serve the tests hand-written ones do.
/// Every end-of-sequence token is banned (a recorded head has no reason to
/// avoid gpt-oss's harmony ends): each row runs its length.
#[test]
fn recorded_checkpoints_decode_batched_as_alone() {
    for family in TinyFamily::ALL {
        let hand = hand_written(family);
        let dir = tempfile::tempdir().unwrap();
        let config = float_config_and_tokenizer(hand.path(), dir.path());
        let norm_center = if family == TinyFamily::Gemma3 { 0.0 } else { 1.0 };
        let values = Values { seed: SEED, norm_center };
        write_recorded(dir.path(), config, None, values, present).unwrap();
        let loaded = model::load(dir.path(), &LOAD).unwrap();
        let sampling = SamplingParams {
            logit_bias: loaded
                .info
                .eos_token_ids
                .iter()
                .map(|&id| (id, f32::NEG_INFINITY))
                .collect(),
            ..SamplingParams::greedy()
        };
        let alone = |ids: &[u32], n: usize| {
            let mut text = String::new();
            let params = GenerateParams { max_tokens: n, sampling: sampling.clone() };
            generate(loaded.model.as_ref(), &loaded.tokenizer, ids, &params, |t| {
                text.push_str(t.text);
                true
            })
            .unwrap();
            text
        };
        let request = |ids: &[u32], n: usize| {
            Request::new(Prompt::Tokens(ids.to_vec()))
                .with_max_tokens(n)
                .with_sampling(sampling.clone())
        };
        let config = SchedulerConfig { max_running: 8, prefill_budget: 6, ..Default::default() };
        let mut driver = Driver::new(dir.path(), config);
        let early = [(prompt(5, 1), 12), (prompt(17, 2), 8)];
        let late = (prompt(11, 3), 10);
        let mut rows: Vec<usize> =
            early.iter().map(|(p, n)| driver.submit(request(p, *n))).collect();
        for _ in 0..6 {
            driver.step();
        }
        assert!(driver.scheduler.stats().decode_steps > 0, "{family:?}: joins mid-decode");
        rows.push(driver.submit(request(&late.0, late.1)));
        driver.run_to_end();
        for (row, (ids, n)) in rows.into_iter().zip(early.iter().chain([&late])) {
            let c = driver.completion(row);
            assert!(c.error.is_none(), "{family:?}: {:?}", c.error);
            assert_eq!(c.stats.generated_tokens, *n, "{family:?}");
            assert_eq!(c.content, alone(ids, *n), "{family:?}: {} tokens", ids.len());
        }
    }
}
