//! The ways to download a repository, each with its size on disk: an MLX or
//! safetensors repository is one (its bits from config.json); a GGUF
//! repository has one per quantization file (split files together), each
//! with the vision projector when the repository has one.
use serde::{Deserialize, Serialize};
use serde_json::Value;
use ts_rs::TS;

use crate::fit::is_projector_name;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "lowercase")]
pub enum VariantFormat {
    Safetensors,
    Gguf,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
pub struct Variant {
    /// "4-bit", "bf16", "Q4_K_M", "IQ2_XXS"…
    pub label: String,
    pub format: VariantFormat,
    /// The files to download for it.
    pub files: Vec<String>,
    /// Size on disk of those files, when the listing had sizes.
    pub bytes: Option<u64>,
    /// Of which the weights proper (safetensors or the GGUF file).
    pub weight_bytes: Option<u64>,
    /// Of which a separate vision projector (GGUF `mmproj`).
    pub projector_bytes: Option<u64>,
}

/// Weights in a format the engine does not load; left out of a
/// safetensors download (many repositories carry both).
const OTHER_WEIGHTS: &[&str] =
    &[".bin", ".pt", ".pth", ".ckpt", ".onnx", ".onnx_data", ".msgpack", ".h5", ".ot", ".tflite"];

/// The variants of a repository from its file names (and sizes, when
/// known) and its config.json (or the Hub's summary of it).
pub fn variants(files: &[(String, Option<u64>)], config: Option<&Value>) -> Vec<Variant> {
    let size_of = |names: &[&String]| -> Option<u64> {
        names.iter().map(|n| files.iter().find(|(f, _)| f == *n).and_then(|(_, s)| *s)).sum()
    };
    let mut out = Vec::new();

    let weights: Vec<&String> =
        files.iter().map(|(n, _)| n).filter(|n| n.ends_with(".safetensors")).collect();
    if !weights.is_empty() {
        let keep: Vec<&String> = files
            .iter()
            .map(|(n, _)| n)
            .filter(|n| {
                let lower = n.to_ascii_lowercase();
                !lower.ends_with(".gguf") && !OTHER_WEIGHTS.iter().any(|ext| lower.ends_with(ext))
            })
            .collect();
        out.push(Variant {
            label: safetensors_label(config),
            format: VariantFormat::Safetensors,
            bytes: size_of(&keep),
            weight_bytes: size_of(&weights),
            projector_bytes: Some(0),
            files: keep.into_iter().cloned().collect(),
        });
    }

    let ggufs: Vec<&String> = files
        .iter()
        .map(|(n, _)| n)
        .filter(|n| n.to_ascii_lowercase().ends_with(".gguf"))
        .collect();
    let mut projectors: Vec<&String> =
        ggufs.iter().copied().filter(|n| is_projector_name(file_name(n))).collect();
    // one projector serves every quantization: f16 when there is a choice
    projectors.sort_by_key(|n| (!n.to_ascii_lowercase().contains("f16"), n.len(), (*n).clone()));
    let projector = projectors.first().copied();
    let mut groups: Vec<(String, Vec<&String>)> = Vec::new();
    for name in ggufs.iter().copied().filter(|n| !is_projector_name(file_name(n))) {
        let label = gguf_quantization(file_name(name));
        match groups.iter_mut().find(|(l, _)| *l == label) {
            Some((_, names)) => names.push(name),
            None => groups.push((label, vec![name])),
        }
    }
    for (label, mut names) in groups {
        names.sort();
        let weight_bytes = size_of(&names);
        let projector_bytes = projector.map_or(Some(0), |p| size_of(&[p]));
        let mut all = names.clone();
        all.extend(projector);
        out.push(Variant {
            label,
            format: VariantFormat::Gguf,
            bytes: size_of(&all),
            weight_bytes,
            projector_bytes,
            files: all.into_iter().cloned().collect(),
        });
    }
    out
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// "4-bit" from MLX's `quantization.bits` (or `quantization_config.bits`),
/// else the float type.
fn safetensors_label(config: Option<&Value>) -> String {
    let Some(config) = config else {
        return "safetensors".into();
    };
    let bits = ["quantization", "quantization_config"]
        .iter()
        .find_map(|k| config.get(*k).and_then(|q| q.get("bits")).and_then(Value::as_u64));
    if let Some(bits) = bits {
        return format!("{bits}-bit");
    }
    match config.get("torch_dtype").or_else(|| config.get("dtype")).and_then(Value::as_str) {
        Some("bfloat16") => "bf16".into(),
        Some("float16") => "f16".into(),
        Some("float32") => "f32".into(),
        _ => "safetensors".into(),
    }
}

/// The quantization in a GGUF file name as llama.cpp's tools write it
/// (`…-Q4_K_M.gguf`, `….q8_0.gguf`, `…-UD-IQ2_XXS-00001-of-00003.gguf`), else
/// the file's stem.
pub fn gguf_quantization(file: &str) -> String {
    let stem = &file[..file.len() - ".gguf".len().min(file.len())];
    let stem = strip_shard_suffix(stem);
    let tokens: Vec<&str> = stem.split(['-', '.']).collect();
    for (i, token) in tokens.iter().enumerate().rev() {
        let upper = token.to_ascii_uppercase();
        if is_quant_token(&upper) {
            return match i.checked_sub(1).map(|j| tokens[j].to_ascii_uppercase()) {
                // Unsloth's dynamic quants
                Some(prefix) if prefix == "UD" => format!("UD-{upper}"),
                _ => upper,
            };
        }
    }
    stem.to_string()
}

/// `name-00001-of-00003` → `name`.
fn strip_shard_suffix(stem: &str) -> &str {
    let parts: Vec<&str> = stem.rsplitn(4, '-').collect();
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if parts.len() == 4 && digits(parts[0]) && parts[1] == "of" && digits(parts[2]) {
        parts[3]
    } else {
        stem
    }
}

fn is_quant_token(t: &str) -> bool {
    if matches!(t, "F16" | "BF16" | "F32" | "FP16" | "MXFP4" | "MXFP4_MOE") {
        return true;
    }
    let rest =
        t.strip_prefix("IQ").or_else(|| t.strip_prefix("TQ")).or_else(|| t.strip_prefix('Q'));
    rest.is_some_and(|r| {
        let mut parts = r.split('_');
        parts
            .next()
            .is_some_and(|bits| !bits.is_empty() && bits.bytes().all(|b| b.is_ascii_digit()))
            && parts.all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantization_labels_from_file_names() {
        for (file, label) in [
            ("Qwen2.5-VL-7B-Instruct-Q4_K_M.gguf", "Q4_K_M"),
            ("SmolLM2-135M-Instruct.Q4_1.gguf", "Q4_1"),
            ("gemma-3-270m-q4_k_m.gguf", "Q4_K_M"),
            ("model-IQ2_XXS-00001-of-00003.gguf", "IQ2_XXS"),
            ("Qwen3-30B-A3B-UD-Q4_K_XL.gguf", "UD-Q4_K_XL"),
            ("llama-3.2-1b-instruct-bf16.gguf", "BF16"),
            ("ggml-model-f16.gguf", "F16"),
            ("my-model.gguf", "my-model"),
        ] {
            assert_eq!(gguf_quantization(file), label, "{file}");
        }
    }

    fn sized(files: &[(&str, u64)]) -> Vec<(String, Option<u64>)> {
        files.iter().map(|(n, s)| (n.to_string(), Some(*s))).collect()
    }

    #[test]
    fn a_gguf_repository_has_one_variant_per_quantization_with_its_projector() {
        let files = sized(&[
            ("README.md", 5),
            ("model-Q4_K_M.gguf", 400),
            ("model-Q8_0-00001-of-00002.gguf", 300),
            ("model-Q8_0-00002-of-00002.gguf", 300),
            ("mmproj-model-f16.gguf", 60),
            ("mmproj-model-f32.gguf", 120),
        ]);
        let v = variants(&files, None);
        assert_eq!(v.len(), 2, "{v:?}");
        let q4 = v.iter().find(|v| v.label == "Q4_K_M").unwrap();
        assert_eq!(q4.files, vec!["model-Q4_K_M.gguf", "mmproj-model-f16.gguf"]);
        assert_eq!(
            (q4.bytes, q4.weight_bytes, q4.projector_bytes),
            (Some(460), Some(400), Some(60))
        );
        let q8 = v.iter().find(|v| v.label == "Q8_0").unwrap();
        assert_eq!((q8.bytes, q8.weight_bytes), (Some(660), Some(600)));
        assert!(v.iter().all(|v| v.format == VariantFormat::Gguf));
    }

    #[test]
    fn a_safetensors_repository_is_one_variant_without_other_weight_formats() {
        let files = sized(&[
            ("config.json", 1),
            ("model.safetensors", 1000),
            ("pytorch_model.bin", 1000),
            ("tokenizer.json", 10),
        ]);
        let v = variants(&files, Some(&json!({"quantization": {"bits": 4, "group_size": 64}})));
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].label, "4-bit");
        assert_eq!(v[0].files, vec!["config.json", "model.safetensors", "tokenizer.json"]);
        assert_eq!((v[0].bytes, v[0].weight_bytes), (Some(1011), Some(1000)));
        assert_eq!(variants(&files, Some(&json!({"torch_dtype": "bfloat16"})))[0].label, "bf16");
        // without sizes the names are still known
        let no_sizes: Vec<_> = files.iter().map(|(n, _)| (n.clone(), None)).collect();
        assert_eq!(variants(&no_sizes, None)[0].bytes, None);
        assert!(variants(&sized(&[("README.md", 1)]), None).is_empty());
    }
}
