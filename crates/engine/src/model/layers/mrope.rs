//! M-RoPE (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5): rotary embedding over
//! three position axes.
//!
//! Each of the `dims / 2` rotary frequencies turns with one position axis
//! (0 temporal, 1 height, 2 width), as `mrope_section` says. Qwen2-VL's
//! layout is *sectioned*: consecutive runs (`[16, 24, 24]`: the first 16
//! frequencies temporal, and so on). Qwen3-VL's and Qwen3.5's is
//! *interleaved*: frequency `i` is height when `i % 3 == 1` and
//! `i < 3·section[1]`, width when `i % 3 == 2` and `i < 3·section[2]`,
//! temporal otherwise. Image patches get
//! their grid coordinates on the three axes; text tokens the same position on
//! all three, where M-RoPE is ordinary RoPE — so only steps with explicit
//! positions come here; the others use the fast RoPE kernel.
use mlx_rs::{ops, Array, Dtype};

use crate::error::{Error, Result};

/// How `mrope_section` assigns frequencies to axes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MRopeLayout {
    /// Consecutive sections (Qwen2-VL, Qwen2.5-VL); they must cover `dims / 2`.
    Sectioned,
    /// Every third frequency (Qwen3-VL, Qwen3.5).
    Interleaved,
}

pub struct MRope {
    /// `[head_dim / 2]` float32: `1 / base^(2i / head_dim)`.
    inv_freq: Array,
    /// `[head_dim / 2]` int32: the position axis each frequency turns with.
    axis_of_freq: Array,
}

impl MRope {
    /// M-RoPE over the first `head_dim` features of each head (all of them
    /// unless the model rotates only part, as Qwen3.5 does).
    pub fn new(head_dim: i32, base: f32, sections: [i32; 3], layout: MRopeLayout) -> Result<Self> {
        let half = head_dim / 2;
        if sections.iter().any(|&s| s < 0) {
            return Err(Error::InvalidConfig(format!(
                "mrope_section {sections:?} has a negative section"
            )));
        }
        let axes: Vec<i32> = match layout {
            MRopeLayout::Sectioned => {
                if sections.iter().sum::<i32>() != half {
                    return Err(Error::InvalidConfig(format!(
                        "mrope_section {sections:?} must add up to head_dim / 2 = {half}"
                    )));
                }
                sections
                    .iter()
                    .enumerate()
                    .flat_map(|(axis, &n)| std::iter::repeat_n(axis as i32, n as usize))
                    .collect()
            }
            MRopeLayout::Interleaved => (0..half)
                .map(|i| match i % 3 {
                    1 if i < 3 * sections[1] => 1,
                    2 if i < 3 * sections[2] => 2,
                    _ => 0,
                })
                .collect(),
        };
        // The same float32 computation as the reference, so angles match bit for bit.
        let exponents =
            ops::arange::<_, f32>(0, head_dim, 2)?.divide(Array::from_f32(head_dim as f32))?;
        let inv_freq =
            Array::from_f32(1.0).divide(ops::power(Array::from_f32(base), exponents)?)?;
        Ok(Self { inv_freq, axis_of_freq: Array::from_slice(&axes, &[half]) })
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

/// [`rotate_half_split`] over the first `cos.dim(-1)` features of `x`; the
/// rest pass unchanged (partial rotary, Qwen3.5).
pub fn rotate_leading(x: &Array, cos: &Array, sin: &Array) -> Result<Array> {
    let (dims, all) = (cos.dim(-1), x.dim(-1));
    if dims == all {
        return rotate_half_split(x, cos, sin);
    }
    let parts = x.split_at_indices(&[dims], -1)?;
    Ok(ops::concatenate(&[rotate_half_split(&parts[0], cos, sin)?, parts[1].clone()], -1)?)
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
    use crate::model::layers::rope::Positions;
    use crate::model::layers::rope::Rope;
    use mlx_rs::ops::indexing::IndexOp;

    fn max_abs_diff(a: &Array, b: &Array) -> f32 {
        a.subtract(b).unwrap().abs().unwrap().max(None).unwrap().item_exact::<f32>()
    }

    /// With equal positions on the three axes M-RoPE must be plain RoPE: the
    /// decode path relies on it to use the fast kernel.
    #[test]
    fn equal_axes_are_plain_rope() {
        let (head_dim, len) = (16, 5);
        let rope = Rope::multimodal(head_dim, 10000.0, [2, 3, 3], MRopeLayout::Sectioned).unwrap();
        let x = mlx_rs::random::normal::<f32>(
            &[1, 2, len, head_dim],
            None,
            None,
            &mlx_rs::random::key(3).unwrap(),
        )
        .unwrap();
        let start = 7;
        let pos: Vec<i32> = (0..3).flat_map(|_| start..start + len).collect();
        let explicit = Positions::Multimodal(Array::from_slice(&pos, &[3, 1, len]));
        let a = rope.apply(&x, &explicit).unwrap();
        let b = rope.apply(&x, &Positions::Start(start)).unwrap();
        assert!(max_abs_diff(&a, &b) < 1e-5, "explicit equal-axis positions differ from fast RoPE");
    }

    /// Each section must follow its own axis: moving only the width
    /// coordinate changes only the width section's frequencies.
    #[test]
    fn sections_follow_their_axis() {
        let m = MRope::new(16, 10000.0, [2, 3, 3], MRopeLayout::Sectioned).unwrap();
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
        assert!(MRope::new(16, 10000.0, [2, 3, 2], MRopeLayout::Sectioned).is_err());
    }

    /// The interleaved layout (mlx-vlm's `_interleaved_position_selector`):
    /// [11, 11, 10] over 32 frequencies is T H W T H W … with the width
    /// axis stopping at frequency 3·10.
    #[test]
    fn interleaved_axes_follow_the_reference_selector() {
        let m = MRope::new(64, 10000.0, [11, 11, 10], MRopeLayout::Interleaved).unwrap();
        m.axis_of_freq.eval().unwrap();
        let axes = m.axis_of_freq.as_slice::<i32>();
        assert_eq!(&axes[..6], &[0, 1, 2, 0, 1, 2]);
        assert_eq!(axes[29], 2);
        assert_eq!(axes[31], 1);
        assert_eq!(axes.iter().filter(|&&a| a == 2).count(), 10);
        assert_eq!(axes.iter().filter(|&&a| a == 1).count(), 11);
    }

    /// Partial rotary: the features past the rotated ones pass unchanged.
    #[test]
    fn rotate_leading_keeps_the_tail() {
        let x = mlx_rs::random::normal::<f32>(
            &[1, 1, 3, 8],
            None,
            None,
            &mlx_rs::random::key(5).unwrap(),
        )
        .unwrap();
        let m = MRope::new(4, 10000.0, [1, 1, 0], MRopeLayout::Interleaved).unwrap();
        let pos = Array::from_slice(&[1i32, 2, 3, 4, 5, 6, 7, 8, 9], &[3, 1, 3]);
        let (cos, sin) = m.cos_sin(&pos).unwrap();
        let y = rotate_leading(&x, &cos, &sin).unwrap();
        let tail = |a: &Array| a.index((.., .., .., 4..));
        assert_eq!(max_abs_diff(&tail(&x), &tail(&y)), 0.0);
        assert!(max_abs_diff(&x, &y) > 1e-3);
    }
}
