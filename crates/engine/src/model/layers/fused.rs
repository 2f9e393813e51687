//! Functions that MLX compiles into fused kernels, as mlx-lm's `mx.compile`d
//! helpers are: MLX traces the function once, then runs each chain of
//! elementwise ops in it as one generated kernel instead of one pass over
//! memory per op.
//!
//! A function is compiled once per thread (a `thread_local!` holding what
//! [`compile`] returns, so its compile id, and with it MLX's cached trace,
//! lives as long as the thread) and called through [`call`].
use std::cell::RefCell;
use std::thread::LocalKey;

use mlx_rs::error::Exception;
use mlx_rs::Array;

use crate::error::Result;

/// A compiled function: arrays in, arrays out.
pub type Fused = Box<dyn FnMut(&[Array]) -> std::result::Result<Vec<Array>, Exception>>;

/// The op-by-op function a [`Fused`] traces.
pub type FusedOps = fn(&[Array]) -> Result<Vec<Array>>;

/// Compiles `ops`. `shapeless`: one trace serves every input shape, which
/// is only correct when no op in `ops` depends on the shapes it sees
/// (expand_dims, broadcasting and reductions over named axes do not;
/// a reshape to a computed shape does). Otherwise MLX traces again for each
/// new shape (a new batch size, a new chunk length).
pub fn compile(ops: FusedOps, shapeless: bool) -> Fused {
    Box::new(mlx_rs::transforms::compile::compile(
        move |inputs: &[Array]| ops(inputs).map_err(exception),
        shapeless,
    ))
}

/// Calls the compiled function `f` holds on this thread.
pub fn call(f: &'static LocalKey<RefCell<Fused>>, inputs: &[Array]) -> Result<Vec<Array>> {
    // Tracing reaches MLX state that no lock of MLX's guards; the engine
    // builds graphs on one thread, but tests run engines side by side. One
    // lock for every compiled function, uncontended in the app.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    Ok(f.with(|f| (f.borrow_mut())(inputs))?)
}

fn exception(e: crate::error::Error) -> Exception {
    Exception::custom(e.to_string())
}
