//! The gated delta rule over a whole prompt in chunks of [`CHUNK`] tokens
//! (fewer for a shorter pass): the same result as running it token by token
//! ([`super::gated_delta::recurrence`]), with a sequential loop over chunks
//! instead of over tokens, and matrix products inside each chunk.
//!
//! Within a chunk that starts from state `S₀`, write `γᵢ` for the product of
//! the decays of its tokens `1..=i` and `uᵢ = βᵢ (vᵢ − gᵢ Sᵢ₋₁ kᵢ)` for what
//! token `i` writes. Unrolling `Sᵢ = gᵢ Sᵢ₋₁ + uᵢ kᵢᵀ` gives
//!
//! ```text
//! Sᵢ = γᵢ S₀ + Σ_{j≤i} (γᵢ/γⱼ) uⱼ kⱼᵀ
//! ```
//!
//! so the writes solve a unit lower-triangular system,
//! `(I + A) U = βV − diag(βγ) K S₀ᵀ` with `A_ij = βᵢ (γᵢ/γⱼ) kᵢ·kⱼ` (j < i),
//! that is `U = U₀ − W S₀ᵀ` with `U₀ = (I + A)⁻¹ βV` and
//! `W = (I + A)⁻¹ diag(βγ) K`, neither of which depends on `S₀`. The outputs
//! and the state the chunk hands on follow:
//!
//! ```text
//! Y    = M U₀ + (diag(γ) Q − M W) S₀ᵀ      M_ij = (γᵢ/γⱼ) qᵢ·kⱼ  (j ≤ i)
//! S_C  = γ_C S₀ + Uᵀ diag(γ_C/γ) K
//! ```
//!
//! `U₀`, `W`, `M`, `M U₀` and `diag(γ) Q − M W` are computed for all chunks
//! at once; only the products with `S₀` run chunk after chunk. The decay
//! ratios are taken in log space (a product of a chunk's decays can
//! underflow float32), and the inverse of `I + A` is built by doubling the
//! size of the blocks it is exact on ([`invert_unit_lower`]): log₂ C rounds
//! of matrix products, none of them a power series that could overflow.
//!
//! Padded tokens (right padding, `real` false) get decay 1 and β 0: they
//! write nothing and keep the state, as the token loop keeps it. The tokens
//! that fill the last chunk up to [`CHUNK`] are padding of the same kind.
//! Their outputs are not the token loop's (which are never read either).
use mlx_rs::ops::indexing::{Ellipsis, IndexOp};
use mlx_rs::{ops, Array, Dtype};

use super::pad_axis;
use crate::error::Result;

/// Tokens per chunk: a power of two (the inverse doubles block sizes up to
/// it). On the bench-size Qwen3.5's heads (128 wide), process CPU time of
/// one layer's scan at 128 / 212 / 512 / 2048 tokens: 4.5 / 6.7 / 15.9 /
/// 67 ms with chunks of 16, 4.1 / 7.3 / 16.2 / 67 ms with 32, 5.6 / 11.6 /
/// 22.8 / 93 ms with 64 (mlx-vlm's), against 29–35 / 48–51 / 118–124 /
/// 493–500 ms token by token. 32 ties 16 with half the sequential steps.
pub const CHUNK: i32 = 32;

/// The smallest decay the log-space ratios see. A decay below it leaves less
/// than a millionth of the state, so flooring it changes the result by less
/// than that; it keeps `log` finite (a decay can underflow to 0) and a
/// chunk's cumulative log-decay above 32 · ln 1e-6 ≈ −442, where float32
/// still resolves a ratio `exp(a − b)` to 3e-5 of its size (and far better
/// in the usual case, decays near 1 and sums near 0).
const MIN_DECAY: f32 = 1e-6;

/// The gated delta rule over `L` tokens in chunks. q, k `[B, L, Hk, Dk]`,
/// v `[B, L, Hv, Dv]`, g and β `[B, L, Hv]`, state `[B, Hv, Dv, Dk]`
/// (float32); where `real` (`[B, L]`) is false the state is kept. Returns
/// y `[B, L, Hv, Dv]` (q's dtype; padded positions hold no meaningful value)
/// and the state after the last real token, float32.
pub fn chunked_recurrence(
    q: &Array,
    k: &Array,
    v: &Array,
    g: &Array,
    beta: &Array,
    state: &Array,
    real: Option<&Array>,
) -> Result<(Array, Array)> {
    let (b, l, hk, dk) = (q.dim(0), q.dim(1), q.dim(2), q.dim(3));
    let (hv, dv) = (v.dim(2), v.dim(3));
    let r = hv / hk;
    let out_dtype = q.dtype();
    // A pass shorter than a chunk is one chunk of the next power of two:
    // the work inside a chunk grows with its square.
    let c = CHUNK.min((l.max(1) as u32).next_power_of_two() as i32);
    let n = (l + c - 1) / c;
    let float = |x: &Array| x.as_dtype(Dtype::Float32);

    // Padded tokens: log-decay 0 (decay 1) and β 0.
    let mut log_g = ops::log(ops::maximum(float(g)?, Array::from_f32(MIN_DECAY))?)?;
    let mut beta = float(beta)?;
    if let Some(real) = real {
        let real = real.expand_dims(-1)?;
        log_g = ops::select(&real, &log_g, Array::from_f32(0.0))?;
        beta = ops::select(&real, &beta, Array::from_f32(0.0))?;
    }
    // Chunk-major layout `[n, B, Hk, r, C, …]`: one chunk is one contiguous
    // slice, and the `r` value heads that share a key head broadcast over it.
    let keys = |x: &Array| -> Result<Array> {
        let x = pad_axis(float(x)?, 1, n * c)?.reshape(&[b, n, c, hk, dk])?;
        Ok(x.transpose_axes(&[1, 0, 3, 2, 4])?.expand_dims(3)?)
    };
    let (q, k) = (keys(q)?, keys(k)?);
    let v = pad_axis(float(v)?, 1, n * c)?
        .reshape(&[b, n, c, hk, r, dv])?
        .transpose_axes(&[1, 0, 3, 4, 2, 5])?;
    let per_head = |x: &Array| -> Result<Array> {
        Ok(pad_axis(x.clone(), 1, n * c)?
            .reshape(&[b, n, c, hk, r])?
            .transpose_axes(&[1, 0, 3, 4, 2])?)
    };
    let (log_g, beta) = (per_head(&log_g)?, per_head(&beta)?);

    // γ within each chunk, and γᵢ/γⱼ for j ≤ i (0 above the diagonal:
    // masked before `exp`, where the ratio would overflow).
    let log_gamma = log_g.cumsum(-1, None, None)?;
    let gamma = ops::exp(&log_gamma)?;
    let diff = log_gamma.expand_dims(-1)?.subtract(log_gamma.expand_dims(-2)?)?;
    let ratio = ops::exp(ops::select(
        &ops::tri::<bool>(c, None, None)?,
        &diff,
        Array::from_f32(f32::NEG_INFINITY),
    )?)?;
    let log_last = log_gamma.index((Ellipsis, (c - 1)..c));
    let gamma_last = ops::exp(&log_last)?.expand_dims(-1)?; // [n, B, Hk, r, 1, 1]
    let to_end = ops::exp(log_last.subtract(&log_gamma)?)?; // γ_C/γⱼ

    let beta_col = beta.expand_dims(-1)?;
    let a = ratio
        .multiply(k.matmul(k.swap_axes(-1, -2)?)?)?
        .multiply(&beta_col)?
        .multiply(ops::tri::<f32>(c, None, Some(-1))?)?;
    let inverse = invert_unit_lower(&a, c)?;
    let w = inverse.matmul(k.multiply(beta.multiply(&gamma)?.expand_dims(-1)?)?)?;
    let u0 = inverse.matmul(v.multiply(&beta_col)?)?;
    let m = ratio.multiply(q.matmul(k.swap_axes(-1, -2)?)?)?;
    let q_state = q.multiply(gamma.expand_dims(-1)?)?.subtract(m.matmul(&w)?)?;
    let y_local = m.matmul(&u0)?;
    let k_to_end = k.multiply(to_end.expand_dims(-1)?)?;

    let mut s = float(state)?.reshape(&[b, hk, r, dv, dk])?;
    let mut ys = Vec::with_capacity(n as usize);
    for i in 0..n {
        let st = s.swap_axes(-1, -2)?;
        ys.push(y_local.index(i).add(q_state.index(i).matmul(&st)?)?);
        let u = u0.index(i).subtract(w.index(i).matmul(&st)?)?;
        s = s
            .multiply(gamma_last.index(i))?
            .add(u.swap_axes(-1, -2)?.matmul(k_to_end.index(i))?)?;
    }
    let y = ops::stack(&ys, 0)?
        .transpose_axes(&[1, 0, 4, 2, 3, 5])?
        .reshape(&[b, n * c, hv, dv])?
        .index((.., ..l))
        .as_dtype(out_dtype)?;
    Ok((y, s.reshape(&[b, hv, dv, dk])?))
}

/// `(I + a)⁻¹` for strictly lower-triangular `a` `[…, C, C]`, C a power of
/// two. With `X` the inverse of the block diagonal of `I + a` in blocks of
/// `s`, the inverse in blocks of `2s` is `X − X E X`, `E` being the
/// lower-left `s × s` block of each `2s` block: for `[[P, 0], [B, R]]` the
/// inverse is `[[P⁻¹, 0], [−R⁻¹ B P⁻¹, R⁻¹]]`. Each round only multiplies
/// inverses already exact on their blocks (no power series whose terms
/// could overflow), in log₂ C rounds instead of forward substitution's C.
pub fn invert_unit_lower(a: &Array, c: i32) -> Result<Array> {
    let eye = ops::eye::<f32>(c, None, None)?;
    // Blocks of 1 are the unit diagonal, so the first round is I − E.
    let mut x = eye.subtract(a.multiply(off_block_mask(c, 1)?)?)?;
    let mut s = 2;
    while s < c {
        let e = a.multiply(off_block_mask(c, s)?)?;
        x = x.subtract(x.matmul(&e)?.matmul(&x)?)?;
        s *= 2;
    }
    Ok(x)
}

/// `[C, C]` float32, 1 on the lower-left `s × s` block of each `2s` block
/// along the diagonal.
fn off_block_mask(c: i32, s: i32) -> Result<Array> {
    let cells: Vec<f32> = (0..c)
        .flat_map(|i| {
            (0..c).map(move |j| {
                let lower_left = i / (2 * s) == j / (2 * s) && (i / s) % 2 == 1 && (j / s) % 2 == 0;
                if lower_left {
                    1.0
                } else {
                    0.0
                }
            })
        })
        .collect();
    Ok(Array::from_slice(&cells, &[c, c]))
}
