//! `vlm convert`: a GGUF model written as an mlx-community folder
//! (config.json with a `quantization` block, model.safetensors,
//! tokenizer.json, tokenizer_config.json with the chat template), so Python
//! mlx-lm and this engine load the very same weights.
use std::collections::HashMap;
use std::path::Path;

use mlx_rs::{Array, Dtype};
use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::model::layers::QuantizedMatrix;
use crate::model::WeightFormat;
use crate::tokenizer::Tokenizer;
use crate::weights::{gguf, QuantSpec};

pub fn gguf_to_folder(gguf_path: &Path, out: &Path, format: WeightFormat) -> Result<()> {
    let g = gguf::load(gguf_path, format)?;
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    let quantization = g.quantization.clone();
    let mut tensors: HashMap<String, Array> = g.weights.into_map();

    let mut config = g.config.clone();
    let class = match g.model_type.as_str() {
        "llama" => "LlamaForCausalLM",
        "qwen2" => "Qwen2ForCausalLM",
        "qwen3" => "Qwen3ForCausalLM",
        "qwen3_moe" => "Qwen3MoeForCausalLM",
        "gemma3_text" => "Gemma3ForCausalLM",
        other => return Err(Error::InvalidConfig(format!("convert: no class name for {other}"))),
    };
    config["architectures"] = json!([class]);

    match format {
        WeightFormat::Float32 => {
            for (module, spec) in &quantization.overrides {
                let Some(spec) = spec else { continue };
                let take = |t: &mut HashMap<String, Array>, p: &str| {
                    t.remove(&format!("{module}.{p}")).ok_or_else(|| Error::MissingTensor {
                        name: format!("{module}.{p}"),
                        source_desc: gguf_path.display().to_string(),
                    })
                };
                let q = QuantizedMatrix {
                    weight: take(&mut tensors, "weight")?,
                    scales: take(&mut tensors, "scales")?,
                    biases: Some(take(&mut tensors, "biases")?),
                    spec: *spec,
                    mode: crate::weights::QuantMode::Affine,
                };
                tensors.insert(format!("{module}.weight"), q.dequantize_f32()?);
            }
            for t in tensors.values_mut() {
                if t.dtype() != Dtype::Float32 {
                    *t = t.as_dtype(Dtype::Float32)?;
                }
            }
        }
        WeightFormat::AsStored => {
            if let Some(block) = quantization_block(&quantization.overrides) {
                config["quantization"] = block;
            }
        }
    }
    config["torch_dtype"] = json!("float32");

    let config_path = out.join("config.json");
    let text = serde_json::to_string_pretty(&config).expect("a JSON value serializes");
    std::fs::write(&config_path, text).map_err(|e| Error::io(&config_path, e))?;
    let metadata = HashMap::from([("format".to_string(), "mlx".to_string())]);
    Array::save_safetensors(tensors.iter(), &metadata, out.join("model.safetensors"))
        .map_err(|e| Error::Mlx(e.to_string()))?;
    Tokenizer::from_gguf_with(g.tokenizer, g.sentencepiece)?.write_hf_files(out)?;
    Ok(())
}

/// The most common spec becomes the default; the rest are per-module overrides.
fn quantization_block(specs: &HashMap<String, Option<QuantSpec>>) -> Option<Value> {
    let mut counts: HashMap<QuantSpec, usize> = HashMap::new();
    for spec in specs.values().flatten() {
        *counts.entry(*spec).or_default() += 1;
    }
    let default = counts.into_iter().max_by_key(|(_, n)| *n)?.0;
    let mut block = json!({"group_size": default.group_size, "bits": default.bits});
    for (module, spec) in specs {
        if let Some(spec) = spec.filter(|s| *s != default) {
            block[module] = json!({"group_size": spec.group_size, "bits": spec.bits});
        }
    }
    Some(block)
}
