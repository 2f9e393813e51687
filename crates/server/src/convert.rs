//! An OpenAI chat-completions request → an engine [`Request`]. Everything a
//! client can get wrong is checked here, before the engine sees it, so the
//! client gets a 400 naming the field instead of a failed stream.
use std::collections::HashMap;
use std::path::Path;

use engine::batch::logprobs::MAX_TOP_LOGPROBS;
use engine::batch::{ImageInput, Prompt, Request};
use engine::constraint::Constraint;
use engine::model::ModelInfo;
use engine::sample::SamplingParams;
use engine::tokenizer::{ChatMessage, ContentPart, MessageContent, TemplateOptions};
use serde_json::{json, Map, Value};

use crate::api_error::ApiError;
use crate::openai::{ChatCompletionRequest, RequestMessage};

/// A checked request, ready for the engine.
#[derive(Debug)]
pub struct Prepared {
    pub request: Request,
    /// Reply as server-sent events.
    pub stream: bool,
    /// Streamed replies end with a usage chunk.
    pub include_usage: bool,
}

/// The bytes of `file:` image URLs, read before [`prepare`] (reading is
/// asynchronous and policed, see `file_urls.rs`), by URL.
pub type FileImages = HashMap<String, Vec<u8>>;

/// OpenAI's range for `temperature`.
const TEMPERATURE_RANGE: std::ops::RangeInclusive<f32> = 0.0..=2.0;

/// A token of any tokenizer in use covers far fewer bytes than this (long
/// ones are runs of spaces or dashes, a few dozen bytes at most), so a prompt
/// text of more than `context × this` bytes cannot fit the context, whatever
/// it says. Checking that before the template runs keeps a huge prompt from
/// being templated and tokenized on the engine thread, where every other
/// request waits for it.
pub(crate) const MAX_BYTES_PER_TOKEN: usize = 32;

/// OpenAI's bounds for `logit_bias` values.
const LOGIT_BIAS_RANGE: std::ops::RangeInclusive<f64> = -100.0..=100.0;

/// What a request is checked against: the loaded model's figures.
#[derive(Debug, Clone, Copy)]
pub struct ModelLimits {
    pub vocab_size: i32,
    pub max_context: usize,
}

impl From<&ModelInfo> for ModelLimits {
    fn from(info: &ModelInfo) -> Self {
        Self { vocab_size: info.shape.vocab_size, max_context: info.shape.max_context }
    }
}

/// The names a request may use for the loaded model: its display name, its
/// path, the file or folder name with and without extension, and `default`.
/// Anything else is a different model, which this server does not have.
pub fn accepts_model_name(name: &str, path: &Path, requested: &str) -> bool {
    requested == "default"
        || requested == name
        || requested == path.to_string_lossy()
        || path.file_name().is_some_and(|n| n.to_string_lossy() == requested)
        || path.file_stem().is_some_and(|n| n.to_string_lossy() == requested)
}

/// Refuses a prompt whose text cannot fit the context (see
/// [`MAX_BYTES_PER_TOKEN`]): the message texts, earlier thinking and tool
/// calls, the tool definitions and the template variables, which all go
/// through the template. Each
/// message also counts as one token at least (its role marker), so a flood
/// of empty messages is refused too.
pub fn check_prompt_size(
    body: &ChatCompletionRequest,
    limits: ModelLimits,
) -> Result<(), ApiError> {
    let max_bytes = limits.max_context.saturating_mul(MAX_BYTES_PER_TOKEN);
    let json_len = |v: &Value| serde_json::to_string(v).map_or(0, |s| s.len());
    let text_len = |v: &Value| match v {
        Value::String(s) => s.len(),
        Value::Array(parts) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).map(str::len).sum()
        }
        _ => 0,
    };
    let mut bytes: usize = body.tools.iter().flatten().map(json_len).sum();
    // Template variables reach the template too (the engine refuses the
    // reserved ones by name, and bounds the rest).
    bytes += body
        .chat_template_kwargs
        .iter()
        .flatten()
        .map(|(k, v)| k.len() + json_len(v))
        .sum::<usize>();
    for m in &body.messages {
        bytes += MAX_BYTES_PER_TOKEN;
        bytes += m.content.as_ref().map_or(0, text_len);
        bytes += m.reasoning_content.as_ref().map_or(0, String::len);
        bytes += m.tool_calls.iter().flatten().map(json_len).sum::<usize>();
    }
    if bytes > max_bytes {
        return Err(ApiError::prompt_too_long(bytes, max_bytes, limits.max_context));
    }
    Ok(())
}

/// Every `file:` image URL of the request, with where it is
/// (`messages[1].content[0]`), in order.
pub fn file_image_urls(body: &ChatCompletionRequest) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for (i, m) in body.messages.iter().enumerate() {
        let Some(Value::Array(parts)) = &m.content else { continue };
        for (j, part) in parts.iter().enumerate() {
            let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
            if !matches!(kind, "image_url" | "input_image" | "image") {
                continue;
            }
            if let Some(url) = image_url(part, kind).filter(|url| url.starts_with("file:")) {
                found.push((format!("messages[{i}].content[{j}]"), url.to_owned()));
            }
        }
    }
    found
}

pub fn prepare(
    body: ChatCompletionRequest,
    limits: ModelLimits,
    defaults: &SamplingParams,
    files: &FileImages,
) -> Result<Prepared, ApiError> {
    if body.messages.is_empty() {
        return Err(ApiError::invalid_param("messages must not be empty"));
    }
    if body.n.is_some_and(|n| n != 1) {
        return Err(ApiError::invalid_param("only n = 1 is supported"));
    }
    let logprobs = match (body.logprobs.unwrap_or(false), body.top_logprobs) {
        (_, Some(n)) if !(0..=MAX_TOP_LOGPROBS as i64).contains(&n) => {
            return Err(ApiError::invalid_param(format!(
                "top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}, got {n}"
            )))
        }
        (false, Some(n)) if n > 0 => {
            return Err(ApiError::invalid_param("top_logprobs needs logprobs: true"))
        }
        (true, n) => Some(n.unwrap_or(0) as usize),
        (false, _) => None,
    };
    refuse_unsupported(&body.other)?;
    if let Some(options) = &body.stream_options {
        refuse_unknown("stream_options", &options.other, &STREAM_OPTION_FIELDS)?;
    }
    let constraint = response_format(body.response_format.as_ref())?;
    let max_tokens = match body.max_completion_tokens.or(body.max_tokens) {
        Some(n) if n < 1 => {
            return Err(ApiError::invalid_param(format!("max_tokens must be at least 1, got {n}")))
        }
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        // Up to the context, as OpenAI does; the engine stops at the context's end.
        None => limits.max_context,
    };
    let sampling = sampling(&body, limits, defaults)?;
    let stop = stop_strings(body.stop.as_ref())?;
    let speculate = speculation(body.speculation.as_ref())?;
    let mut images = Vec::new();
    let messages = body
        .messages
        .into_iter()
        .enumerate()
        .map(|(i, m)| message(i, m, files, &mut images))
        .collect::<Result<Vec<_>, _>>()?;
    let (tools, require_tool_call) = offered_tools(body.tools, body.tool_choice.as_ref())?;
    if require_tool_call && tools.is_none() {
        return Err(ApiError::invalid_param(
            "tool_choice requires a tool call, but tools is empty",
        ));
    }
    if require_tool_call && constraint.is_some() {
        return Err(ApiError::invalid_param(
            "response_format cannot be combined with a required tool_choice",
        ));
    }
    let continue_final_message = body.continue_final_message.unwrap_or(false);
    if continue_final_message && messages.last().is_none_or(|m| m.role != "assistant") {
        return Err(ApiError::invalid_param(
            "continue_final_message needs the last message to be the assistant's",
        ));
    }
    let (enable_thinking, extra) =
        thinking(body.chat_template_kwargs, body.reasoning_effort.as_deref())?;
    let options = TemplateOptions {
        enable_thinking,
        tools,
        extra,
        continue_final_message,
        ..TemplateOptions::default()
    };
    let request = Request {
        prompt: Prompt::Chat { messages, options },
        images,
        max_tokens,
        sampling,
        stop,
        thinking_budget: body.thinking_budget.map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        constraint,
        parallel_tool_calls: body.parallel_tool_calls.unwrap_or(true),
        require_tool_call,
        logprobs,
        prompt_logprobs: None,
        // a whole reply has nobody watching its tokens arrive: no pacing for it
        interactive: body.stream.unwrap_or(false),
        speculate,
    };
    Ok(Prepared {
        request,
        stream: body.stream.unwrap_or(false),
        include_usage: body.stream_options.is_some_and(|o| o.include_usage),
    })
}

/// `speculation`: `"off"` (this request never drafts) or `"auto"` (as the
/// server speculates; the default). Anything else is refused, naming it.
fn speculation(value: Option<&Value>) -> Result<bool, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(true),
        Some(Value::String(s)) if s == "auto" => Ok(true),
        Some(Value::String(s)) if s == "off" => Ok(false),
        Some(other) => Err(ApiError::invalid_param(format!(
            "speculation must be \"off\" or \"auto\", not {other}"
        ))),
    }
}

/// Request fields that change nothing about the answer, accepted as OpenAI does.
const BOOKKEEPING_FIELDS: [&str; 4] = ["user", "metadata", "store", "service_tier"];

/// Fields we do not implement get a 400 naming them, so a client never gets
/// an answer that silently ignored what it asked for. A penalty of 0 (the
/// OpenAI default some clients always send) asks for nothing and passes.
fn refuse_unsupported(other: &Map<String, Value>) -> Result<(), ApiError> {
    for (name, value) in other {
        let harmless = BOOKKEEPING_FIELDS.contains(&name.as_str())
            || value.is_null()
            || (matches!(name.as_str(), "presence_penalty" | "frequency_penalty")
                && value.as_f64() == Some(0.0));
        if !harmless {
            return Err(ApiError::invalid_param(format!("{name} is not supported by this server")));
        }
    }
    Ok(())
}

/// `stream_options` fields that change nothing here: `include_obfuscation`
/// pads OpenAI's chunks against a side channel of its own network.
const STREAM_OPTION_FIELDS: [&str; 1] = ["include_obfuscation"];

/// Message fields of OpenAI's that carry nothing the template shows, accepted
/// so that a client can send back the assistant message it was given:
/// `refusal` (the reply's refusal text) and `annotations` (its citations).
const MESSAGE_BOOKKEEPING_FIELDS: [&str; 2] = ["refusal", "annotations"];

/// Refuses any field of an object nested in the request (`at`; empty for
/// the top level) other than `harmless` ones, or null: a field that would be
/// ignored is named instead (`messages[0].images`). Every dialect checks its
/// objects with it.
pub(crate) fn refuse_unknown(
    at: &str,
    other: &Map<String, Value>,
    harmless: &[&str],
) -> Result<(), ApiError> {
    match other.iter().find(|(name, value)| !value.is_null() && !harmless.contains(&name.as_str()))
    {
        Some((name, _)) => {
            let path = if at.is_empty() { name.clone() } else { format!("{at}.{name}") };
            Err(ApiError::invalid_param(format!("{path} is not supported by this server")))
        }
        None => Ok(()),
    }
}

/// `object.field` as a string, or a 400 naming it (`at.field`).
pub(crate) fn required_str<'a>(
    at: &str,
    object: &'a Value,
    field: &str,
) -> Result<&'a str, ApiError> {
    object.get(field).and_then(Value::as_str).ok_or_else(|| {
        ApiError::invalid_param(format!("{at}.{field} is required and must be a string"))
    })
}

/// The fields of `object` other than `known` (what [`refuse_unknown`] checks
/// in a dialect's objects, which arrive as JSON rather than typed).
pub(crate) fn fields_except(object: &Map<String, Value>, known: &[&str]) -> Map<String, Value> {
    object
        .iter()
        .filter(|(k, _)| !known.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// OpenAI's `response_format` (and our regex / Lark extensions) as the
/// engine's constraint; `text` or none is free text.
fn response_format(format: Option<&Value>) -> Result<Option<Constraint>, ApiError> {
    let Some(format) = format.filter(|f| !f.is_null()) else { return Ok(None) };
    let bad = |m: &str| ApiError::invalid_param(format!("response_format{m}"));
    let kind =
        format.get("type").and_then(Value::as_str).ok_or_else(|| bad(".type is required"))?;
    let text = |field: &str| {
        format
            .get(field)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| bad(&format!(".{field} must be a string for type {kind:?}")))
    };
    Ok(match kind {
        "text" => None,
        "json_object" => Some(Constraint::JsonObject),
        "json_schema" => {
            let spec = format.get("json_schema").ok_or_else(|| bad(".json_schema is required for type \"json_schema\""))?;
            let schema = spec.get("schema").ok_or_else(|| bad(".json_schema.schema is required"))?;
            if !(schema.is_object() || schema.is_boolean()) {
                return Err(bad(".json_schema.schema must be a JSON Schema object"));
            }
            Some(Constraint::JsonSchema(schema.clone()))
        }
        "regex" => Some(Constraint::Regex(text("regex")?)),
        "lark" => Some(Constraint::Lark(text("lark")?)),
        other => {
            return Err(bad(&format!(
                ".type must be \"text\", \"json_object\", \"json_schema\", \"regex\" or \"lark\", got {other:?}"
            )))
        }
    })
}

pub(crate) fn sampling(
    body: &ChatCompletionRequest,
    limits: ModelLimits,
    defaults: &SamplingParams,
) -> Result<SamplingParams, ApiError> {
    let mut s = defaults.clone();
    if let Some(t) = body.temperature {
        if !TEMPERATURE_RANGE.contains(&t) {
            return Err(ApiError::invalid_param(format!(
                "temperature must be between 0 and 2, got {t}"
            )));
        }
        s.temperature = t;
    }
    if let Some(p) = body.top_p {
        s.top_p = p;
    }
    if let Some(k) = body.top_k {
        s.top_k = i32::try_from(k)
            .ok()
            .filter(|k| *k >= 0)
            .ok_or_else(|| ApiError::invalid_param(format!("top_k must be >= 0, got {k}")))?;
    }
    if let Some(p) = body.min_p {
        s.min_p = p;
    }
    if let Some(r) = body.repetition_penalty {
        s.repetition_penalty = r;
    }
    if let Some(seed) = body.seed {
        // OpenAI takes any integer; only its bits matter for a random stream.
        s.seed = Some(seed as u64);
    }
    if let Some(bias) = &body.logit_bias {
        for (key, value) in bias {
            let id: u32 = key.parse().map_err(|_| {
                ApiError::invalid_param(format!("logit_bias keys must be token ids, got {key:?}"))
            })?;
            let b = value.as_f64().filter(|b| LOGIT_BIAS_RANGE.contains(b)).ok_or_else(|| {
                ApiError::invalid_param(format!(
                    "logit_bias[{key:?}] must be a number in [-100, 100]"
                ))
            })?;
            s.logit_bias.insert(id, b as f32);
        }
    }
    // The engine checks the same, but only once the request is queued; here
    // the client gets the 400 before a stream starts.
    s.validate(limits.vocab_size).map_err(|e| ApiError::invalid_param(e.to_string()))?;
    Ok(s)
}

pub(crate) fn stop_strings(stop: Option<&Value>) -> Result<Vec<String>, ApiError> {
    let stops = match stop {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| ApiError::invalid_param("stop must be a string or a list of strings"))?,
        Some(_) => {
            return Err(ApiError::invalid_param("stop must be a string or a list of strings"))
        }
    };
    // the engine checks the same; here the client gets the 400 before a stream starts
    engine::stop::check_stop_strings(&stops).map_err(ApiError::invalid_param)?;
    Ok(stops)
}

fn message(
    index: usize,
    m: RequestMessage,
    files: &FileImages,
    images: &mut Vec<ImageInput>,
) -> Result<ChatMessage, ApiError> {
    let at = |what: &str| format!("messages[{index}]{what}");
    refuse_unknown(&at(""), &m.other, &MESSAGE_BOOKKEEPING_FIELDS)?;
    let role = match m.role.as_str() {
        // OpenAI's newer name for the system prompt; chat templates know only "system".
        "developer" => "system".to_owned(),
        "system" | "user" | "assistant" | "tool" => m.role.clone(),
        other => {
            return Err(ApiError::invalid_param(format!(
                "{}: unknown role {other:?} (expected system, developer, user, assistant or tool)",
                at(".role")
            )))
        }
    };
    let content = match m.content {
        None | Some(Value::Null) if role == "assistant" => MessageContent::Text(String::new()),
        None | Some(Value::Null) => {
            return Err(ApiError::invalid_param(format!("{}: content is required", at(""))))
        }
        Some(value) => content(&at(".content"), value, files, images)?,
    };
    let tool_calls = match m.tool_calls {
        Some(calls) if role != "assistant" => {
            return Err(ApiError::invalid_param(format!(
                "{}: only assistant messages carry tool calls ({} given)",
                at(".tool_calls"),
                calls.len()
            )))
        }
        Some(calls) => Some(
            calls
                .into_iter()
                .enumerate()
                .map(|(j, c)| template_tool_call(&at(&format!(".tool_calls[{j}]")), c))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        None => None,
    };
    Ok(ChatMessage {
        role,
        content,
        reasoning_content: m.reasoning_content,
        tool_calls,
        tool_call_id: m.tool_call_id,
        name: m.name,
    })
}

/// A message's content: a string, or parts. Text parts are joined; image
/// parts keep their place (the chat template puts each image's placeholder
/// there) and their bytes go to `images`, in order.
fn content(
    at: &str,
    content: Value,
    files: &FileImages,
    images: &mut Vec<ImageInput>,
) -> Result<MessageContent, ApiError> {
    let parts = match content {
        Value::String(s) => return Ok(MessageContent::Text(s)),
        Value::Array(parts) => parts,
        _ => {
            return Err(ApiError::invalid_param(format!(
                "{at}: content must be a string or a list of parts"
            )))
        }
    };
    let mut out: Vec<ContentPart> = Vec::new();
    for (j, part) in parts.iter().enumerate() {
        let at = format!("{at}[{j}]");
        match part.get("type").and_then(Value::as_str) {
            Some("text") | Some("input_text") => match part.get("text").and_then(Value::as_str) {
                Some(t) => match out.last_mut() {
                    Some(ContentPart::Text { text }) => text.push_str(t),
                    _ => out.push(ContentPart::text(t)),
                },
                None => {
                    return Err(ApiError::invalid_param(format!(
                        "{at}: a text part needs \"text\""
                    )))
                }
            },
            Some(kind @ ("image_url" | "input_image" | "image")) => {
                let url = image_url(part, kind).ok_or_else(|| {
                    ApiError::invalid_param(format!("{at}: an image part needs an image URL"))
                })?;
                let image = ImageInput::from_bytes(image_bytes(&at, url, files)?);
                out.push(ContentPart::Image { image: Some(image.sha256.clone()) });
                images.push(image);
            }
            Some(kind @ ("input_audio" | "audio" | "video_url" | "video" | "input_video")) => {
                let what = if kind.contains("audio") { "audio" } else { "video" };
                return Err(ApiError::invalid_param(format!(
                    "{at}: {what} input is not supported (this server reads text and images; convert {what} to text or frames first)"
                )));
            }
            Some(other) => {
                return Err(ApiError::invalid_param(format!(
                    "{at}: content parts of type {other:?} are not supported"
                )))
            }
            None => {
                return Err(ApiError::invalid_param(format!(
                    "{at}: a content part needs a \"type\""
                )))
            }
        }
    }
    Ok(match out.as_slice() {
        [] => MessageContent::Text(String::new()),
        [ContentPart::Text { text }] => MessageContent::Text(text.clone()),
        _ => MessageContent::Parts(out),
    })
}

/// The URL of an image part in any of the shapes clients send:
/// `{"image_url": {"url": …}}` (Chat Completions), `{"image_url": "…"}`
/// (Responses API), `{"image": "…"}` (mlx-vlm and others).
fn image_url<'a>(part: &'a Value, kind: &str) -> Option<&'a str> {
    let field = part.get(if kind == "image" { "image" } else { "image_url" })?;
    field.as_str().or_else(|| field.get("url").and_then(Value::as_str))
}

/// An image URL's bytes: a `data:` URL (base64) or a `file:` URL read
/// beforehand (`files`). Remote URLs are refused: a local server should not
/// fetch from the network on a client's behalf.
fn image_bytes(at: &str, url: &str, files: &FileImages) -> Result<Vec<u8>, ApiError> {
    use base64::Engine as _;
    if let Some(rest) = url.strip_prefix("data:") {
        let (meta, data) = rest.split_once(',').ok_or_else(|| {
            ApiError::invalid_image(format!("{at}: a data URL needs a comma before its data"))
        })?;
        if !meta.ends_with(";base64") {
            return Err(ApiError::invalid_image(format!(
                "{at}: only base64 data URLs are supported"
            )));
        }
        return base64::engine::general_purpose::STANDARD.decode(data.trim()).map_err(|e| {
            ApiError::invalid_image(format!("{at}: the data URL is not valid base64: {e}"))
        });
    }
    if url.starts_with("file:") {
        // `file_image_urls` found every one; a miss would be a bug here, not the client's.
        return files
            .get(url)
            .cloned()
            .ok_or_else(|| ApiError::invalid_image(format!("{at}: this file: URL was not read")));
    }
    Err(ApiError::invalid_image(format!(
        "{at}: only data: and file: image URLs are accepted (this local server does not fetch remote images)"
    )))
}

/// An earlier assistant tool call, shaped for chat templates: OpenAI sends
/// `arguments` as a JSON string, but templates print it with `tojson` or
/// iterate over it, as transformers documents, so it goes in as an object.
fn template_tool_call(at: &str, call: Value) -> Result<Value, ApiError> {
    let function = call.get("function").filter(|f| f.is_object()).ok_or_else(|| {
        ApiError::invalid_param(format!("{at}: a tool call needs a \"function\" object"))
    })?;
    let name = function.get("name").and_then(Value::as_str).ok_or_else(|| {
        ApiError::invalid_param(format!("{at}.function: a tool call needs a \"name\""))
    })?;
    let arguments = match function.get("arguments") {
        None | Some(Value::Null) => json!({}),
        Some(Value::String(s)) if s.trim().is_empty() => json!({}),
        // A string that is not JSON is passed on as it is: the template shows
        // what the client sent rather than the request failing.
        Some(Value::String(s)) => {
            serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone()))
        }
        Some(other) => other.clone(),
    };
    let mut out = Map::new();
    if let Some(id) = call.get("id").filter(|v| v.is_string()) {
        out.insert("id".into(), id.clone());
    }
    out.insert("type".into(), json!("function"));
    out.insert("function".into(), json!({ "name": name, "arguments": arguments }));
    Ok(Value::Object(out))
}

/// The tools the template shows the model, after `tool_choice`. `"none"`
/// hides them; `"required"` cannot be enforced (no constrained decoding), so
/// it offers them like `"auto"`; naming one function offers only that one.
fn offered_tools(
    tools: Option<Vec<Value>>,
    choice: Option<&Value>,
) -> Result<(Option<Vec<Value>>, bool), ApiError> {
    let tools = tools.unwrap_or_default();
    for (i, tool) in tools.iter().enumerate() {
        let kind = tool.get("type").and_then(Value::as_str);
        let name = tool.get("function").and_then(|f| f.get("name")).and_then(Value::as_str);
        if kind != Some("function") || name.is_none() {
            return Err(ApiError::invalid_param(format!(
                "tools[{i}] must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}"
            )));
        }
    }
    let (chosen, required) = match choice {
        None | Some(Value::Null) => (tools, false),
        Some(Value::String(s)) if s == "auto" => (tools, false),
        Some(Value::String(s)) if s == "required" => (tools, true),
        Some(Value::String(s)) if s == "none" => (Vec::new(), false),
        Some(Value::Object(o)) => {
            let wanted = o.get("function").and_then(|f| f.get("name")).and_then(Value::as_str).ok_or_else(|| {
                ApiError::invalid_param(
                    "tool_choice must name a function: {\"type\": \"function\", \"function\": {\"name\": ...}}",
                )
            })?;
            let named: Vec<Value> = tools
                .into_iter()
                .filter(|t| {
                    t.get("function").and_then(|f| f.get("name")).and_then(Value::as_str)
                        == Some(wanted)
                })
                .collect();
            if named.is_empty() {
                return Err(ApiError::invalid_param(format!(
                    "tool_choice names {wanted:?}, which is not in tools"
                )));
            }
            (named, true)
        }
        Some(other) => {
            return Err(ApiError::invalid_param(format!(
                "tool_choice must be \"auto\", \"none\", \"required\" or a function, got {other}"
            )))
        }
    };
    Ok((if chosen.is_empty() { None } else { Some(chosen) }, required))
}

/// `enable_thinking` and the other template variables. An explicit
/// `chat_template_kwargs.enable_thinking` wins over `reasoning_effort`.
fn thinking(
    kwargs: Option<Map<String, Value>>,
    effort: Option<&str>,
) -> Result<(Option<bool>, Map<String, Value>), ApiError> {
    let mut extra = kwargs.unwrap_or_default();
    let explicit = match extra.remove("enable_thinking") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(b),
        Some(_) => {
            return Err(ApiError::invalid_param(
                "chat_template_kwargs.enable_thinking must be true or false",
            ))
        }
    };
    let from_effort = match effort {
        None => None,
        Some("none") => Some(false),
        Some(level @ ("minimal" | "low" | "medium" | "high" | "xhigh")) => {
            // Templates with effort levels (gpt-oss) read this variable.
            extra.entry("reasoning_effort").or_insert_with(|| json!(level));
            Some(true)
        }
        Some(other) => {
            return Err(ApiError::invalid_param(format!(
                "reasoning_effort must be none, minimal, low, medium, high or xhigh, got {other:?}"
            )))
        }
    };
    Ok((explicit.or(from_effort), extra))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: ModelLimits = ModelLimits { vocab_size: 300, max_context: 2048 };

    fn request(body: Value) -> Result<Prepared, ApiError> {
        let body: ChatCompletionRequest = serde_json::from_value(body).unwrap();
        prepare(body, LIMITS, &SamplingParams::default(), &FileImages::new())
    }

    fn chat(p: &Prepared) -> (&[ChatMessage], &TemplateOptions) {
        match &p.request.prompt {
            Prompt::Chat { messages, options } => (messages, options),
            other => panic!("not a chat prompt: {other:?}"),
        }
    }

    #[test]
    fn the_loaded_model_answers_to_its_names() {
        let path = Path::new("/models/tiny-model.gguf");
        for name in
            ["default", "Tiny Model", "/models/tiny-model.gguf", "tiny-model.gguf", "tiny-model"]
        {
            assert!(accepts_model_name("Tiny Model", path, name), "{name}");
        }
        assert!(!accepts_model_name("Tiny Model", path, "gpt-4o"));
    }

    #[test]
    fn sampling_parameters_and_stops_reach_the_engine() {
        let p = request(json!({
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 5, "max_completion_tokens": 7,
            "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1,
            "seed": -1, "stop": "END", "logit_bias": {"2": -100, "17": 3.5},
            "stream": true, "stream_options": {"include_usage": true}
        }))
        .unwrap();
        let s = &p.request.sampling;
        assert_eq!(p.request.max_tokens, 7, "max_completion_tokens wins");
        assert_eq!(
            (s.temperature, s.top_p, s.top_k, s.min_p, s.repetition_penalty),
            (0.5, 0.9, 40, 0.05, 1.1)
        );
        assert_eq!(s.seed, Some(u64::MAX));
        assert_eq!(s.logit_bias.get(&2), Some(&-100.0));
        assert_eq!(s.logit_bias.get(&17), Some(&3.5));
        assert_eq!(p.request.stop, vec!["END".to_string()]);
        assert!(p.stream && p.include_usage);
    }

    #[test]
    fn max_tokens_defaults_to_the_context() {
        let p = request(json!({"messages": [{"role": "user", "content": "hi"}]})).unwrap();
        assert_eq!(p.request.max_tokens, 2048);
        assert!(!p.stream);
    }

    #[test]
    fn bad_parameters_are_refused_with_their_name() {
        let bad = [
            (json!({"messages": []}), "messages"),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": -3}),
                "max_tokens",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}),
                "max_tokens",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "temperature": -1}),
                "temperature",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "temperature": 2.5}),
                "temperature",
            ),
            (json!({"messages": [{"role": "user", "content": "x"}], "top_k": -1}), "top_k"),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"a": 1}}),
                "logit_bias",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"1": 500}}),
                "logit_bias",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"9999": 1}}),
                "logit_bias",
            ),
            (json!({"messages": [{"role": "user", "content": "x"}], "stop": ["a", ""]}), "stop"),
            (json!({"messages": [{"role": "user", "content": "x"}], "stop": 3}), "stop"),
            (json!({"messages": [{"role": "wizard", "content": "x"}]}), "role"),
            (json!({"messages": [{"role": "user"}]}), "content"),
            (json!({"messages": [{"role": "user", "content": "x"}], "n": 2}), "n = 1"),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "max"}),
                "reasoning_effort",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "tool_choice": "sometimes"}),
                "tool_choice",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}),
                "tools[0]",
            ),
        ];
        for (body, needle) in bad {
            let e = request(body.clone()).expect_err(&body.to_string());
            assert_eq!(e.status, 400, "{body}");
            assert!(e.message.contains(needle), "{body}: {}", e.message);
        }
    }

    #[test]
    fn response_formats_become_constraints() {
        let with = |format: Value| {
            request(
                json!({"messages": [{"role": "user", "content": "x"}], "response_format": format}),
            )
        };
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let cases = [
            (json!({"type": "text"}), None),
            (json!({"type": "json_object"}), Some(Constraint::JsonObject)),
            (
                json!({"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": true}}),
                Some(Constraint::JsonSchema(schema.clone())),
            ),
            (json!({"type": "regex", "regex": "[0-9]+"}), Some(Constraint::Regex("[0-9]+".into()))),
            (
                json!({"type": "lark", "lark": "start: \"a\""}),
                Some(Constraint::Lark("start: \"a\"".into())),
            ),
        ];
        for (format, expected) in cases {
            assert_eq!(with(format.clone()).unwrap().request.constraint, expected, "{format}");
        }
        assert_eq!(
            request(json!({"messages": [{"role": "user", "content": "x"}]}))
                .unwrap()
                .request
                .constraint,
            None
        );
        let bad = [
            (json!({"type": "xml"}), "response_format.type"),
            (json!({}), "response_format.type"),
            (json!({"type": "json_schema"}), "response_format.json_schema"),
            (
                json!({"type": "json_schema", "json_schema": {"name": "x"}}),
                "response_format.json_schema.schema",
            ),
            (
                json!({"type": "json_schema", "json_schema": {"schema": "object"}}),
                "response_format.json_schema.schema",
            ),
            (json!({"type": "regex"}), "response_format.regex"),
        ];
        for (format, needle) in bad {
            let e = with(format.clone()).expect_err(&format.to_string());
            assert_eq!(e.status, 400);
            assert!(e.message.contains(needle), "{format}: {}", e.message);
        }
    }

    /// A one-message request with these fields added.
    fn with(extra: Value) -> Result<Prepared, ApiError> {
        let mut body = json!({"messages": [{"role": "user", "content": "x"}]});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        request(body)
    }

    #[test]
    fn logprobs_and_their_alternatives_reach_the_engine() {
        assert_eq!(with(json!({})).unwrap().request.logprobs, None);
        assert_eq!(with(json!({"logprobs": false})).unwrap().request.logprobs, None);
        assert_eq!(with(json!({"logprobs": true})).unwrap().request.logprobs, Some(0));
        assert_eq!(
            with(json!({"logprobs": true, "top_logprobs": 5})).unwrap().request.logprobs,
            Some(5)
        );
        for (bad, needle) in [
            (json!({"logprobs": true, "top_logprobs": 21}), "top_logprobs"),
            (json!({"logprobs": true, "top_logprobs": -1}), "top_logprobs"),
            (json!({"top_logprobs": 2}), "needs logprobs"),
        ] {
            let e = with(bad.clone()).expect_err(&bad.to_string());
            assert!(e.message.contains(needle), "{bad}: {}", e.message);
        }
    }

    #[test]
    fn fields_we_do_not_act_on_are_refused_by_name() {
        for extra in [
            json!({"presence_penalty": 0.5}),
            json!({"frequency_penalty": -1}),
            json!({"logit_bias_mode": "x"}),
            json!({"audio": {"voice": "alloy"}}),
            json!({"functions": []}),
            json!({"prediction": {"type": "content", "content": "x"}}),
        ] {
            let name = extra.as_object().unwrap().keys().next().unwrap().clone();
            let e = with(extra.clone()).expect_err(&extra.to_string());
            assert_eq!(e.status, 400);
            assert!(e.message.contains(&name), "{extra}: {}", e.message);
        }
        // What asks for nothing, or cannot change the answer, passes.
        for extra in [
            json!({"presence_penalty": 0, "frequency_penalty": 0.0}),
            json!({"user": "u1", "metadata": {"k": "v"}, "store": false}),
            json!({"audio": null}),
        ] {
            assert!(with(extra.clone()).is_ok(), "{extra}");
        }
    }

    #[test]
    fn image_parts_keep_their_place_and_carry_their_bytes() {
        let p = request(json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is "},
            {"type": "text", "text": "this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAEC"}},
            {"type": "input_image", "image_url": "data:image/png;base64,AwQ="}
        ]}]}))
        .unwrap();
        let (messages, _) = chat(&p);
        let MessageContent::Parts(parts) = &messages[0].content else { panic!("parts expected") };
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0], ContentPart::text("what is this?"));
        let images = &p.request.images;
        assert_eq!(images.len(), 2);
        assert_eq!(&*images[0].bytes, &[0u8, 1, 2]);
        assert_eq!(&*images[1].bytes, &[3u8, 4]);
        assert_eq!(parts[1], ContentPart::Image { image: Some(images[0].sha256.clone()) });
    }

    #[test]
    fn a_file_url_image_takes_the_bytes_read_for_it() {
        let body: ChatCompletionRequest = serde_json::from_value(json!({"messages": [
            {"role": "user", "content": "no images here"},
            {"role": "user", "content": [
                {"type": "text", "text": "file:///not/an/image/part"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAEC"}},
                {"type": "image_url", "image_url": {"url": "file:///pictures/a%20b.png"}},
                {"type": "image", "image": "file:///pictures/c.png"}
            ]}
        ]}))
        .unwrap();
        let urls = file_image_urls(&body);
        assert_eq!(
            urls,
            vec![
                ("messages[1].content[2]".to_owned(), "file:///pictures/a%20b.png".to_owned()),
                ("messages[1].content[3]".to_owned(), "file:///pictures/c.png".to_owned()),
            ]
        );
        let files: FileImages =
            [(urls[0].1.clone(), vec![9u8, 8]), (urls[1].1.clone(), vec![7u8])].into();
        let p = prepare(body, LIMITS, &SamplingParams::default(), &files).unwrap();
        let bytes: Vec<&[u8]> = p.request.images.iter().map(|i| &*i.bytes).collect();
        assert_eq!(bytes, vec![&[0u8, 1, 2][..], &[9, 8], &[7]]);
    }

    #[test]
    fn a_prompt_too_long_for_any_tokenization_is_refused_before_templating() {
        let limits = ModelLimits { vocab_size: 300, max_context: 100 };
        let max = 100 * MAX_BYTES_PER_TOKEN;
        let body = |text: String| -> ChatCompletionRequest {
            serde_json::from_value(json!({"messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": text}]}
            ]}))
            .unwrap()
        };
        // two messages: one token each at least, and the system text
        let room = max - 2 * MAX_BYTES_PER_TOKEN - "be brief".len();
        check_prompt_size(&body("a".repeat(room)), limits).unwrap();
        let e = check_prompt_size(&body("a".repeat(room + 1)), limits).unwrap_err();
        assert_eq!((e.status.as_u16(), e.code.as_str()), (400, "context_length_exceeded"));
        assert!(e.message.contains(&format!("{} bytes", max + 1)), "{}", e.message);
        // tool definitions and earlier tool calls count too
        let tools: ChatCompletionRequest = serde_json::from_value(json!({
            "messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "function", "function": {"name": "f", "description": "d".repeat(max)}}]
        }))
        .unwrap();
        assert!(check_prompt_size(&tools, limits).is_err());
        let empty: Vec<Value> = (0..101).map(|_| json!({"role": "user", "content": ""})).collect();
        let many: ChatCompletionRequest =
            serde_json::from_value(json!({"messages": empty})).unwrap();
        assert!(check_prompt_size(&many, limits).is_err(), "101 messages cannot fit 100 tokens");
    }

    #[test]
    fn bad_image_urls_are_refused_clearly() {
        for (url, needle) in [
            ("https://example.com/cat.png", "does not fetch remote images"),
            ("data:image/png;base64,!!!", "not valid base64"),
            ("data:image/png,raw", "only base64"),
            ("file:///never/read.png", "was not read"),
        ] {
            let e = request(json!({"messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": url}}
            ]}]}))
            .expect_err(url);
            assert_eq!(e.status, 400, "{url}");
            assert_eq!(e.code, "invalid_image", "{url}");
            assert!(e.message.contains(needle), "{url}: {}", e.message);
        }
    }

    #[test]
    fn audio_and_video_parts_are_refused_by_name() {
        for (part, needle) in [
            (
                json!({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}),
                "audio input is not supported",
            ),
            (
                json!({"type": "video_url", "video_url": {"url": "file:///v.mp4"}}),
                "video input is not supported",
            ),
        ] {
            let e = request(json!({"messages": [{"role": "user", "content": [part]}]}))
                .expect_err(needle);
            assert_eq!(e.status, 400);
            assert!(e.message.contains(needle), "{}", e.message);
        }
    }

    #[test]
    fn text_parts_are_joined_and_roles_mapped() {
        let p = request(json!({"messages": [
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hello "}, {"type": "text", "text": "there"}]}
        ]}))
        .unwrap();
        let (messages, _) = chat(&p);
        assert_eq!(messages[0].role, "system");
        assert_eq!(messages[1].content, MessageContent::Text("hello there".into()));
    }

    #[test]
    fn tool_calls_reach_the_template_with_object_arguments() {
        let tool = json!({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}});
        let p = request(json!({
            "messages": [
                {"role": "user", "content": "weather in Paris?"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
            ],
            "tools": [tool.clone()], "tool_choice": "auto"
        }))
        .unwrap();
        let (messages, options) = chat(&p);
        assert_eq!(options.tools, Some(vec![tool]));
        let call = &messages[1].tool_calls.as_ref().unwrap()[0];
        assert_eq!(
            call,
            &json!({"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}})
        );
        assert_eq!(messages[1].content, MessageContent::Text(String::new()));
        assert_eq!(messages[2].tool_call_id.as_deref(), Some("call_1"));
    }

    #[test]
    fn tool_choice_none_hides_the_tools_and_a_named_choice_keeps_one() {
        let tools = json!([
            {"type": "function", "function": {"name": "a"}},
            {"type": "function", "function": {"name": "b"}}
        ]);
        let msgs = json!([{"role": "user", "content": "x"}]);
        let none =
            request(json!({"messages": msgs, "tools": tools, "tool_choice": "none"})).unwrap();
        assert_eq!(chat(&none).1.tools, None);
        let named = request(
            json!({"messages": msgs, "tools": tools, "tool_choice": {"type": "function", "function": {"name": "b"}}}),
        )
        .unwrap();
        assert_eq!(
            chat(&named).1.tools,
            Some(vec![json!({"type": "function", "function": {"name": "b"}})])
        );
        let missing = request(
            json!({"messages": msgs, "tools": tools, "tool_choice": {"type": "function", "function": {"name": "c"}}}),
        );
        assert_eq!(missing.unwrap_err().status, 400);
    }

    #[test]
    fn thinking_follows_kwargs_then_effort() {
        let msgs = json!([{"role": "user", "content": "x"}]);
        let off = request(json!({"messages": msgs, "reasoning_effort": "none"})).unwrap();
        assert_eq!(chat(&off).1.enable_thinking, Some(false));
        let on = request(json!({"messages": msgs, "reasoning_effort": "high"})).unwrap();
        assert_eq!(chat(&on).1.enable_thinking, Some(true));
        assert_eq!(chat(&on).1.extra.get("reasoning_effort"), Some(&json!("high")));
        let kw = request(json!({"messages": msgs, "reasoning_effort": "high",
            "chat_template_kwargs": {"enable_thinking": false, "date_string": "today"}}))
        .unwrap();
        assert_eq!(chat(&kw).1.enable_thinking, Some(false));
        assert_eq!(chat(&kw).1.extra.get("date_string"), Some(&json!("today")));
        assert!(!chat(&kw).1.extra.contains_key("enable_thinking"));
        let unset = request(json!({"messages": msgs})).unwrap();
        assert_eq!(chat(&unset).1.enable_thinking, None);
    }
}
