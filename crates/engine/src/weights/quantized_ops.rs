//! MLX's quantized products and dequantization in every mode. mlx-c's
//! `quantized_matmul`, `gather_qmm` and `dequantize` take a mode (affine,
//! mxfp4, nvfp4, mxfp8); mlx-rs 0.33 always passes "affine", so these call
//! mlx-c themselves with the module's mode. A mode other than affine has
//! no biases (mlx-c takes a null array there).
use std::ffi::CString;

use mlx_rs::{Array, Dtype, Stream};

use super::quantization::{QuantMode, QuantSpec};
use crate::error::{Error, Result};
use crate::ffi_error;

fn optional_int(v: i32) -> mlx_sys::mlx_optional_int {
    mlx_sys::mlx_optional_int { value: v, has_value: true }
}

/// The array behind an optional argument (a new null array when absent,
/// which mlx-c takes as "none" and the caller frees).
struct OptionalArray(mlx_sys::mlx_array, bool);

impl OptionalArray {
    fn of(a: Option<&Array>) -> Self {
        match a {
            Some(a) => OptionalArray(a.as_ptr(), false),
            None => OptionalArray(unsafe { mlx_sys::mlx_array_new() }, true),
        }
    }
}

impl Drop for OptionalArray {
    fn drop(&mut self) {
        if self.1 {
            unsafe { mlx_sys::mlx_array_free(self.0) };
        }
    }
}

/// Runs one mlx-c op that fills an array, on the default stream.
fn call(
    what: &str,
    mode: QuantMode,
    op: impl FnOnce(*mut mlx_sys::mlx_array, *const std::ffi::c_char, mlx_sys::mlx_stream) -> i32,
) -> Result<Array> {
    ffi_error::install();
    let stream = Stream::thread_local_or_default();
    let mode = CString::new(mode.name()).expect("mode names have no NUL");
    ffi_error::clear();
    let mut res = unsafe { mlx_sys::mlx_array_new() };
    let status = op(&mut res, mode.as_ptr(), stream.as_ptr());
    if status != 0 {
        unsafe { mlx_sys::mlx_array_free(res) };
        return Err(Error::Mlx(ffi_error::take(what, status)));
    }
    // SAFETY: mlx-c filled `res` with a new reference that we now own.
    Ok(unsafe { Array::from_ptr(res) })
}

/// `x @ w.T` (or `x @ w` without `transpose`) for quantized `w`.
#[allow(clippy::too_many_arguments)]
pub fn quantized_matmul(
    x: &Array,
    w: &Array,
    scales: &Array,
    biases: Option<&Array>,
    transpose: bool,
    spec: QuantSpec,
    mode: QuantMode,
) -> Result<Array> {
    let biases = OptionalArray::of(biases);
    call("quantized_matmul", mode, |res, mode, s| unsafe {
        mlx_sys::mlx_quantized_matmul(
            res,
            x.as_ptr(),
            w.as_ptr(),
            scales.as_ptr(),
            biases.0,
            transpose,
            optional_int(spec.group_size),
            optional_int(spec.bits),
            mode,
            s,
        )
    })
}

/// [`quantized_matmul`] with `w` stacked `[experts, …]` and each row's
/// expert given by `indices` (MLX's `gather_qmm`).
#[allow(clippy::too_many_arguments)]
pub fn gather_qmm(
    x: &Array,
    w: &Array,
    scales: &Array,
    biases: Option<&Array>,
    indices: &Array,
    transpose: bool,
    spec: QuantSpec,
    mode: QuantMode,
    sorted: bool,
) -> Result<Array> {
    let biases = OptionalArray::of(biases);
    let lhs = OptionalArray::of(None);
    call("gather_qmm", mode, |res, mode, s| unsafe {
        mlx_sys::mlx_gather_qmm(
            res,
            x.as_ptr(),
            w.as_ptr(),
            scales.as_ptr(),
            biases.0,
            lhs.0,
            indices.as_ptr(),
            transpose,
            optional_int(spec.group_size),
            optional_int(spec.bits),
            mode,
            sorted,
            s,
        )
    })
}

/// The float values of quantized `w`, in `dtype` (for affine, MLX's
/// default: the scales' dtype).
pub fn dequantize(
    w: &Array,
    scales: &Array,
    biases: Option<&Array>,
    spec: QuantSpec,
    mode: QuantMode,
    dtype: Option<Dtype>,
) -> Result<Array> {
    let biases = OptionalArray::of(biases);
    let global_scale = OptionalArray::of(None);
    let dtype = mlx_sys::mlx_optional_dtype {
        value: dtype.map_or(mlx_sys::mlx_dtype__MLX_FLOAT32, |d| d as mlx_sys::mlx_dtype),
        has_value: dtype.is_some(),
    };
    call("dequantize", mode, |res, mode, s| unsafe {
        mlx_sys::mlx_dequantize(
            res,
            w.as_ptr(),
            scales.as_ptr(),
            biases.0,
            optional_int(spec.group_size),
            optional_int(spec.bits),
            mode,
            global_scale.0,
            dtype,
            s,
        )
    })
}

/// `w` quantized in `mode`: packed values, scales, and biases (affine only).
pub fn quantize(
    w: &Array,
    spec: QuantSpec,
    mode: QuantMode,
) -> Result<(Array, Array, Option<Array>)> {
    if mode == QuantMode::Affine {
        let (q, s, b) = mlx_rs::ops::quantize(w, spec.group_size, spec.bits)?;
        return Ok((q, s, Some(b)));
    }
    ffi_error::install();
    let stream = Stream::thread_local_or_default();
    let name = CString::new(mode.name()).expect("mode names have no NUL");
    let global_scale = OptionalArray::of(None);
    ffi_error::clear();
    unsafe {
        let mut res = mlx_sys::mlx_vector_array_new();
        let status = mlx_sys::mlx_quantize(
            &mut res,
            w.as_ptr(),
            optional_int(spec.group_size),
            optional_int(spec.bits),
            name.as_ptr(),
            global_scale.0,
            stream.as_ptr(),
        );
        if status != 0 {
            mlx_sys::mlx_vector_array_free(res);
            return Err(Error::Mlx(ffi_error::take("quantize", status)));
        }
        let mut parts = Vec::new();
        for i in 0..mlx_sys::mlx_vector_array_size(res) {
            let mut a = mlx_sys::mlx_array_new();
            mlx_sys::mlx_vector_array_get(&mut a, res, i);
            parts.push(Array::from_ptr(a));
        }
        mlx_sys::mlx_vector_array_free(res);
        let mut parts = parts.into_iter();
        match (parts.next(), parts.next()) {
            (Some(q), Some(s)) => Ok((q, s, None)),
            _ => Err(Error::Mlx(format!("quantize ({}) returned too few arrays", mode.name()))),
        }
    }
}
