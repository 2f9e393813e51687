//! Loading a model from what users download: a Hugging Face /
//! mlx-community folder or a `.gguf` file. The family comes from the
//! registry; every tensor is checked by name and shape; the first forward
//! pass runs here, so a broken checkpoint fails at load, not mid-request.
use std::path::{Path, PathBuf};

use mlx_rs::{Array, Dtype};
use serde_json::Value;

use super::layers::{self, WeightFormat};
use super::registry::{self, Family};
use super::{Capabilities, LoadedModel, ModelInfo, Positions};
use crate::distributed::{Pipeline, TensorParallel};
use crate::error::{Error, Result};
use crate::tokenizer::Tokenizer;
use crate::weights::{self, Quantization, Weights};

#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    pub format: WeightFormat,
}

/// Where a model lives on disk.
enum Source {
    Folder(PathBuf),
    Gguf(PathBuf),
}

fn resolve(path: &Path) -> Result<Source> {
    let not_found = |reason: &str| Error::ModelNotFound {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    };
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

/// Loads a model folder or `.gguf` file. A draft head the checkpoint ships
/// (Qwen3.5's `mtp.*` layers) is left unread: only speculative decoding by
/// it needs it ([`load_with_draft_head`]).
pub fn load(path: &Path, opts: &LoadOptions) -> Result<LoadedModel> {
    load_whole(path, opts, false)
}

/// [`load`], with the checkpoint's own draft head when it has one
/// ([`super::LanguageModel::draft_head`]), for speculative decoding by it.
pub fn load_with_draft_head(path: &Path, opts: &LoadOptions) -> Result<LoadedModel> {
    load_whole(path, opts, true)
}

fn load_whole(path: &Path, opts: &LoadOptions, draft_head: bool) -> Result<LoadedModel> {
    let started = std::time::Instant::now();
    let loaded = match resolve(path)? {
        Source::Folder(dir) => load_folder(&dir, opts, None, draft_head)?,
        Source::Gguf(file) => load_gguf(&file, opts, None)?,
    };
    tracing::info!(
        model = %loaded.info.name,
        arch = %loaded.info.architecture,
        quantization = ?loaded.info.stored_quantization,
        loaded_as = %loaded.info.loaded_as,
        layers = %loaded.info.cache_layout,
        secs = started.elapsed().as_secs_f32(),
        "model loaded"
    );
    Ok(loaded)
}

/// This process's share of a model split across processes.
#[derive(Clone)]
pub enum Share {
    /// Its slices of every layer's heads and MLP columns.
    Tensor(TensorParallel),
    /// Its stage: a contiguous range of whole layers.
    Pipeline(Pipeline),
}

/// Loads this rank's share of a model split across the ranks of `tp`
/// (tensor parallel: every rank calls this with the same folder and options;
/// the load ends with a forward pass that is already a collective). Each
/// rank keeps only its slices of the sharded layers.
pub fn load_tensor_parallel(
    path: &Path,
    opts: &LoadOptions,
    tp: TensorParallel,
) -> Result<LoadedModel> {
    load_share(path, opts, Share::Tensor(tp))
}

/// Loads this rank's pipeline stage of a model (every rank calls this with
/// the same model and options; the load ends with a forward pass through
/// every stage). Each rank reads only its own layers' tensors.
pub fn load_pipeline(path: &Path, opts: &LoadOptions, pipeline: Pipeline) -> Result<LoadedModel> {
    load_share(path, opts, Share::Pipeline(pipeline))
}

/// Loads this rank's `share` of a split model.
pub fn load_share(path: &Path, opts: &LoadOptions, share: Share) -> Result<LoadedModel> {
    match (resolve(path)?, share) {
        (Source::Folder(dir), share) => load_folder(&dir, opts, Some(share), false),
        (Source::Gguf(file), Share::Pipeline(p)) => load_gguf(&file, opts, Some(Share::Pipeline(p))),
        (Source::Gguf(file), Share::Tensor(_)) => Err(Error::InvalidRequest(format!(
            "{}: tensor parallel loads a safetensors folder, not a .gguf file (split it as a pipeline, or convert it)",
            file.display()
        ))),
    }
}

/// A drafter folder that reads the target's own states: mlx-vlm's split
/// multi-token-prediction head (`model_type: "qwen3_5_mtp"`, written by its
/// `split_mtp`), for a `target` whose checkpoint has none. Refused, saying
/// why, when the folder is no such head or was split from a model of
/// another size.
pub fn load_draft_head(
    path: &Path,
    target: &dyn super::LanguageModel,
    opts: &LoadOptions,
) -> Result<Box<dyn super::DraftHead>> {
    let mut folder = DrafterFolder::open(
        path,
        "qwen3_5_mtp",
        "a multi-token-prediction head",
        "a multi-token-prediction head (mlx-vlm's split drafter, model_type qwen3_5_mtp): give it \
         as a draft model instead",
    )?;
    let (config, mut loader) = folder.loader(opts);
    // The width of the target's hidden states, from one embedding.
    let hidden = target.embed(&Array::from_slice(&[0i32], &[1, 1]))?.dim(-1);
    let head =
        super::qwen3_5::mtp::load_split(config, &mut loader, hidden, target.shape().vocab_size)?;
    let leftover = loader.weights.leftover();
    if !leftover.is_empty() {
        tracing::warn!(count = leftover.len(), first = %leftover[0], "head tensors not used");
    }
    Ok(Box::new(head))
}

/// A Gemma 4 assistant drafter folder (`model_type: "gemma4_assistant"`)
/// for `target`. Refused, saying why, when the folder holds something
/// else or was made for another model; one draft is run on a probe at load,
/// so a drafter that does not fit fails here, not mid-request.
pub fn load_assistant(
    path: &Path,
    target: &dyn super::LanguageModel,
    opts: &LoadOptions,
) -> Result<Box<dyn super::KvDrafter>> {
    let mut folder = DrafterFolder::open(
        path,
        "gemma4_assistant",
        "an assistant drafter",
        "a Gemma 4 assistant drafter (model_type gemma4_assistant)",
    )?;
    let (config, mut loader) = folder.loader(opts);
    let probe = Array::from_slice(&[0i32], &[1, 1]);
    let layout = target.cache_layout();
    let assistant = super::gemma4::assistant::load(
        config,
        &mut loader,
        target.embed(&probe)?.dim(-1),
        target.shape().vocab_size,
        layout.kinds(),
    )?;
    let leftover = loader.weights.leftover();
    if !leftover.is_empty() {
        tracing::warn!(count = leftover.len(), first = %leftover[0], "assistant tensors not used");
    }
    // One draft over a one-token target cache: shapes that do not fit fail now.
    let mut cache = target.new_cache(1);
    let hidden = target.forward_embeddings(
        target.embed(&probe)?,
        &probe,
        &Positions::Start(0),
        &mut cache,
    )?;
    use super::KvDrafter;
    assistant.draft(target, &cache, &probe, &hidden, &[0], 1)?.eval()?;
    Ok(Box::new(assistant))
}

/// The drafter folders the engine reads besides models: what one holds,
/// told from its config.json alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrafterKind {
    /// A Gemma 4 assistant drafter ([`load_assistant`]).
    Assistant,
    /// mlx-vlm's split multi-token-prediction head ([`load_draft_head`]).
    MtpHead,
}

impl DrafterKind {
    /// Its config.json `model_type`.
    pub fn model_type(self) -> &'static str {
        match self {
            DrafterKind::Assistant => "gemma4_assistant",
            DrafterKind::MtpHead => "qwen3_5_mtp",
        }
    }

    /// What it is, in words ("a Gemma 4 assistant drafter").
    pub fn words(self) -> &'static str {
        match self {
            DrafterKind::Assistant => "a Gemma 4 assistant drafter",
            DrafterKind::MtpHead => "a Qwen3.5 multi-token-prediction head",
        }
    }

    /// The `model_type`s of the models it can draft for.
    fn targets(self) -> impl Iterator<Item = &'static str> {
        let lists = match self {
            DrafterKind::Assistant => {
                [super::gemma4::FAMILY.model_types, super::gemma4::vision::FAMILY.model_types]
            }
            DrafterKind::MtpHead => {
                [super::qwen3_5::FAMILY.model_types, super::qwen3_5::vision::FAMILY.model_types]
            }
        };
        lists.into_iter().flatten().copied()
    }

    /// The hidden size and vocabulary of the model it was made for.
    fn made_for(self, config: &Value) -> (Option<u64>, Option<u64>) {
        let text = config.get("text_config").filter(|t| t.is_object()).unwrap_or(config);
        let hidden = match self {
            DrafterKind::Assistant => config.get("backbone_hidden_size"),
            DrafterKind::MtpHead => text.get("hidden_size"),
        };
        (hidden.and_then(Value::as_u64), text.get("vocab_size").and_then(Value::as_u64))
    }
}

/// The drafter in the folder `path`, from its config.json's `model_type`
/// (no weights read, no MLX); `None` when it holds none, or no readable config.
pub fn drafter_kind(path: &Path) -> Option<DrafterKind> {
    let config = read_config(path).ok()?;
    let found = registry::model_type(&config).ok()?;
    [DrafterKind::Assistant, DrafterKind::MtpHead].into_iter().find(|k| k.model_type() == found)
}

/// Whether the drafter folder `drafter` can draft for the model folder
/// `target`, from their config.json files alone (no weights, no MLX): the
/// family it drafts for, and the hidden size and vocabulary of the model it
/// was made for, which [`load_assistant`] and [`load_draft_head`] check
/// again on the weights. Refused, saying why, in words for a form.
pub fn check_drafter(drafter: &Path, target: &Path) -> Result<DrafterKind> {
    let kind = drafter_kind(drafter).ok_or_else(|| {
        Error::InvalidRequest(format!(
            "{} holds no drafter (a Gemma 4 assistant or a split multi-token-prediction head)",
            drafter.display()
        ))
    })?;
    if target.is_file() {
        return Err(Error::InvalidRequest(format!(
            "it is {}, matched to a model folder (config.json), and this model is a .gguf file",
            kind.words()
        )));
    }
    let config = read_config(target)?;
    let model_type = registry::model_type(&config)?;
    if !kind.targets().any(|t| t == model_type) {
        let family = registry::family(&model_type).map_or(model_type.as_str(), |f| f.name);
        let drafts_for = match kind {
            DrafterKind::Assistant => "Gemma 4",
            DrafterKind::MtpHead => "Qwen3.5",
        };
        return Err(Error::InvalidRequest(format!(
            "it is {}, which drafts for {drafts_for} models, and this model is {family}",
            kind.words()
        )));
    }
    let shape = registry::shape_of(&config)?;
    let (hidden, vocab) = kind.made_for(&read_config(drafter)?);
    let (want_hidden, want_vocab) = (shape.hidden_size as u64, shape.vocab_size as u64);
    if (hidden, vocab) != (Some(want_hidden), Some(want_vocab)) {
        let said = |v: Option<u64>| v.map_or("?".to_string(), |v| v.to_string());
        return Err(Error::InvalidRequest(format!(
            "it was made for a model of hidden size {} and vocabulary {}, and this model has \
             hidden size {want_hidden} and vocabulary {want_vocab}",
            said(hidden),
            said(vocab)
        )));
    }
    Ok(kind)
}

/// A drafter's own folder, opened and checked to hold the expected
/// `model_type` before any weight is read.
struct DrafterFolder {
    config: Value,
    quantization: Quantization,
    weights: Weights,
}

impl DrafterFolder {
    /// `what` names the drafter in the not-found reason ("an assistant
    /// drafter"); `expected` says what the folder should have held.
    fn open(path: &Path, model_type: &str, what: &str, expected: &str) -> Result<Self> {
        if !path.join("config.json").is_file() {
            return Err(Error::ModelNotFound {
                path: path.to_path_buf(),
                reason: format!("{what} is a folder with config.json"),
            });
        }
        let config = read_config(path)?;
        let found = registry::model_type(&config)?;
        if found != model_type {
            return Err(Error::InvalidRequest(format!(
                "{} holds a {found} model, not {expected}",
                path.display()
            )));
        }
        let quantization = Quantization::from_config(&config)?;
        let weights = weights::safetensors::load_folder(path)?;
        Ok(Self { config, quantization, weights })
    }

    /// Its config and a loader over the whole drafter: no split across
    /// processes, and the draft tensors are the point.
    fn loader(&mut self, opts: &LoadOptions) -> (&Value, layers::LayerLoader<'_>) {
        let loader = layers::LayerLoader::whole(&mut self.weights, &self.quantization, opts.format);
        (&self.config, loader)
    }
}

/// A model folder's config.json, parsed (what the loader reads first; a
/// fixture reads it to record what the family takes for it).
pub fn read_config(dir: &Path) -> Result<Value> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    serde_json::from_str(&text)
        .map_err(|e| Error::InvalidConfig(format!("{}: {e}", path.display())))
}

fn load_folder(
    dir: &Path,
    opts: &LoadOptions,
    share: Option<Share>,
    draft_head: bool,
) -> Result<LoadedModel> {
    let config = read_config(dir)?;
    let model_type = registry::model_type(&config)?;
    // Before reading gigabytes of weights.
    let family = registry::family(&model_type).ok_or_else(|| registry::unsupported(&model_type))?;
    let quantization = Quantization::from_config(&config)?;
    let mut weights = weights::safetensors::load_folder(dir)?;
    let tokenizer = Tokenizer::from_folder(dir)?;
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let stored = describe_quantization(&quantization);
    let words = quantization_words(&quantization);
    let parts = Parts {
        name,
        path: dir,
        model_type: &model_type,
        family,
        config: &config,
        stored,
        words,
        draft_head,
    };
    let mut loaded = finish(parts, &quantization, &mut weights, tokenizer, opts, share)?;
    if let Some(processing) = family.image_processor {
        loaded.preprocessor = Some((processing.read)(dir)?);
    }
    Ok(loaded)
}

fn load_gguf(file: &Path, opts: &LoadOptions, share: Option<Share>) -> Result<LoadedModel> {
    let mut g = weights::gguf::load(file, opts.format)?;
    let tokenizer = Tokenizer::from_gguf_with(g.tokenizer, g.sentencepiece)?;
    // The file name is what users chose and recognize; `general.name` is often a training-run label.
    let name = match file.file_stem() {
        Some(stem) => stem.to_string_lossy().into_owned(),
        None => g.name.clone().unwrap_or_default(),
    };
    let parts = Parts {
        name,
        path: file,
        model_type: &g.model_type,
        family: g.family,
        config: &g.config,
        stored: Some(g.stored),
        words: g.quantization_words,
        draft_head: false,
    };
    let mut loaded = finish(parts, &g.quantization, &mut g.weights, tokenizer, opts, share)?;
    if let (Some(note), WeightFormat::AsStored) = (g.converted, opts.format) {
        // Blocks MLX cannot keep were requantized; the rest kept as they are.
        loaded.info.loaded_as = format!("{note}; the other blocks kept quantized");
    }
    Ok(loaded)
}

/// What `finish` needs besides the tensors.
struct Parts<'a> {
    name: String,
    path: &'a Path,
    model_type: &'a str,
    family: &'static Family,
    config: &'a Value,
    stored: Option<String>,
    words: Option<String>,
    /// Read the checkpoint's own draft head, if it has one.
    draft_head: bool,
}

fn finish(
    parts: Parts,
    quantization: &Quantization,
    weights: &mut Weights,
    tokenizer: Tokenizer,
    opts: &LoadOptions,
    share: Option<Share>,
) -> Result<LoadedModel> {
    let (tensor_parallel, pipeline) = match share.clone() {
        Some(Share::Tensor(tp)) => (Some(tp), None),
        Some(Share::Pipeline(p)) => (None, Some(p)),
        None => (None, None),
    };
    let mut loader = layers::LayerLoader {
        weights,
        quantization,
        format: opts.format,
        dtype: activation_dtype(opts.format),
        tensor_parallel,
        sharded_layers: 0,
        pipeline,
        stage: None,
        draft_head: parts.draft_head,
    };
    let model = (parts.family.build)(parts.model_type, parts.config, &mut loader)?;
    // Whole on every rank would run, but would not be what was asked for.
    let loader_stage = loader.stage.take();
    let refused = match (&share, &loader_stage) {
        (Some(Share::Tensor(_)), _) if loader.sharded_layers == 0 => {
            Some("(tensor parallel) yet: split it as a pipeline")
        }
        (Some(Share::Pipeline(_)), None) => Some("(pipeline) yet"),
        _ => None,
    };
    if let Some(how) = refused {
        return Err(Error::InvalidRequest(format!(
            "the {} family cannot be split across processes {how}",
            parts.family.name
        )));
    }
    let leftover = loader.weights.leftover();
    if !leftover.is_empty() {
        tracing::warn!(count = leftover.len(), first = %leftover[0], "checkpoint tensors the model does not use");
    }
    // Materialize the weights now (dequantization, casts, Q/K unpermutation)
    // rather than inside the first request's timing.
    let probe = Array::from_slice(&[0i32], &[1, 1]);
    model.forward(&probe, &Positions::Start(0), &mut model.new_cache(1))?.eval()?;
    let loaded_as = match (opts.format, &parts.stored) {
        (_, None) => "float".to_string(),
        (WeightFormat::AsStored, Some(_)) => "kept quantized".to_string(),
        (WeightFormat::Float32, Some(_)) => "dequantized to float32".to_string(),
    };
    let info = ModelInfo {
        name: parts.name,
        path: parts.path.to_path_buf(),
        architecture: parts.model_type.to_string(),
        family: parts.family.name.to_string(),
        stored_quantization: parts.stored,
        quantization_words: parts.words,
        loaded_as,
        format: opts.format,
        shape: model.shape(),
        cache_layout: model.cache_layout().describe(),
        eos_token_ids: tokenizer.eos_ids().to_vec(),
        capabilities: Capabilities::of(
            tokenizer.chat_template().map(|t| t.source()),
            model.vision().is_some(),
        ),
        has_chat_template: tokenizer.chat_template().is_some(),
        share: match (&share, &loader_stage) {
            (Some(Share::Tensor(tp)), _) => Some(format!(
                "1/{} of each layer's heads and MLP columns, tensor parallel rank {} of {}",
                tp.size(),
                tp.rank(),
                tp.size()
            )),
            (Some(Share::Pipeline(p)), Some(stage)) => Some(format!(
                "layers {}..{} of {}, pipeline rank {} of {}",
                stage.layers().start,
                stage.layers().end,
                stage.total(),
                p.group().rank(),
                p.group().size()
            )),
            _ => None,
        },
    };
    Ok(LoadedModel { model, tokenizer: std::sync::Arc::new(tokenizer), preprocessor: None, info })
}

/// Activations run in float32 on the CPU backend (no fast half-precision
/// kernels there) and in float16 on Metal.
pub fn activation_dtype(format: WeightFormat) -> Dtype {
    if cfg!(target_os = "macos") && format == WeightFormat::AsStored {
        Dtype::Float16
    } else {
        Dtype::Float32
    }
}

/// How a checkpoint is quantized, in words ("4-bit (group 64) + 8-bit (group 64)").
pub fn describe_quantization(q: &Quantization) -> Option<String> {
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

/// A checkpoint's quantization in plain words: the bits most layers use,
/// and the embeddings' when they differ ("4-bit, embeddings 8-bit").
pub fn quantization_words(q: &Quantization) -> Option<String> {
    let default = q.default.map(|s| s.bits);
    let embedding = q
        .overrides
        .iter()
        .find(|(module, _)| module.ends_with("embed_tokens"))
        .map(|(_, spec)| spec.map(|s| s.bits));
    let others: Vec<i32> = q
        .overrides
        .iter()
        .filter(|(module, _)| !module.ends_with("embed_tokens"))
        .filter_map(|(_, spec)| spec.map(|s| s.bits))
        .collect();
    let body = default.or_else(|| most_common(&others))?;
    let mut words = format!("{body}-bit");
    if let Some(e) = embedding.filter(|e| *e != Some(body)) {
        words.push_str(&match e {
            Some(bits) => format!(", embeddings {bits}-bit"),
            None => ", embeddings unquantized".to_string(),
        });
    }
    if others.iter().any(|&b| b != body) {
        words.push_str(", some layers otherwise");
    }
    Some(words)
}

fn most_common(values: &[i32]) -> Option<i32> {
    let mut counts: Vec<(i32, usize)> = Vec::new();
    for &v in values {
        match counts.iter_mut().find(|(x, _)| *x == v) {
            Some((_, n)) => *n += 1,
            None => counts.push((v, 1)),
        }
    }
    counts.into_iter().max_by_key(|(_, n)| *n).map(|(v, _)| v)
}
