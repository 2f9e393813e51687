//! Anthropic's Messages API (`POST /v1/messages`, `/v1/messages/count_tokens`)
//! at the edge: a request becomes the inner chat request
//! ([`ChatCompletionRequest`]), the engine's events become Anthropic's
//! message, content blocks and stream events, and errors take Anthropic's
//! shape. What the translation cannot carry is refused by name.
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use engine::batch::{Event, FinishReason, RequestStats};
use engine::handle::Completion;
use engine::tools::ToolCall;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::api_error::ApiError;
use crate::convert::{fields_except, refuse_unknown, required_str};
use crate::openai::{ChatCompletionRequest, RequestMessage};
use crate::routes::sse::{Frame, StreamWriter};

/// `POST /v1/messages` (and, without `max_tokens` and `stream`, the body of
/// `/v1/messages/count_tokens`).
#[derive(Debug, Clone, Deserialize)]
pub struct MessagesRequest {
    /// Required by Anthropic; a local server has one model and takes a
    /// missing name to mean it.
    #[serde(default)]
    pub model: Option<String>,
    pub messages: Vec<Message>,
    /// Required for `/v1/messages`, as Anthropic requires it.
    #[serde(default)]
    pub max_tokens: Option<i64>,
    /// A string or a list of text blocks.
    #[serde(default)]
    pub system: Option<Value>,
    #[serde(default)]
    pub stop_sequences: Option<Vec<String>>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub top_k: Option<i64>,
    /// `{"name", "description", "input_schema"}` each.
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
    /// `{"type": "auto" | "any" | "tool" | "none", "name"?, "disable_parallel_tool_use"?}`.
    #[serde(default)]
    pub tool_choice: Option<Value>,
    /// `{"type": "enabled", "budget_tokens"}`, `{"type": "disabled"}` or
    /// `{"type": "adaptive"}`.
    #[serde(default)]
    pub thinking: Option<Value>,
    /// `{"format": {"type": "json_schema", "schema"}, "effort"}`.
    #[serde(default)]
    pub output_config: Option<Value>,
    /// Server-side edits of the conversation; only those that change
    /// nothing here are accepted (see [`context_management`]).
    #[serde(default)]
    pub context_management: Option<Value>,
    /// Everything else the client sent, checked by name.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Message {
    pub role: String,
    /// A string or a list of content blocks.
    pub content: Value,
    /// Everything else the client sent, checked by name.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// Request fields that change nothing about the answer here: `metadata`
/// (a user id), `service_tier`, `cache_control` (the engine's prefix cache
/// needs no marks), `speed` and `inference_geo` (where Anthropic runs it).
const BOOKKEEPING_FIELDS: [&str; 5] =
    ["metadata", "service_tier", "cache_control", "speed", "inference_geo"];

/// Block fields that carry nothing the template shows.
const BLOCK_BOOKKEEPING_FIELDS: [&str; 2] = ["cache_control", "citations"];

/// Which endpoint the request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `/v1/messages`: `max_tokens` is required.
    Create,
    /// `/v1/messages/count_tokens`: the prompt only.
    CountTokens,
}

/// The inner chat request for an Anthropic request.
pub fn to_chat(
    body: MessagesRequest,
    endpoint: Endpoint,
) -> Result<ChatCompletionRequest, ApiError> {
    refuse_unknown("", &body.other, &BOOKKEEPING_FIELDS)?;
    context_management(body.context_management.as_ref())?;
    let max_tokens = match (endpoint, body.max_tokens) {
        (Endpoint::Create, None) => return Err(ApiError::invalid_param("max_tokens is required")),
        (Endpoint::Create, Some(n)) => Some(n),
        // count_tokens counts the prompt: these change nothing about it
        (Endpoint::CountTokens, _) => None,
    };
    let mut messages = Vec::new();
    if let Some(system) = body.system.filter(|s| !s.is_null()) {
        messages.push(text_message("system", system_text(system)?));
    }
    let last_is_assistant = body.messages.last().is_some_and(|m| m.role == "assistant");
    for (i, m) in body.messages.into_iter().enumerate() {
        translate_message(i, m, &mut messages)?;
    }
    let (tools, tool_choice, parallel_tool_calls) = tools(body.tools, body.tool_choice)?;
    let (chat_template_kwargs, thinking_budget) = thinking(body.thinking.as_ref())?;
    let (response_format, reasoning_effort) = output_config(body.output_config.as_ref())?;
    Ok(ChatCompletionRequest {
        model: body.model,
        messages,
        max_tokens,
        temperature: body.temperature,
        top_p: body.top_p,
        top_k: body.top_k,
        stop: body.stop_sequences.map(|s| json!(s)),
        tools,
        tool_choice,
        parallel_tool_calls,
        chat_template_kwargs,
        thinking_budget,
        reasoning_effort,
        response_format,
        stream: if endpoint == Endpoint::Create { body.stream } else { None },
        // Anthropic continues a final assistant turn in place ("prefill").
        continue_final_message: last_is_assistant.then_some(true),
        ..ChatCompletionRequest::default()
    })
}

fn text_message(role: &str, text: String) -> RequestMessage {
    RequestMessage {
        role: role.to_owned(),
        content: Some(Value::String(text)),
        ..RequestMessage::default()
    }
}

/// `system`: a string, or text blocks joined by newlines.
fn system_text(system: Value) -> Result<String, ApiError> {
    match system {
        Value::String(s) => Ok(s),
        Value::Array(blocks) => {
            let mut texts = Vec::new();
            for (i, block) in blocks.iter().enumerate() {
                let at = format!("system[{i}]");
                let (kind, fields) = block_parts(&at, block)?;
                if kind != "text" {
                    return Err(ApiError::invalid_param(format!(
                        "{at}: system blocks must be text blocks, got {kind:?}"
                    )));
                }
                refuse_unknown(
                    &at,
                    &fields_except(fields, &["type", "text"]),
                    &BLOCK_BOOKKEEPING_FIELDS,
                )?;
                texts.push(required_str(&at, block, "text")?.to_owned());
            }
            Ok(texts.join("\n"))
        }
        _ => Err(ApiError::invalid_param("system must be a string or a list of text blocks")),
    }
}

/// One Anthropic message as chat messages: a user message's `tool_result`
/// blocks become `tool` messages (in their place), its other blocks user
/// messages; an assistant message's `tool_use` blocks become its tool calls
/// and its `thinking` its reasoning.
fn translate_message(
    index: usize,
    m: Message,
    out: &mut Vec<RequestMessage>,
) -> Result<(), ApiError> {
    let at = format!("messages[{index}]");
    refuse_unknown(&at, &m.other, &[])?;
    let blocks = match m.content {
        Value::String(text) => vec![json!({"type": "text", "text": text})],
        Value::Array(blocks) => blocks,
        _ => {
            return Err(ApiError::invalid_param(format!(
                "{at}.content must be a string or a list of content blocks"
            )))
        }
    };
    match m.role.as_str() {
        "user" => user_blocks(&at, blocks, out),
        "assistant" => {
            out.push(assistant_blocks(&at, blocks)?);
            Ok(())
        }
        // A system turn in mid-conversation (Claude Code sends them); the
        // chat template decides whether it can show one there.
        "system" => {
            let text = system_text(Value::Array(blocks))?;
            out.push(text_message("system", text));
            Ok(())
        }
        other => Err(ApiError::invalid_param(format!(
            "{at}.role: unknown role {other:?} (expected user, assistant or system)"
        ))),
    }
}

fn user_blocks(
    at: &str,
    blocks: Vec<Value>,
    out: &mut Vec<RequestMessage>,
) -> Result<(), ApiError> {
    let mut parts: Vec<Value> = Vec::new();
    let flush = |parts: &mut Vec<Value>, out: &mut Vec<RequestMessage>| {
        if !parts.is_empty() {
            out.push(RequestMessage {
                role: "user".into(),
                content: Some(Value::Array(std::mem::take(parts))),
                ..RequestMessage::default()
            });
        }
    };
    for (j, block) in blocks.iter().enumerate() {
        let at = format!("{at}.content[{j}]");
        let (kind, fields) = block_parts(&at, block)?;
        match kind {
            "tool_result" => {
                refuse_unknown(
                    &at,
                    &fields_except(fields, &["type", "tool_use_id", "content", "is_error"]),
                    &BLOCK_BOOKKEEPING_FIELDS,
                )?;
                flush(&mut parts, out);
                let id = required_str(&at, block, "tool_use_id")?;
                let content = match block.get("content") {
                    None | Some(Value::Null) => Value::String(String::new()),
                    Some(Value::String(s)) => Value::String(s.clone()),
                    Some(Value::Array(inner)) => {
                        let mut inner_parts = Vec::new();
                        for (k, b) in inner.iter().enumerate() {
                            inner_parts.push(user_part(&format!("{at}.content[{k}]"), b)?);
                        }
                        Value::Array(inner_parts)
                    }
                    Some(_) => {
                        return Err(ApiError::invalid_param(format!(
                            "{at}.content must be a string or a list of text and image blocks"
                        )))
                    }
                };
                out.push(RequestMessage {
                    role: "tool".into(),
                    content: Some(content),
                    tool_call_id: Some(id.to_owned()),
                    ..RequestMessage::default()
                });
            }
            _ => parts.push(user_part(&at, block)?),
        }
    }
    flush(&mut parts, out);
    Ok(())
}

/// A text or image block as a chat content part.
fn user_part(at: &str, block: &Value) -> Result<Value, ApiError> {
    let (kind, fields) = block_parts(at, block)?;
    match kind {
        "text" => {
            refuse_unknown(
                at,
                &fields_except(fields, &["type", "text"]),
                &BLOCK_BOOKKEEPING_FIELDS,
            )?;
            Ok(json!({"type": "text", "text": required_str(at, block, "text")?}))
        }
        "image" => {
            refuse_unknown(
                at,
                &fields_except(fields, &["type", "source"]),
                &BLOCK_BOOKKEEPING_FIELDS,
            )?;
            Ok(json!({"type": "image_url", "image_url": {"url": image_url(at, block)?}}))
        }
        "document" | "search_result" | "container_upload" => Err(ApiError::invalid_param(format!(
            "{at}: {kind} blocks are not supported by this server (send text or images)"
        ))),
        other => Err(ApiError::invalid_param(format!(
            "{at}: content blocks of type {other:?} are not supported here"
        ))),
    }
}

/// An image block's source as a URL the inner request reads: base64 data
/// becomes a data URL; a `file:` URL is read under the server's policy;
/// remote URLs are refused, as in chat completions.
fn image_url(at: &str, block: &Value) -> Result<String, ApiError> {
    let source = block.get("source").filter(|s| s.is_object()).ok_or_else(|| {
        ApiError::invalid_param(format!("{at}: an image block needs a \"source\" object"))
    })?;
    let at = format!("{at}.source");
    match source.get("type").and_then(Value::as_str) {
        Some("base64") => {
            let media_type = required_str(&at, source, "media_type")?;
            let data = required_str(&at, source, "data")?;
            Ok(format!("data:{media_type};base64,{data}"))
        }
        Some("url") => {
            let url = required_str(&at, source, "url")?;
            if !url.starts_with("file:") && !url.starts_with("data:") {
                return Err(ApiError::invalid_image(format!(
                    "{at}: this local server does not fetch remote images; send the image as base64"
                )));
            }
            Ok(url.to_owned())
        }
        other => Err(ApiError::invalid_param(format!(
            "{at}.type must be \"base64\" or \"url\", got {}",
            other.map_or("nothing".to_owned(), |o| format!("{o:?}"))
        ))),
    }
}

fn assistant_blocks(at: &str, blocks: Vec<Value>) -> Result<RequestMessage, ApiError> {
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut calls = Vec::new();
    for (j, block) in blocks.iter().enumerate() {
        let at = format!("{at}.content[{j}]");
        let (kind, fields) = block_parts(&at, block)?;
        match kind {
            "text" => {
                refuse_unknown(
                    &at,
                    &fields_except(fields, &["type", "text"]),
                    &BLOCK_BOOKKEEPING_FIELDS,
                )?;
                text.push_str(required_str(&at, block, "text")?);
            }
            "thinking" => {
                let known = fields_except(fields, &["type", "thinking", "signature"]);
                refuse_unknown(&at, &known, &BLOCK_BOOKKEEPING_FIELDS)?;
                reasoning.push_str(required_str(&at, block, "thinking")?);
            }
            // Encrypted by Anthropic: nothing a local model can read.
            "redacted_thinking" => {}
            "tool_use" => {
                let known = fields_except(fields, &["type", "id", "name", "input"]);
                refuse_unknown(&at, &known, &BLOCK_BOOKKEEPING_FIELDS)?;
                let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
                calls.push(json!({
                    "id": required_str(&at, block, "id")?,
                    "type": "function",
                    "function": {"name": required_str(&at, block, "name")?, "arguments": input},
                }));
            }
            other => {
                return Err(ApiError::invalid_param(format!(
                    "{at}: assistant blocks of type {other:?} are not supported here"
                )))
            }
        }
    }
    Ok(RequestMessage {
        role: "assistant".into(),
        content: Some(Value::String(text)),
        reasoning_content: (!reasoning.is_empty()).then_some(reasoning),
        tool_calls: (!calls.is_empty()).then_some(calls),
        ..RequestMessage::default()
    })
}

/// Chat completions' `tools`, `tool_choice` and `parallel_tool_calls`.
type ChatTools = (Option<Vec<Value>>, Option<Value>, Option<bool>);

/// Anthropic's tools and tool choice as chat completions': tools, choice,
/// and whether calls may come in parallel.
fn tools(tools: Option<Vec<Value>>, choice: Option<Value>) -> Result<ChatTools, ApiError> {
    let mut out = Vec::new();
    for (i, tool) in tools.unwrap_or_default().iter().enumerate() {
        let at = format!("tools[{i}]");
        let object = tool.as_object().ok_or_else(|| {
            ApiError::invalid_param(format!("{at} must be an object with name and input_schema"))
        })?;
        if let Some(kind) = object.get("type").and_then(Value::as_str).filter(|k| *k != "custom") {
            return Err(ApiError::invalid_param(format!(
                "{at}: tools of type {kind:?} (run by Anthropic) are not supported here; define it as a custom tool"
            )));
        }
        let known = fields_except(object, &["type", "name", "description", "input_schema"]);
        refuse_unknown(&at, &known, &["cache_control", "strict"])?;
        let mut function = Map::new();
        function.insert("name".into(), json!(required_str(&at, tool, "name")?));
        if let Some(description) = object.get("description").filter(|d| !d.is_null()) {
            function.insert("description".into(), description.clone());
        }
        let schema =
            object.get("input_schema").cloned().unwrap_or_else(|| json!({"type": "object"}));
        function.insert("parameters".into(), schema);
        out.push(json!({"type": "function", "function": function}));
    }
    let tools = (!out.is_empty()).then_some(out);
    let Some(choice) = choice.filter(|c| !c.is_null()) else { return Ok((tools, None, None)) };
    let at = "tool_choice";
    let object = choice.as_object().ok_or_else(|| {
        ApiError::invalid_param(format!("{at} must be an object such as {{\"type\": \"auto\"}}"))
    })?;
    refuse_unknown(
        at,
        &fields_except(object, &["type", "name", "disable_parallel_tool_use"]),
        &[],
    )?;
    let parallel = match object.get("disable_parallel_tool_use") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(disable)) => Some(!disable),
        Some(_) => {
            return Err(ApiError::invalid_param(format!(
                "{at}.disable_parallel_tool_use must be true or false"
            )))
        }
    };
    let choice = match object.get("type").and_then(Value::as_str) {
        Some("auto") => json!("auto"),
        Some("any") => json!("required"),
        Some("none") => json!("none"),
        Some("tool") => {
            json!({"type": "function", "function": {"name": required_str(at, &choice, "name")?}})
        }
        other => {
            return Err(ApiError::invalid_param(format!(
                "{at}.type must be \"auto\", \"any\", \"tool\" or \"none\", got {other:?}"
            )))
        }
    };
    Ok((tools, Some(choice), parallel))
}

/// `context_management`: Anthropic edits the conversation before the model
/// reads it (clearing old tool results or thinking). Only the edit that
/// keeps everything (`clear_thinking` with `keep: "all"`, which Claude Code
/// sends) is accepted; any other would change the prompt and is refused.
fn context_management(edits: Option<&Value>) -> Result<(), ApiError> {
    let Some(config) = edits.filter(|c| !c.is_null()) else { return Ok(()) };
    let at = "context_management";
    let object = config
        .as_object()
        .ok_or_else(|| ApiError::invalid_param(format!("{at} must be an object")))?;
    refuse_unknown(at, &fields_except(object, &["edits"]), &[])?;
    let edits = object.get("edits").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    for (i, edit) in edits.iter().enumerate() {
        let kind = edit.get("type").and_then(Value::as_str).unwrap_or("");
        let keeps_all =
            kind.starts_with("clear_thinking_") && edit.get("keep") == Some(&json!("all"));
        if !keeps_all {
            return Err(ApiError::invalid_param(format!(
                "{at}.edits[{i}]: the edit {kind:?} is not supported by this server (only clear_thinking with keep \"all\")"
            )));
        }
    }
    Ok(())
}

/// The chat template's keyword arguments (`enable_thinking`) and a thinking budget.
type TemplateThinking = (Option<Map<String, Value>>, Option<u64>);

/// `thinking` as the template's `enable_thinking` and a thinking budget.
fn thinking(thinking: Option<&Value>) -> Result<TemplateThinking, ApiError> {
    let Some(thinking) = thinking.filter(|t| !t.is_null()) else { return Ok((None, None)) };
    let at = "thinking";
    let object = thinking.as_object().ok_or_else(|| {
        ApiError::invalid_param(format!(
            "{at} must be an object such as {{\"type\": \"enabled\", \"budget_tokens\": 1024}}"
        ))
    })?;
    refuse_unknown(at, &fields_except(object, &["type", "budget_tokens"]), &["display"])?;
    let enable = |on: bool| Some(Map::from_iter([("enable_thinking".to_owned(), json!(on))]));
    match object.get("type").and_then(Value::as_str) {
        Some("enabled") => {
            let budget = object.get("budget_tokens").and_then(Value::as_u64).ok_or_else(|| {
                ApiError::invalid_param(format!("{at}.budget_tokens must be a positive integer"))
            })?;
            Ok((enable(true), Some(budget)))
        }
        Some("adaptive") => Ok((enable(true), None)),
        Some("disabled") => Ok((enable(false), None)),
        other => Err(ApiError::invalid_param(format!(
            "{at}.type must be \"enabled\", \"adaptive\" or \"disabled\", got {other:?}"
        ))),
    }
}

/// `output_config`: a JSON schema the answer must follow, and an effort
/// (any effort turns thinking on, as `reasoning_effort` does).
fn output_config(config: Option<&Value>) -> Result<(Option<Value>, Option<String>), ApiError> {
    let Some(config) = config.filter(|c| !c.is_null()) else { return Ok((None, None)) };
    let at = "output_config";
    let object = config
        .as_object()
        .ok_or_else(|| ApiError::invalid_param(format!("{at} must be an object")))?;
    refuse_unknown(at, &fields_except(object, &["format", "effort"]), &[])?;
    let format = match object.get("format").filter(|f| !f.is_null()) {
        None => None,
        Some(format) => {
            let kind = format.get("type").and_then(Value::as_str);
            let schema = format.get("schema").filter(|s| s.is_object());
            match (kind, schema) {
                (Some("json_schema"), Some(schema)) => Some(
                    json!({"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}),
                ),
                _ => {
                    return Err(ApiError::invalid_param(format!(
                        "{at}.format must be {{\"type\": \"json_schema\", \"schema\": {{...}}}}"
                    )))
                }
            }
        }
    };
    let effort = match object.get("effort").filter(|e| !e.is_null()) {
        None => None,
        Some(Value::String(e)) if e == "max" => Some("xhigh".to_owned()),
        Some(Value::String(e)) => Some(e.clone()),
        Some(_) => return Err(ApiError::invalid_param(format!("{at}.effort must be a string"))),
    };
    Ok((format, effort))
}

/// A block's `type` and all its fields.
fn block_parts<'a>(
    at: &str,
    block: &'a Value,
) -> Result<(&'a str, &'a Map<String, Value>), ApiError> {
    let object = block
        .as_object()
        .ok_or_else(|| ApiError::invalid_param(format!("{at} must be a content block object")))?;
    let kind = object.get("type").and_then(Value::as_str).ok_or_else(|| {
        ApiError::invalid_param(format!("{at}: a content block needs a \"type\""))
    })?;
    Ok((kind, object))
}

// ---------------------------------------------------------------- replies

/// A whole reply.
#[derive(Debug, Clone, Serialize)]
pub struct MessageReply {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub role: &'static str,
    pub model: String,
    pub content: Vec<ContentBlock>,
    pub stop_reason: Option<&'static str>,
    pub stop_sequence: Option<String>,
    pub usage: AnthropicUsage,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Thinking { thinking: String, signature: String },
    Text { text: String },
    ToolUse { id: String, name: String, input: Value },
}

/// Anthropic counts prompt tokens read from the cache apart from the others.
#[derive(Debug, Clone, Serialize)]
pub struct AnthropicUsage {
    pub input_tokens: usize,
    pub output_tokens: usize,
    pub cache_read_input_tokens: usize,
    pub cache_creation_input_tokens: usize,
}

fn usage(stats: &RequestStats) -> AnthropicUsage {
    AnthropicUsage {
        input_tokens: stats.prompt_tokens - stats.cached_prompt_tokens.min(stats.prompt_tokens),
        output_tokens: stats.generated_tokens,
        cache_read_input_tokens: stats.cached_prompt_tokens,
        cache_creation_input_tokens: 0,
    }
}

/// Anthropic's name for a finish; `None` for the ends that are errors.
fn stop_reason(reason: FinishReason) -> Option<&'static str> {
    match reason {
        FinishReason::Stop => Some("end_turn"),
        FinishReason::Length => Some("max_tokens"),
        FinishReason::ToolCalls => Some("tool_use"),
        FinishReason::Cancelled | FinishReason::Error => None,
    }
}

/// A tool call's arguments (a JSON string) as the object Anthropic sends;
/// arguments that are not an object are kept under `"arguments"` rather
/// than lost.
fn tool_input(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(object @ Value::Object(_)) => object,
        Ok(other) => json!({ "arguments": other }),
        Err(_) => json!({ "arguments": arguments }),
    }
}

fn tool_use(call: ToolCall) -> ContentBlock {
    ContentBlock::ToolUse { input: tool_input(&call.arguments), id: call.id, name: call.name }
}

/// The whole reply, or the error the request ended with.
pub fn whole_reply(id: String, model: String, c: Completion) -> Result<MessageReply, ApiError> {
    if let Some(e) = crate::routes::chunks::failure(&c) {
        return Err(e);
    }
    let mut content = Vec::new();
    if !c.reasoning.is_empty() {
        content.push(ContentBlock::Thinking { thinking: c.reasoning, signature: String::new() });
    }
    if !c.content.is_empty() || c.tool_calls.is_empty() {
        content.push(ContentBlock::Text { text: c.content });
    }
    content.extend(c.tool_calls.into_iter().map(tool_use));
    Ok(MessageReply {
        id,
        kind: "message",
        role: "assistant",
        model,
        content,
        stop_reason: c.finish_reason.and_then(stop_reason),
        stop_sequence: None,
        usage: usage(&c.stats),
    })
}

/// `msg_` + time and a counter (as chat completions' ids).
pub fn new_message_id() -> String {
    crate::routes::chunks::new_id("msg_")
}

/// An error in Anthropic's shape, `{"type": "error", "error": {"type", "message"}}`,
/// with the status of the [`ApiError`] it carries.
#[derive(Debug)]
pub struct AnthropicError(pub ApiError);

impl From<ApiError> for AnthropicError {
    fn from(e: ApiError) -> Self {
        Self(e)
    }
}

/// Anthropic's error type for a status.
fn error_type(status: u16) -> &'static str {
    match status {
        400 | 405 | 408 | 415 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 => "overloaded_error",
        _ => "api_error",
    }
}

pub fn error_body(e: &ApiError) -> Value {
    json!({"type": "error", "error": {"type": error_type(e.status.as_u16()), "message": e.message}})
}

impl IntoResponse for AnthropicError {
    fn into_response(self) -> Response {
        let body = error_body(&self.0).to_string();
        // The OpenAI-shaped response logs it and sets the headers (a
        // closed connection after a 413); only the body differs.
        let mut response = self.0.into_response();
        *response.body_mut() = Body::from(body);
        response
    }
}

// ---------------------------------------------------------------- streams

/// The kind of the content block being streamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Thinking,
    Text,
}

/// The events of a streamed reply: `message_start`, then for each block
/// `content_block_start`, its deltas and `content_block_stop`, then
/// `message_delta` (stop reason, usage) and `message_stop`.
pub struct MessageStream {
    id: String,
    model: String,
    /// The block open now, if any.
    open: Option<Open>,
    /// Blocks started so far: the next block's index.
    blocks: usize,
    /// An error was sent; nothing follows it.
    failed: bool,
}

impl MessageStream {
    pub fn new(id: String, model: String) -> Self {
        Self { id, model, open: None, blocks: 0, failed: false }
    }

    /// `message_start`: usage is not known yet (the prompt is counted when
    /// the engine has prepared it); `message_delta` carries it.
    pub fn start(&self) -> Frame {
        sse(
            "message_start",
            json!({"type": "message_start", "message": {
                "id": self.id, "type": "message", "role": "assistant", "model": self.model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 0, "output_tokens": 0}
            }}),
        )
    }

    /// The open block's stop, if one is open.
    fn close(&mut self, out: &mut Vec<Frame>) {
        if self.open.take().is_some() {
            out.push(sse(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": self.blocks - 1}),
            ));
        }
    }

    fn begin(&mut self, block: Value, out: &mut Vec<Frame>) {
        self.close(out);
        out.push(sse(
            "content_block_start",
            json!({"type": "content_block_start", "index": self.blocks, "content_block": block}),
        ));
        self.blocks += 1;
    }

    /// Text into a block of kind `kind`, opening one when another is open.
    fn text(&mut self, kind: Open, text: String, out: &mut Vec<Frame>) {
        if self.open != Some(kind) {
            let block = match kind {
                Open::Thinking => json!({"type": "thinking", "thinking": "", "signature": ""}),
                Open::Text => json!({"type": "text", "text": ""}),
            };
            self.begin(block, out);
            self.open = Some(kind);
        }
        let delta = match kind {
            Open::Thinking => json!({"type": "thinking_delta", "thinking": text}),
            Open::Text => json!({"type": "text_delta", "text": text}),
        };
        out.push(sse(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": self.blocks - 1, "delta": delta}),
        ));
    }

    fn error(&mut self, e: &ApiError) -> Vec<Frame> {
        self.failed = true;
        vec![sse("error", error_body(e))]
    }
}

impl StreamWriter for MessageStream {
    fn event(&mut self, _choice: usize, event: Event) -> Vec<Frame> {
        if self.failed {
            return Vec::new();
        }
        let mut out = Vec::new();
        match event {
            Event::Reasoning(text) => self.text(Open::Thinking, text, &mut out),
            Event::Content(text) => self.text(Open::Text, text, &mut out),
            Event::ToolCall(call) => {
                let arguments = call.arguments.clone();
                let block =
                    json!({"type": "tool_use", "id": call.id, "name": call.name, "input": {}});
                self.begin(block, &mut out);
                let partial = serde_json::to_string(&tool_input(&arguments)).unwrap_or_default();
                out.push(sse(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": self.blocks - 1,
                        "delta": {"type": "input_json_delta", "partial_json": partial}}),
                ));
                out.push(sse(
                    "content_block_stop",
                    json!({"type": "content_block_stop", "index": self.blocks - 1}),
                ));
            }
            Event::Error(e) => return self.error(&ApiError::from_engine(&e)),
            Event::Finished { reason, stats } => match stop_reason(reason) {
                Some(stop_reason) => {
                    if self.blocks == 0 {
                        // An empty answer is still one (empty) text block.
                        self.begin(json!({"type": "text", "text": ""}), &mut out);
                        self.open = Some(Open::Text);
                    }
                    self.close(&mut out);
                    out.push(sse(
                        "message_delta",
                        json!({"type": "message_delta",
                            "delta": {"stop_reason": stop_reason, "stop_sequence": null},
                            "usage": usage(&stats)}),
                    ));
                    out.push(sse("message_stop", json!({"type": "message_stop"})));
                }
                None if reason == FinishReason::Cancelled => {
                    return self.error(&ApiError::cancelled())
                }
                None => return self.error(&ApiError::engine_stopped()),
            },
            Event::Accepted
            | Event::Queued { .. }
            | Event::Logprob(_)
            | Event::PromptLogprobs(_) => {}
        }
        out
    }

    fn engine_gone(&mut self, _choice: usize) -> Vec<Frame> {
        if self.failed {
            return Vec::new();
        }
        self.error(&ApiError::engine_stopped())
    }
}

/// An SSE event with Anthropic's `event:` name beside its data.
fn sse(name: &'static str, data: Value) -> Frame {
    Frame::named(name, &data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(body: Value) -> Result<ChatCompletionRequest, ApiError> {
        to_chat(serde_json::from_value(body).unwrap(), Endpoint::Create)
    }

    fn roles(r: &ChatCompletionRequest) -> Vec<&str> {
        r.messages.iter().map(|m| m.role.as_str()).collect()
    }

    #[test]
    fn system_tools_and_tool_results_become_chat_messages() {
        let r = chat(json!({
            "model": "default", "max_tokens": 50,
            "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "use the tool", "signature": "x"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                    {"type": "text", "text": "and tomorrow?"}
                ]}
            ],
            "tools": [{"name": "get_weather", "description": "d", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
            "stop_sequences": ["END"], "temperature": 0.2, "top_k": 5
        }))
        .unwrap();
        assert_eq!(roles(&r), ["system", "user", "assistant", "tool", "user"]);
        assert_eq!(r.messages[0].content, Some(json!("be brief")));
        let assistant = &r.messages[2];
        assert_eq!(assistant.content, Some(json!("Checking.")));
        assert_eq!(assistant.reasoning_content.as_deref(), Some("use the tool"));
        assert_eq!(
            assistant.tool_calls.as_ref().unwrap()[0],
            json!({"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}})
        );
        assert_eq!(r.messages[3].tool_call_id.as_deref(), Some("toolu_1"));
        assert_eq!(r.messages[3].content, Some(json!("sunny")));
        assert_eq!(r.messages[4].content, Some(json!([{"type": "text", "text": "and tomorrow?"}])));
        assert_eq!(
            r.tools,
            Some(vec![
                json!({"type": "function", "function": {"name": "get_weather", "description": "d", "parameters": {"type": "object"}}})
            ])
        );
        assert_eq!(r.tool_choice, Some(json!("required")));
        assert_eq!(r.parallel_tool_calls, Some(false));
        assert_eq!(r.stop, Some(json!(["END"])));
        assert_eq!((r.max_tokens, r.temperature, r.top_k), (Some(50), Some(0.2), Some(5)));
        assert_eq!(r.continue_final_message, None);
    }

    #[test]
    fn images_thinking_prefill_and_output_format_translate() {
        let r = chat(json!({
            "max_tokens": 10,
            "messages": [
                {"role": "user", "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAEC"}},
                    {"type": "text", "text": "what is it?"}
                ]},
                {"role": "assistant", "content": "It is"}
            ],
            "thinking": {"type": "enabled", "budget_tokens": 64},
            "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}, "effort": "max"}
        }))
        .unwrap();
        assert_eq!(
            r.messages[0].content,
            Some(json!([
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAEC"}},
                {"type": "text", "text": "what is it?"}
            ]))
        );
        assert_eq!(r.continue_final_message, Some(true), "a final assistant turn is continued");
        assert_eq!(r.chat_template_kwargs.unwrap()["enable_thinking"], true);
        assert_eq!(r.thinking_budget, Some(64));
        assert_eq!(r.reasoning_effort.as_deref(), Some("xhigh"));
        assert_eq!(r.response_format.unwrap()["json_schema"]["schema"], json!({"type": "object"}));
        let off = chat(json!({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
            "thinking": {"type": "disabled"}}))
        .unwrap();
        assert_eq!(off.chat_template_kwargs.unwrap()["enable_thinking"], false);
    }

    #[test]
    fn what_cannot_be_carried_is_refused_by_name() {
        let user = |content: Value| json!({"max_tokens": 5, "messages": [{"role": "user", "content": content}]});
        let with = |extra: Value| {
            let mut body = user(json!("x"));
            for (k, v) in extra.as_object().unwrap() {
                body[k] = v.clone();
            }
            body
        };
        let cases = [
            (json!({"messages": [{"role": "user", "content": "x"}]}), "max_tokens is required"),
            (with(json!({"mcp_servers": []})), "mcp_servers"),
            (with(json!({"container": "c"})), "container"),
            (user(json!([{"type": "document", "source": {}}])), "messages[0].content[0]: document"),
            (
                user(
                    json!([{"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}]),
                ),
                "does not fetch remote images",
            ),
            (
                user(json!([{"type": "text", "text": "x", "colour": 1}])),
                "messages[0].content[0].colour",
            ),
            (
                json!({"max_tokens": 5, "messages": [{"role": "tool", "content": "x"}]}),
                "messages[0].role",
            ),
            (
                with(
                    json!({"context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]}}),
                ),
                "context_management.edits[0]",
            ),
            (
                with(json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}]})),
                "tools[0]",
            ),
            (with(json!({"tool_choice": {"type": "sometimes"}})), "tool_choice.type"),
            (with(json!({"thinking": {"type": "enabled"}})), "thinking.budget_tokens"),
            (with(json!({"output_config": {"format": {"type": "xml"}}})), "output_config.format"),
        ];
        for (body, needle) in cases {
            let e = chat(body.clone()).expect_err(&body.to_string());
            assert_eq!(e.status, 400, "{body}");
            assert!(e.message.contains(needle), "{body}: {}", e.message);
        }
        // bookkeeping passes, and count_tokens needs no max_tokens
        chat(with(json!({"metadata": {"user_id": "u"}, "service_tier": "auto",
            "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}})))
        .unwrap();
        let count: MessagesRequest =
            serde_json::from_value(json!({"messages": [{"role": "user", "content": "x"}]}))
                .unwrap();
        to_chat(count, Endpoint::CountTokens).unwrap();
    }

    fn stats() -> RequestStats {
        RequestStats {
            prompt_tokens: 11,
            cached_prompt_tokens: 4,
            generated_tokens: 5,
            ..Default::default()
        }
    }

    #[test]
    fn a_whole_reply_has_thinking_text_and_tool_use_blocks() {
        let c = Completion {
            reasoning: "hmm".into(),
            tool_calls: vec![ToolCall {
                id: "call_1".into(),
                name: "f".into(),
                arguments: "{\"a\":1}".into(),
            }],
            finish_reason: Some(FinishReason::ToolCalls),
            stats: stats(),
            ..Default::default()
        };
        let reply =
            serde_json::to_value(whole_reply("msg_1".into(), "tiny".into(), c).unwrap()).unwrap();
        assert_eq!(
            reply,
            json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "tiny",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": ""},
                    {"type": "tool_use", "id": "call_1", "name": "f", "input": {"a": 1}}
                ],
                "stop_reason": "tool_use", "stop_sequence": null,
                "usage": {"input_tokens": 7, "output_tokens": 5, "cache_read_input_tokens": 4,
                    "cache_creation_input_tokens": 0}})
        );
        let e = AnthropicError(ApiError::invalid_param("bad"));
        assert_eq!(
            error_body(&e.0),
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}})
        );
    }

    #[test]
    fn a_stream_opens_closes_and_numbers_its_blocks() {
        let mut w = MessageStream::new("msg_1".into(), "tiny".into());
        let mut frames = vec![w.start()];
        for event in [
            Event::Accepted,
            Event::Reasoning("a".into()),
            Event::Reasoning("b".into()),
            Event::Content("Hi".into()),
            Event::ToolCall(ToolCall {
                id: "call_1".into(),
                name: "f".into(),
                arguments: "{}".into(),
            }),
            Event::Finished { reason: FinishReason::ToolCalls, stats: stats() },
        ] {
            frames.extend(w.event(0, event));
        }
        let names: Vec<&str> = frames.iter().map(|f| f.event.unwrap()).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
            ]
        );
        let data: Vec<Value> =
            frames.iter().map(|f| serde_json::from_str(&f.data).unwrap()).collect();
        assert!(data.iter().zip(&names).all(|(d, n)| d["type"] == *n), "each data names its event");
        assert_eq!(data[1]["content_block"]["type"], "thinking");
        assert_eq!(data[3]["delta"], json!({"type": "thinking_delta", "thinking": "b"}));
        assert_eq!(data[5]["index"], 1);
        assert_eq!(data[6]["delta"], json!({"type": "text_delta", "text": "Hi"}));
        assert_eq!(
            data[8]["content_block"],
            json!({"type": "tool_use", "id": "call_1", "name": "f", "input": {}})
        );
        assert_eq!(data[9]["delta"], json!({"type": "input_json_delta", "partial_json": "{}"}));
        assert_eq!(data[10]["index"], 2);
        assert_eq!(data[11]["delta"]["stop_reason"], "tool_use");
        assert_eq!(data[11]["usage"]["output_tokens"], 5);

        let mut failing = MessageStream::new("msg_2".into(), "tiny".into());
        let frames =
            failing.event(0, Event::Finished { reason: FinishReason::Cancelled, stats: stats() });
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].event, Some("error"));
        assert!(failing.engine_gone(0).is_empty(), "nothing follows an error");
    }
}
