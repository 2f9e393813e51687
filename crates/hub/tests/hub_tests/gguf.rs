//! The GGUF header reader on files written here byte by byte, and on the
//! real default model.
use crate::common;

use std::path::Path;

use common::{write_gguf, GgufValue};
use hub::gguf::{read_architecture, read_string_value};

fn tokens(n: usize) -> GgufValue {
    GgufValue::Strings((0..n).map(|i| format!("tok{i}")).collect())
}

#[test]
fn reads_the_architecture_after_values_it_skips() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_gguf(
        &path,
        3,
        &[
            ("general.alignment", GgufValue::U32(32)),
            ("tokenizer.ggml.tokens", tokens(1000)),
            ("tokenizer.ggml.scores", GgufValue::F32s(vec![0.5; 1000])),
            ("general.architecture", GgufValue::Str("qwen2".into())),
            ("general.name", GgufValue::Str("Tiny".into())),
        ],
    );
    assert_eq!(read_architecture(&path).unwrap(), "qwen2");
    assert_eq!(read_string_value(&path, "general.name").unwrap().as_deref(), Some("Tiny"));
    assert_eq!(read_string_value(&path, "general.missing").unwrap(), None);
}

#[test]
fn reads_version_1_with_32_bit_lengths() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.gguf");
    write_gguf(
        &path,
        1,
        &[
            ("tokenizer.ggml.tokens", tokens(10)),
            ("general.architecture", GgufValue::Str("llama".into())),
        ],
    );
    assert_eq!(read_architecture(&path).unwrap(), "llama");
}

#[test]
fn malformed_files_are_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.gguf");
    write_gguf(
        &good,
        3,
        &[
            ("tokenizer.ggml.tokens", tokens(50)),
            ("general.architecture", GgufValue::Str("llama".into())),
        ],
    );
    let bytes = std::fs::read(&good).unwrap();

    let check = |name: &str, content: &[u8], needle: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        let err = read_architecture(&path).unwrap_err();
        assert_eq!(err.code(), "INVALID_GGUF", "{name}: {err}");
        assert!(err.to_string().contains(needle), "{name}: {err}");
    };
    // cut inside the skipped array, and inside the wanted string
    check("truncated.gguf", &bytes[..bytes.len() / 2], "truncated");
    check("cut-value.gguf", &bytes[..bytes.len() - 2], "truncated");
    check("empty.gguf", b"", "truncated");
    check("magic.gguf", b"GGML\x03\0\0\0", "not a GGUF file");
    let mut big_endian = bytes.clone();
    big_endian[4..8].copy_from_slice(&3u32.to_be_bytes());
    check("big-endian.gguf", &big_endian, "unsupported GGUF version");
    // a key length of 2^40 bytes
    let mut huge = bytes[..24].to_vec();
    huge.extend((1u64 << 40).to_le_bytes());
    check("huge-key.gguf", &huge, "implausibly long");

    let no_arch = dir.path().join("no-arch.gguf");
    write_gguf(&no_arch, 3, &[("general.name", GgufValue::Str("x".into()))]);
    assert_eq!(read_architecture(&no_arch).unwrap_err().code(), "INVALID_GGUF");
    let wrong_type = dir.path().join("wrong-type.gguf");
    write_gguf(&wrong_type, 3, &[("general.architecture", GgufValue::U32(7))]);
    assert_eq!(read_architecture(&wrong_type).unwrap_err().code(), "INVALID_GGUF");
    assert_eq!(read_architecture(&dir.path().join("absent.gguf")).unwrap_err().code(), "IO_ERROR");
}

/// The default model, installed by scripts/setup.sh before the tests run.
#[test]
fn the_default_model_is_llama() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(path.is_file(), "{} is missing: run scripts/setup.sh", path.display());
    assert_eq!(read_architecture(&path).unwrap(), "llama");
}
