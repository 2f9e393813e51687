//! The `quantization` block of an mlx-community config.json:
//! `{"group_size": 64, "bits": 4, "model.embed_tokens": {"group_size": 32, "bits": 8}, "lm_head": false}`
//! — a default plus per-module overrides (or `false` for a module kept in float),
//! each in one of MLX's modes (`"mode": "mxfp4"`; affine when absent).
use std::collections::HashMap;

use serde_json::Value;

use crate::error::{Error, Result};

/// How MLX stores a group of quantized values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum QuantMode {
    /// `scale · q + bias` per group (mlx-community's 4-bit and 8-bit folders).
    #[default]
    Affine,
    /// OCP microscaling FP4 (E2M1 values, an E8M0 scale per 32): gpt-oss's experts.
    Mxfp4,
    /// NVIDIA's FP4 (an E4M3 scale per 16).
    Nvfp4,
    /// OCP microscaling FP8 (E4M3 values, an E8M0 scale per 32).
    Mxfp8,
}

impl QuantMode {
    /// MLX's name, as config.json and mlx-c spell it.
    pub fn name(self) -> &'static str {
        match self {
            QuantMode::Affine => "affine",
            QuantMode::Mxfp4 => "mxfp4",
            QuantMode::Nvfp4 => "nvfp4",
            QuantMode::Mxfp8 => "mxfp8",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        [QuantMode::Affine, QuantMode::Mxfp4, QuantMode::Nvfp4, QuantMode::Mxfp8]
            .into_iter()
            .find(|m| m.name() == name)
    }

    /// Only affine groups carry a bias (`.biases` beside `.scales`).
    pub fn has_biases(self) -> bool {
        self == QuantMode::Affine
    }

    /// The group size and bits a floating-point mode fixes.
    fn fixed(self) -> Option<QuantSpec> {
        match self {
            QuantMode::Affine => None,
            QuantMode::Mxfp4 => Some(QuantSpec { group_size: 32, bits: 4 }),
            QuantMode::Nvfp4 => Some(QuantSpec { group_size: 16, bits: 4 }),
            QuantMode::Mxfp8 => Some(QuantSpec { group_size: 32, bits: 8 }),
        }
    }
}

/// How one module's weight is quantized: its group size and bits (the mode
/// is [`Quantization::mode_for_module`]'s).
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
    /// The default's mode.
    pub default_mode: QuantMode,
    /// The mode of each override that names one other than the default's.
    pub override_modes: HashMap<String, QuantMode>,
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
        // Hugging Face's block for weights stored in an MX format (OpenAI's
        // gpt-oss: `{"quant_method": "mxfp4", "modules_to_not_convert": …}`):
        // the modules stored with scales are quantized, the others float.
        if let Some(method) = map.get("quant_method").and_then(Value::as_str) {
            let mode = match method {
                "mxfp4" => QuantMode::Mxfp4,
                "mxfp8" => QuantMode::Mxfp8,
                other => {
                    return Err(Error::InvalidConfig(format!(
                        "quantization_config: quant_method {other:?} is not supported (mxfp4 and mxfp8 are)"
                    )))
                }
            };
            return Ok(Quantization {
                default: mode.fixed(),
                default_mode: mode,
                ..Default::default()
            });
        }
        let spec_of = |v: &Value, what: &str| -> Result<(QuantSpec, QuantMode)> {
            let int = |k: &str| {
                v.get(k).and_then(Value::as_i64).map(|x| x as i32).ok_or_else(|| {
                    Error::InvalidConfig(format!("quantization {what}: missing integer `{k}`"))
                })
            };
            let mode = match v.get("mode").and_then(Value::as_str) {
                None => QuantMode::Affine,
                Some(name) => QuantMode::parse(name).ok_or_else(|| {
                    Error::InvalidConfig(format!(
                        "quantization {what}: mode {name:?} is not supported (MLX's affine, mxfp4, nvfp4 and mxfp8 are)"
                    ))
                })?,
            };
            let spec = match mode.fixed() {
                // The floating-point modes fix both; a config may leave them out.
                Some(fixed) => {
                    let spec = QuantSpec {
                        group_size: int("group_size").unwrap_or(fixed.group_size),
                        bits: int("bits").unwrap_or(fixed.bits),
                    };
                    if spec != fixed {
                        return Err(Error::InvalidConfig(format!(
                            "quantization {what}: mode {} has groups of {} and {} bits, not {} and {}",
                            mode.name(),
                            fixed.group_size,
                            fixed.bits,
                            spec.group_size,
                            spec.bits
                        )));
                    }
                    spec
                }
                None => QuantSpec { group_size: int("group_size")?, bits: int("bits")? },
            };
            if ![2, 3, 4, 5, 6, 8].contains(&spec.bits)
                || ![16, 32, 64, 128].contains(&spec.group_size)
                || (mode == QuantMode::Affine && spec.group_size == 16)
            {
                return Err(Error::InvalidConfig(format!(
                    "quantization {what}: unsupported bits {} / group_size {}",
                    spec.bits, spec.group_size
                )));
            }
            Ok((spec, mode))
        };
        let (default, default_mode) = spec_of(block, "default")?;
        let mut q = Quantization {
            default: Some(default),
            overrides: HashMap::new(),
            default_mode,
            override_modes: HashMap::new(),
        };
        for (key, v) in map {
            match v {
                Value::Object(_) => {
                    let (spec, mode) = spec_of(v, key)?;
                    q.overrides.insert(key.clone(), Some(spec));
                    if mode != default_mode {
                        q.override_modes.insert(key.clone(), mode);
                    }
                }
                Value::Bool(false) => {
                    q.overrides.insert(key.clone(), None);
                }
                _ => {} // group_size, bits, mode and other scalar settings
            }
        }
        Ok(q)
    }

    /// The mode of the module at `path` (stored quantized), found as
    /// [`Self::for_module`] finds its spec.
    pub fn mode_for_module(&self, path: &str) -> QuantMode {
        let saved = multimodal_names(path);
        let mut names = std::iter::once(path).chain(saved.iter().map(String::as_str));
        match names.find(|p| self.overrides.contains_key(*p)) {
            Some(p) => self.override_modes.get(p).copied().unwrap_or(self.default_mode),
            None => self.default_mode,
        }
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
    fn hugging_faces_mxfp4_block_quantizes_what_has_scales() {
        let cfg = serde_json::json!({"quantization_config": {"quant_method": "mxfp4",
            "modules_to_not_convert": ["model.layers.*.self_attn", "lm_head"]}});
        let q = Quantization::from_config(&cfg).unwrap();
        assert_eq!(
            q.for_module("model.layers.0.mlp.experts.gate_proj"),
            Some(QuantSpec { group_size: 32, bits: 4 })
        );
        assert_eq!(q.mode_for_module("model.layers.0.mlp.experts.gate_proj"), QuantMode::Mxfp4);
        let bitnet = serde_json::json!({"quantization_config": {"quant_method": "bitnet"}});
        assert!(Quantization::from_config(&bitnet).unwrap_err().to_string().contains("bitnet"));
    }

    #[test]
    fn modes_are_read_per_module_and_unknown_ones_refused_by_name() {
        // mlx-community's gpt-oss: MXFP4 experts in an 8-bit affine model.
        let cfg = serde_json::json!({"quantization": {"group_size": 64, "bits": 8, "mode": "affine",
            "model.layers.0.mlp.experts.gate_proj": {"group_size": 32, "bits": 4, "mode": "mxfp4"},
            "model.layers.0.mlp.router": {"group_size": 64, "bits": 8}}});
        let q = Quantization::from_config(&cfg).unwrap();
        let experts = "model.layers.0.mlp.experts.gate_proj";
        assert_eq!(q.mode_for_module(experts), QuantMode::Mxfp4);
        assert_eq!(q.for_module(experts), Some(QuantSpec { group_size: 32, bits: 4 }));
        assert_eq!(q.mode_for_module("model.layers.0.mlp.router"), QuantMode::Affine);
        assert_eq!(q.mode_for_module("lm_head"), QuantMode::Affine);
        // A floating-point mode fixes its groups: absent is fine, others are not.
        let q = Quantization::from_config(&serde_json::json!({"quantization": {"mode": "nvfp4"}}))
            .unwrap();
        assert_eq!(q.default, Some(QuantSpec { group_size: 16, bits: 4 }));
        assert_eq!(q.mode_for_module("x"), QuantMode::Nvfp4);
        for block in [
            serde_json::json!({"group_size": 64, "bits": 4, "mode": "mxfp4"}),
            serde_json::json!({"group_size": 64, "bits": 4, "lm_head": {"group_size": 32, "bits": 4, "mode": "fp3"}}),
        ] {
            let err =
                Quantization::from_config(&serde_json::json!({"quantization": block})).unwrap_err();
            assert_eq!(err.code(), "INVALID_MODEL_CONFIG", "{err}");
        }
    }
}
