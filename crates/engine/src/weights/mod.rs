//! Checkpoint tensors, checked by name and shape.
//!
//! mlx-rs's `load_safetensors` silently ignores missing and unknown keys and
//! does not check shapes; a model built that way produces fluent garbage or a
//! shape crash deep inside a forward pass. Every model family instead takes its
//! tensors from a [`Weights`] map that fails with the tensor's name.
pub mod gguf;
pub(crate) mod quantization;
pub mod quantized_ops;
pub(crate) mod recording;
pub mod safetensors;

use std::collections::HashMap;
use std::ops::Range;
use std::path::PathBuf;

use mlx_rs::{ops::indexing::IndexOp, Array};

use crate::error::{Error, Result};
pub use quantization::{QuantMode, QuantSpec, Quantization};
pub use recording::Asked;
use recording::Recording;

/// The tensors of one checkpoint, by their Hugging Face / MLX names.
pub struct Weights {
    tensors: HashMap<String, Array>,
    /// Where they came from, for error messages ("model.safetensors", a GGUF path).
    source: String,
    /// Where the tensors still as stored lie in their files (see [`Self::take_part`]).
    stored: HashMap<String, StoredAt>,
    /// Set in recording mode ([`Self::recording`]).
    recording: Option<Recording>,
}

/// Where a tensor's data lies in a safetensors file.
#[derive(Debug, Clone)]
pub struct StoredAt {
    pub file: PathBuf,
    /// Of its first byte, from the file's start.
    pub offset: u64,
}

impl Weights {
    pub fn new(tensors: HashMap<String, Array>, source: impl Into<String>) -> Self {
        Self { tensors, source: source.into(), stored: HashMap::new(), recording: None }
    }

    /// No tensors, and every one a loader takes answered with zeros of the
    /// shape it asks for and noted ([`Self::asked`]). `present` says which
    /// optional tensors (asked about with [`Self::contains`]) are there;
    /// `.scales` never are: the recording is of a float checkpoint.
    pub fn recording(present: impl Fn(&str) -> bool + Send + 'static) -> Self {
        Self {
            recording: Some(Recording::new(present)),
            ..Self::new(HashMap::new(), "a recording of what the loader asks for")
        }
    }

    /// What a loader took from a recording, in the order it did (empty for
    /// a checkpoint's tensors).
    pub fn asked(&self) -> &[Asked] {
        self.recording.as_ref().map_or(&[], |r| &r.asked)
    }

    /// The same, knowing where in their files the tensors lie.
    pub fn with_stored(mut self, stored: HashMap<String, StoredAt>) -> Self {
        self.stored = stored;
        self
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name) || self.recording.as_ref().is_some_and(|r| r.contains(name))
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
        self.stored.remove(name);
        self.tensors.remove(name).ok_or_else(|| Error::MissingTensor {
            name: name.to_string(),
            source_desc: self.source.clone(),
        })
    }

    /// Removes and returns a tensor whose shape must be `expected`.
    pub fn take(&mut self, name: &str, expected: &[i32]) -> Result<Array> {
        if let (Some(recording), false) = (&mut self.recording, self.tensors.contains_key(name)) {
            recording.take(name, expected);
            return Ok(Array::zeros::<f32>(expected)?);
        }
        let t = self.take_any(name)?;
        check_shape(name, &t, expected)?;
        Ok(t)
    }

    /// Removes tensor `name`, whose shape must be `expected`, and returns
    /// the part `range` of its first (`axis` 0) or second (`axis` 1)
    /// dimension, in memory of its own. A tensor still as its safetensors
    /// file stores it is read from the file in part, so a tensor-parallel
    /// rank reads only its share; any other is cut from the whole one.
    pub fn take_part(
        &mut self,
        name: &str,
        expected: &[i32],
        axis: usize,
        range: Range<i32>,
    ) -> Result<Array> {
        let at = self.stored.get(name).cloned();
        let whole = self.take(name, expected)?;
        if range.start < 0 || range.end > expected[axis] || range.is_empty() {
            return Err(Error::InvalidConfig(format!(
                "{name}: part {range:?} of a dimension of {} (shape {expected:?})",
                expected[axis]
            )));
        }
        match at {
            // the lazy `whole` is dropped unread
            Some(at) => read_part(&at, &whole, axis, range).map_err(|e| Error::io(&at.file, e)),
            None => {
                let part = if axis == 0 { whole.index(range) } else { whole.index((.., range)) };
                own_copy(&part)
            }
        }
    }

    /// Inserts or replaces a tensor (used by name-mapping `sanitize` steps).
    pub fn insert(&mut self, name: impl Into<String>, t: Array) {
        let name = name.into();
        // no longer what the file holds under that name
        self.stored.remove(&name);
        self.tensors.insert(name, t);
    }

    /// Moves tensor `from` to name `to` (a family's naming scheme), keeping
    /// where its file holds it. False when there is no `from`.
    pub fn rename(&mut self, from: &str, to: impl Into<String>) -> bool {
        let to = to.into();
        let Some(t) = self.tensors.remove(from) else { return false };
        match self.stored.remove(from) {
            Some(at) => self.stored.insert(to.clone(), at),
            None => self.stored.remove(&to),
        };
        self.tensors.insert(to, t);
        true
    }

    pub fn remove(&mut self, name: &str) -> Option<Array> {
        self.stored.remove(name);
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

/// A copy of `t` in memory of its own. A slice of a loaded tensor is a view
/// that keeps the whole tensor alive: each rank would hold the full model.
pub fn own_copy(t: &Array) -> Result<Array> {
    let t = t.contiguous()?;
    t.eval()?;
    Ok(t.deep_clone())
}

/// Reads part `range` of dimension `axis` (0 or 1) of `whole` (still
/// unread: its shape and dtype) from where the file stores it, `at`: one
/// read for rows, one per row for columns.
fn read_part(
    at: &StoredAt,
    whole: &Array,
    axis: usize,
    range: Range<i32>,
) -> std::io::Result<Array> {
    use std::os::unix::fs::FileExt;
    let (shape, item) = (whole.shape(), whole.item_size());
    let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let (start, len) = (range.start as usize, range.len());
    let file = std::fs::File::open(&at.file)?;
    let mut part_shape = shape.to_vec();
    part_shape[axis] = len as i32;
    let bytes = if axis == 0 {
        let row = dims[1..].iter().product::<usize>() * item;
        let mut buf = vec![0u8; len * row];
        file.read_exact_at(&mut buf, at.offset + (start * row) as u64)?;
        buf
    } else {
        assert_eq!(dims.len(), 2, "columns of a matrix");
        let (row, piece) = (dims[1] * item, len * item);
        let mut buf = vec![0u8; dims[0] * piece];
        for (r, chunk) in buf.chunks_exact_mut(piece).enumerate() {
            file.read_exact_at(chunk, at.offset + (r * row + start * item) as u64)?;
        }
        buf
    };
    // SAFETY: `bytes` holds exactly `part_shape` items of the dtype; MLX copies them.
    Ok(unsafe { Array::from_raw_data(bytes.as_ptr().cast(), &part_shape, whole.dtype()) })
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

#[cfg(test)]
mod part_tests {
    use std::collections::HashMap;

    use mlx_rs::{ops::indexing::IndexOp, Array, Dtype};

    use super::safetensors::load_folder;

    /// A folder with one `[4, 6]` tensor `t` (0, 1, 2, …) stored as `dtype`.
    fn folder(dtype: Dtype) -> (tempfile::TempDir, Array) {
        let dir = tempfile::tempdir().unwrap();
        let t = Array::from_iter(0..24, &[4, 6]).as_dtype(dtype).unwrap();
        let tensors = HashMap::from([("t".to_string(), t.clone())]);
        Array::save_safetensors(
            tensors.iter(),
            &HashMap::new(),
            dir.path().join("model.safetensors"),
        )
        .unwrap();
        (dir, t)
    }

    #[test]
    fn a_part_of_rows_or_columns_is_read_from_the_file() {
        for dtype in [Dtype::Float32, Dtype::Bfloat16, Dtype::Uint32] {
            let (dir, t) = folder(dtype);
            let mut weights = load_folder(dir.path()).unwrap();
            assert!(weights.stored.contains_key("t"), "where the file holds it is known");
            let rows = weights.take_part("t", &[4, 6], 0, 1..3).unwrap();
            assert!(rows.eq_values(t.index((1..3, ..))).unwrap(), "{dtype:?}");
            let columns =
                load_folder(dir.path()).unwrap().take_part("t", &[4, 6], 1, 2..5).unwrap();
            assert_eq!(columns.shape(), &[4, 3]);
            assert!(columns.eq_values(t.index((.., 2..5))).unwrap(), "{dtype:?}");
        }
    }

    #[test]
    fn a_tensor_changed_since_loading_is_cut_from_its_new_values() {
        let (dir, t) = folder(Dtype::Float32);
        let mut weights = load_folder(dir.path()).unwrap();
        let doubled = t.multiply(Array::from_f32(2.0)).unwrap();
        weights.insert("t", doubled.clone());
        let part = weights.take_part("t", &[4, 6], 1, 0..2).unwrap();
        assert!(part.eq_values(doubled.index((.., 0..2))).unwrap());
    }

    #[test]
    fn a_renamed_tensor_is_still_read_in_part_and_a_replaced_one_is_not() {
        let (dir, t) = folder(Dtype::Float32);
        let mut weights = load_folder(dir.path()).unwrap();
        assert!(weights.rename("t", "model.t"));
        assert!(!weights.rename("t", "again"));
        assert!(weights.stored.contains_key("model.t") && !weights.stored.contains_key("t"));
        let part = weights.take_part("model.t", &[4, 6], 0, 2..4).unwrap();
        assert!(part.eq_values(t.index((2..4, ..))).unwrap());
        let mut weights = load_folder(dir.path()).unwrap();
        weights.insert("u", t.clone());
        assert!(weights.rename("u", "t"), "over the stored one");
        assert!(!weights.stored.contains_key("t"));
    }

    #[test]
    fn a_part_checks_the_shape_and_its_range() {
        let (dir, _) = folder(Dtype::Float32);
        let err = load_folder(dir.path()).unwrap().take_part("t", &[6, 4], 0, 0..2).unwrap_err();
        assert!(err.to_string().contains("t"), "{err}");
        let err = load_folder(dir.path()).unwrap().take_part("t", &[4, 6], 1, 4..8).unwrap_err();
        assert!(err.to_string().contains("4..8"), "{err}");
    }
}
