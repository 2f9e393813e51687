//! Pieces every Qwen vision tower shares (Qwen2-VL, Qwen2.5-VL, Qwen3-VL,
//! Qwen3.5): the patch embedding (a Conv3d whose stride equals its kernel,
//! so one matmul over each flattened patch), the 2-D rotary embedding of
//! each patch's row and column, attention within segments (an image's
//! frames, or Qwen2.5-VL's windows), and the exact GELU of the mergers.
//!
//! Patches arrive in the processor's merge-window order: each 2×2 group of
//! patches is four consecutive rows.
use mlx_rs::{ops, ops::indexing::IndexOp, Array};

use crate::cache::AttentionMask;
use crate::error::{Error, Result};
use crate::model::layers::attention;
use crate::model::layers::mrope::rotate_half_split;
use crate::model::layers::{LayerLoader, Linear};

/// The patch merger always merges 2×2 patches (the references ignore
/// `spatial_merge_size` there), so the loaders accept only 2.
pub const MERGE: i32 = 2;
pub const MERGE_UNIT: i32 = MERGE * MERGE;
const ROTARY_BASE: f32 = 10000.0;

/// The shape of a Conv3d patch embedding: `width` outputs over patches of
/// `channels × temporal × size × size` values.
#[derive(Debug, Clone, Copy)]
pub struct PatchShape {
    pub width: i32,
    pub channels: i32,
    pub temporal: i32,
    pub size: i32,
}

impl PatchShape {
    /// Values in one flattened patch: `C · T · P · P`.
    pub fn values(&self) -> i32 {
        self.channels * self.temporal * self.size * self.size
    }
}

/// The Conv3d kernel as `[width, C·T·P·P]`. Hugging Face checkpoints store it
/// `[width, C, T, P, P]` (PyTorch), mlx-community ones `[width, T, P, P, C]`.
pub fn load_patch_kernel(shape: PatchShape, name: &str, loader: &mut LayerLoader) -> Result<Array> {
    let PatchShape { width, channels: c, temporal: t, size: p } = shape;
    let torch = [width, c, t, p, p];
    let mlx = [width, t, p, p, c];
    let stored = loader.weights.shape_of(name);
    let kernel = match stored.as_deref() {
        Some(s) if s == torch => loader.float(name, &torch)?,
        Some(s) if s != mlx => {
            return Err(Error::TensorShape {
                name: name.into(),
                expected: torch.to_vec(),
                actual: s.to_vec(),
            });
        }
        // MLX's, or absent: asked for in MLX's layout (a missing tensor's
        // error, or what a recording of the loader notes).
        _ => loader.float(name, &mlx)?.transpose_axes(&[0, 4, 1, 2, 3])?,
    };
    Ok(kernel.reshape(&[width, shape.values()])?)
}

/// Checks one image's patches against its grid: `[t·h·w, C·T·P·P]`, whole
/// 2×2 groups.
pub fn check_patches(pixels: &Array, grid: [i32; 3], values: i32) -> Result<i32> {
    let [t, h, w] = grid;
    let n = t * h * w;
    if t <= 0 || h <= 0 || w <= 0 || h % MERGE != 0 || w % MERGE != 0 {
        return Err(Error::InvalidRequest(format!(
            "image grid {grid:?} is not a positive grid of whole 2×2 groups"
        )));
    }
    if pixels.shape() != [n, values] {
        return Err(Error::InvalidRequest(format!(
            "image patches have shape {:?}; grid {grid:?} needs [{n}, {values}]",
            pixels.shape()
        )));
    }
    Ok(n)
}

/// `[head_dim / 4]`: the rotary frequencies of each of the two spatial axes.
pub fn rotary_inv_freq(head_dim: i32) -> Result<Array> {
    let rotary_dim = head_dim / 2;
    let exponents =
        ops::arange::<_, f32>(0, rotary_dim, 2)?.divide(Array::from_f32(rotary_dim as f32))?;
    Ok(Array::from_f32(1.0).divide(ops::power(Array::from_f32(ROTARY_BASE), exponents)?)?)
}

/// Each patch's (row, column) in the processor's patch order (2×2 groups
/// consecutive, frames one after another).
pub fn patch_coordinates(grid: [i32; 3]) -> (Vec<i32>, Vec<i32>) {
    let [t, h, w] = grid;
    let mut rows = Vec::with_capacity((t * h * w) as usize);
    let mut cols = Vec::with_capacity(rows.capacity());
    for _ in 0..t {
        for hb in 0..h / MERGE {
            for wb in 0..w / MERGE {
                for hi in 0..MERGE {
                    for wi in 0..MERGE {
                        rows.push(hb * MERGE + hi);
                        cols.push(wb * MERGE + wi);
                    }
                }
            }
        }
    }
    (rows, cols)
}

/// `[N, head_dim / 2]`: each patch's row angles then column angles.
pub fn rotary_angles(inv_freq: &Array, grid: [i32; 3]) -> Result<Array> {
    let (rows, cols) = patch_coordinates(grid);
    let side = grid[1].max(grid[2]);
    let table = ops::outer(ops::arange::<_, f32>(0, side, 1)?, inv_freq)?;
    let n = rows.len() as i32;
    let r = table.take_axis(Array::from_slice(&rows, &[n]), 0)?;
    let c = table.take_axis(Array::from_slice(&cols, &[n]), 0)?;
    Ok(ops::concatenate(&[r, c], -1)?)
}

/// cos and sin `[N, 1, head_dim]` of [`rotary_angles`], in `dtype`.
pub fn rotary_tables(angles: &Array, dtype: mlx_rs::Dtype) -> Result<(Array, Array)> {
    let angles = ops::concatenate(&[angles, angles], -1)?.expand_dims(1)?;
    Ok((ops::cos(&angles)?.as_dtype(dtype)?, ops::sin(&angles)?.as_dtype(dtype)?))
}

/// A tower block's attention: fused `qkv`, rotary on queries and keys,
/// attention within each `[bounds[i], bounds[i+1])` segment of the `[N, width]`
/// rows, then `proj`.
pub struct SegmentAttention<'a> {
    pub qkv: &'a Linear,
    pub proj: &'a Linear,
    pub heads: i32,
    pub head_dim: i32,
}

impl SegmentAttention<'_> {
    pub fn forward(&self, x: &Array, cos: &Array, sin: &Array, bounds: &[i32]) -> Result<Array> {
        let n = x.dim(0);
        let (heads, hd) = (self.heads, self.head_dim);
        let qkv = self.qkv.forward(x)?.reshape(&[n, 3, heads, hd])?;
        let pick = |i: i32| qkv.index((.., i, .., ..));
        let q = rotate_half_split(&pick(0), cos, sin)?;
        let k = rotate_half_split(&pick(1), cos, sin)?;
        let to_heads =
            |a: Array| -> Result<Array> { Ok(a.transpose_axes(&[1, 0, 2])?.expand_dims(0)?) };
        let (q, k, v) = (to_heads(q)?, to_heads(k)?, to_heads(pick(2))?);
        let scale = (hd as f32).powf(-0.5);
        let mut outputs = Vec::with_capacity(bounds.len());
        for pair in bounds.windows(2) {
            let (s, e) = (pair[0], pair[1]);
            let seg = |a: &Array| a.index((.., .., s..e, ..));
            outputs.push(attention::sdpa(
                &seg(&q),
                &seg(&k),
                &seg(&v),
                scale,
                &AttentionMask::None,
            )?);
        }
        let o = ops::concatenate(&outputs, 2)?; // [1, heads, N, hd]
        let o = o.squeeze_axes(&[0])?.transpose_axes(&[1, 0, 2])?.reshape(&[n, heads * hd])?;
        self.proj.forward(&o)
    }
}

/// `x · (1 + erf(x / √2)) / 2`.
pub fn gelu_exact(x: &Array) -> Result<Array> {
    let erf = ops::erf(x.divide(Array::from_f32(std::f32::consts::SQRT_2))?)?;
    Ok(x.multiply(erf.add(Array::from_f32(1.0))?)?.divide(Array::from_f32(2.0))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coordinates_are_in_merge_window_order() {
        let (rows, cols) = patch_coordinates([1, 2, 4]);
        assert_eq!(rows, [0, 0, 1, 1, 0, 0, 1, 1]);
        assert_eq!(cols, [0, 1, 0, 1, 2, 3, 2, 3]);
    }

    #[test]
    fn exact_gelu_matches_its_definition() {
        let x = Array::from_slice(&[0.7f32], &[1]);
        let y = gelu_exact(&x).unwrap();
        // erf-GELU(0.7) = 0.7·Φ(0.7) = 0.530625; the sigmoid form gives 0.537.
        assert!((y.as_slice::<f32>()[0] - 0.530625).abs() < 1e-5);
    }
}
