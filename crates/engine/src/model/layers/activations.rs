//! The activations of the MLPs and heads, each compiled once per thread
//! ([`fused`]) as mlx-lm `mx.compile`s its own: MLX traces the function once
//! and runs its chain of elementwise ops as one generated kernel.
//!
//! Not mlx-rs's `nn::silu`, `nn::gelu` and the like: each of those compiles
//! a new function on every call and erases it after, so MLX traced and
//! fused it again for every layer of every step.
use std::cell::RefCell;

use mlx_rs::{ops, Array};

use super::fused::{self, Fused};
use crate::error::{Error, Result};

/// GELU with the tanh approximation (Gemma's MLPs, SigLIP), compiled
/// shapeless as mlx-lm's `gelu_approx` is: MLX fuses its nine elementwise
/// passes into one generated kernel (bench-size Gemma 4, 480-token prompt:
/// 245–265 → 279–315 tok/s, alternating runs under load). An earlier try
/// measured slower; it compiled shape by shape, and MLX then traces and
/// builds a kernel for every new chunk length.
pub fn gelu_tanh(x: &Array) -> Result<Array> {
    thread_local! {
        static FUSED: RefCell<Fused> =
            RefCell::new(fused::compile(|x| Ok(vec![gelu_tanh_ops(&x[0])?]), true));
    }
    Ok(fused::call(&FUSED, std::slice::from_ref(x))?.remove(0))
}

/// GeGLU's `gelu_tanh(gate) · up` in one compiled function, as mlx-lm's
/// Gemma 4 `geglu`: Gemma's MLPs and GELU experts, one pass over the
/// intermediate activations instead of two.
pub fn geglu(gate: &Array, up: &Array) -> Result<Array> {
    thread_local! {
        static FUSED: RefCell<Fused> = RefCell::new(fused::compile(
            |x| Ok(vec![gelu_tanh_ops(&x[0])?.multiply(&x[1])?]),
            true,
        ));
    }
    Ok(fused::call(&FUSED, &[gate.clone(), up.clone()])?.remove(0))
}

/// [`gelu_tanh`] op by op (what the compiled function traces), `x³` as two
/// products: `powf` per element took 6% of a Gemma 4 prefill uncompiled.
fn gelu_tanh_ops(x: &Array) -> Result<Array> {
    let c = |v: f32| Array::from_f32(v).as_dtype(x.dtype());
    let cube = x.multiply(x)?.multiply(x)?;
    let inner =
        x.add(cube.multiply(c(0.044715)?)?)?.multiply(c((2.0 / std::f32::consts::PI).sqrt())?)?;
    Ok(x.multiply(c(0.5)?)?.multiply(ops::tanh(&inner)?.add(c(1.0)?)?)?)
}

/// Exact GELU, `x · (1 + erf(x / √2)) / 2` (the projectors of LFM2-VL and
/// Mistral 3), compiled once per thread: the same ops in the same order as
/// mlx-rs's `nn::gelu`, without its compile per call.
pub fn gelu(x: &Array) -> Result<Array> {
    thread_local! {
        static FUSED: RefCell<Fused> = RefCell::new(fused::compile(
            |x| {
                let x = &x[0];
                let c = |v: f32| Array::from_f32(v).as_dtype(x.dtype());
                let erf = ops::erf(x.divide(c(std::f32::consts::SQRT_2)?)?)?;
                Ok(vec![x.multiply(c(1.0)?.add(erf)?)?.divide(c(2.0)?)?])
            },
            true,
        ));
    }
    Ok(fused::call(&FUSED, std::slice::from_ref(x))?.remove(0))
}

/// SiLU, `x · σ(x)`, compiled once per thread (shapeless) as mlx-lm's
/// `nn.silu` is.
pub fn silu(x: &Array) -> Result<Array> {
    thread_local! {
        static FUSED: RefCell<Fused> =
            RefCell::new(fused::compile(|x| Ok(vec![silu_ops(&x[0])?]), true));
    }
    Ok(fused::call(&FUSED, std::slice::from_ref(x))?.remove(0))
}

/// SwiGLU's `silu(gate) · up` in one compiled function, as mlx-lm's
/// `swiglu`: the MLPs of the llama-shaped families, LFM2 and the SiLU
/// experts.
pub fn swiglu(gate: &Array, up: &Array) -> Result<Array> {
    thread_local! {
        static FUSED: RefCell<Fused> = RefCell::new(fused::compile(
            |x| Ok(vec![silu_ops(&x[0])?.multiply(&x[1])?]),
            true,
        ));
    }
    Ok(fused::call(&FUSED, &[gate.clone(), up.clone()])?.remove(0))
}

/// SiLU op by op, for compiled functions that gate with it.
pub(super) fn silu_ops(x: &Array) -> Result<Array> {
    Ok(x.multiply(ops::sigmoid(x)?)?)
}

/// gpt-oss's clamped SwiGLU, `(clip(up, ±limit) + 1) · g · σ(alpha · g)`
/// with `g = min(gate, limit)`, in one compiled function as mlx-lm's
/// `swiglu_oai`. `alpha` and `limit` go in as scalars, so one trace serves
/// every checkpoint's limit.
pub fn swiglu_clamped(gate: &Array, up: &Array, alpha: f32, limit: f32) -> Result<Array> {
    thread_local! {
        static FUSED: RefCell<Fused> = RefCell::new(fused::compile(swiglu_clamped_ops, true));
    }
    let inputs = [gate.clone(), up.clone(), Array::from_f32(alpha), Array::from_f32(limit)];
    Ok(fused::call(&FUSED, &inputs)?.remove(0))
}

/// [`swiglu_clamped`] op by op: `[gate, up, alpha, limit]` → `[h]`.
fn swiglu_clamped_ops(inputs: &[Array]) -> Result<Vec<Array>> {
    let [gate, up, alpha, limit] = inputs else {
        return Err(arity("clamped SwiGLU", 4, inputs));
    };
    let dtype = gate.dtype();
    let (alpha, limit) = (alpha.as_dtype(dtype)?, limit.as_dtype(dtype)?);
    let gate = ops::minimum(gate, &limit)?;
    let up = ops::clip(up, (limit.negative()?, &limit))?;
    let glu = gate.multiply(ops::sigmoid(&gate.multiply(&alpha)?)?)?;
    Ok(vec![up.add(Array::from_f32(1.0).as_dtype(dtype)?)?.multiply(glu)?])
}

/// Logit soft-capping, `tanh(x / cap) · cap` (Gemma 4's output head), in one
/// compiled function as mlx-lm's `logit_softcap`: one pass over the
/// vocabulary-wide logits instead of three.
pub fn logit_softcap(x: &Array, cap: f32) -> Result<Array> {
    thread_local! {
        static FUSED: RefCell<Fused> = RefCell::new(fused::compile(
            |inputs| {
                let [x, cap] = inputs else { return Err(arity("logit soft-cap", 2, inputs)) };
                let cap = cap.as_dtype(x.dtype())?;
                Ok(vec![ops::tanh(&x.divide(&cap)?)?.multiply(&cap)?])
            },
            true,
        ));
    }
    Ok(fused::call(&FUSED, &[x.clone(), Array::from_f32(cap)])?.remove(0))
}

fn arity(what: &str, want: usize, inputs: &[Array]) -> Error {
    Error::Mlx(format!("{what}: {want} inputs expected, {} given", inputs.len()))
}
