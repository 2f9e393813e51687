//! The `qwen3_moe` architecture (Qwen3-30B-A3B, Qwen3-235B-A22B): Qwen3's
//! attention with a sparse mixture of experts in place of the MLP in every
//! `decoder_sparse_step`-th layer not listed in `mlp_only_layers`.
//!
//! Checkpoints store the experts either one by one
//! (`mlp.experts.E.{gate,up,down}_proj`, Hugging Face) or stacked
//! (`mlp.switch_mlp.*`, mlx-community); the first are stacked at load.
use serde::Deserialize;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::model::layers::moe::{stack_experts, SparseMoe};
use crate::model::layers::rope::Rope;
use crate::model::layers::LayerLoader;
use crate::model::llama::{FeedForward, Llama, Mlp};
use crate::model::qwen3::{layout, parse_qwen3_args};
use crate::model::registry::Family;
use crate::weights::gguf::GgufImport;

pub const FAMILY: Family = Family {
    name: "Qwen3-MoE",
    model_types: &["qwen3_moe"],
    build: |_, config, loader| Ok(Box::new(load(config, loader)?)),
    layers: |config| Ok(parse_qwen3_args(config, "qwen3_moe")?.layer_shapes()),
    gguf: Some(GgufImport {
        architecture: "qwen3moe",
        class_name: "Qwen3MoeForCausalLM",
        block_names: &[
            ("attn_q_norm", "self_attn.q_norm"),
            ("attn_k_norm", "self_attn.k_norm"),
            ("ffn_gate_inp", "mlp.gate"),
            ("ffn_gate_exps", "mlp.switch_mlp.gate_proj"),
            ("ffn_up_exps", "mlp.switch_mlp.up_proj"),
            ("ffn_down_exps", "mlp.switch_mlp.down_proj"),
        ],
        config_keys: &[
            ("num_experts", "expert_count"),
            ("num_experts_per_tok", "expert_used_count"),
            ("moe_intermediate_size", "expert_feed_forward_length"),
        ],
        permuted_qk: false,
        norm_plus_one: false,
        complete_config: None,
    }),
    image_processor: None,
    tensor_parallel: true,
};

/// The mixture-of-experts fields of config.json.
#[derive(Debug, Clone, Deserialize)]
struct MoeArgs {
    num_experts: i32,
    num_experts_per_tok: i32,
    moe_intermediate_size: i32,
    #[serde(default = "one")]
    decoder_sparse_step: i32,
    #[serde(default)]
    mlp_only_layers: Vec<i32>,
    #[serde(default = "yes")]
    norm_topk_prob: bool,
}

fn one() -> i32 {
    1
}
fn yes() -> bool {
    true
}

pub fn load(config: &Value, loader: &mut LayerLoader) -> Result<Llama> {
    let args = parse_qwen3_args(config, "qwen3_moe")?;
    let rope = Rope::new(args.head_dim(), args.rope_theta, false, args.rope_scaling.as_ref())?;
    load_with_rope(config, loader, rope)
}

/// [`load`] with the rotary embedding given (Qwen3-VL-MoE's M-RoPE).
pub fn load_with_rope(config: &Value, loader: &mut LayerLoader, rope: Rope) -> Result<Llama> {
    let args = parse_qwen3_args(config, "qwen3_moe")?;
    let moe: MoeArgs = serde_json::from_value(config.clone())
        .map_err(|e| Error::InvalidConfig(format!("qwen3_moe config.json: {e}")))?;
    if moe.decoder_sparse_step < 1 {
        return Err(Error::InvalidConfig("decoder_sparse_step must be at least 1".into()));
    }
    const PARTS: [(&str, &str); 3] =
        [("gate_proj", "gate_proj"), ("up_proj", "up_proj"), ("down_proj", "down_proj")];
    for layer in 0..args.num_hidden_layers {
        stack_experts(loader, &format!("model.layers.{layer}.mlp"), moe.num_experts, &PARTS)?;
    }
    let dense_size = args.intermediate_size;
    let feed_forward = |loader: &mut LayerLoader, path: &str, layer: i32, hidden: i32| {
        let sparse = !moe.mlp_only_layers.contains(&layer)
            && moe.num_experts > 0
            && (layer + 1) % moe.decoder_sparse_step == 0;
        Ok(if sparse {
            FeedForward::Experts(SparseMoe::load(
                loader,
                path,
                hidden,
                moe.moe_intermediate_size,
                moe.num_experts,
                moe.num_experts_per_tok,
                moe.norm_topk_prob,
            )?)
        } else {
            FeedForward::Dense(Mlp::load(loader, path, hidden, dense_size, false)?)
        })
    };
    Llama::build_with(args, &layout(), rope, loader, feed_forward)
}
