//! The storage of one layer's keys (or values) in a batch cache:
//! `[B, kv_heads, columns, head_dim]`, either float or MLX affine-quantized
//! along `head_dim` (packed values, scales, biases — three arrays with the same
//! leading axes). Row and column operations (join, leave, pad, grow) apply to
//! every part alike; only writing (quantize) and reading (dequantize) differ.
use mlx_rs::{
    ops::{
        self,
        indexing::{IndexOp, TryIndexMutOp},
    },
    Array,
};

use crate::error::Result;
use crate::weights::QuantSpec;

#[derive(Clone)]
pub struct KvStore {
    /// `[data]` when float; `[packed, scales, biases]` when quantized.
    parts: Vec<Array>,
    quant: Option<QuantSpec>,
}

impl KvStore {
    /// Float storage holding `x` as is.
    pub fn float(x: Array) -> Self {
        Self { parts: vec![x], quant: None }
    }

    /// Zero-filled storage shaped like `like` (`[B, H, *, D]`) with `columns` columns.
    pub fn zeros_like(like: &Array, columns: i32, quant: Option<QuantSpec>) -> Result<Self> {
        let s = like.shape();
        let zeros = ops::zeros_dtype(&[s[0], s[1], columns, s[3]], like.dtype())?;
        Self::float(zeros).quantized(quant)
    }

    /// The arrays that hold the data (one when float, three when quantized).
    pub fn parts(&self) -> &[Array] {
        &self.parts
    }

    pub fn quant(&self) -> Option<QuantSpec> {
        self.quant
    }

    /// The same contents stored with `quant` (no-op when already so).
    pub fn quantized(self, quant: Option<QuantSpec>) -> Result<Self> {
        if self.quant == quant {
            return Ok(self);
        }
        match (self.quant, quant) {
            (None, None) => Ok(self),
            (None, Some(spec)) => {
                let (w, s, b) = ops::quantize(&self.parts[0], spec.group_size, spec.bits)?;
                Ok(Self { parts: vec![w, s, b], quant: Some(spec) })
            }
            (Some(_), target) => Self::float(self.read_all()?).quantized(target),
        }
    }

    pub fn columns(&self) -> i32 {
        self.parts[0].dim(2)
    }

    pub fn nbytes(&self) -> usize {
        self.parts.iter().map(Array::nbytes).sum()
    }

    /// Bytes one row's one column takes (values plus, when quantized, scales and biases).
    pub fn bytes_per_row_column(&self) -> usize {
        self.parts.iter().map(|p| p.nbytes() / (p.dim(0) as usize * p.dim(2) as usize).max(1)).sum()
    }

    fn map(&self, f: impl Fn(&Array) -> Result<Array>) -> Result<Self> {
        let parts = self.parts.iter().map(f).collect::<Result<Vec<_>>>()?;
        Ok(Self { parts, quant: self.quant })
    }

    /// Columns `range` of every row.
    pub fn columns_range(&self, start: i32, end: i32) -> Self {
        Self {
            parts: self.parts.iter().map(|p| p.index((.., .., start..end, ..))).collect(),
            quant: self.quant,
        }
    }

    /// Row `row` only.
    pub fn row(&self, row: i32) -> Self {
        Self {
            parts: self.parts.iter().map(|p| p.index((row..row + 1, .., .., ..))).collect(),
            quant: self.quant,
        }
    }

    pub fn take_rows(&self, rows: &Array) -> Result<Self> {
        self.map(|p| Ok(p.take_axis(rows, 0)?))
    }

    /// `self` rows then `other` rows; both must hold the same columns and storage.
    pub fn concat_rows(&self, other: &Self) -> Result<Self> {
        let parts = self
            .parts
            .iter()
            .zip(&other.parts)
            .map(|(a, b)| Ok(ops::concatenate(&[a, b], 0)?))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { parts, quant: self.quant })
    }

    /// `extra` zero columns on the left (`left`) or on the right.
    pub fn pad_columns(&self, extra: i32, left: bool) -> Result<Self> {
        if extra == 0 {
            return Ok(self.clone());
        }
        self.map(|p| {
            let s = p.shape();
            let zeros = ops::zeros_dtype(&[s[0], s[1], extra, s[3]], p.dtype())?;
            Ok(if left {
                ops::concatenate(&[&zeros, p], 2)?
            } else {
                ops::concatenate(&[p, &zeros], 2)?
            })
        })
    }

    /// `rows` rows of zeros with `columns` columns, stored like `self`.
    pub fn zero_rows(&self, rows: i32, columns: i32) -> Result<Self> {
        self.map(|p| {
            let s = p.shape();
            Ok(ops::zeros_dtype(&[rows, s[1], columns, s[3]], p.dtype())?)
        })
    }

    /// A contiguous copy (detached from the buffer it views, so that buffer's
    /// memory can go).
    pub fn copied(&self) -> Result<Self> {
        self.map(|p| Ok(p.contiguous()?))
    }

    /// A contiguous float copy.
    pub fn as_float(&self) -> Result<Self> {
        Ok(Self::float(self.read_all()?.contiguous()?))
    }

    /// Writes float `x` `[B, H, L, D]` into columns `start..start + L`.
    pub fn write(&mut self, start: i32, x: &Array) -> Result<()> {
        let end = start + x.dim(2);
        let new_parts = match self.quant {
            None => vec![x.clone()],
            Some(spec) => {
                let (w, s, b) = ops::quantize(x, spec.group_size, spec.bits)?;
                vec![w, s, b]
            }
        };
        for (part, new) in self.parts.iter_mut().zip(&new_parts) {
            part.try_index_mut((.., .., start..end, ..), new)?;
        }
        Ok(())
    }

    /// Overwrites row `row`'s first columns with `row_store` (one row, stored
    /// like `self`).
    pub fn write_row(&mut self, row: i32, row_store: &Self) -> Result<()> {
        let end = row_store.columns();
        for (part, new) in self.parts.iter_mut().zip(&row_store.parts) {
            part.try_index_mut((row..row + 1, .., 0..end, ..), new)?;
        }
        Ok(())
    }

    /// Columns `..end` still quantized (packed, scales, biases); `None` when stored as float.
    pub fn read_quantized(&self, end: i32) -> Option<([Array; 3], QuantSpec)> {
        let spec = self.quant?;
        let used = self.columns_range(0, end);
        let parts: [Array; 3] = used.parts.try_into().ok()?;
        Some((parts, spec))
    }

    /// Columns `..end` as float.
    pub fn read(&self, end: i32) -> Result<Array> {
        let used = self.columns_range(0, end);
        used.read_all()
    }

    fn read_all(&self) -> Result<Array> {
        Ok(match self.quant {
            None => self.parts[0].clone(),
            Some(spec) => ops::dequantize(
                &self.parts[0],
                &self.parts[1],
                &self.parts[2],
                spec.group_size,
                spec.bits,
            )?,
        })
    }
}
