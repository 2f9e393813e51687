//! A sparse mixture of experts (Qwen3-MoE): a router picks `top_k` of
//! `experts` SwiGLU MLPs per token, and their outputs are summed, weighted by
//! the router's probabilities. The experts' matrices are stacked
//! `[experts, out, in]` and applied with MLX's gather matmuls, so a batch
//! whose rows route to different experts runs in one call per projection.
use mlx_rs::{nn, ops, ops::indexing::IndexOp, Array};

use super::layers::{ExpertMatrices, LayerLoader, Linear};
use crate::error::{Error, Result};

pub struct SparseMoe {
    /// The router: hidden → one logit per expert.
    gate: Linear,
    gate_proj: ExpertMatrices,
    up_proj: ExpertMatrices,
    down_proj: ExpertMatrices,
    top_k: i32,
    /// Renormalize the chosen experts' probabilities to sum to 1.
    norm_topk_prob: bool,
}

/// Above this many (token, expert) pairs, tokens are sorted by expert so each
/// expert's matrix is read once (as mlx-lm does); the result is the same.
const SORT_FROM: i32 = 64;

impl SparseMoe {
    /// Loads `path.gate` and the stacked `path.switch_mlp.{gate,up,down}_proj`.
    pub fn load(
        loader: &mut LayerLoader,
        path: &str,
        hidden: i32,
        intermediate: i32,
        experts: i32,
        top_k: i32,
        norm_topk_prob: bool,
    ) -> Result<Self> {
        if top_k < 1 || top_k > experts {
            return Err(Error::InvalidConfig(format!("num_experts_per_tok {top_k} must be within 1..={experts}")));
        }
        let e = format!("{path}.switch_mlp");
        Ok(Self {
            gate: loader.linear(&format!("{path}.gate"), hidden, experts, false)?,
            gate_proj: loader.experts(&format!("{e}.gate_proj"), experts, intermediate, hidden)?,
            up_proj: loader.experts(&format!("{e}.up_proj"), experts, intermediate, hidden)?,
            down_proj: loader.experts(&format!("{e}.down_proj"), experts, hidden, intermediate)?,
            top_k,
            norm_topk_prob,
        })
    }

    /// `[B, L, D]` → `[B, L, D]`.
    pub fn forward(&self, x: &Array) -> Result<Array> {
        // Softmax over all experts first, then the top k (Qwen3's order).
        let probs = ops::softmax_axis(&self.gate.forward(x)?, -1, true)?;
        let k = self.top_k;
        let experts = probs.dim(-1);
        let chosen = ops::argpartition_axis(&probs, experts - k, -1)?.index((.., .., (experts - k)..));
        let mut scores = probs.take_along_axis(&chosen, -1)?;
        if self.norm_topk_prob {
            scores = scores.divide(scores.sum_axis(-1, true)?)?;
        }
        let y = self.experts(x, &chosen)?;
        Ok(y.multiply(scores.expand_dims(-1)?)?.sum_axis(-2, false)?.as_dtype(y.dtype())?)
    }

    /// Each token through its chosen experts: `[B, L, D]`, indices `[B, L, k]` → `[B, L, k, D]`.
    fn experts(&self, x: &Array, indices: &Array) -> Result<Array> {
        let (b, l, d) = (x.dim(0), x.dim(1), x.dim(2));
        let k = indices.dim(-1);
        let x = x.reshape(&[b, l, 1, 1, d])?;
        if indices.size() as i32 >= SORT_FROM {
            // Flatten the (token, expert) pairs, sort them by expert, run, unsort.
            let flat = indices.flatten(None, None)?;
            let order = ops::argsort_axis(&flat, 0)?;
            let inverse = ops::argsort_axis(&order, 0)?;
            let tokens = order.floor_divide(Array::from_int(k))?;
            let x = x.reshape(&[b * l, 1, d])?.take_axis(&tokens, 0)?;
            let sorted = flat.take_axis(&order, 0)?;
            let y = self.swiglu(&x, &sorted, true)?;
            let y = y.take_axis(&inverse, 0)?;
            return Ok(y.reshape(&[b, l, k, d])?);
        }
        let y = self.swiglu(&x, indices, false)?;
        Ok(y.reshape(&[b, l, k, d])?)
    }

    fn swiglu(&self, x: &Array, indices: &Array, sorted: bool) -> Result<Array> {
        let up = self.up_proj.gather_matmul_t(x, indices, sorted)?;
        let gate = self.gate_proj.gather_matmul_t(x, indices, sorted)?;
        let h = nn::silu(gate)?.multiply(up)?;
        self.down_proj.gather_matmul_t(&h, indices, sorted)
    }
}
