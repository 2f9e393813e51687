//! Broken or unsupported checkpoints of the new families and GGUF files fail
//! at load with an error that names the field, tensor or type — and leave
//! nothing half-loaded in memory.
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use engine::model::{self, LoadOptions, WeightFormat};
use engine::Error;
use fixtures::{write_tiny_family, GgufTensor, GgufValue, TinyFamily};

const LOAD: LoadOptions = LoadOptions { format: WeightFormat::AsStored };

fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) {
    let path = dir.join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(config.as_object_mut().unwrap());
    std::fs::write(&path, config.to_string()).unwrap();
}

fn family(family: TinyFamily) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_family(dir.path(), family, None, 11).unwrap();
    dir
}

/// MLX's active memory is one figure for the whole process: the tests of
/// this file load models one at a time, so the memory test sees only its own.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOADS: Mutex<()> = Mutex::new(());
    LOADS.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn load_error(path: &Path) -> Error {
    match model::load(path, &LOAD) {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e) => e,
    }
}

#[test]
fn config_fields_a_family_needs_are_named() {
    let _serial = one_at_a_time();
    let cases: [(TinyFamily, &str, &str); 3] = [
        (TinyFamily::Gemma3, "sliding_window", "sliding_window"),
        (TinyFamily::Qwen3, "head_dim", "head_dim"),
        (TinyFamily::Qwen3Moe, "num_experts", "num_experts"),
    ];
    for (f, field, named) in cases {
        let dir = family(f);
        edit_config(dir.path(), |c| {
            c.remove(field);
        });
        let e = load_error(dir.path());
        assert!(matches!(e, Error::InvalidConfig(_)), "{f:?}: {e}");
        assert!(e.to_string().contains(named), "{f:?} without {field}: {e}");
    }
    let dir = family(TinyFamily::Gemma3);
    edit_config(dir.path(), |c| {
        c.insert(
            "layer_types".into(),
            serde_json::json!(["sliding_attention", "chunked_attention"]),
        );
    });
    assert!(load_error(dir.path()).to_string().contains("layer_types"));
}

#[test]
fn an_unknown_model_type_lists_the_supported_ones() {
    let _serial = one_at_a_time();
    let dir = family(TinyFamily::Qwen3);
    edit_config(dir.path(), |c| {
        c.insert("model_type".into(), "qwen3_next".into());
    });
    let e = load_error(dir.path());
    assert_eq!(e.code(), "UNSUPPORTED_ARCHITECTURE");
    let text = e.to_string();
    assert!(
        text.contains("qwen3_next") && text.contains("gemma3_text") && text.contains("qwen3_moe"),
        "{text}"
    );
}

/// A quantization block that does not match the tensors: the tensor whose
/// shape disagrees is named.
#[test]
fn a_quantization_block_that_does_not_match_the_tensors_is_named() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let q4 = engine::weights::QuantSpec { group_size: 32, bits: 4 };
    write_tiny_family(dir.path(), TinyFamily::Qwen3Moe, Some(q4), 11).unwrap();
    edit_config(dir.path(), |c| {
        c.insert("quantization".into(), serde_json::json!({"group_size": 32, "bits": 8}));
    });
    let e = load_error(dir.path()).to_string();
    assert!(e.contains(".weight") && e.contains("shape"), "{e}");
}

/// Failed loads free what they read: MLX's active memory comes back to
/// where it was (a model that stayed would hold its weights).
#[test]
fn a_failed_load_leaves_nothing_in_memory() {
    let _serial = one_at_a_time();
    let dir = family(TinyFamily::Gemma3);
    let ok = model::load(dir.path(), &LOAD).unwrap();
    let model_bytes = mlx_rs::memory::active_memory().unwrap();
    drop(ok);
    let before = mlx_rs::memory::active_memory().unwrap();
    // The last layer's weights are gone: everything before it was read.
    let path = dir.path().join("model.safetensors");
    let mut tensors = mlx_rs::Array::load_safetensors(&path).unwrap();
    tensors.retain(|name, _| !name.starts_with("model.layers.3.mlp"));
    // Loading is lazy: write a new file, then put it in place.
    let scratch = tempfile::tempdir_in(dir.path()).unwrap();
    let edited = scratch.path().join("model.safetensors");
    mlx_rs::Array::save_safetensors(tensors.iter(), None, &edited).unwrap();
    drop(tensors);
    std::fs::rename(&edited, &path).unwrap();
    for _ in 0..3 {
        let e = load_error(dir.path());
        assert!(e.to_string().contains("model.layers.3.mlp"), "{e}");
    }
    let after = mlx_rs::memory::active_memory().unwrap();
    println!("active memory: {model_bytes} with the model, {before} without, {after} after three failed loads");
    assert!(after <= before + 4096, "a failed load kept {} bytes", after - before);
}

/// A GGUF of one architecture and raw tensors (`kind` = ggml type code).
fn write_gguf(path: &Path, arch: &str, tensors: &[(&str, &[usize], u32, Vec<u8>)]) {
    let tensors: Vec<GgufTensor> = tensors
        .iter()
        .map(|(name, shape, kind, data)| GgufTensor {
            name: name.to_string(),
            shape: shape.to_vec(),
            kind: *kind,
            data: data.clone(),
        })
        .collect();
    fixtures::write_gguf(path, &[("general.architecture", GgufValue::Str(arch.into()))], &tensors)
        .unwrap();
}

#[test]
fn unsupported_gguf_files_are_named() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let arch = dir.path().join("mamba.gguf");
    write_gguf(&arch, "mamba", &[("token_embd.weight", &[2, 4], 0, vec![0; 32])]);
    let e = load_error(&arch);
    assert_eq!(e.code(), "UNSUPPORTED_ARCHITECTURE");
    assert!(e.to_string().contains("mamba") && e.to_string().contains("gemma3"), "{e}");

    // Q3_K (code 11) is a real type we do not read: named with its tensor.
    let q3 = dir.path().join("q3.gguf");
    write_gguf(&q3, "qwen3", &[("blk.0.attn_q.weight", &[1, 256], 11, vec![0; 110])]);
    let e = load_error(&q3).to_string();
    assert!(e.contains("blk.0.attn_q.weight") && e.contains("Q3_K"), "{e}");

    // A tensor that runs past the end of the file: a cut download.
    let cut = dir.path().join("cut.gguf");
    write_gguf(&cut, "qwen3", &[("token_embd.weight", &[4, 64], 0, vec![0; 1024])]);
    let bytes = std::fs::read(&cut).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() - 100]).unwrap();
    let e = load_error(&cut);
    assert_eq!(e.code(), "CORRUPT_WEIGHTS", "{e}");
    assert!(e.to_string().contains("truncated"), "{e}");

    // Not a GGUF at all.
    let junk = dir.path().join("junk.gguf");
    std::fs::write(&junk, b"this is not a model").unwrap();
    assert_eq!(load_error(&junk).code(), "CORRUPT_WEIGHTS");
}
