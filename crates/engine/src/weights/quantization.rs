//! The `quantization` block of an mlx-community config.json:
//! `{"group_size": 64, "bits": 4, "model.embed_tokens": {"group_size": 32, "bits": 8}, "lm_head": false}`
//! — a default plus per-module overrides (or `false` for a module kept in float).
use std::collections::HashMap;

use serde_json::Value;

use crate::error::{Error, Result};

/// How one module's weight is quantized (MLX affine quantization).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QuantSpec {
    pub group_size: i32,
    pub bits: i32,
}

impl QuantSpec {
    /// Packed uint32 columns for `in_features` values.
    pub fn packed_cols(&self, in_features: i32) -> i32 {
        in_features * self.bits / 32
    }

    pub fn groups(&self, in_features: i32) -> i32 {
        in_features / self.group_size
    }
}

/// Default spec plus per-module overrides; `None` in an override means "float".
#[derive(Debug, Clone, Default)]
pub struct Quantization {
    pub default: Option<QuantSpec>,
    pub overrides: HashMap<String, Option<QuantSpec>>,
}

impl Quantization {
    /// Reads `quantization` (mlx-lm) or `quantization_config` (older exports).
    pub fn from_config(config: &Value) -> Result<Self> {
        let Some(block) = config.get("quantization").or_else(|| config.get("quantization_config"))
        else {
            return Ok(Self::default());
        };
        let Some(map) = block.as_object() else {
            return Err(Error::InvalidConfig("`quantization` must be an object".into()));
        };
        let spec_of = |v: &Value, what: &str| -> Result<QuantSpec> {
            let int = |k: &str| {
                v.get(k).and_then(Value::as_i64).map(|x| x as i32).ok_or_else(|| {
                    Error::InvalidConfig(format!("quantization {what}: missing integer `{k}`"))
                })
            };
            // MLX's other modes (mxfp4, nvfp4, mxfp8: scales without biases,
            // other block formats) need their own kernels and dequantization;
            // read as affine they would load and compute garbage.
            match v.get("mode").and_then(Value::as_str) {
                None | Some("affine") => {}
                Some(mode) => {
                    return Err(Error::InvalidConfig(format!(
                        "quantization {what}: mode {mode:?} is not supported (only MLX's affine quantization, \
                         the mode of mlx-community's 4-bit and 8-bit folders); use an affine or float checkpoint"
                    )))
                }
            }
            let spec = QuantSpec { group_size: int("group_size")?, bits: int("bits")? };
            if ![2, 3, 4, 5, 6, 8].contains(&spec.bits) || ![32, 64, 128].contains(&spec.group_size)
            {
                return Err(Error::InvalidConfig(format!(
                    "quantization {what}: unsupported bits {} / group_size {}",
                    spec.bits, spec.group_size
                )));
            }
            Ok(spec)
        };
        let mut q =
            Quantization { default: Some(spec_of(block, "default")?), overrides: HashMap::new() };
        for (key, v) in map {
            match v {
                Value::Object(_) => {
                    q.overrides.insert(key.clone(), Some(spec_of(v, key)?));
                }
                Value::Bool(false) => {
                    q.overrides.insert(key.clone(), None);
                }
                _ => {} // group_size, bits, mode and other scalar settings
            }
        }
        Ok(q)
    }

    /// The spec for the module at `path` (e.g. `model.layers.0.self_attn.q_proj`).
    /// A multimodal checkpoint's language model loads under the text
    /// model's names, while its overrides keep the names it was saved with
    /// (`language_model.model.layers.0.mlp.gate`): those count too.
    pub fn for_module(&self, path: &str) -> Option<QuantSpec> {
        let saved = multimodal_names(path);
        match std::iter::once(path)
            .chain(saved.iter().map(String::as_str))
            .find_map(|p| self.overrides.get(p))
        {
            Some(spec) => *spec,
            None => self.default,
        }
    }
}

/// The names a text model's module may have been saved under in a
/// multimodal checkpoint (see `model::language_model_only`).
fn multimodal_names(path: &str) -> Vec<String> {
    if let Some(rest) = path.strip_prefix("model.") {
        vec![format!("language_model.model.{rest}"), format!("model.language_model.{rest}")]
    } else if let Some(rest) = path.strip_prefix("lm_head") {
        vec![format!("language_model.lm_head{rest}")]
    } else {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_and_float_modules() {
        let cfg = serde_json::json!({"quantization": {
            "group_size": 32, "bits": 4,
            "model.embed_tokens": {"group_size": 32, "bits": 8},
            "lm_head": false
        }});
        let q = Quantization::from_config(&cfg).unwrap();
        assert_eq!(
            q.for_module("model.layers.0.mlp.up_proj"),
            Some(QuantSpec { group_size: 32, bits: 4 })
        );
        assert_eq!(q.for_module("model.embed_tokens"), Some(QuantSpec { group_size: 32, bits: 8 }));
        assert_eq!(q.for_module("lm_head"), None);
    }

    /// mlx-community's multimodal folders name overrides as saved; the
    /// language model asks under the text model's names.
    #[test]
    fn overrides_under_a_multimodal_checkpoints_names() {
        let cfg = serde_json::json!({"quantization": {
            "group_size": 64, "bits": 4,
            "language_model.model.layers.0.mlp.gate": {"group_size": 64, "bits": 8},
            "model.language_model.layers.1.mlp.gate": {"group_size": 64, "bits": 8},
            "language_model.lm_head": false
        }});
        let q = Quantization::from_config(&cfg).unwrap();
        let eight = Some(QuantSpec { group_size: 64, bits: 8 });
        assert_eq!(q.for_module("model.layers.0.mlp.gate"), eight);
        assert_eq!(q.for_module("model.layers.1.mlp.gate"), eight);
        assert_eq!(
            q.for_module("model.layers.2.mlp.gate"),
            Some(QuantSpec { group_size: 64, bits: 4 })
        );
        assert_eq!(q.for_module("lm_head"), None);
    }

    #[test]
    fn absent_block_means_float() {
        let q = Quantization::from_config(&serde_json::json!({})).unwrap();
        assert_eq!(q.for_module("anything"), None);
    }

    #[test]
    fn bad_bits_is_a_clear_error() {
        let err = Quantization::from_config(
            &serde_json::json!({"quantization": {"group_size": 32, "bits": 7}}),
        )
        .unwrap_err();
        assert!(err.to_string().contains("unsupported bits 7"), "{err}");
    }

    #[test]
    fn quantization_modes_other_than_affine_are_refused_by_name() {
        let ok =
            serde_json::json!({"quantization": {"group_size": 64, "bits": 4, "mode": "affine"}});
        assert!(Quantization::from_config(&ok).is_ok());
        for block in [
            serde_json::json!({"group_size": 32, "bits": 4, "mode": "mxfp4"}),
            serde_json::json!({"group_size": 64, "bits": 4, "lm_head": {"group_size": 16, "bits": 4, "mode": "nvfp4"}}),
        ] {
            let err =
                Quantization::from_config(&serde_json::json!({"quantization": block})).unwrap_err();
            assert!(err.to_string().contains("is not supported (only MLX's affine"), "{err}");
            assert_eq!(err.code(), "INVALID_MODEL_CONFIG");
        }
    }
}
