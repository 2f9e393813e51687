//! Collectives and point-to-point messages on MLX arrays, over a [`Group`].
//!
//! Each returns a lazy array, as every MLX op does: nothing is sent until it
//! is evaluated, and then every rank of the group must evaluate the matching
//! op (the same collectives in the same order), or the ranks wait on each
//! other. A peer that dies surfaces at evaluation as MLX's
//! "[ring] connection to a peer was lost" error; a peer that stays alive but
//! never takes part blocks the evaluation (MLX has no timeout there: see the
//! module notes on who guards against that).
use mlx_rs::{Array, Device, Dtype, Stream};

use super::group::Group;
use crate::ffi_error;
use crate::{Error, Result};

/// The sum over all ranks of each rank's `x` (same shape and dtype everywhere).
pub fn all_sum(x: &Array, group: &Group) -> Result<Array> {
    call("all_sum", |res, s| unsafe {
        mlx_sys::mlx_distributed_all_sum(res, x.as_ptr(), group.as_raw(), s)
    })
}

/// Every rank's `x` concatenated along the first axis, rank 0 first.
pub fn all_gather(x: &Array, group: &Group) -> Result<Array> {
    call("all_gather", |res, s| unsafe {
        mlx_sys::mlx_distributed_all_gather(res, x.as_ptr(), group.as_raw(), s)
    })
}

/// Sends `x` to rank `dst`. The returned array stands for the send: evaluate
/// it (its value is `x`) for the message to go out. The ring backend reaches
/// only its two neighbours (`rank ± 1`, wrapping).
pub fn send(x: &Array, dst: usize, group: &Group) -> Result<Array> {
    let dst = peer(dst, group)?;
    call("send", |res, s| unsafe {
        mlx_sys::mlx_distributed_send(res, x.as_ptr(), dst, group.as_raw(), s)
    })
}

/// Receives an array of `shape` and `dtype` from rank `src` (which sends it
/// with [`send`]); the data arrives when the result is evaluated.
pub fn recv(shape: &[i32], dtype: Dtype, src: usize, group: &Group) -> Result<Array> {
    let src = peer(src, group)?;
    call("recv", |res, s| unsafe {
        mlx_sys::mlx_distributed_recv(
            res,
            shape.as_ptr(),
            shape.len(),
            dtype as mlx_sys::mlx_dtype,
            src,
            group.as_raw(),
            s,
        )
    })
}

/// Receives an array shaped and typed like `like` from rank `src`.
pub fn recv_like(like: &Array, src: usize, group: &Group) -> Result<Array> {
    recv(like.shape(), like.dtype(), src, group)
}

/// `x`, which evaluates only after `after` has: MLX's `depends`. A stage
/// of a pipeline receives its input with [`recv`], which has no inputs of
/// its own; the collectives that lead up to the pass (the step's token ids,
/// shared with an `all_sum`) must still run first, on every rank, in the
/// same order.
pub fn after(x: &Array, after: &[&Array]) -> Result<Array> {
    ffi_error::install();
    ffi_error::clear();
    let handles: Vec<mlx_sys::mlx_array> = after.iter().map(|a| a.as_ptr()).collect();
    // SAFETY: the vectors take their own references to the arrays (freed
    // below); `res` is filled with a new vector that we free after taking
    // its one element (a new reference we then own).
    unsafe {
        let inputs = mlx_sys::mlx_vector_array_new_value(x.as_ptr());
        let dependencies = mlx_sys::mlx_vector_array_new_data(handles.as_ptr(), handles.len());
        let mut res = mlx_sys::mlx_vector_array_new();
        let status = mlx_sys::mlx_depends(&mut res, inputs, dependencies);
        mlx_sys::mlx_vector_array_free(inputs);
        mlx_sys::mlx_vector_array_free(dependencies);
        if status != 0 {
            mlx_sys::mlx_vector_array_free(res);
            return Err(Error::Distributed(ffi_error::take("depends", status)));
        }
        let mut out = mlx_sys::mlx_array_new();
        let status = mlx_sys::mlx_vector_array_get(&mut out, res, 0);
        mlx_sys::mlx_vector_array_free(res);
        if status != 0 {
            mlx_sys::mlx_array_free(out);
            return Err(Error::Distributed(ffi_error::take("depends", status)));
        }
        Ok(Array::from_ptr(out))
    }
}

fn peer(rank: usize, group: &Group) -> Result<i32> {
    if rank >= group.size() || rank == group.rank() {
        return Err(Error::Distributed(format!(
            "rank {} cannot exchange with rank {rank} in a group of {}",
            group.rank(),
            group.size()
        )));
    }
    Ok(rank as i32)
}

/// Runs one mlx-c distributed op on the CPU stream.
///
/// The CPU stream because MLX runs the ring's (and JACCL's) communication on
/// the CPU; on a Mac the GPU arrays feeding it are synchronized by MLX's
/// cross-stream dependencies, as in mlx-lm.
fn call(
    what: &str,
    op: impl FnOnce(*mut mlx_sys::mlx_array, mlx_sys::mlx_stream) -> i32,
) -> Result<Array> {
    ffi_error::install();
    let stream = Stream::try_default_on_device(&Device::cpu())?;
    ffi_error::clear();
    let mut res = unsafe { mlx_sys::mlx_array_new() };
    let status = op(&mut res, stream.as_ptr());
    if status != 0 {
        unsafe { mlx_sys::mlx_array_free(res) };
        return Err(Error::Distributed(ffi_error::take(what, status)));
    }
    // SAFETY: mlx-c filled `res` with a new reference that we now own (and
    // free when the Array drops).
    Ok(unsafe { Array::from_ptr(res) })
}
