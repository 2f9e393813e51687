//! Text ↔ token ids for every model family: Hugging Face `tokenizers` for the
//! actual encoding, plus what the engine needs around it — special token ids
//! (BOS, the set of EOS ids), the chat template, and streaming detokenization.
//!
//! Two sources: an mlx-community / Hugging Face folder ([`Tokenizer::from_folder`])
//! and the vocabulary inside a GGUF file ([`Tokenizer::from_gguf`]). A GGUF
//! tokenizer can be written back out as a folder ([`Tokenizer::write_hf_files`])
//! that Python `transformers` / `mlx-lm` load unchanged.
mod chat_template;
mod detokenize;
mod gguf;
mod literal_text;

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use serde_json::{json, Value as Json};

pub use chat_template::{
    prompt_opens_thinking, ChatMessage, ChatTemplate, ContentPart, MessageContent,
    SpecialTokenStrings, TemplateOptions,
};
pub use detokenize::StreamDetokenizer;
use literal_text::LiteralText;

use crate::error::{Error, Result};

/// The tokenizer part of GGUF metadata (`tokenizer.ggml.*`,
/// `tokenizer.chat_template`).
#[derive(Clone, Default)]
pub struct GgufTokenizerMeta {
    /// `tokenizer.ggml.model`: "gpt2" (byte-level BPE) or "llama" (SentencePiece BPE).
    pub model: String,
    /// `tokenizer.ggml.pre`: names the pre-tokenizer, e.g. "smollm", "llama-bpe", "qwen2".
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`, indexed by id.
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.merges`, "left right" strings in rank order. Empty for
    /// SentencePiece vocabularies, whose merges are derived from the pieces.
    pub merges: Vec<String>,
    /// `tokenizer.ggml.token_type`: 1 normal, 2 unknown, 3 control,
    /// 4 user-defined, 5 unused, 6 byte. Empty means all normal.
    pub token_types: Vec<i32>,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos_id: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos_id: Option<u32>,
    /// `tokenizer.ggml.add_bos_token`; absent means llama.cpp's default for
    /// the vocabulary type.
    pub add_bos: Option<bool>,
    /// `tokenizer.chat_template`.
    pub chat_template: Option<String>,
}

/// GGUF keys that only SentencePiece ("llama") vocabularies use; kept apart
/// from [`GgufTokenizerMeta`] so that struct stays as callers build it.
#[derive(Debug, Clone, Default)]
pub struct GgufSentencePieceMeta {
    /// `tokenizer.ggml.add_space_prefix` (default true). Gemma sets it to false.
    pub add_space_prefix: Option<bool>,
    /// `tokenizer.ggml.scores`: ranks the derived merges. Empty means
    /// vocabulary order, which is SentencePiece's best-first order.
    pub scores: Vec<f32>,
}

impl std::fmt::Debug for GgufTokenizerMeta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufTokenizerMeta")
            .field("model", &self.model)
            .field("pre", &self.pre)
            .field("tokens", &self.tokens.len())
            .field("merges", &self.merges.len())
            .field("token_types", &self.token_types.len())
            .field("bos_id", &self.bos_id)
            .field("eos_id", &self.eos_id)
            .field("add_bos", &self.add_bos)
            .field("chat_template", &self.chat_template.as_ref().map(|t| t.len()))
            .finish()
    }
}

/// A model's tokenizer. Cheap enough to clone; usually shared behind an `Arc`.
#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    bos_id: Option<u32>,
    eos_ids: Vec<u32>,
    /// `encode(.., add_special_tokens = true)` starts with BOS.
    add_bos: bool,
    /// The `tokenizers` post-processor itself inserts BOS (tokenizer.json's
    /// TemplateProcessing); needed to honour `add_bos = false` over it.
    post_processor_adds_bos: bool,
    special: SpecialTokenStrings,
    chat_template: Option<ChatTemplate>,
    /// Why the model's template could not be compiled: loading still works
    /// for plain completion, chat requests get this error.
    chat_template_error: Option<String>,
    /// Keeps special tokens typed in messages as text (built on first need).
    literal_text: Arc<OnceLock<Option<LiteralText>>>,
    /// Special tokens that are the chat template's tool-call or thinking
    /// tags (`<|tool_call_start|>` is special in some vocabularies): decoding
    /// that skips special tokens keeps these, so the stream matcher sees
    /// them. With them, every special id, to skip the others.
    kept_specials: Option<(HashSet<u32>, HashSet<u32>)>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("bos_id", &self.bos_id)
            .field("eos_ids", &self.eos_ids)
            .field("add_bos", &self.add_bos)
            .field("chat_template", &self.chat_template)
            .finish_non_exhaustive()
    }
}

impl Tokenizer {
    /// Loads `tokenizer.json` plus, when present, `tokenizer_config.json`
    /// (special tokens, `add_bos_token`, chat template), `chat_template.jinja`
    /// or `chat_template.json` (these win over tokenizer_config, as in
    /// `transformers`), and the EOS ids of `generation_config.json` and
    /// `config.json`.
    pub fn from_folder(dir: &Path) -> Result<Self> {
        let tokenizer_json = dir.join("tokenizer.json");
        if !tokenizer_json.is_file() {
            return Err(Error::Tokenizer(format!(
                "{} not found (a model folder needs tokenizer.json)",
                tokenizer_json.display()
            )));
        }
        let inner = tokenizers::Tokenizer::from_file(&tokenizer_json)
            .map_err(|e| Error::Tokenizer(format!("{}: {e}", tokenizer_json.display())))?;
        let config =
            read_json_if_present(&dir.join("tokenizer_config.json"))?.unwrap_or(Json::Null);

        let token_string = |key: &str| -> Option<String> {
            match config.get(key)? {
                Json::String(s) => Some(s.clone()),
                Json::Object(o) => o.get("content")?.as_str().map(str::to_owned),
                _ => None,
            }
        };
        let special = SpecialTokenStrings {
            bos_token: token_string("bos_token"),
            eos_token: token_string("eos_token"),
            pad_token: token_string("pad_token"),
            unk_token: token_string("unk_token"),
        };
        let lookup = |what: &str, tok: &Option<String>| -> Option<u32> {
            let tok = tok.as_ref()?;
            let id = inner.token_to_id(tok);
            if id.is_none() {
                tracing::warn!(
                    token = tok.as_str(),
                    "{what} token from tokenizer_config.json is not in the vocabulary"
                );
            }
            id
        };
        let bos_id = lookup("bos", &special.bos_token);
        let mut eos_ids: Vec<u32> = lookup("eos", &special.eos_token).into_iter().collect();
        if let Some(generation) = read_json_if_present(&dir.join("generation_config.json"))? {
            eos_ids.extend(json_ids(generation.get("eos_token_id")));
        }
        if let Some(model_config) = read_json_if_present(&dir.join("config.json"))? {
            eos_ids.extend(json_ids(model_config.get("eos_token_id")));
            eos_ids.extend(json_ids(
                model_config.get("text_config").and_then(|c| c.get("eos_token_id")),
            ));
        }

        let post_processor_adds_bos = match bos_id {
            Some(bos) => inner
                .encode_fast("", true)
                .map(|e| e.get_ids().first() == Some(&bos))
                .unwrap_or(false),
            None => false,
        };
        let add_bos = bos_id.is_some()
            && config
                .get("add_bos_token")
                .and_then(Json::as_bool)
                .unwrap_or(post_processor_adds_bos);

        let (template_source, template_origin) = folder_chat_template(dir, &config)?;
        let mut tokenizer = Tokenizer {
            inner,
            bos_id,
            eos_ids: Vec::new(),
            add_bos,
            post_processor_adds_bos,
            special,
            chat_template: None,
            chat_template_error: None,
            literal_text: Arc::default(),
            kept_specials: None,
        };
        tokenizer.add_eos_ids(&eos_ids);
        if let Some(source) = template_source {
            tokenizer.set_chat_template_lenient(&source, &template_origin);
        }
        Ok(tokenizer)
    }

    /// Rebuilds the tokenizer from GGUF metadata. Supports the "gpt2"
    /// (byte-level BPE: Llama 3, Qwen, SmolLM, ...) and "llama" (SentencePiece
    /// BPE with byte fallback: Llama 2, Mistral, Gemma) vocabularies.
    pub fn from_gguf(meta: GgufTokenizerMeta) -> Result<Self> {
        Self::from_gguf_with(meta, GgufSentencePieceMeta::default())
    }

    /// [`Self::from_gguf`] with the SentencePiece-only keys, which matter for
    /// Gemma (no space prefix) and for vocabularies not stored best-first.
    pub fn from_gguf_with(meta: GgufTokenizerMeta, spm: GgufSentencePieceMeta) -> Result<Self> {
        let built = gguf::build(&meta, &spm)?;
        let name = |id: Option<u32>| id.map(|id| meta.tokens[id as usize].clone());
        let special = SpecialTokenStrings {
            bos_token: name(meta.bos_id),
            eos_token: name(meta.eos_id),
            pad_token: None,
            unk_token: built.unk_token,
        };
        let mut tokenizer = Tokenizer {
            inner: built.inner,
            bos_id: meta.bos_id,
            eos_ids: Vec::new(),
            add_bos: built.add_bos,
            post_processor_adds_bos: built.add_bos,
            special,
            chat_template: None,
            chat_template_error: None,
            literal_text: Arc::default(),
            kept_specials: None,
        };
        tokenizer.add_eos_ids(&meta.eos_id.into_iter().collect::<Vec<_>>());
        if let Some(source) = &meta.chat_template {
            tokenizer.set_chat_template_lenient(source, "GGUF tokenizer.chat_template");
        }
        Ok(tokenizer)
    }

    fn set_chat_template_lenient(&mut self, source: &str, origin: &str) {
        match ChatTemplate::new(source) {
            Ok(t) => {
                self.chat_template = Some(t);
                self.chat_template_error = None;
                self.keep_template_tags(source);
            }
            Err(e) => {
                tracing::warn!(origin, error = %e, "chat template does not compile; chat is unavailable");
                self.chat_template = None;
                self.chat_template_error = Some(format!("{origin}: {e}"));
            }
        }
    }

    /// Replaces the chat template (a user override); a template that does not
    /// compile is an error and leaves the old one in place.
    pub fn set_chat_template(&mut self, source: &str) -> Result<()> {
        self.chat_template = Some(ChatTemplate::new(source)?);
        self.chat_template_error = None;
        self.keep_template_tags(source);
        Ok(())
    }

    /// Finds the template's tool-call and thinking tags that are single
    /// special tokens ([`Self::decode`] keeps them).
    fn keep_template_tags(&mut self, source: &str) {
        let tool = crate::stop::tool_call_tags_for_template(source)
            .map(|t| [Some(t.open), t.close])
            .unwrap_or_default();
        let think = crate::stop::thinking_tags_for_template(source).map(|t| [t.open, t.close]);
        // Harmony's structure is all markers (`<|channel|>`, `<|message|>`, …).
        let harmony = crate::stop::harmony::is_harmony_template(source)
            .then_some(crate::stop::harmony::MARKERS.map(String::from));
        // Markers inside a call (Mistral's `[ARGS]`).
        let inner: Vec<String> = crate::tools::ToolCallStyle::for_template(source)
            .map(|s| s.inner_markers().iter().map(|m| m.to_string()).collect())
            .unwrap_or_default();
        let added = self.inner.get_added_tokens_decoder();
        let specials: HashSet<u32> =
            added.iter().filter(|(_, t)| t.special).map(|(&id, _)| id).collect();
        let kept: HashSet<u32> = tool
            .into_iter()
            .flatten()
            .chain(think.into_iter().flatten())
            .chain(harmony.into_iter().flatten())
            .chain(inner)
            .filter_map(|tag| self.inner.token_to_id(&tag))
            .filter(|id| specials.contains(id))
            .collect();
        self.kept_specials = (!kept.is_empty()).then_some((kept, specials));
    }

    /// Adds ids that also end generation (from the model config, or `<|eot_id|>`
    /// next to `<|end_of_text|>`). Order is kept and duplicates dropped.
    pub fn add_eos_ids(&mut self, ids: &[u32]) {
        for &id in ids {
            if !self.eos_ids.contains(&id) {
                self.eos_ids.push(id);
            }
        }
    }

    /// `add_special_tokens` adds BOS where the model wants it (never twice:
    /// a text that already starts with the BOS token keeps just that one).
    /// Text produced by a chat template already holds its special tokens, so
    /// encode it with `false` — or use [`Self::encode_chat`].
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        let encoding = self
            .inner
            .encode_fast(text, add_special_tokens)
            .map_err(|e| Error::Tokenizer(format!("encode: {e}")))?;
        let mut ids = encoding.get_ids().to_vec();
        if let (true, Some(bos)) = (add_special_tokens, self.bos_id) {
            if self.add_bos {
                if ids.first() != Some(&bos) {
                    ids.insert(0, bos);
                }
                if ids.len() >= 2 && ids[1] == bos {
                    ids.remove(0);
                }
            } else if self.post_processor_adds_bos && ids.first() == Some(&bos) {
                ids.remove(0);
            }
        }
        Ok(ids)
    }

    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        let decode = |ids: &[u32], skip: bool| {
            self.inner.decode(ids, skip).map_err(|e| Error::Tokenizer(format!("decode: {e}")))
        };
        match &self.kept_specials {
            Some((kept, specials)) if skip_special && ids.iter().any(|id| kept.contains(id)) => {
                let ids: Vec<u32> = ids
                    .iter()
                    .copied()
                    .filter(|id| kept.contains(id) || !specials.contains(id))
                    .collect();
                decode(&ids, false)
            }
            _ => decode(ids, skip_special),
        }
    }

    pub fn bos_id(&self) -> Option<u32> {
        self.bos_id
    }

    pub fn eos_ids(&self) -> &[u32] {
        &self.eos_ids
    }

    pub fn is_eos(&self, id: u32) -> bool {
        self.eos_ids.contains(&id)
    }

    /// Whether `encode(.., true)` starts with BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// The underlying Hugging Face tokenizer (structured output reads its vocabulary).
    pub(crate) fn hf(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// The number of ids the tokenizer knows, added tokens included. The
    /// model's embedding table may be larger (padded).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The special-token strings templates print (`bos_token`, `eos_token`).
    pub fn special_tokens(&self) -> &SpecialTokenStrings {
        &self.special
    }

    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.chat_template.as_ref()
    }

    /// The wrapped `tokenizers` pipeline, for anything not covered here.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// Renders a conversation into the prompt text the model expects.
    pub fn apply_chat_template(
        &self,
        messages: &[ChatMessage],
        opts: &TemplateOptions,
    ) -> Result<String> {
        match (&self.chat_template, &self.chat_template_error) {
            (Some(t), _) => t.render(messages, opts, &self.special),
            (None, Some(e)) => Err(Error::ChatTemplate(e.clone())),
            (None, None) => Err(Error::ChatTemplate("this model has no chat template".into())),
        }
    }

    /// Renders a conversation and encodes it, without adding special tokens
    /// the template already wrote (as `transformers` does).
    pub fn encode_chat(
        &self,
        messages: &[ChatMessage],
        opts: &TemplateOptions,
    ) -> Result<Vec<u32>> {
        Ok(self.render_and_encode(messages, opts, |_| None)?.1)
    }

    /// Renders a conversation and encodes it; `expand` may rewrite the
    /// rendered text first (a family that writes image slots into it).
    /// Special tokens typed inside the messages stay text (see
    /// [`literal_text`]). Returns the rendered text too.
    pub fn render_and_encode(
        &self,
        messages: &[ChatMessage],
        opts: &TemplateOptions,
        expand: impl Fn(&str) -> Option<String>,
    ) -> Result<(String, Vec<u32>)> {
        let guarded = LiteralText::get(&self.literal_text, &self.inner)
            .and_then(|literal| Some((literal, literal.guard(messages)?)));
        let Some((literal, (messages, literals))) = guarded else {
            let rendered = self.apply_chat_template(messages, opts)?;
            let ids = self.encode(expand(&rendered).as_deref().unwrap_or(&rendered), false)?;
            return Ok((rendered, ids));
        };
        let rendered = self.apply_chat_template(&messages, opts)?;
        let text = expand(&rendered);
        let ids =
            literal.encode(&self.inner, text.as_deref().unwrap_or(&rendered), &literals, |t| {
                self.encode(t, false)
            })?;
        Ok((rendered, ids))
    }

    /// Writes `tokenizer.json` and `tokenizer_config.json` into `dir` so the
    /// folder loads in `transformers` / `mlx-lm` (e.g. after converting a GGUF
    /// model into an mlx-community style folder).
    pub fn write_hf_files(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let tokenizer_json = dir.join("tokenizer.json");
        let serialized = self
            .inner
            .to_string(false)
            .map_err(|e| Error::Tokenizer(format!("serializing tokenizer.json: {e}")))?;
        std::fs::write(&tokenizer_json, serialized).map_err(|e| Error::io(&tokenizer_json, e))?;

        let mut added: Vec<(u32, tokenizers::AddedToken)> =
            self.inner.get_added_tokens_decoder().into_iter().collect();
        added.sort_by_key(|(id, _)| *id);
        let mut added_json = serde_json::Map::new();
        for (id, tok) in added {
            added_json.insert(
                id.to_string(),
                json!({
                    "content": tok.content,
                    "lstrip": tok.lstrip,
                    "normalized": tok.normalized,
                    "rstrip": tok.rstrip,
                    "single_word": tok.single_word,
                    "special": tok.special,
                }),
            );
        }
        let mut config = serde_json::Map::new();
        config.insert("add_bos_token".into(), self.add_bos.into());
        config.insert("add_eos_token".into(), false.into());
        config.insert("added_tokens_decoder".into(), Json::Object(added_json));
        let eos_token = self
            .special
            .eos_token
            .clone()
            .or_else(|| self.eos_ids.first().and_then(|&id| self.id_to_token(id)));
        for (key, value) in [
            ("bos_token", &self.special.bos_token),
            ("eos_token", &eos_token),
            ("pad_token", &self.special.pad_token),
            ("unk_token", &self.special.unk_token),
        ] {
            config.insert(key.into(), value.clone().map(Json::String).unwrap_or(Json::Null));
        }
        if let Some(t) = &self.chat_template {
            config.insert("chat_template".into(), t.source().into());
        }
        config.insert("clean_up_tokenization_spaces".into(), false.into());
        config.insert("tokenizer_class".into(), "PreTrainedTokenizerFast".into());
        let path = dir.join("tokenizer_config.json");
        let text = serde_json::to_string_pretty(&Json::Object(config))
            .map_err(|e| Error::Tokenizer(format!("serializing tokenizer_config.json: {e}")))?;
        std::fs::write(&path, text).map_err(|e| Error::io(&path, e))?;
        Ok(())
    }
}

fn read_json_if_present(path: &Path) -> Result<Option<Json>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, e)),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| Error::Tokenizer(format!("{}: invalid JSON: {e}", path.display())))
}

/// An id or a list of ids (`eos_token_id` is either).
fn json_ids(v: Option<&Json>) -> Vec<u32> {
    match v {
        Some(Json::Number(n)) => n.as_u64().map(|n| vec![n as u32]).unwrap_or_default(),
        Some(Json::Array(a)) => a.iter().filter_map(|x| x.as_u64()).map(|n| n as u32).collect(),
        _ => Vec::new(),
    }
}

/// A model folder's chat template source, if it has one (without loading
/// the tokenizer): for describing a folder in a scan.
pub fn folder_chat_template_source(dir: &Path) -> Result<Option<String>> {
    let config = read_json_if_present(&dir.join("tokenizer_config.json"))?.unwrap_or(Json::Null);
    Ok(folder_chat_template(dir, &config)?.0)
}

/// The template and where it came from, in `transformers`' order of
/// precedence: chat_template.jinja, chat_template.json (processor templates
/// of vision models), tokenizer_config.json.
fn folder_chat_template(dir: &Path, config: &Json) -> Result<(Option<String>, String)> {
    let jinja = dir.join("chat_template.jinja");
    match std::fs::read_to_string(&jinja) {
        Ok(t) => return Ok((Some(t), jinja.display().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(&jinja, e)),
    }
    let json_path = dir.join("chat_template.json");
    if let Some(v) = read_json_if_present(&json_path)? {
        if let Some(t) = template_from_json(v.get("chat_template")) {
            return Ok((Some(t), json_path.display().to_string()));
        }
    }
    let origin = dir.join("tokenizer_config.json").display().to_string();
    Ok((template_from_json(config.get("chat_template")), origin))
}

/// A template string, or a list of `{name, template}` of which "default" is
/// taken (the first one when none is named so).
fn template_from_json(v: Option<&Json>) -> Option<String> {
    match v? {
        Json::String(s) => Some(s.clone()),
        Json::Array(list) => {
            let named = |name: &str| {
                list.iter()
                    .find(|t| t.get("name").and_then(Json::as_str) == Some(name))
                    .and_then(|t| t.get("template")?.as_str())
            };
            named("default")
                .or_else(|| list.first().and_then(|t| t.get("template")?.as_str()))
                .map(str::to_owned)
        }
        _ => None,
    }
}
