//! How a model is split across the ranks of a group: tensor parallel
//! (every layer's heads and MLP columns shared out; two `all_sum`s per layer
//! and pass) or pipeline parallel (each rank runs a contiguous range of
//! layers; one message per rank and pass). Every rank must choose the same:
//! the choice depends only on the model's files and the group's size.
use std::fmt;
use std::path::Path;
use std::str::FromStr;

use crate::model::registry;
use crate::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Split {
    /// Tensor parallel where the family has it and its heads divide by the
    /// number of ranks; pipeline otherwise.
    #[default]
    Auto,
    Tensor,
    Pipeline,
}

impl Split {
    pub fn name(self) -> &'static str {
        match self {
            Split::Auto => "auto",
            Split::Tensor => "tensor",
            Split::Pipeline => "pipeline",
        }
    }

    /// What this choice means for the model at `path` over `ranks` ranks
    /// (`Auto` resolved; the others as they are).
    pub fn resolve(self, path: &Path, ranks: usize) -> Result<Split> {
        if self != Split::Auto {
            return Ok(self);
        }
        let config_path = path.join("config.json");
        // A .gguf file: pipeline (tensor parallel reads safetensors folders).
        let Ok(text) = std::fs::read_to_string(&config_path) else { return Ok(Split::Pipeline) };
        let config: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Error::InvalidConfig(format!("{}: {e}", config_path.display())))?;
        let family = registry::family(&registry::model_type(&config)?);
        let heads =
            config.get("num_attention_heads").and_then(|v| v.as_u64()).unwrap_or(0) as usize;
        let kv_heads = config
            .get("num_key_value_heads")
            .and_then(|v| v.as_u64())
            .map_or(heads, |v| v as usize);
        let divides = heads > 0 && heads.is_multiple_of(ranks) && kv_heads.is_multiple_of(ranks);
        Ok(if family.is_some_and(|f| f.tensor_parallel) && divides {
            Split::Tensor
        } else {
            Split::Pipeline
        })
    }
}

impl fmt::Display for Split {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Split {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Split, String> {
        match s {
            "auto" => Ok(Split::Auto),
            "tensor" => Ok(Split::Tensor),
            "pipeline" => Ok(Split::Pipeline),
            other => Err(format!("`{other}`: a model splits as auto, tensor or pipeline")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Split;

    fn folder(config: serde_json::Value) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
        dir
    }

    #[test]
    fn auto_is_tensor_where_the_family_has_it_and_the_heads_divide() {
        let llama = folder(
            serde_json::json!({"model_type": "llama", "num_attention_heads": 8, "num_key_value_heads": 2}),
        );
        assert_eq!(Split::Auto.resolve(llama.path(), 2).unwrap(), Split::Tensor);
        assert_eq!(Split::Auto.resolve(llama.path(), 3).unwrap(), Split::Pipeline);
        assert_eq!(
            Split::Auto.resolve(llama.path(), 4).unwrap(),
            Split::Pipeline,
            "2 KV heads over 4 ranks"
        );
        let gemma =
            folder(serde_json::json!({"model_type": "gemma3_text", "num_attention_heads": 8}));
        assert_eq!(Split::Auto.resolve(gemma.path(), 2).unwrap(), Split::Pipeline);
        assert_eq!(
            Split::Tensor.resolve(gemma.path(), 2).unwrap(),
            Split::Tensor,
            "asked for: the loader refuses"
        );
        assert_eq!("pipeline".parse::<Split>().unwrap(), Split::Pipeline);
        assert!("layers".parse::<Split>().is_err());
    }
}
