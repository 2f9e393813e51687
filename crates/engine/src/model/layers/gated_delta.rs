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
//! The recurrence runs as composed MLX ops: one token at a time for decode
//! steps, short passes and speculative verify steps (mlx-lm's fallback where
//! its Metal kernel does not apply; on the CPU backend the same), and in
//! chunks of tokens for longer prompts ([`super::gated_delta_chunked`], as
//! mlx-vlm does on backends without that kernel).
use mlx_rs::{fast, nn, ops, ops::indexing::IndexOp, Array, Dtype};

use crate::cache::BatchCache;
use crate::error::{Error, Result};
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
            nn::silu(ops::conv1d(&conv_input, &self.conv_weight, 1, 0, 1, d.conv_channels())?)?;

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

    /// `g = exp(−exp(A_log) · softplus(a + dt_bias))`, float32 `[B, L, Hv]`.
    fn decay(&self, a: &Array) -> Result<Array> {
        let softplus = nn::softplus(a.add(&self.dt_bias)?)?;
        Ok(ops::exp(ops::exp(&self.a_log)?.negative()?.multiply(softplus)?)?)
    }

    /// RMSNorm of `y` gated by SiLU(`z`), computed in float32.
    fn gated_norm(&self, y: &Array, z: &Array) -> Result<Array> {
        let normed = fast::rms_norm(y, Some(&self.norm_weight), self.dims.eps)?;
        let gate = nn::silu(z.as_dtype(Dtype::Float32)?)?;
        Ok(gate.multiply(normed.as_dtype(Dtype::Float32)?)?.as_dtype(y.dtype())?)
    }
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
        let (qt, kt, vt) = (q.index((.., t)), k.index((.., t)), v.index((.., t)));
        let decay = g.index((.., t)).reshape(&[b, hv, 1, 1])?;
        let decayed = state.multiply(&decay)?;
        let kt_row = kt.expand_dims(-2)?;
        let remembered = decayed.multiply(&kt_row)?.sum_axis(-1, false)?;
        let delta = vt.subtract(&remembered)?.multiply(beta.index((.., t)).expand_dims(-1)?)?;
        let next = decayed.add(kt_row.multiply(delta.expand_dims(-1)?)?)?;
        let y = next.multiply(qt.expand_dims(-2)?)?.sum_axis(-1, false)?;
        ys.push(y.as_dtype(q.dtype())?);
        state = match real {
            Some(real) => ops::select(&real.index((.., t)).reshape(&[b, 1, 1, 1])?, &next, &state)?,
            None => next,
        };
        if record {
            states.push(state.clone());
        }
    }
    let steps = if record { Some(ops::stack(&states, 1)?) } else { None };
    Ok((ops::stack(&ys, 1)?, state, steps))
}

/// A slice as its own buffer, so a kept state does not pin the whole pass.
fn contiguous(a: Array) -> Result<Array> {
    Ok(a.contiguous()?)
}
