//! Model families behind one trait, and loading a model from what users
//! download: a Hugging Face / mlx-community folder or a `.gguf` file.
//!
//! A new family is one file plus one line in [`build`].
pub mod attention;
pub mod layers;
pub mod llama;
pub mod mrope;
pub mod qwen2;
pub mod qwen2_vl;
pub mod rope;
pub mod vision_tower;

use std::path::{Path, PathBuf};

use mlx_rs::{Array, Dtype};
use serde_json::Value;

use crate::cache::KvCache;
use crate::error::{Error, Result};
use crate::tokenizer::Tokenizer;
use crate::weights::{self, Quantization, Weights};
pub use layers::WeightFormat;
pub use vision_tower::VisionTower;

/// Sizes the engine needs to plan caches and validate requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelShape {
    pub num_layers: usize,
    pub kv_heads: i32,
    pub head_dim: i32,
    pub vocab_size: i32,
    /// The longest context the model was trained for (`max_position_embeddings`).
    pub max_context: usize,
}

/// A decoder-only language model. Per-sequence state (positions, caches)
/// lives in the [`KvCache`] passed in, never on the model, so one model
/// serves any number of sequences.
pub trait LanguageModel {
    fn shape(&self) -> ModelShape;

    /// Token ids `[B, L]` → input embeddings `[B, L, D]`. Vision models
    /// splice image features into these before [`Self::forward_embeddings`].
    fn embed(&self, tokens: &Array) -> Result<Array>;

    /// Runs the decoder over `[B, L, D]` embeddings, appending to `cache`;
    /// returns the final-normed hidden states `[B, L, D]`.
    fn forward_embeddings(&self, embeddings: Array, cache: &mut dyn KvCache) -> Result<Array>;

    /// Hidden states → logits over the vocabulary.
    fn logits(&self, hidden: &Array) -> Result<Array>;

    /// The vision tower, for models that see images.
    fn vision(&self) -> Option<&dyn VisionTower> {
        None
    }

    /// Token ids `[B, L]` → logits `[B, L, vocab]`.
    fn forward(&self, tokens: &Array, cache: &mut dyn KvCache) -> Result<Array> {
        let h = self.forward_embeddings(self.embed(tokens)?, cache)?;
        self.logits(&h)
    }
}

/// Model families we implement, by config.json `model_type`.
pub const SUPPORTED_ARCHITECTURES: &[&str] = &["llama", "mistral", "qwen2", "qwen2_vl", "qwen2_5_vl"];

fn build(model_type: &str, config: &Value, loader: &mut layers::LayerLoader) -> Result<Box<dyn LanguageModel>> {
    Ok(match model_type {
        "llama" | "mistral" => Box::new(llama::Llama::load(config, loader)?),
        "qwen2" => Box::new(qwen2::load(config, loader)?),
        "qwen2_vl" | "qwen2_5_vl" => Box::new(qwen2_vl::Qwen2Vl::load(model_type, config, loader)?),
        other => {
            return Err(Error::UnsupportedArchitecture {
                architecture: other.to_string(),
                supported: SUPPORTED_ARCHITECTURES.join(", "),
            })
        }
    })
}

#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    pub format: WeightFormat,
}

/// What was loaded, for the UI and the stats line.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    /// A display name (folder name, or GGUF `general.name`).
    pub name: String,
    pub path: PathBuf,
    pub architecture: String,
    /// How the checkpoint is quantized, e.g. "4-bit (group 32)"; `None` for float.
    pub stored_quantization: Option<String>,
    pub format: WeightFormat,
    pub shape: ModelShape,
    /// Token ids that end generation.
    pub eos_token_ids: Vec<u32>,
    /// What the model can do, for the UI (badges, which settings apply).
    pub capabilities: Capabilities,
}

/// What a loaded model can do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Capabilities {
    /// It has a vision tower: it sees images.
    pub vision: bool,
    /// Its chat template reasons in a thinking block (`<think>`, `enable_thinking`).
    pub thinking: bool,
    /// Its chat template renders tool definitions and tool calls.
    pub tools: bool,
}

impl Capabilities {
    /// The template-derived flags of a model, plus `vision` from its tower.
    pub fn of(template_source: Option<&str>, vision: bool) -> Self {
        let t = template_source.unwrap_or_default();
        Self {
            vision,
            thinking: crate::stop::thinking_tags_for_template(t).is_some() || t.contains("enable_thinking"),
            tools: crate::stop::tool_call_tags_for_template(t).is_some(),
        }
    }
}

pub struct LoadedModel {
    pub model: Box<dyn LanguageModel>,
    pub tokenizer: Tokenizer,
    /// The image processor of a vision-language model (`preprocessor_config.json`).
    pub preprocessor: Option<crate::vision::ImagePreprocessor>,
    pub info: ModelInfo,
}

/// Where a model lives on disk.
enum Source {
    Folder(PathBuf),
    Gguf(PathBuf),
}

fn resolve(path: &Path) -> Result<Source> {
    let not_found = |reason: &str| Error::ModelNotFound { path: path.to_path_buf(), reason: reason.to_string() };
    if path.is_file() {
        return if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
            Ok(Source::Gguf(path.to_path_buf()))
        } else {
            Err(not_found("a model is a folder with config.json or a .gguf file"))
        };
    }
    if !path.is_dir() {
        return Err(not_found("no such file or folder"));
    }
    if path.join("config.json").is_file() {
        return Ok(Source::Folder(path.to_path_buf()));
    }
    let ggufs: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| Error::io(path, e))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")))
        .collect();
    match ggufs.as_slice() {
        [one] => Ok(Source::Gguf(one.clone())),
        [] => Err(not_found("the folder has no config.json and no .gguf file")),
        _ => Err(not_found("the folder has several .gguf files; name one")),
    }
}

/// Loads a model folder or `.gguf` file.
pub fn load(path: &Path, opts: &LoadOptions) -> Result<LoadedModel> {
    let started = std::time::Instant::now();
    let loaded = match resolve(path)? {
        Source::Folder(dir) => load_folder(&dir, opts)?,
        Source::Gguf(file) => load_gguf(&file, opts)?,
    };
    tracing::info!(
        model = %loaded.info.name,
        arch = %loaded.info.architecture,
        quantization = ?loaded.info.stored_quantization,
        format = ?loaded.info.format,
        secs = started.elapsed().as_secs_f32(),
        "model loaded"
    );
    Ok(loaded)
}

fn read_config(dir: &Path) -> Result<Value> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    serde_json::from_str(&text).map_err(|e| Error::InvalidConfig(format!("{}: {e}", path.display())))
}

fn model_type(config: &Value) -> Result<String> {
    if let Some(t) = config.get("model_type").and_then(Value::as_str) {
        return Ok(t.to_string());
    }
    // Older exports only list the HF class name.
    let arch = config
        .get("architectures")
        .and_then(|a| a.get(0))
        .and_then(Value::as_str)
        .ok_or_else(|| Error::InvalidConfig("config.json has neither model_type nor architectures".into()))?;
    Ok(arch.trim_end_matches("ForCausalLM").to_ascii_lowercase())
}

fn load_folder(dir: &Path, opts: &LoadOptions) -> Result<LoadedModel> {
    let config = read_config(dir)?;
    let model_type = model_type(&config)?;
    if !SUPPORTED_ARCHITECTURES.contains(&model_type.as_str()) {
        // Fail before reading gigabytes of weights.
        return Err(Error::UnsupportedArchitecture {
            architecture: model_type,
            supported: SUPPORTED_ARCHITECTURES.join(", "),
        });
    }
    let quantization = Quantization::from_config(&config)?;
    let mut weights = weights::safetensors::load_folder(dir)?;
    let tokenizer = Tokenizer::from_folder(dir)?;
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut loaded = finish(name, dir, &model_type, &config, &quantization, &mut weights, tokenizer, opts)?;
    if loaded.model.vision().is_some() {
        loaded.preprocessor = Some(crate::vision::ImagePreprocessor::from_folder(dir)?);
    }
    Ok(loaded)
}

fn load_gguf(file: &Path, opts: &LoadOptions) -> Result<LoadedModel> {
    let mut g = weights::gguf::load(file)?;
    let model_type = model_type(&g.config)?;
    let tokenizer = Tokenizer::from_gguf(g.tokenizer)?;
    // The file name is what users chose and recognize; `general.name` is often a training-run label.
    let name = match file.file_stem() {
        Some(stem) => stem.to_string_lossy().into_owned(),
        None => g.name.clone().unwrap_or_default(),
    };
    finish(name, file, &model_type, &g.config, &g.quantization, &mut g.weights, tokenizer, opts)
}

#[allow(clippy::too_many_arguments)]
fn finish(
    name: String,
    path: &Path,
    model_type: &str,
    config: &Value,
    quantization: &Quantization,
    weights: &mut Weights,
    tokenizer: Tokenizer,
    opts: &LoadOptions,
) -> Result<LoadedModel> {
    let stored_quantization = describe_quantization(quantization);
    let mut loader = layers::LayerLoader {
        weights,
        quantization,
        format: opts.format,
        dtype: activation_dtype(opts.format),
    };
    let model = build(model_type, config, &mut loader)?;
    let leftover = loader.weights.leftover();
    if !leftover.is_empty() {
        tracing::warn!(count = leftover.len(), first = %leftover[0], "checkpoint tensors the model does not use");
    }
    // Materialize the weights now (dequantization, casts, Q/K unpermutation)
    // rather than inside the first request's timing.
    let probe = Array::from_slice(&[0i32], &[1, 1]);
    let mut cache = crate::cache::SimpleKvCache::new(model.shape().num_layers);
    model.forward(&probe, &mut cache)?.eval()?;
    let info = ModelInfo {
        name,
        path: path.to_path_buf(),
        architecture: model_type.to_string(),
        stored_quantization,
        format: opts.format,
        shape: model.shape(),
        eos_token_ids: tokenizer.eos_ids().to_vec(),
        capabilities: Capabilities::of(tokenizer.chat_template().map(|t| t.source()), model.vision().is_some()),
    };
    Ok(LoadedModel { model, tokenizer, preprocessor: None, info })
}

/// Activations run in float32 on the CPU backend (no fast half-precision
/// kernels there) and in float16 on Metal.
fn activation_dtype(format: WeightFormat) -> Dtype {
    if cfg!(target_os = "macos") && format == WeightFormat::AsStored {
        Dtype::Float16
    } else {
        Dtype::Float32
    }
}

fn describe_quantization(q: &Quantization) -> Option<String> {
    let mut specs: Vec<(i32, i32)> = q
        .default
        .iter()
        .chain(q.overrides.values().flatten())
        .map(|s| (s.bits, s.group_size))
        .collect();
    specs.sort();
    specs.dedup();
    if specs.is_empty() {
        return None;
    }
    Some(
        specs
            .iter()
            .map(|(bits, group)| format!("{bits}-bit (group {group})"))
            .collect::<Vec<_>>()
            .join(" + "),
    )
}
