//! A one-token step's graph handed to MLX layer by layer, as it is built.
//!
//! On MLX's CPU backend `async_eval` runs at most about a hundred kernels
//! ahead of the stream thread, so it returns only near the end of the step
//! it queued; the next step's whole graph (hundreds of nodes for a
//! bench-size model, about a sixth of the compute's time) is then built
//! while the stream thread finishes that tail and then waits. Queuing each
//! layer's keys and values as soon as they exist lets the stream thread
//! start on layer 0 while the host builds layer 1, as a GPU's command
//! buffers would. Results are the same: only when things run changes.
//! Steps of more tokens (prompts, verify passes) spend their time in large
//! kernels and are left whole.
use mlx_rs::Array;

use super::KvView;
use crate::error::Result;

/// Queues everything `view` depends on (the step's graph up to this
/// layer's keys and values) for evaluation, without waiting for it.
pub fn queue_view(view: &KvView) -> Result<()> {
    match view {
        KvView::Float(keys, values) => queue([keys, values]),
        KvView::Quantized { keys, values, .. } => queue(keys.iter().chain(values)),
    }
}

/// [`queue_view`] for a recurrent layer's new state.
pub fn queue<'a>(arrays: impl IntoIterator<Item = &'a Array>) -> Result<()> {
    Ok(mlx_rs::transforms::async_eval(arrays)?)
}
