//! The `lfm2_moe` architecture (Liquid AI's LFM2-8B-A1B): LFM2's hybrid of
//! short gated convolutions and attention ([`crate::model::lfm2`]), whose
//! blocks after the first `num_dense_layers` put a mixture of experts where
//! LFM2 has its dense MLP.
//!
//! The router scores every expert with a sigmoid. It picks the top
//! `num_experts_per_tok` on those scores plus a learned per-expert bias
//! (`expert_bias`, with `use_expert_bias`: it balances the load and only
//! steers the choice), then weights the chosen experts by their unbiased
//! scores, renormalized to sum to one (`norm_topk_prob`) and scaled by
//! `routed_scaling_factor`. The experts are SwiGLU MLPs of
//! `moe_intermediate_size`; the dense blocks' MLP is `intermediate_size` wide
//! as given (no LFM2-style width adjustment).
//!
//! Names: mlx-community's checkpoints say `feed_forward.{gate,up,down}_proj`
//! and stack the experts as `feed_forward.switch_mlp.{gate,up,down}_proj`;
//! Hugging Face's say `w1` / `w3` / `w2`, the experts one by one
//! (`feed_forward.experts.{e}.w1`). Both load, and so do llama.cpp's
//! `lfm2moe` GGUFs (LFM2's names plus `ffn_*_exps`, `ffn_gate_inp` and the
//! routing bias as `exp_probs_b.bias`).
use mlx_rs::{ops, ops::indexing::IndexOp, Array, Dtype};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::model::layers::moe::{stack_experts, Experts, GateActivation};
use crate::model::layers::{LayerLoader, Linear};
use crate::model::lfm2::{self, FeedForward, Lfm2, Lfm2Args};
use crate::model::llama::Mlp;
use crate::model::registry::Family;
use crate::weights::gguf::{joined_block_names, GgufImport};

pub const FAMILY: Family = Family {
    name: "LFM2-MoE",
    model_types: &["lfm2_moe"],
    build: |_, config, loader| Ok(Box::new(load(config, loader)?)),
    // The experts change no cache: the layers keep what LFM2's keep.
    layers: |config| Ok(Lfm2Args::parse(config)?.layer_shapes()),
    gguf: Some(GgufImport {
        architecture: "lfm2moe",
        class_name: "Lfm2MoeForCausalLM",
        block_names: &GGUF_BLOCK_NAMES,
        config_keys: &[
            ("conv_L_cache", "shortconv.l_cache"),
            ("num_experts", "expert_count"),
            ("num_experts_per_tok", "expert_used_count"),
            ("moe_intermediate_size", "expert_feed_forward_length"),
            ("num_dense_layers", "leading_dense_block_count"),
        ],
        permuted_qk: false,
        norm_plus_one: false,
        complete_config: Some(complete_gguf_config),
    }),
    image_processor: None,
    tensor_parallel: false,
};

/// llama.cpp's `lfm2moe` block names: LFM2's, and the experts stacked as
/// its converter stacks them (`[experts, out, in]`, as `switch_mlp`'s).
const GGUF_BLOCK_NAMES: [(&str, &str); 16] = joined_block_names(
    lfm2::GGUF_BLOCK_NAMES,
    [
        ("ffn_gate_inp", "feed_forward.gate"),
        ("ffn_gate_exps", "feed_forward.switch_mlp.gate_proj"),
        ("ffn_up_exps", "feed_forward.switch_mlp.up_proj"),
        ("ffn_down_exps", "feed_forward.switch_mlp.down_proj"),
        ("exp_probs_b.bias", "feed_forward.expert_bias"),
    ],
);

/// What llama.cpp's `lfm2moe` graph hard-codes, said in config.json's
/// words: the routing bias is always there, the chosen experts' weights are
/// renormalized and not scaled (its `build_moe_ffn(…, norm_w = true,
/// scale_w = false)`), and the dense blocks' MLP width is stored as is.
fn complete_gguf_config(c: &mut Map<String, Value>) {
    lfm2::complete_gguf_config(c);
    c.insert("use_expert_bias".into(), true.into());
    c.insert("norm_topk_prob".into(), true.into());
    c.insert("routed_scaling_factor".into(), 1.0.into());
}

/// The config.json fields of the mixture (mlx-lm's names; those it
/// requires are required here too).
#[derive(Debug, Clone, Deserialize)]
struct MoeArgs {
    num_hidden_layers: i32,
    intermediate_size: i32,
    moe_intermediate_size: i32,
    num_experts: i32,
    num_experts_per_tok: i32,
    norm_topk_prob: bool,
    use_expert_bias: bool,
    num_dense_layers: i32,
    #[serde(default = "one")]
    routed_scaling_factor: f32,
}

fn one() -> f32 {
    1.0
}

impl MoeArgs {
    fn parse(config: &Value) -> Result<Self> {
        let args: Self = serde_json::from_value(config.clone())
            .map_err(|e| Error::InvalidConfig(format!("lfm2_moe config.json: {e}")))?;
        let (k, experts) = (args.num_experts_per_tok, args.num_experts);
        if k < 1 || k > experts {
            return Err(Error::InvalidConfig(format!(
                "lfm2_moe: num_experts_per_tok {k} must be within 1..={experts}"
            )));
        }
        if args.intermediate_size < 1 || args.moe_intermediate_size < 1 {
            return Err(Error::InvalidConfig(
                "lfm2_moe: intermediate_size and moe_intermediate_size must be positive".into(),
            ));
        }
        Ok(args)
    }
}

/// LFM2's decoder with experts after the dense blocks.
pub fn load(config: &Value, loader: &mut LayerLoader) -> Result<Lfm2> {
    let moe = MoeArgs::parse(config)?;
    to_mlx_names(loader, &moe)?;
    Lfm2::load_with(config, loader, &|loader, args, path, layer| {
        let d = args.hidden_size();
        Ok(if (layer as i32) < moe.num_dense_layers {
            Box::new(Dense(Mlp::load(loader, path, d, moe.intermediate_size, false)?))
        } else {
            Box::new(RoutedExperts::load(loader, path, d, &moe)?)
        })
    })
}

/// Hugging Face's names as mlx-community's: `w1` / `w3` / `w2` as
/// `gate_proj` / `up_proj` / `down_proj`, and each layer's experts stacked
/// under `switch_mlp` (`[experts, out, in]`).
fn to_mlx_names(loader: &mut LayerLoader, moe: &MoeArgs) -> Result<()> {
    const PARTS: [(&str, &str); 3] = [("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj")];
    for layer in 0..moe.num_hidden_layers {
        let f = format!("model.layers.{layer}.feed_forward");
        for (hf, mlx) in PARTS {
            for part in ["weight", "scales", "biases"] {
                loader.weights.rename(&format!("{f}.{hf}.{part}"), format!("{f}.{mlx}.{part}"));
            }
        }
        stack_experts(loader, &f, moe.num_experts, &PARTS)?;
    }
    Ok(())
}

/// A dense block's SwiGLU MLP, named as the other SwiGLU families name it.
struct Dense(Mlp);

impl FeedForward for Dense {
    fn forward(&self, x: &Array) -> Result<Array> {
        self.0.forward(x)
    }
}

/// The sigmoid-routed experts of one block.
struct RoutedExperts {
    /// hidden → one score per expert.
    gate: Linear,
    /// Added to the scores to choose, not to weigh (`[experts]`, float32).
    expert_bias: Option<Array>,
    experts: Experts,
    top_k: i32,
    norm_topk_prob: bool,
    routed_scaling_factor: f32,
}

impl RoutedExperts {
    fn load(loader: &mut LayerLoader, path: &str, d: i32, moe: &MoeArgs) -> Result<Self> {
        let experts = moe.num_experts;
        let expert_bias = match moe.use_expert_bias {
            true => Some(loader.float(&format!("{path}.expert_bias"), &[experts])?),
            false => None,
        };
        Ok(Self {
            gate: loader.linear(&format!("{path}.gate"), d, experts, false)?,
            expert_bias,
            experts: Experts::load(
                loader,
                &format!("{path}.switch_mlp"),
                d,
                moe.moe_intermediate_size,
                experts,
                GateActivation::Silu,
            )?,
            top_k: moe.num_experts_per_tok,
            norm_topk_prob: moe.norm_topk_prob,
            routed_scaling_factor: moe.routed_scaling_factor,
        })
    }
}

impl FeedForward for RoutedExperts {
    fn forward(&self, x: &Array) -> Result<Array> {
        let scores = ops::sigmoid(&self.gate.forward(x)?)?;
        let choose_on = match &self.expert_bias {
            Some(bias) => scores.as_dtype(Dtype::Float32)?.add(bias)?,
            None => scores.clone(),
        };
        let (experts, k) = (scores.dim(-1), self.top_k);
        let chosen =
            ops::argpartition_axis(&choose_on, experts - k, -1)?.index((.., .., (experts - k)..));
        let mut weights = scores.take_along_axis(&chosen, -1)?;
        if self.norm_topk_prob {
            // The reference's epsilon keeps a row of zero scores finite.
            let total = weights.sum_axis(-1, true)?.add(Array::from_f32(1e-6))?;
            weights = weights.divide(total)?;
        }
        let weights = weights.multiply(Array::from_f32(self.routed_scaling_factor))?;
        self.experts.weighted_sum(x, &chosen, &weights.as_dtype(x.dtype())?)
    }
}

/// A tiny LFM2-MoE for tests, from its config alone: convolution and
/// attention blocks, one dense block then experts (8, 2 per token) with a
/// routing bias. `vocab`: the tokenizer's size.
pub fn tiny_config(vocab: i32) -> Value {
    serde_json::json!({
        "model_type": "lfm2_moe", "architectures": ["Lfm2MoeForCausalLM"],
        "vocab_size": vocab, "hidden_size": 64, "num_hidden_layers": 4,
        "layer_types": ["conv", "full_attention", "conv", "full_attention"],
        "num_attention_heads": 4, "num_key_value_heads": 2, "conv_L_cache": 3,
        "conv_bias": false, "norm_eps": 1e-5, "rope_theta": 1000000.0,
        "max_position_embeddings": 4096, "intermediate_size": 96,
        "moe_intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2,
        "norm_topk_prob": true, "use_expert_bias": true, "num_dense_layers": 1,
        "routed_scaling_factor": 1.0, "tie_word_embeddings": true,
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0
    })
}

/// A bench-size LFM2-MoE (LFM2-8B-A1B's plan scaled down: hidden 2048 →
/// 512, 24 blocks → 8 with attention in two, 32 experts with 4 per token,
/// the first block dense), for scripts/bench-models.sh. `vocab`: the
/// tokenizer's size.
pub fn bench_config(vocab: i32) -> Value {
    let mut config = tiny_config(vocab);
    let layer_types: Vec<&str> =
        (0..8).map(|i| if i == 2 || i == 5 { "full_attention" } else { "conv" }).collect();
    for (key, value) in [
        ("hidden_size", serde_json::json!(512)),
        ("num_hidden_layers", serde_json::json!(8)),
        ("layer_types", serde_json::json!(layer_types)),
        ("num_attention_heads", serde_json::json!(8)),
        ("num_key_value_heads", serde_json::json!(2)),
        ("intermediate_size", serde_json::json!(1792)),
        ("moe_intermediate_size", serde_json::json!(448)),
        ("num_experts", serde_json::json!(32)),
        ("num_experts_per_tok", serde_json::json!(4)),
        ("max_position_embeddings", serde_json::json!(32768)),
    ] {
        config[key] = value;
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::LayerCache;

    #[test]
    fn configs_it_cannot_run_are_refused() {
        for (key, value) in [
            ("num_experts_per_tok", serde_json::json!(9)),
            ("num_experts_per_tok", serde_json::json!(0)),
            ("moe_intermediate_size", serde_json::json!(0)),
        ] {
            let mut config = tiny_config(300);
            config[key] = value;
            assert!(matches!(MoeArgs::parse(&config), Err(Error::InvalidConfig(_))), "{key}");
        }
        let mut config = tiny_config(300);
        config.as_object_mut().unwrap().remove("use_expert_bias");
        let refused = MoeArgs::parse(&config).unwrap_err().to_string();
        assert!(refused.contains("use_expert_bias"), "{refused}");
    }

    #[test]
    fn the_bench_size_is_a_config_it_runs() {
        let config = bench_config(300);
        let moe = MoeArgs::parse(&config).unwrap();
        assert_eq!((moe.num_experts, moe.num_experts_per_tok), (32, 4));
        let shapes = (FAMILY.layers)(&config).unwrap();
        assert_eq!(shapes.iter().filter(|s| s.cache == LayerCache::Full).count(), 2);
    }

    #[test]
    fn the_experts_keep_no_cache_of_their_own() {
        let config = tiny_config(300);
        let shapes = (FAMILY.layers)(&config).unwrap();
        let lfm2 = Lfm2Args::parse(&config).unwrap().layer_shapes();
        assert_eq!(shapes, lfm2);
        assert_eq!(shapes.len(), 4);
    }
}
