//! The `qwen2` architecture (Qwen2, Qwen2.5 text models): the llama decoder
//! with biases on the Q/K/V projections (not on the output projection) and
//! RoPE base 1e6 unless config.json says otherwise.
use serde_json::Value;

use crate::error::Result;
use crate::model::layers::rope::Rope;
use crate::model::layers::LayerLoader;
use crate::model::llama::{DecoderLayout, Llama, LlamaArgs};
use crate::model::registry::Family;
use crate::weights::gguf::GgufImport;

/// The registry entry: Qwen2 / Qwen2.5 text models.
pub const FAMILY: Family = Family {
    name: "Qwen2",
    model_types: &["qwen2"],
    build: |_, config, loader| Ok(Box::new(load(config, loader)?)),
    layers: |config| Ok(parse_args(config)?.layer_shapes()),
    gguf: Some(GgufImport {
        architecture: "qwen2",
        class_name: "Qwen2ForCausalLM",
        block_names: &[],
        config_keys: &[],
        permuted_qk: false,
        norm_plus_one: false,
        complete_config: None,
    }),
    image_processor: None,
    tensor_parallel: true,
};

/// Qwen2's defaults where config.json is silent (transformers' `Qwen2Config`).
const DEFAULT_ROPE_THETA: f64 = 1_000_000.0;

pub fn load(config: &Value, loader: &mut LayerLoader) -> Result<Llama> {
    let args = parse_args(config)?;
    let rope = Rope::new(
        args.head_dim(),
        args.rope_theta,
        args.rope_traditional,
        args.rope_scaling.as_ref(),
    )?;
    Llama::build(args, &DecoderLayout { qkv_bias: true, ..DecoderLayout::llama() }, rope, loader)
}

pub fn parse_args(config: &Value) -> Result<LlamaArgs> {
    let mut config = config.clone();
    if let Some(map) = config.as_object_mut() {
        map.entry("rope_theta").or_insert(DEFAULT_ROPE_THETA.into());
        // `attention_bias` means a bias on all four projections in llama
        // configs; qwen2 has Q/K/V biases whatever it says.
        map.remove("attention_bias");
    }
    crate::model::llama::parse_args(&config, "qwen2")
}
