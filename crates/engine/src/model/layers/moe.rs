//! Sparse mixtures of experts: a router picks `top_k` of `experts` gated
//! MLPs per token, and their outputs are summed, weighted by the router's
//! scores. The experts' matrices are stacked `[experts, out, in]` and applied
//! with MLX's gather matmuls ([`Experts`]), so a batch whose rows route to
//! different experts runs in one call per projection. [`SparseMoe`] is
//! Qwen3-MoE's router over SwiGLU experts; Gemma 4 routes its own way over
//! GELU-gated ones.
use mlx_rs::{ops, ops::indexing::IndexOp, Array};

use crate::error::{Error, Result};
use crate::model::layers::{geglu, swiglu_clamped, ExpertMatrices, LayerLoader, Linear};

pub struct SparseMoe {
    /// The router: hidden → one logit per expert.
    gate: Linear,
    experts: Experts,
    top_k: i32,
    /// Renormalize the chosen experts' probabilities to sum to 1.
    norm_topk_prob: bool,
}

/// The gate's activation in each expert's gated MLP.
#[derive(Debug, Clone, Copy)]
pub enum GateActivation {
    /// SwiGLU (Qwen3-MoE).
    Silu,
    /// GELU, tanh approximation (Gemma 4).
    GeluApprox,
    /// gpt-oss's clamped SwiGLU: the gate clipped from above at `limit`,
    /// the linear part to ±`limit` and shifted by one:
    /// `(up + 1) · gate · σ(alpha · gate)`.
    ClampedSwiglu { alpha: f32, limit: f32 },
}

/// Stacked gated-MLP experts (`gate_proj`, `up_proj`, `down_proj`).
pub struct Experts {
    gate_proj: ExpertMatrices,
    up_proj: ExpertMatrices,
    down_proj: ExpertMatrices,
    activation: GateActivation,
    /// Each expert's output biases `[experts, out]` of gate, up and down
    /// (gpt-oss); `None` for experts without.
    biases: Option<[Array; 3]>,
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
            return Err(Error::InvalidConfig(format!(
                "num_experts_per_tok {top_k} must be within 1..={experts}"
            )));
        }
        Ok(Self {
            gate: loader.linear(&format!("{path}.gate"), hidden, experts, false)?,
            experts: Experts::load(
                loader,
                &format!("{path}.switch_mlp"),
                hidden,
                intermediate,
                experts,
                GateActivation::Silu,
            )?,
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
        let chosen =
            ops::argpartition_axis(&probs, experts - k, -1)?.index((.., .., (experts - k)..));
        let mut scores = probs.take_along_axis(&chosen, -1)?;
        if self.norm_topk_prob {
            scores = scores.divide(scores.sum_axis(-1, true)?)?;
        }
        self.experts.weighted_sum(x, &chosen, &scores)
    }
}

/// Hugging Face stores a layer's experts as `experts.gate_up_proj`
/// `[E, 2I, D]` and `experts.down_proj` (Gemma 4, Qwen3.5-MoE); mlx-community
/// as `{gate,up,down}_proj.weight` under one path. Renames the first as the
/// second, under `into`.
pub fn unstack_gate_up(loader: &mut LayerLoader, experts: &str, into: &str) -> Result<()> {
    if let Some(t) = loader.weights.remove(&format!("{experts}.gate_up_proj")) {
        let halves = ops::split_equal(&t, 2, -2)?;
        loader.weights.insert(format!("{into}.gate_proj.weight"), halves[0].clone());
        loader.weights.insert(format!("{into}.up_proj.weight"), halves[1].clone());
    }
    if let Some(t) = loader.weights.remove(&format!("{experts}.down_proj")) {
        loader.weights.insert(format!("{into}.down_proj.weight"), t);
    }
    Ok(())
}

/// Hugging Face stores a layer's experts one by one
/// (`{path}.experts.{e}.{from}.weight`); mlx-community stacks them as
/// `{path}.switch_mlp.{to}.weight` `[experts, out, in]`. Stacks the first as
/// the second, for each `(from, to)` in `parts`; a layer already stacked
/// (or dense) is left alone.
pub fn stack_experts(
    loader: &mut LayerLoader,
    path: &str,
    experts: i32,
    parts: &[(&str, &str)],
) -> Result<()> {
    for (from, to) in parts {
        if !loader.weights.contains(&format!("{path}.experts.0.{from}.weight")) {
            continue;
        }
        let mut stack = Vec::with_capacity(experts as usize);
        for e in 0..experts {
            stack.push(loader.weights.take_any(&format!("{path}.experts.{e}.{from}.weight"))?);
        }
        loader.weights.insert(format!("{path}.switch_mlp.{to}.weight"), ops::stack(&stack, 0)?);
    }
    Ok(())
}

impl Experts {
    /// Loads `path.{gate,up,down}_proj`, each stacked `[experts, out, in]`.
    pub fn load(
        loader: &mut LayerLoader,
        path: &str,
        hidden: i32,
        intermediate: i32,
        experts: i32,
        activation: GateActivation,
    ) -> Result<Self> {
        Ok(Self {
            gate_proj: loader.experts(
                &format!("{path}.gate_proj"),
                experts,
                intermediate,
                hidden,
            )?,
            up_proj: loader.experts(&format!("{path}.up_proj"), experts, intermediate, hidden)?,
            down_proj: loader.experts(
                &format!("{path}.down_proj"),
                experts,
                hidden,
                intermediate,
            )?,
            activation,
            biases: None,
        })
    }

    /// [`Self::load`] for experts with biases (`path.{gate,up,down}_proj.bias`,
    /// `[experts, out]` each).
    pub fn load_with_biases(
        loader: &mut LayerLoader,
        path: &str,
        hidden: i32,
        intermediate: i32,
        experts: i32,
        activation: GateActivation,
    ) -> Result<Self> {
        let mut loaded = Self::load(loader, path, hidden, intermediate, experts, activation)?;
        let mut bias =
            |name: &str, out: i32| loader.float(&format!("{path}.{name}.bias"), &[experts, out]);
        loaded.biases = Some([
            bias("gate_proj", intermediate)?,
            bias("up_proj", intermediate)?,
            bias("down_proj", hidden)?,
        ]);
        Ok(loaded)
    }

    /// `[B, L, D]` through the experts `indices` `[B, L, k]`, summed with
    /// `weights` `[B, L, k]` → `[B, L, D]`.
    pub fn weighted_sum(&self, x: &Array, indices: &Array, weights: &Array) -> Result<Array> {
        let y = self.each(x, indices)?;
        Ok(y.multiply(weights.expand_dims(-1)?)?.sum_axis(-2, false)?.as_dtype(y.dtype())?)
    }

    /// Each token through its chosen experts: `[B, L, D]`, indices `[B, L, k]` → `[B, L, k, D]`.
    fn each(&self, x: &Array, indices: &Array) -> Result<Array> {
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
            let y = self.gated_mlp(&x, &sorted, true)?;
            let y = y.take_axis(&inverse, 0)?;
            return Ok(y.reshape(&[b, l, k, d])?);
        }
        let y = self.gated_mlp(&x, indices, false)?;
        Ok(y.reshape(&[b, l, k, d])?)
    }

    fn gated_mlp(&self, x: &Array, indices: &Array, sorted: bool) -> Result<Array> {
        // Each (token, expert) pair's bias row, `[..., k, 1, out]` as the products.
        let bias = |which: usize, y: Array| -> Result<Array> {
            match &self.biases {
                None => Ok(y),
                Some(b) => Ok(y.add(b[which].take_axis(indices, 0)?.expand_dims(-2)?)?),
            }
        };
        let up = bias(1, self.up_proj.gather_matmul_t(x, indices, sorted)?)?;
        let gate = bias(0, self.gate_proj.gather_matmul_t(x, indices, sorted)?)?;
        let h = match self.activation {
            GateActivation::Silu => super::swiglu(&gate, &up)?,
            GateActivation::GeluApprox => geglu(&gate, &up)?,
            GateActivation::ClampedSwiglu { alpha, limit } => {
                swiglu_clamped(&gate, &up, alpha, limit)?
            }
        };
        bias(2, self.down_proj.gather_matmul_t(&h, indices, sorted)?)
    }
}
