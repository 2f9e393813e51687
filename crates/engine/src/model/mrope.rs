//! M-RoPE (Qwen2-VL, Qwen2.5-VL): rotary embedding over three position axes.
//!
//! The `head_dim / 2` rotary frequencies are cut into consecutive sections
//! (`mrope_section`, e.g. `[16, 24, 24]`); frequency `i` of section `s` turns
//! with position axis `s` (0 temporal, 1 height, 2 width). Image patches get
//! their grid coordinates on the three axes; text tokens the same position on
//! all three, where M-RoPE is ordinary RoPE — so only steps with explicit
//! positions come here; the others use the fast RoPE kernel.
use mlx_rs::{ops, Array, Dtype};

use crate::error::{Error, Result};

pub struct MRope {
    /// `[head_dim / 2]` float32: `1 / base^(2i / head_dim)`.
    inv_freq: Array,
    /// `[head_dim / 2]` int32: the position axis each frequency turns with.
    axis_of_freq: Array,
}

impl MRope {
    pub fn new(head_dim: i32, base: f32, sections: [i32; 3]) -> Result<Self> {
        let half = head_dim / 2;
        if sections.iter().any(|&s| s < 0) || sections.iter().sum::<i32>() != half {
            return Err(Error::InvalidConfig(format!(
                "mrope_section {sections:?} must add up to head_dim / 2 = {half}"
            )));
        }
        // The same float32 computation as the reference, so angles match bit for bit.
        let exponents = ops::arange::<_, f32>(0, head_dim, 2)?.divide(Array::from_f32(head_dim as f32))?;
        let inv_freq = Array::from_f32(1.0).divide(ops::power(Array::from_f32(base), exponents)?)?;
        let axes: Vec<i32> = sections
            .iter()
            .enumerate()
            .flat_map(|(axis, &n)| std::iter::repeat_n(axis as i32, n as usize))
            .collect();
        Ok(Self {
            inv_freq,
            axis_of_freq: Array::from_slice(&axes, &[half]),
        })
    }

    /// Positions `[3, B, L]` → cos and sin tables `[B, 1, L, head_dim]`.
    pub fn cos_sin(&self, positions: &Array) -> Result<(Array, Array)> {
        let shape = positions.shape();
        if shape.len() != 3 || shape[0] != 3 {
            return Err(Error::InvalidRequest(format!(
                "M-RoPE positions must be [3, B, L], got {shape:?}"
            )));
        }
        // [half, B, L]: each frequency's own axis → [B, L, half].
        let per_freq = positions.take_axis(&self.axis_of_freq, 0)?.transpose_axes(&[1, 2, 0])?;
        let angles = per_freq.as_dtype(Dtype::Float32)?.multiply(&self.inv_freq)?;
        let angles = ops::concatenate(&[&angles, &angles], -1)?.expand_dims(1)?;
        Ok((ops::cos(&angles)?, ops::sin(&angles)?))
    }
}

/// `x * cos + rotate_half(x) * sin` with the two halves of the last axis as
/// the rotated pairs (the non-interleaved layout), in `x`'s dtype. Shared
/// with the vision tower's 2-D rotary embedding.
pub fn rotate_half_split(x: &Array, cos: &Array, sin: &Array) -> Result<Array> {
    let halves = x.split_equal(2, -1)?;
    let rotated = ops::concatenate(&[&halves[1].negative()?, &halves[0]], -1)?;
    let cos = cos.as_dtype(x.dtype())?;
    let sin = sin.as_dtype(x.dtype())?;
    Ok(x.multiply(&cos)?.add(rotated.multiply(&sin)?)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::rope::Positions;
    use crate::model::rope::Rope;

    fn max_abs_diff(a: &Array, b: &Array) -> f32 {
        a.subtract(b)
            .unwrap()
            .abs()
            .unwrap()
            .max(None)
            .unwrap()
            .item_exact::<f32>()
    }

    /// With equal positions on the three axes M-RoPE must be plain RoPE: the
    /// decode path relies on it to use the fast kernel.
    #[test]
    fn equal_axes_are_plain_rope() {
        let (head_dim, len) = (16, 5);
        let rope = Rope::multimodal(head_dim, 10000.0, [2, 3, 3]).unwrap();
        let x = mlx_rs::random::normal::<f32>(&[1, 2, len, head_dim], None, None, &mlx_rs::random::key(3).unwrap())
            .unwrap();
        let start = 7;
        let pos: Vec<i32> = (0..3).flat_map(|_| start..start + len).collect();
        let explicit = Positions::Multimodal(Array::from_slice(&pos, &[3, 1, len]));
        let a = rope.apply(&x, &explicit).unwrap();
        let b = rope.apply(&x, &Positions::Start(start)).unwrap();
        assert!(
            max_abs_diff(&a, &b) < 1e-5,
            "explicit equal-axis positions differ from fast RoPE"
        );
    }

    /// Each section must follow its own axis: moving only the width
    /// coordinate changes only the width section's frequencies.
    #[test]
    fn sections_follow_their_axis() {
        let m = MRope::new(16, 10000.0, [2, 3, 3]).unwrap();
        let base = Array::from_slice(&[4i32, 4, 4], &[3, 1, 1]);
        let moved = Array::from_slice(&[4i32, 4, 9], &[3, 1, 1]);
        let (c0, _) = m.cos_sin(&base).unwrap();
        let (c1, _) = m.cos_sin(&moved).unwrap();
        let diff = c0.subtract(&c1).unwrap().abs().unwrap().reshape(&[16]).unwrap();
        diff.eval().unwrap();
        let d = diff.as_slice::<f32>();
        for half in [0, 8] {
            assert!(
                d[half..half + 5].iter().all(|&v| v == 0.0),
                "temporal/height sections moved: {d:?}"
            );
            assert!(
                d[half + 5..half + 8].iter().all(|&v| v > 0.0),
                "width section did not move: {d:?}"
            );
        }
    }

    #[test]
    fn sections_must_cover_half_the_head() {
        assert!(MRope::new(16, 10000.0, [2, 3, 2]).is_err());
    }
}
