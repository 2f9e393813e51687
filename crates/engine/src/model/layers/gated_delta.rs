//! The Gated DeltaNet layer (Qwen3.5's linear attention): instead of keys
//! and values that grow with the context, each row keeps a fixed-size state
//! per value head, `[Dv, Dk]`, updated token by token with the gated delta
//! rule:
//!
//! ```text
//! S ← g·S;   S ← S + k ⊗ β·(v − S·k);   y = S·q
//! ```
//!
//! with a per-token, per-head decay `g = exp(−exp(A_log)·softplus(a + dt_bias))`
//! and write strength `β = sigmoid(b)`. Before it, a short causal depthwise
//! convolution mixes each of q, k, v with the previous `kernel − 1` tokens
//! (so the layer also keeps those as a conv state); after it, an RMSNorm
//! gated by SiLU(z).
//!
//! Both states live in the batch's recurrent cache ([`BatchCache::recurrent_state`]).
//! In a right-padded prefill pass the padded tokens must leave a row's
//! states untouched: their inputs are zeroed, the conv state is taken at
//! each row's real end, and the recurrence keeps the old state there.
//!
//! A speculative verify step records each token's states too
//! ([`BatchCache::records_recurrent_steps`]), so that a row whose drafts were
//! rejected goes back to the state after its last kept token without
//! running anything again.
//!
//! The recurrence runs one token at a time for decode steps, short passes
//! and speculative verify steps, each token as one compiled function
//! ([`step`]: mlx-lm's fallback where its Metal kernel does not apply, on
//! the CPU backend the same), and in chunks of tokens for longer prompts
//! ([`super::gated_delta_chunked`], as mlx-vlm does on backends without
//! that kernel).
use std::cell::RefCell;

use mlx_rs::ops::indexing::Ellipsis;
use mlx_rs::{fast, nn, ops, ops::indexing::IndexOp, Array, Dtype};

use crate::cache::BatchCache;
use crate::error::{Error, Result};
use crate::model::layers::fused::{self, Fused};
use crate::model::layers::gated_delta_chunked::chunked_recurrence;
use crate::model::layers::{LayerLoader, Linear};
use crate::model::shape::LayerShape;

/// Passes of at least this many tokens run the chunked scan. Process CPU
/// time of one layer's scan on the bench-size Qwen3.5's heads, token loop
/// against chunks: 0.33 / 0.31 ms at 2 tokens, 0.65 / 0.32 ms at 4, 2.8 /
/// 0.6 ms at 16 (one row; four rows: 2.9 / 1.1 ms at 4). Below 4 the two are
/// level, and such passes are mostly verify steps, which take the loop anyway.
pub const CHUNKED_FROM_TOKENS: i32 = 4;

/// The sizes of a Gated DeltaNet layer (config.json's `linear_*` fields).
#[derive(Debug, Clone, Copy)]
pub struct GatedDeltaDims {
    pub hidden: i32,
    pub key_heads: i32,
    pub value_heads: i32,
    pub key_dim: i32,
    pub value_dim: i32,
    pub conv_kernel: i32,
    pub eps: f32,
}

impl GatedDeltaDims {
    fn keys(&self) -> i32 {
        self.key_heads * self.key_dim
    }
    fn values(&self) -> i32 {
        self.value_heads * self.value_dim
    }
    /// Channels the convolution runs over: q, k and v side by side.
    fn conv_channels(&self) -> i32 {
        2 * self.keys() + self.values()
    }

    /// What a row keeps between steps: the convolution's last `kernel − 1`
    /// inputs (activation type) and the recurrent state `[Hv, Dv, Dk]` (float32).
    pub fn layer_shape(&self) -> LayerShape {
        let conv = (self.conv_kernel - 1).max(0) * self.conv_channels();
        let state = self.value_heads * self.value_dim * self.key_dim;
        LayerShape::recurrent(conv.max(0) as usize, state.max(0) as usize)
    }
}

pub struct GatedDeltaNet {
    dims: GatedDeltaDims,
    in_proj_qkv: Linear,
    in_proj_z: Linear,
    in_proj_b: Linear,
    in_proj_a: Linear,
    /// Depthwise kernel `[channels, kernel, 1]` (MLX's conv1d layout).
    conv_weight: Array,
    /// float32, as the reference keeps it whatever the checkpoint's dtype.
    a_log: Array,
    dt_bias: Array,
    norm_weight: Array,
    out_proj: Linear,
}

impl GatedDeltaNet {
    /// Loads `path.*`. `hf_conv`: the checkpoint stores the kernel as Hugging
    /// Face does, `[channels, 1, kernel]`.
    pub fn load(
        loader: &mut LayerLoader,
        path: &str,
        dims: GatedDeltaDims,
        hf_conv: bool,
    ) -> Result<Self> {
        let d = dims;
        if d.key_heads < 1 || d.value_heads % d.key_heads != 0 {
            return Err(Error::InvalidConfig(format!(
                "linear_num_value_heads {} must be a multiple of linear_num_key_heads {}",
                d.value_heads, d.key_heads
            )));
        }
        let channels = d.conv_channels();
        let conv_name = format!("{path}.conv1d.weight");
        let conv_weight = if hf_conv {
            loader.float(&conv_name, &[channels, 1, d.conv_kernel])?.swap_axes(1, 2)?
        } else {
            loader.float(&conv_name, &[channels, d.conv_kernel, 1])?
        };
        let a_log = loader
            .weights
            .take(&format!("{path}.A_log"), &[d.value_heads])?
            .as_dtype(Dtype::Float32)?;
        Ok(Self {
            dims,
            in_proj_qkv: loader.linear(
                &format!("{path}.in_proj_qkv"),
                d.hidden,
                channels,
                false,
            )?,
            in_proj_z: loader.linear(&format!("{path}.in_proj_z"), d.hidden, d.values(), false)?,
            in_proj_b: loader.linear(
                &format!("{path}.in_proj_b"),
                d.hidden,
                d.value_heads,
                false,
            )?,
            in_proj_a: loader.linear(
                &format!("{path}.in_proj_a"),
                d.hidden,
                d.value_heads,
                false,
            )?,
            conv_weight,
            a_log,
            dt_bias: loader.float(&format!("{path}.dt_bias"), &[d.value_heads])?,
            norm_weight: loader.float(&format!("{path}.norm.weight"), &[d.value_dim])?,
            out_proj: loader.linear(&format!("{path}.out_proj"), d.values(), d.hidden, false)?,
        })
    }

    /// `[B, L, D]` → `[B, L, D]`, reading and writing layer `layer`'s states.
    pub fn forward(&self, x: &Array, layer: usize, cache: &mut BatchCache) -> Result<Array> {
        let d = self.dims;
        let (b, l) = (x.dim(0), x.dim(1));
        let k_keep = d.conv_kernel - 1;
        let mut qkv = self.in_proj_qkv.forward(x)?;
        let z = self.in_proj_z.forward(x)?.reshape(&[b, l, d.value_heads, d.value_dim])?;
        let beta = ops::sigmoid(self.in_proj_b.forward(x)?)?;
        let a = self.in_proj_a.forward(x)?;

        let (conv_state, state) = match cache.recurrent_state(layer)? {
            Some([conv, state]) => (conv.clone(), state.clone()),
            Some(_) => {
                return Err(Error::Mlx(format!(
                    "layer {layer}: a recurrent state of another shape"
                )))
            }
            None => (
                ops::zeros_dtype(&[b, k_keep, d.conv_channels()], x.dtype())?,
                ops::zeros_dtype(&[b, d.value_heads, d.value_dim, d.key_dim], Dtype::Float32)?,
            ),
        };
        // `[B, L]`: which tokens are real, in a right-padded pass.
        let real = cache.real_tokens()?;
        if let Some(real) = &real {
            qkv = ops::select(&real.expand_dims(-1)?, &qkv, &ops::zeros_dtype(&[1], qkv.dtype())?)?;
        }
        let conv_input = ops::concatenate(&[conv_state, qkv], 1)?;
        // The next conv state: the last `kernel − 1` inputs up to each row's real end.
        let next_conv = match &real {
            Some(real) => {
                let ends = real.as_dtype(Dtype::Int32)?.sum_axis(1, true)?;
                let cols =
                    ends.add(ops::arange::<_, i32>(None, k_keep, None)?.reshape(&[1, k_keep])?)?;
                conv_input.take_along_axis(&cols.expand_dims(-1)?, 1)?
            }
            None => conv_input.index((.., (l)..(l + k_keep), ..)),
        };
        let conv_out =
            super::silu(&ops::conv1d(&conv_input, &self.conv_weight, 1, 0, 1, d.conv_channels())?)?;

        let parts = ops::split_at_indices(&conv_out, &[d.keys(), 2 * d.keys()], -1)?;
        let q = parts[0].reshape(&[b, l, d.key_heads, d.key_dim])?;
        let k = parts[1].reshape(&[b, l, d.key_heads, d.key_dim])?;
        let v = parts[2].reshape(&[b, l, d.value_heads, d.value_dim])?;
        let (q, k) = self.normalize_qk(&q, &k)?;
        let g = self.decay(&a)?;
        let record = cache.records_recurrent_steps();
        // A verify step keeps every token's state, which only the loop has.
        let (y, state, state_steps) = if !record && l >= CHUNKED_FROM_TOKENS {
            let (y, state) = chunked_recurrence(&q, &k, &v, &g, &beta, &state, real.as_ref())?;
            (y, state, None)
        } else {
            recurrence(&q, &k, &v, &g, &beta, state, real.as_ref(), record)?
        };
        if let Some(state_steps) = state_steps {
            // After token t the conv state is the `kernel − 1` inputs ending at t.
            let windows: Vec<Array> =
                (1..=l).map(|t| conv_input.index((.., t..t + k_keep, ..))).collect();
            cache.set_recurrent_steps(layer, vec![ops::stack(&windows, 1)?, state_steps])?;
        }
        cache.set_recurrent_state(layer, vec![contiguous(next_conv)?, state])?;

        let out = self.gated_norm(&y, &z)?;
        self.out_proj.forward(&out.reshape(&[b, l, d.values()])?)
    }

    /// L2-normalizes q and k per head, with the readout scale `Dk^-1/2`
    /// folded into q (as the reference: RMS norm with its eps rescaled).
    fn normalize_qk(&self, q: &Array, k: &Array) -> Result<(Array, Array)> {
        let inv = (self.dims.key_dim as f32).powf(-0.5);
        let eps = 1e-6 * inv * inv;
        let scaled = |x: Array, s: f32| -> Result<Array> {
            Ok(x.multiply(Array::from_f32(s).as_dtype(x.dtype())?)?)
        };
        let q = scaled(fast::rms_norm(q, None, eps)?, inv * inv)?;
        let k = scaled(fast::rms_norm(k, None, eps)?, inv)?;
        Ok((q, k))
    }

    /// `g = exp(−exp(A_log) · softplus(a + dt_bias))`, float32 `[B, L, Hv]`,
    /// compiled shapeless as mlx-lm's `compute_g` is.
    fn decay(&self, a: &Array) -> Result<Array> {
        thread_local! {
            static FUSED: RefCell<Fused> = RefCell::new(fused::compile(decay_ops, true));
        }
        let inputs = [self.a_log.clone(), a.clone(), self.dt_bias.clone()];
        Ok(fused::call(&FUSED, &inputs)?.remove(0))
    }

    /// RMSNorm of `y` gated by SiLU(`z`), computed in float32; the gating
    /// compiled shapeless as mlx-lm's `precise_swiglu` is.
    fn gated_norm(&self, y: &Array, z: &Array) -> Result<Array> {
        thread_local! {
            static FUSED: RefCell<Fused> = RefCell::new(fused::compile(gate_ops, true));
        }
        let normed = fast::rms_norm(y, Some(&self.norm_weight), self.dims.eps)?;
        Ok(fused::call(&FUSED, &[y.clone(), z.clone(), normed])?.remove(0))
    }
}

/// [`GatedDeltaNet::decay`] op by op: `[A_log, a, dt_bias]` → `[g]`.
fn decay_ops(inputs: &[Array]) -> Result<Vec<Array>> {
    let [a_log, a, dt_bias] = inputs else { return Err(arity("decay", 3, inputs)) };
    let softplus = nn::softplus(a.add(dt_bias)?)?;
    Ok(vec![ops::exp(ops::exp(a_log)?.negative()?.multiply(softplus)?)?])
}

/// [`GatedDeltaNet::gated_norm`]'s gating op by op: `[y, z, normed]` →
/// `[SiLU(z) · normed]` in float32, returned in `y`'s dtype.
fn gate_ops(inputs: &[Array]) -> Result<Vec<Array>> {
    let [y, z, normed] = inputs else { return Err(arity("gated norm", 3, inputs)) };
    let gate = super::silu_ops(&z.as_dtype(Dtype::Float32)?)?;
    Ok(vec![gate.multiply(normed.as_dtype(Dtype::Float32)?)?.as_dtype(y.dtype())?])
}

fn arity(what: &str, want: usize, inputs: &[Array]) -> Error {
    Error::Mlx(format!("{what}: {want} inputs expected, {} given", inputs.len()))
}

/// The gated delta rule over `L` tokens. q, k `[B, L, Hk, Dk]`, v `[B, L, Hv, Dv]`,
/// g and β `[B, L, Hv]`, state `[B, Hv, Dv, Dk]` (float32). Where `real` is
/// false the state is kept (right padding). Returns y `[B, L, Hv, Dv]`, the
/// new state and, when `record`, the state after each token `[B, L, Hv, Dv, Dk]`.
#[allow(clippy::too_many_arguments)]
pub fn recurrence(
    q: &Array,
    k: &Array,
    v: &Array,
    g: &Array,
    beta: &Array,
    mut state: Array,
    real: Option<&Array>,
    record: bool,
) -> Result<(Array, Array, Option<Array>)> {
    let (b, l, hk, dk) = (q.dim(0), q.dim(1), q.dim(2), q.dim(3));
    let hv = v.dim(2);
    // Each key head serves `hv / hk` consecutive value heads.
    let repeat = |x: &Array| -> Result<Array> {
        if hv == hk {
            return Ok(x.clone());
        }
        let r = hv / hk;
        Ok(ops::broadcast_to(x.expand_dims(3)?, &[b, l, hk, r, dk])?.reshape(&[b, l, hv, dk])?)
    };
    let (q, k) = (repeat(q)?, repeat(k)?);
    let mut ys = Vec::with_capacity(l as usize);
    let mut states = Vec::new();
    for t in 0..l {
        let real_t = real.map(|real| real.index((.., t)));
        let (y, next) = step(
            &q.index((.., t)),
            &k.index((.., t)),
            &v.index((.., t)),
            &g.index((.., t)),
            &beta.index((.., t)),
            &state,
            real_t.as_ref(),
        )?;
        ys.push(y);
        state = next;
        if record {
            states.push(state.clone());
        }
    }
    let steps = if record { Some(ops::stack(&states, 1)?) } else { None };
    Ok((ops::stack(&ys, 1)?, state, steps))
}

/// One token of the gated delta rule, compiled: q, k `[B, Hv, Dk]` (key
/// heads already repeated to the value heads), v `[B, Hv, Dv]`, g and β
/// `[B, Hv]`, state `[B, Hv, Dv, Dk]` (float32); where `real` (`[B]`) is
/// false the row keeps its state. Returns y `[B, Hv, Dv]` in q's dtype and
/// the next state.
///
/// Not mlx-lm's step (`_gated_delta_step_ops`, which it compiles too): that
/// one makes four elementwise passes over the state and two reductions,
/// and MLX's CPU backend runs a compiled chain of broadcast operands as a
/// scalar strided loop, so compiling it gained nothing here (bench-size
/// Qwen3.5, decode of 8 rows, CPU per token in libmlx and compiled
/// kernels: 2.07–2.21 ms op by op, 1.91–2.34 ms compiled). [`step_ops`]
/// reads the state once in a matrix product and writes it once: 1.26–1.33
/// ms, plus 0.35–0.5 ms of OpenBLAS for the product (docs/performance.md).
///
/// Compiled shape by shape, as mlx-lm's step is: MLX traces it once per
/// batch size and thread and keeps each trace.
pub fn step(
    q: &Array,
    k: &Array,
    v: &Array,
    g: &Array,
    beta: &Array,
    state: &Array,
    real: Option<&Array>,
) -> Result<(Array, Array)> {
    thread_local! {
        static FUSED: RefCell<Fused> = RefCell::new(fused::compile(step_ops, false));
    }
    let mut inputs = vec![q.clone(), k.clone(), v.clone(), g.clone(), beta.clone(), state.clone()];
    inputs.extend(real.cloned());
    let mut out = fused::call(&FUSED, &inputs)?.into_iter();
    match (out.next(), out.next()) {
        (Some(y), Some(next)) => Ok((y, next)),
        _ => Err(Error::Mlx("gated delta step: two outputs expected".into())),
    }
}

/// [`step`] op by op: `[q, k, v, g, β, state]` and optionally `real`.
/// With `S' = g·S + δ kᵀ` and `δ = β (v − g·S k)`, the readout is
/// `y = S' q = g·S q + δ (k·q)`: one product `S [k q]` gives both `S k` and
/// `S q`, and the state is read again only to write `S'`.
pub fn step_ops(inputs: &[Array]) -> Result<Vec<Array>> {
    let (q, k, v, g, beta, state, real) = match inputs {
        [q, k, v, g, beta, state] => (q, k, v, g, beta, state, None),
        [q, k, v, g, beta, state, real] => (q, k, v, g, beta, state, Some(real)),
        _ => return Err(arity("gated delta step", 6, inputs)),
    };
    let g = g.expand_dims_axes(&[-1, -2])?; // [B, H, 1, 1]
    let s_kq = state.matmul(ops::stack(&[k, q], -1)?)?; // [B, H, Dv, 2]
    let (s_k, s_q) = (s_kq.index((Ellipsis, 0..1)), s_kq.index((Ellipsis, 1..2)));
    let delta = v
        .expand_dims(-1)?
        .subtract(g.multiply(&s_k)?)?
        .multiply(beta.expand_dims_axes(&[-1, -2])?)?; // [B, H, Dv, 1]
    let k_dot_q = k.multiply(q)?.sum_axes(&[-1], true)?.expand_dims(-1)?; // [B, H, 1, 1]
    let y = g.multiply(&s_q)?.add(delta.multiply(&k_dot_q)?)?.squeeze_axes(&[-1])?;
    let next = state.multiply(&g)?.add(delta.multiply(k.expand_dims(-2)?)?)?;
    let next = match real {
        Some(real) => ops::select(&real.expand_dims_axes(&[1, 2, 3])?, &next, state)?,
        None => next,
    };
    Ok(vec![y.as_dtype(q.dtype())?, next])
}

/// A slice as its own buffer, so a kept state does not pin the whole pass.
fn contiguous(a: Array) -> Result<Array> {
    Ok(a.contiguous()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlx_rs::random;

    /// Random inputs of one step for `b` rows, 4 value heads of width 8.
    fn inputs(b: i32, seed: u64) -> Vec<Array> {
        let part = |i: u64, shape: &[i32]| {
            let key = random::key(seed * 16 + i).unwrap();
            random::normal::<f32>(shape, None, None, &key).unwrap()
        };
        let (h, d) = (4, 8);
        vec![
            part(0, &[b, h, d]),
            part(1, &[b, h, d]),
            part(2, &[b, h, d]),
            ops::sigmoid(part(3, &[b, h])).unwrap(),
            ops::sigmoid(part(4, &[b, h])).unwrap(),
            part(5, &[b, h, d, d]),
        ]
    }

    fn max_abs_diff(a: &Array, b: &Array) -> f32 {
        a.subtract(b).unwrap().abs().unwrap().max(None).unwrap().item_exact::<f32>()
    }

    /// The gated delta rule as written: `S ← g·S; S ← S + k ⊗ β·(v − S·k);
    /// y = S·q`, each product an elementwise multiply and a sum.
    fn rule_as_written(x: &[Array]) -> (Array, Array) {
        let (q, k, v, g, beta, state) = (&x[0], &x[1], &x[2], &x[3], &x[4], &x[5]);
        let decayed = state.multiply(g.expand_dims_axes(&[-1, -2]).unwrap()).unwrap();
        let k_row = k.expand_dims(-2).unwrap();
        let remembered = decayed.multiply(&k_row).unwrap().sum_axis(-1, false).unwrap();
        let delta =
            v.subtract(&remembered).unwrap().multiply(beta.expand_dims(-1).unwrap()).unwrap();
        let next = decayed.add(k_row.multiply(delta.expand_dims(-1).unwrap()).unwrap()).unwrap();
        let y = next.multiply(q.expand_dims(-2).unwrap()).unwrap().sum_axis(-1, false).unwrap();
        (y, next)
    }

    /// The compiled step against its own ops and against the rule as
    /// written, at batch sizes that change from call to call (each traced
    /// once), with and without padded rows. Measured: equal to its ops to
    /// the last bit, and 1.9e-6 from the rule as written (values of size
    /// ~1 to 10, float32 rounding in another order); a wrong term moves
    /// them by the size of the values.
    #[test]
    fn compiled_step_matches_the_rule_as_the_batch_changes() {
        for (b, seed) in [(3, 1), (1, 2), (5, 3), (3, 4)] {
            let x = inputs(b, seed);
            let (y, next) = step(&x[0], &x[1], &x[2], &x[3], &x[4], &x[5], None).unwrap();
            assert_eq!(y.shape(), &[b, 4, 8]);
            assert_eq!(next.shape(), &[b, 4, 8, 8]);
            let ops = step_ops(&x).unwrap();
            assert_eq!(max_abs_diff(&y, &ops[0]), 0.0, "y at batch {b}");
            assert_eq!(max_abs_diff(&next, &ops[1]), 0.0, "state at batch {b}");
            let (y_rule, next_rule) = rule_as_written(&x);
            assert!(max_abs_diff(&y, &y_rule) < 1e-5, "y at batch {b}");
            assert!(max_abs_diff(&next, &next_rule) < 1e-5, "state at batch {b}");

            // Every other row padded: it keeps its state exactly.
            let real: Vec<bool> = (0..b).map(|r| r % 2 == 0).collect();
            let real = Array::from_slice(&real, &[b]);
            let (_, kept) = step(&x[0], &x[1], &x[2], &x[3], &x[4], &x[5], Some(&real)).unwrap();
            for r in 0..b {
                let want = if r % 2 == 0 { next.index(r) } else { x[5].index(r) };
                assert_eq!(max_abs_diff(&kept.index(r), &want), 0.0, "row {r} of {b}");
            }
        }
    }
}
