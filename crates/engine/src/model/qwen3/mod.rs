//! The `qwen3` architecture (Qwen3 dense models, 0.6B–32B): the llama
//! decoder with an RMSNorm over each head's queries and keys before RoPE, no
//! Q/K/V biases, and an explicit `head_dim`. Its chat template thinks in
//! `<think>` blocks, switched by `enable_thinking` (and `/think`, `/no_think`
//! in a message).
use serde_json::Value;

use crate::error::{Error, Result};
use crate::model::layers::rope::Rope;
use crate::model::layers::LayerLoader;
use crate::model::llama::{parse_args, DecoderLayout, Llama, LlamaArgs};
use crate::model::registry::Family;
use crate::weights::gguf::GgufImport;

/// llama.cpp's names for the per-head norms.
pub const GGUF_QK_NORMS: &[(&str, &str)] =
    &[("attn_q_norm", "self_attn.q_norm"), ("attn_k_norm", "self_attn.k_norm")];

pub const FAMILY: Family = Family {
    name: "Qwen3",
    model_types: &["qwen3"],
    build: |_, config, loader| Ok(Box::new(load(config, loader)?)),
    layers: |config| Ok(parse_qwen3_args(config, "qwen3")?.layer_shapes()),
    gguf: Some(GgufImport {
        architecture: "qwen3",
        class_name: "Qwen3ForCausalLM",
        block_names: GGUF_QK_NORMS,
        config_keys: &[],
        permuted_qk: false,
        norm_plus_one: false,
        complete_config: None,
    }),
    image_processor: None,
    tensor_parallel: true,
};

/// The layout of Qwen3's decoder (also Qwen3-MoE's).
pub fn layout() -> DecoderLayout {
    DecoderLayout { qk_norm: true, ..DecoderLayout::llama() }
}

/// Parses the fields Qwen3 and Qwen3-MoE share; `head_dim` is required (it
/// is not hidden / heads in these models).
pub fn parse_qwen3_args(config: &Value, family: &str) -> Result<LlamaArgs> {
    let mut config = config.clone();
    if let Some(map) = config.as_object_mut() {
        // Qwen3 has no biases on its projections, whatever a config says.
        map.remove("attention_bias");
        map.entry("rope_theta").or_insert(1_000_000.0.into());
    }
    let args = parse_args(&config, family)?;
    if args.head_dim.is_none() {
        return Err(Error::InvalidConfig(format!("{family} config.json has no head_dim")));
    }
    Ok(args)
}

pub fn load(config: &Value, loader: &mut LayerLoader) -> Result<Llama> {
    let args = parse_qwen3_args(config, "qwen3")?;
    let rope = Rope::new(args.head_dim(), args.rope_theta, false, args.rope_scaling.as_ref())?;
    Llama::build(args, &layout(), rope, loader)
}
