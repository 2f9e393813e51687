//! Checkpoint tensors, checked by name and shape.
//!
//! mlx-rs's `load_safetensors` silently ignores missing and unknown keys and
//! does not check shapes; a model built that way produces fluent garbage or a
//! shape crash deep inside a forward pass. Every model family instead takes its
//! tensors from a [`Weights`] map that fails with the tensor's name.
pub mod gguf;
pub mod quantization;
pub mod safetensors;

use std::collections::HashMap;

use mlx_rs::Array;

use crate::error::{Error, Result};
pub use quantization::{QuantSpec, Quantization};

/// The tensors of one checkpoint, by their Hugging Face / MLX names.
pub struct Weights {
    tensors: HashMap<String, Array>,
    /// Where they came from, for error messages ("model.safetensors", a GGUF path).
    source: String,
}

impl Weights {
    pub fn new(tensors: HashMap<String, Array>, source: impl Into<String>) -> Self {
        Self { tensors, source: source.into() }
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    pub fn shape_of(&self, name: &str) -> Option<Vec<i32>> {
        self.tensors.get(name).map(|t| t.shape().to_vec())
    }

    /// The bytes a tensor holds (known without reading it).
    pub fn nbytes_of(&self, name: &str) -> Option<usize> {
        self.tensors.get(name).map(Array::nbytes)
    }

    /// Removes and returns a tensor, failing when it is absent.
    pub fn take_any(&mut self, name: &str) -> Result<Array> {
        self.tensors.remove(name).ok_or_else(|| Error::MissingTensor {
            name: name.to_string(),
            source_desc: self.source.clone(),
        })
    }

    /// Removes and returns a tensor whose shape must be `expected`.
    pub fn take(&mut self, name: &str, expected: &[i32]) -> Result<Array> {
        let t = self.take_any(name)?;
        check_shape(name, &t, expected)?;
        Ok(t)
    }

    /// Inserts or replaces a tensor (used by name-mapping `sanitize` steps).
    pub fn insert(&mut self, name: impl Into<String>, t: Array) {
        self.tensors.insert(name.into(), t);
    }

    pub fn remove(&mut self, name: &str) -> Option<Array> {
        self.tensors.remove(name)
    }

    /// Names left over after a model took what it needs: unknown tensors.
    pub fn leftover(&self) -> Vec<String> {
        let mut v: Vec<String> = self.tensors.keys().cloned().collect();
        v.sort();
        v
    }

    pub fn into_map(self) -> HashMap<String, Array> {
        self.tensors
    }

}

pub fn check_shape(name: &str, t: &Array, expected: &[i32]) -> Result<()> {
    if t.shape() != expected {
        return Err(Error::TensorShape {
            name: name.to_string(),
            expected: expected.to_vec(),
            actual: t.shape().to_vec(),
        });
    }
    Ok(())
}
