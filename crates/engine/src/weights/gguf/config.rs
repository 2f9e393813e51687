//! A GGUF file's metadata as the config.json its family reads. One mapping
//! for the import (which has the whole file) and for the hub's fit check
//! (which may have only the header, or a prefix of it fetched from the Hub),
//! so a family's shape is told the same way from either.
use serde_json::{json, Map, Value};

use super::{GgufFile, GgufImport, MetaValue, COMMON_CONFIG_KEYS, FLOAT_FIELDS};
use crate::error::{Error, Result};
use crate::model::registry::{self, Family};

/// What the mapping reads of a GGUF header.
pub trait GgufMetadata {
    /// A number (integers, floats and booleans alike).
    fn number(&self, key: &str) -> Option<f64>;
    fn text(&self, key: &str) -> Option<&str>;
    /// An array of numbers (per-layer values), when the header keeps it.
    fn numbers(&self, key: &str) -> Option<Vec<f64>>;
}

impl GgufMetadata for GgufFile {
    fn number(&self, key: &str) -> Option<f64> {
        self.get(key).and_then(MetaValue::as_f64)
    }

    fn text(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(MetaValue::as_str)
    }

    fn numbers(&self, key: &str) -> Option<Vec<f64>> {
        let items = self.get(key).and_then(MetaValue::as_array)?;
        Some(items.iter().filter_map(MetaValue::as_f64).collect())
    }
}

/// The family that imports the header's `general.architecture`.
pub fn family_of(meta: &dyn GgufMetadata) -> Result<(&'static Family, &'static GgufImport)> {
    let arch = meta.text("general.architecture").ok_or_else(|| {
        Error::InvalidConfig("the GGUF header has no general.architecture".into())
    })?;
    let family = registry::family_for_gguf(arch).ok_or_else(|| Error::UnsupportedArchitecture {
        architecture: format!("{arch} (GGUF)"),
        supported: registry::FAMILIES
            .iter()
            .filter_map(|f| f.gguf.as_ref().map(|g| g.architecture))
            .collect::<Vec<_>>()
            .join(", "),
    })?;
    Ok((family, family.gguf.as_ref().expect("found by its GGUF import")))
}

/// The config.json fields the family reads (its `model_type` included):
/// `vocab` is the embedding's rows (or the vocabulary's size), `untied` says
/// whether the file has its own output matrix.
pub fn imported_config(meta: &dyn GgufMetadata, vocab: usize, untied: bool) -> Result<Value> {
    let (family, import) = family_of(meta)?;
    let arch = import.architecture;
    let mut c = Map::new();
    for (hf, gguf) in COMMON_CONFIG_KEYS.iter().chain(import.config_keys) {
        if let Some(v) = meta.number(&format!("{arch}.{gguf}")) {
            let v = if FLOAT_FIELDS.contains(hf) { json!(v) } else { json!(v as i64) };
            c.insert(hf.to_string(), v);
        }
    }
    // Hybrid models: llama.cpp writes the KV heads of each layer, 0 for a
    // layer without attention.
    if let Some(heads) = meta.numbers(&format!("{arch}.attention.head_count_kv")) {
        let heads: Vec<i64> = heads.iter().map(|&v| v as i64).collect();
        c.insert("num_key_value_heads".into(), json!(heads.iter().copied().max().unwrap_or(0)));
        c.insert("num_key_value_heads_per_layer".into(), json!(heads));
    }
    c.insert("vocab_size".into(), json!(vocab));
    c.insert("tie_word_embeddings".into(), json!(!untied));
    let scaling = |key: &str| format!("{arch}.rope.scaling.{key}");
    if let (Some(kind), Some(factor)) =
        (meta.text(&scaling("type")), meta.number(&scaling("factor")))
    {
        if kind != "none" {
            c.insert("rope_scaling".into(), json!({"rope_type": kind, "factor": factor}));
        }
    }
    if let Some(complete) = import.complete_config {
        complete(&mut c);
    }
    c.insert("model_type".into(), json!(family.model_types[0]));
    Ok(Value::Object(c))
}
