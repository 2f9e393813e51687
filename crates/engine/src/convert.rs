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
use crate::weights::{gguf, QuantMode, QuantSpec, Quantization};

pub fn gguf_to_folder(gguf_path: &Path, out: &Path, format: WeightFormat) -> Result<()> {
    let g = gguf::load(gguf_path, format)?;
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    let quantization = g.quantization.clone();
    let mut tensors: HashMap<String, Array> = g.weights.into_map();

    let mut config = g.config.clone();
    // Every family with a GGUF import names its class there.
    if let Some(import) = &g.family.gguf {
        config["architectures"] = json!([import.class_name]);
    }

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
                // The floating-point modes (gpt-oss's MXFP4 experts) keep no biases.
                let q = QuantizedMatrix {
                    weight: take(&mut tensors, "weight")?,
                    scales: take(&mut tensors, "scales")?,
                    biases: tensors.remove(&format!("{module}.biases")),
                    spec: *spec,
                    mode: quantization.mode_for_module(module),
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
            if let Some(block) = quantization_block(&quantization) {
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

/// The most common spec (with its mode) becomes the default; the rest are
/// per-module overrides. A mode other than affine is named (`"mode":
/// "mxfp4"`): MXFP4's groups of 32 at 4 bits are affine 4-bit's too.
fn quantization_block(quantization: &Quantization) -> Option<Value> {
    let stored = |module: &String, spec: &Option<QuantSpec>| {
        spec.map(|spec| (spec, quantization.mode_for_module(module)))
    };
    let mut counts: HashMap<(QuantSpec, QuantMode), usize> = HashMap::new();
    for (module, spec) in &quantization.overrides {
        if let Some(key) = stored(module, spec) {
            *counts.entry(key).or_default() += 1;
        }
    }
    let default = counts.into_iter().max_by_key(|(_, n)| *n)?.0;
    let entry = |(spec, mode): (QuantSpec, QuantMode)| {
        let mut e = json!({"group_size": spec.group_size, "bits": spec.bits});
        if mode != QuantMode::Affine {
            e["mode"] = json!(mode.name());
        }
        e
    };
    let mut block = entry(default);
    for (module, spec) in &quantization.overrides {
        if let Some(key) = stored(module, spec).filter(|k| *k != default) {
            block[module] = entry(key);
        }
    }
    Some(block)
}
