//! OpenAI's Responses API (`POST /v1/responses`) at the edge: input items
//! become the inner chat request ([`ChatCompletionRequest`]); the engine's
//! events become output items (reasoning, message, function calls) and the
//! documented stream events (`response.created` … `response.completed`).
//! What the translation cannot carry is refused by name.
use engine::batch::{Event, FinishReason, RequestStats, TokenLogprob};
use engine::handle::Completion;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::api_error::ApiError;
use crate::convert::{fields_except, refuse_unknown, required_str};
use crate::openai::{ChatCompletionRequest, RequestMessage};
use crate::routes::chunks::{failure, new_id, unix_now};
use crate::routes::sse::{Frame, StreamWriter};

/// `POST /v1/responses`.
#[derive(Debug, Clone, Deserialize)]
pub struct ResponsesRequest {
    #[serde(default)]
    pub model: Option<String>,
    /// A string (one user message) or a list of input items.
    #[serde(default)]
    pub input: Option<Value>,
    /// A system message for this turn only (not inherited by a continuation).
    #[serde(default)]
    pub instructions: Option<String>,
    /// Function tools: `{"type": "function", "name", "description", "parameters"}`.
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
    #[serde(default)]
    pub tool_choice: Option<Value>,
    /// `{"format": {"type": "text" | "json_object" | "json_schema", ...}}`.
    #[serde(default)]
    pub text: Option<Value>,
    /// `{"effort", "summary"}`: the effort switches thinking as
    /// `reasoning_effort` does in chat completions.
    #[serde(default)]
    pub reasoning: Option<Value>,
    #[serde(default)]
    pub max_output_tokens: Option<i64>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub top_logprobs: Option<i64>,
    #[serde(default)]
    pub stream: Option<bool>,
    /// Keep the response for `GET` and `previous_response_id` (default true).
    #[serde(default)]
    pub store: Option<bool>,
    #[serde(default)]
    pub previous_response_id: Option<String>,
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// Extra output to include; `message.output_text.logprobs` asks for logprobs.
    #[serde(default)]
    pub include: Option<Vec<String>>,
    #[serde(default)]
    pub metadata: Option<Value>,
    /// Only `"disabled"`: an over-long conversation is refused, never cut.
    #[serde(default)]
    pub truncation: Option<String>,
    #[serde(default)]
    pub stream_options: Option<Value>,
    /// Everything else the client sent, checked by name.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// Fields that change nothing about the answer: who asks (Codex sends its
/// session ids as `client_metadata`), and hints for OpenAI's own caches and
/// tiers.
const BOOKKEEPING_FIELDS: [&str; 7] = [
    "user",
    "client_metadata",
    "safety_identifier",
    "prompt_cache_key",
    "prompt_cache_retention",
    "service_tier",
    "background_options",
];

/// `include` values: the logprobs one is acted on; the others ask for
/// parts of items this server never makes (or, for encrypted reasoning,
/// cannot make), so including them changes nothing.
const INCLUDABLE: [&str; 8] = [
    "message.output_text.logprobs",
    "reasoning.encrypted_content",
    "message.input_image.image_url",
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
];

/// A translated request.
pub struct Translated {
    /// The inner request: instructions, the earlier conversation, this turn.
    pub chat: ChatCompletionRequest,
    /// This turn's input as chat messages (what a stored response keeps).
    pub turn: Vec<RequestMessage>,
    /// The request's settings as the response object repeats them.
    pub echo: Map<String, Value>,
}

/// The inner chat request for a Responses request continuing `earlier`
/// (the stored conversation of `previous_response_id`, or nothing).
pub fn to_chat(
    body: ResponsesRequest,
    earlier: Vec<RequestMessage>,
) -> Result<Translated, ApiError> {
    refuse_unknown("", &body.other, &BOOKKEEPING_FIELDS)?;
    if let Some(t) = body.truncation.as_deref().filter(|t| *t != "disabled") {
        return Err(ApiError::invalid_param(format!(
            "truncation {t:?} is not supported: this server refuses an over-long conversation instead of cutting it"
        )));
    }
    if let Some(options) = body.stream_options.as_ref().and_then(Value::as_object) {
        refuse_unknown("stream_options", options, &["include_obfuscation"])?;
    }
    let include = body.include.clone().unwrap_or_default();
    if let Some(unknown) = include.iter().find(|i| !INCLUDABLE.contains(&i.as_str())) {
        return Err(ApiError::invalid_param(format!("include: {unknown:?} is not a known value")));
    }
    let logprobs = include.iter().any(|i| i == "message.output_text.logprobs");
    let echo = echo(&body);
    let turn = match body.input {
        None | Some(Value::Null) => return Err(ApiError::invalid_param("input is required")),
        Some(Value::String(text)) => {
            vec![RequestMessage {
                role: "user".into(),
                content: Some(json!(text)),
                ..Default::default()
            }]
        }
        Some(Value::Array(items)) => input_items(&items)?,
        Some(_) => {
            return Err(ApiError::invalid_param("input must be a string or a list of items"))
        }
    };
    let mut messages = Vec::with_capacity(earlier.len() + turn.len() + 1);
    if let Some(instructions) = body.instructions.filter(|i| !i.is_empty()) {
        messages.push(RequestMessage {
            role: "system".into(),
            content: Some(json!(instructions)),
            ..Default::default()
        });
    }
    messages.extend(earlier);
    messages.extend(turn.iter().cloned());
    let chat = ChatCompletionRequest {
        model: body.model,
        messages,
        max_completion_tokens: body.max_output_tokens,
        temperature: body.temperature,
        top_p: body.top_p,
        tools: tools(body.tools)?,
        tool_choice: tool_choice(body.tool_choice)?,
        parallel_tool_calls: body.parallel_tool_calls,
        response_format: text_format(body.text.as_ref())?,
        reasoning_effort: reasoning_effort(body.reasoning.as_ref())?,
        logprobs: logprobs.then_some(true),
        top_logprobs: if logprobs { body.top_logprobs } else { None },
        stream: body.stream,
        ..ChatCompletionRequest::default()
    };
    if !logprobs && body.top_logprobs.is_some_and(|n| n > 0) {
        return Err(ApiError::invalid_param(
            "top_logprobs needs include: [\"message.output_text.logprobs\"]",
        ));
    }
    Ok(Translated { chat, turn, echo })
}

/// The settings a response object repeats from its request.
fn echo(body: &ResponsesRequest) -> Map<String, Value> {
    let text = body.text.clone().unwrap_or_else(|| json!({"format": {"type": "text"}}));
    let mut echo = Map::new();
    echo.insert("instructions".into(), json!(body.instructions));
    echo.insert("max_output_tokens".into(), json!(body.max_output_tokens));
    echo.insert("metadata".into(), body.metadata.clone().unwrap_or_else(|| json!({})));
    echo.insert("parallel_tool_calls".into(), json!(body.parallel_tool_calls.unwrap_or(true)));
    echo.insert("previous_response_id".into(), json!(body.previous_response_id));
    echo.insert(
        "reasoning".into(),
        body.reasoning.clone().unwrap_or_else(|| json!({"effort": null, "summary": null})),
    );
    echo.insert("store".into(), json!(body.store.unwrap_or(true)));
    echo.insert("temperature".into(), json!(body.temperature));
    echo.insert("text".into(), text);
    echo.insert("tool_choice".into(), body.tool_choice.clone().unwrap_or_else(|| json!("auto")));
    echo.insert("tools".into(), json!(body.tools.clone().unwrap_or_default()));
    echo.insert("top_p".into(), json!(body.top_p));
    echo.insert("truncation".into(), json!("disabled"));
    echo
}

/// Input items as chat messages. Consecutive assistant output (a message,
/// function calls, reasoning) becomes one assistant message, as chat
/// templates expect a turn's calls together.
fn input_items(items: &[Value]) -> Result<Vec<RequestMessage>, ApiError> {
    let mut out: Vec<RequestMessage> = Vec::new();
    // Reasoning waiting for the assistant message it belongs to.
    let mut reasoning = String::new();
    // The last message is the assistant turn still being put together.
    let mut assistant_open = false;
    for (i, item) in items.iter().enumerate() {
        let at = format!("input[{i}]");
        let object = item
            .as_object()
            .ok_or_else(|| ApiError::invalid_param(format!("{at} must be an input item object")))?;
        let kind = object.get("type").and_then(Value::as_str).unwrap_or("message");
        match kind {
            "message" => {
                let known = fields_except(object, &["type", "role", "content", "id", "status"]);
                refuse_unknown(&at, &known, &[])?;
                let role = required_str(&at, item, "role")?;
                let content = message_content(&format!("{at}.content"), item.get("content"))?;
                if role == "assistant" {
                    let m = open_assistant(&mut out, &mut assistant_open);
                    append_text(m, content);
                    take_reasoning(m, &mut reasoning);
                } else {
                    if !matches!(role, "user" | "system" | "developer") {
                        return Err(ApiError::invalid_param(format!(
                            "{at}.role: unknown role {role:?} (expected user, assistant, system or developer)"
                        )));
                    }
                    assistant_open = false;
                    out.push(RequestMessage {
                        role: role.into(),
                        content: Some(content),
                        ..Default::default()
                    });
                }
            }
            "function_call" => {
                let known = fields_except(
                    object,
                    &["type", "call_id", "name", "arguments", "id", "status"],
                );
                refuse_unknown(&at, &known, &[])?;
                let call = json!({
                    "id": required_str(&at, item, "call_id")?,
                    "type": "function",
                    "function": {"name": required_str(&at, item, "name")?, "arguments": required_str(&at, item, "arguments")?},
                });
                let m = open_assistant(&mut out, &mut assistant_open);
                m.tool_calls.get_or_insert_with(Vec::new).push(call);
                take_reasoning(m, &mut reasoning);
            }
            "function_call_output" => {
                let known = fields_except(object, &["type", "call_id", "output", "id", "status"]);
                refuse_unknown(&at, &known, &[])?;
                let output = match item.get("output") {
                    Some(Value::String(s)) => json!(s),
                    Some(Value::Array(_)) => {
                        message_content(&format!("{at}.output"), item.get("output"))?
                    }
                    _ => {
                        return Err(ApiError::invalid_param(format!(
                            "{at}.output must be a string or a list of content parts"
                        )))
                    }
                };
                assistant_open = false;
                out.push(RequestMessage {
                    role: "tool".into(),
                    content: Some(output),
                    tool_call_id: Some(required_str(&at, item, "call_id")?.to_owned()),
                    ..Default::default()
                });
            }
            "reasoning" => {
                let known = fields_except(
                    object,
                    &["type", "id", "summary", "content", "encrypted_content", "status"],
                );
                refuse_unknown(&at, &known, &[])?;
                // The thinking itself when it came back, else its summary.
                let parts = ["content", "summary"]
                    .iter()
                    .filter_map(|f| item.get(*f).and_then(Value::as_array))
                    .find(|p| !p.is_empty());
                for part in parts.into_iter().flatten() {
                    if let Some(text) = part.get("text").and_then(Value::as_str) {
                        reasoning.push_str(text);
                    }
                }
            }
            other => {
                return Err(ApiError::invalid_param(format!(
                    "{at}: input items of type {other:?} are not supported here"
                )))
            }
        }
    }
    Ok(out)
}

/// The assistant message being put together, opening one if the last
/// message is not it.
fn open_assistant<'a>(out: &'a mut Vec<RequestMessage>, open: &mut bool) -> &'a mut RequestMessage {
    if !*open {
        out.push(RequestMessage {
            role: "assistant".into(),
            content: Some(json!("")),
            ..Default::default()
        });
        *open = true;
    }
    out.last_mut().expect("just pushed")
}

fn append_text(m: &mut RequestMessage, content: Value) {
    let text = match &content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<String>()
        }
        _ => String::new(),
    };
    if let Some(Value::String(existing)) = &mut m.content {
        existing.push_str(&text);
    }
}

fn take_reasoning(m: &mut RequestMessage, reasoning: &mut String) {
    if !reasoning.is_empty() {
        m.reasoning_content.get_or_insert_with(String::new).push_str(&std::mem::take(reasoning));
    }
}

/// A message's content: a string, or parts (`input_text`, `output_text`,
/// `refusal`, `input_image`) as chat content parts.
fn message_content(at: &str, content: Option<&Value>) -> Result<Value, ApiError> {
    let parts = match content {
        Some(Value::String(s)) => return Ok(json!(s)),
        Some(Value::Array(parts)) => parts,
        _ => {
            return Err(ApiError::invalid_param(format!(
                "{at} must be a string or a list of content parts"
            )))
        }
    };
    let mut out = Vec::with_capacity(parts.len());
    for (j, part) in parts.iter().enumerate() {
        let at = format!("{at}[{j}]");
        let object = part.as_object().ok_or_else(|| {
            ApiError::invalid_param(format!("{at} must be a content part object"))
        })?;
        match object.get("type").and_then(Value::as_str) {
            Some(kind @ ("input_text" | "output_text" | "text")) => {
                let known = fields_except(object, &["type", "text"]);
                refuse_unknown(&at, &known, &["annotations", "logprobs"])?;
                let _ = kind;
                out.push(json!({"type": "text", "text": required_str(&at, part, "text")?}));
            }
            Some("refusal") => {
                out.push(json!({"type": "text", "text": required_str(&at, part, "refusal")?}));
            }
            Some("input_image") => {
                refuse_unknown(&at, &fields_except(object, &["type", "image_url", "detail"]), &[])?;
                let url = object.get("image_url").and_then(Value::as_str).ok_or_else(|| {
                    ApiError::invalid_param(format!(
                        "{at}: an input_image needs an image_url (data: or file: URL; file_id is not supported here)"
                    ))
                })?;
                out.push(json!({"type": "image_url", "image_url": {"url": url}}));
            }
            // a PDF: read as the chat completions `file` part is (documents.rs)
            Some("input_file") => {
                // no file_id: this server keeps no files
                let fields = ["type", "filename", "file_data"];
                refuse_unknown(&at, &fields_except(object, &fields), &[])?;
                let mut file = object.clone();
                file.remove("type");
                out.push(json!({"type": "file", "file": file}));
            }
            Some(other) => {
                return Err(ApiError::invalid_param(format!(
                    "{at}: content parts of type {other:?} are not supported here"
                )))
            }
            None => {
                return Err(ApiError::invalid_param(format!(
                    "{at}: a content part needs a \"type\""
                )))
            }
        }
    }
    Ok(Value::Array(out))
}

/// Function tools, flat in the Responses API, nested in chat completions.
fn tools(tools: Option<Vec<Value>>) -> Result<Option<Vec<Value>>, ApiError> {
    let Some(tools) = tools else { return Ok(None) };
    let mut out = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        let at = format!("tools[{i}]");
        let object = tool
            .as_object()
            .ok_or_else(|| ApiError::invalid_param(format!("{at} must be a tool object")))?;
        match object.get("type").and_then(Value::as_str) {
            Some("function") => {}
            Some(other) => {
                return Err(ApiError::invalid_param(format!(
                    "{at}: tools of type {other:?} are not supported here (only function tools)"
                )))
            }
            None => return Err(ApiError::invalid_param(format!("{at}: a tool needs a \"type\""))),
        }
        let known = fields_except(object, &["type", "name", "description", "parameters", "strict"]);
        refuse_unknown(&at, &known, &[])?;
        let mut function = Map::new();
        function.insert("name".into(), json!(required_str(&at, tool, "name")?));
        for field in ["description", "parameters", "strict"] {
            if let Some(v) = object.get(field).filter(|v| !v.is_null()) {
                function.insert(field.into(), v.clone());
            }
        }
        out.push(json!({"type": "function", "function": function}));
    }
    Ok((!out.is_empty()).then_some(out))
}

fn tool_choice(choice: Option<Value>) -> Result<Option<Value>, ApiError> {
    Ok(match choice {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(Value::String(s)),
        Some(Value::Object(o)) => match (o.get("type").and_then(Value::as_str), o.get("name")) {
            (Some("function"), Some(name)) => {
                Some(json!({"type": "function", "function": {"name": name}}))
            }
            _ => {
                return Err(ApiError::invalid_param(
                    "tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": ...}",
                ))
            }
        },
        Some(other) => {
            return Err(ApiError::invalid_param(format!("tool_choice must be a string or an object, got {other}")))
        }
    })
}

/// `text.format` as chat completions' `response_format`.
fn text_format(text: Option<&Value>) -> Result<Option<Value>, ApiError> {
    let Some(text) = text.filter(|t| !t.is_null()) else { return Ok(None) };
    let object =
        text.as_object().ok_or_else(|| ApiError::invalid_param("text must be an object"))?;
    // `verbosity` is a hint for OpenAI's own models; only its default asks nothing.
    if let Some(v) =
        object.get("verbosity").filter(|v| !v.is_null() && v.as_str() != Some("medium"))
    {
        return Err(ApiError::invalid_param(format!(
            "text.verbosity {v} is not supported by this server"
        )));
    }
    refuse_unknown("text", &fields_except(object, &["format", "verbosity"]), &[])?;
    let Some(format) = object.get("format").filter(|f| !f.is_null()) else { return Ok(None) };
    let kind = format.get("type").and_then(Value::as_str);
    Ok(match kind {
        Some("text") => None,
        Some("json_object") => Some(json!({"type": "json_object"})),
        Some("json_schema") => {
            let schema = format.get("schema").ok_or_else(|| {
                ApiError::invalid_param("text.format.schema is required for type \"json_schema\"")
            })?;
            let name = format.get("name").cloned().unwrap_or_else(|| json!("output"));
            Some(json!({"type": "json_schema", "json_schema": {"name": name, "schema": schema}}))
        }
        other => {
            return Err(ApiError::invalid_param(format!(
            "text.format.type must be \"text\", \"json_object\" or \"json_schema\", got {other:?}"
        )))
        }
    })
}

fn reasoning_effort(reasoning: Option<&Value>) -> Result<Option<String>, ApiError> {
    let Some(reasoning) = reasoning.filter(|r| !r.is_null()) else { return Ok(None) };
    let object = reasoning
        .as_object()
        .ok_or_else(|| ApiError::invalid_param("reasoning must be an object"))?;
    // Summaries: the thinking comes back whole as reasoning text, whatever is asked.
    refuse_unknown(
        "reasoning",
        &fields_except(object, &["effort", "summary", "generate_summary"]),
        &[],
    )?;
    match object.get("effort") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(e)) => Ok(Some(e.clone())),
        Some(_) => Err(ApiError::invalid_param("reasoning.effort must be a string")),
    }
}

// ---------------------------------------------------------------- replies

/// What every snapshot of one response repeats.
#[derive(Debug, Clone)]
pub struct ResponseMeta {
    pub id: String,
    pub created_at: u64,
    pub model: String,
    pub echo: Map<String, Value>,
}

impl ResponseMeta {
    pub fn new(model: String, echo: Map<String, Value>) -> Self {
        Self { id: new_id("resp_"), created_at: unix_now(), model, echo }
    }

    /// The response object with `status`, its output so far, and its end.
    fn object(&self, status: &str, output: &[Value], end: Option<&End>) -> Value {
        let mut object = Map::new();
        object.insert("id".into(), json!(self.id));
        object.insert("object".into(), json!("response"));
        object.insert("created_at".into(), json!(self.created_at));
        object.insert("status".into(), json!(status));
        object.insert("model".into(), json!(self.model));
        object.insert("output".into(), json!(output));
        object.insert("error".into(), end.and_then(|e| e.error.clone()).unwrap_or(Value::Null));
        object.insert(
            "incomplete_details".into(),
            match status {
                "incomplete" => json!({"reason": "max_output_tokens"}),
                _ => Value::Null,
            },
        );
        object.insert("usage".into(), end.map_or(Value::Null, |e| e.usage.clone()));
        object.extend(self.echo.clone());
        Value::Object(object)
    }
}

/// How a response ended: its usage, or its error.
struct End {
    usage: Value,
    error: Option<Value>,
}

fn usage(stats: &RequestStats) -> Value {
    json!({
        "input_tokens": stats.prompt_tokens,
        "input_tokens_details": {"cached_tokens": stats.cached_prompt_tokens},
        "output_tokens": stats.generated_tokens,
        "output_tokens_details": {"reasoning_tokens": stats.reasoning_tokens},
        "total_tokens": stats.prompt_tokens + stats.generated_tokens,
    })
}

fn status_of(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Length => "incomplete",
        _ => "completed",
    }
}

fn reasoning_item(id: &str, text: &str, status: &str) -> Value {
    json!({"type": "reasoning", "id": id, "status": status, "summary": [],
        "content": [{"type": "reasoning_text", "text": text}]})
}

fn text_part(text: &str, logprobs: &[Value]) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs})
}

fn message_item(id: &str, status: &str, content: Vec<Value>) -> Value {
    json!({"type": "message", "id": id, "status": status, "role": "assistant", "content": content})
}

fn function_call_item(id: &str, call: &engine::tools::ToolCall, status: &str) -> Value {
    json!({"type": "function_call", "id": id, "call_id": call.id, "name": call.name,
        "arguments": call.arguments, "status": status})
}

fn logprob(lp: &TokenLogprob) -> Value {
    json!({
        "token": lp.token.text, "logprob": lp.logprob, "bytes": lp.token.bytes,
        "top_logprobs": lp.top.iter().map(|(t, l)| json!({"token": t.text, "logprob": l, "bytes": t.bytes})).collect::<Vec<_>>(),
    })
}

/// A finished response: the object, and its answer as a chat message (what
/// a continuation sends back to the model).
pub struct Finished {
    pub response: Value,
    pub answer: RequestMessage,
}

/// The assistant message a response's output makes.
fn answer_message(
    content: &str,
    reasoning: &str,
    calls: &[engine::tools::ToolCall],
) -> RequestMessage {
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
        .collect();
    RequestMessage {
        role: "assistant".into(),
        content: Some(json!(content)),
        reasoning_content: (!reasoning.is_empty()).then(|| reasoning.to_owned()),
        tool_calls: (!tool_calls.is_empty()).then_some(tool_calls),
        ..Default::default()
    }
}

/// The whole response, or the error the request ended with.
pub fn whole_reply(meta: &ResponseMeta, c: Completion) -> Result<Finished, ApiError> {
    if let Some(e) = failure(&c) {
        return Err(e);
    }
    let mut output = Vec::new();
    if !c.reasoning.is_empty() {
        output.push(reasoning_item(&new_id("rs_"), &c.reasoning, "completed"));
    }
    if !c.content.is_empty() || c.tool_calls.is_empty() {
        let logprobs: Vec<Value> = c.logprobs.iter().map(logprob).collect();
        output.push(message_item(
            &new_id("msg_"),
            "completed",
            vec![text_part(&c.content, &logprobs)],
        ));
    }
    for call in &c.tool_calls {
        output.push(function_call_item(&new_id("fc_"), call, "completed"));
    }
    let reason = c.finish_reason.unwrap_or(FinishReason::Stop);
    let end = End { usage: usage(&c.stats), error: None };
    Ok(Finished {
        response: meta.object(status_of(reason), &output, Some(&end)),
        answer: answer_message(&c.content, &c.reasoning, &c.tool_calls),
    })
}

// ---------------------------------------------------------------- streams

/// The item being streamed.
struct OpenItem {
    kind: OpenKind,
    id: String,
    text: String,
    logprobs: Vec<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpenKind {
    Reasoning,
    Message,
}

/// The events of a streamed response, in the documented order:
/// `response.created`, `response.in_progress`, then per output item
/// `response.output_item.added`, its parts and deltas, `…done`, and at the
/// end `response.completed` (or `.incomplete`, or `.failed`).
pub struct ResponseStream {
    meta: ResponseMeta,
    sequence: u64,
    /// Finished output items.
    output: Vec<Value>,
    open: Option<OpenItem>,
    /// Logprobs of tokens whose text has not gone out yet.
    logprobs: Vec<Value>,
    /// The answer so far, for the stored conversation.
    content: String,
    reasoning: String,
    calls: Vec<engine::tools::ToolCall>,
    /// Called once with the finished response (to store it).
    on_finish: Option<Box<dyn FnOnce(Finished) + Send>>,
    /// Ended (finished or failed): nothing follows.
    ended: bool,
}

impl ResponseStream {
    pub fn new(meta: ResponseMeta, on_finish: Option<Box<dyn FnOnce(Finished) + Send>>) -> Self {
        Self {
            meta,
            sequence: 0,
            output: Vec::new(),
            open: None,
            logprobs: Vec::new(),
            content: String::new(),
            reasoning: String::new(),
            calls: Vec::new(),
            on_finish,
            ended: false,
        }
    }

    /// `response.created` and `response.in_progress`.
    pub fn start(&mut self) -> Vec<Frame> {
        let response = self.meta.object("in_progress", &[], None);
        let mut out = Vec::new();
        self.emit(&mut out, "response.created", json!({"response": response}));
        self.emit(&mut out, "response.in_progress", json!({"response": response}));
        out
    }

    fn emit(&mut self, out: &mut Vec<Frame>, name: &'static str, mut data: Value) {
        data["type"] = json!(name);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        out.push(Frame::named(name, &data));
    }

    fn output_index(&self) -> usize {
        self.output.len()
    }

    /// Text into an item of `kind`, opening one (and closing another) first.
    fn text(&mut self, kind: OpenKind, text: String, out: &mut Vec<Frame>) {
        if self.open.as_ref().map(|o| o.kind) != Some(kind) {
            self.close(out);
            let id = new_id(if kind == OpenKind::Reasoning { "rs_" } else { "msg_" });
            let (item, part) = match kind {
                OpenKind::Reasoning => (
                    json!({"type": "reasoning", "id": id, "status": "in_progress", "summary": [], "content": []}),
                    json!({"type": "reasoning_text", "text": ""}),
                ),
                OpenKind::Message => {
                    (message_item(&id, "in_progress", Vec::new()), text_part("", &[]))
                }
            };
            let index = self.output_index();
            self.emit(
                out,
                "response.output_item.added",
                json!({"output_index": index, "item": item}),
            );
            self.emit(
                out,
                "response.content_part.added",
                json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
            );
            self.open = Some(OpenItem { kind, id, text: String::new(), logprobs: Vec::new() });
        }
        let index = self.output_index();
        let logprobs = std::mem::take(&mut self.logprobs);
        let open = self.open.as_mut().expect("opened above");
        open.text.push_str(&text);
        let id = open.id.clone();
        match kind {
            OpenKind::Reasoning => {
                self.reasoning.push_str(&text);
                self.emit(
                    out,
                    "response.reasoning_text.delta",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "delta": text}),
                );
            }
            OpenKind::Message => {
                open.logprobs.extend(logprobs.iter().cloned());
                self.content.push_str(&text);
                self.emit(
                    out,
                    "response.output_text.delta",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "delta": text, "logprobs": logprobs}),
                );
            }
        }
    }

    /// Ends the open item: its `…done` events, then it joins the output.
    fn close(&mut self, out: &mut Vec<Frame>) {
        let Some(open) = self.open.take() else { return };
        let index = self.output_index();
        let (item, part) = match open.kind {
            OpenKind::Reasoning => {
                self.emit(
                    out,
                    "response.reasoning_text.done",
                    json!({"item_id": open.id, "output_index": index, "content_index": 0, "text": open.text}),
                );
                (
                    reasoning_item(&open.id, &open.text, "completed"),
                    json!({"type": "reasoning_text", "text": open.text}),
                )
            }
            OpenKind::Message => {
                self.emit(
                    out,
                    "response.output_text.done",
                    json!({"item_id": open.id, "output_index": index, "content_index": 0,
                        "text": open.text, "logprobs": open.logprobs}),
                );
                let part = text_part(&open.text, &open.logprobs);
                (message_item(&open.id, "completed", vec![part.clone()]), part)
            }
        };
        self.emit(
            out,
            "response.content_part.done",
            json!({"item_id": open.id, "output_index": index, "content_index": 0, "part": part}),
        );
        self.emit(out, "response.output_item.done", json!({"output_index": index, "item": item}));
        self.output.push(item);
    }

    fn function_call(&mut self, call: engine::tools::ToolCall, out: &mut Vec<Frame>) {
        self.close(out);
        let id = new_id("fc_");
        let index = self.output_index();
        let mut added = function_call_item(&id, &call, "in_progress");
        added["arguments"] = json!("");
        self.emit(out, "response.output_item.added", json!({"output_index": index, "item": added}));
        self.emit(
            out,
            "response.function_call_arguments.delta",
            json!({"item_id": id, "output_index": index, "delta": call.arguments}),
        );
        self.emit(
            out,
            "response.function_call_arguments.done",
            json!({"item_id": id, "output_index": index, "name": call.name, "arguments": call.arguments}),
        );
        let item = function_call_item(&id, &call, "completed");
        self.emit(out, "response.output_item.done", json!({"output_index": index, "item": item}));
        self.output.push(item);
        self.calls.push(call);
    }

    fn fail(&mut self, e: &ApiError, out: &mut Vec<Frame>) {
        self.ended = true;
        let end =
            End { usage: Value::Null, error: Some(json!({"code": e.code, "message": e.message})) };
        let response = self.meta.object("failed", &self.output, Some(&end));
        self.emit(out, "response.failed", json!({"response": response}));
    }

    fn finish(&mut self, reason: FinishReason, stats: &RequestStats, out: &mut Vec<Frame>) {
        if self.output.is_empty() && self.open.is_none() {
            // An empty answer is still one message, with empty text.
            self.text(OpenKind::Message, String::new(), out);
        }
        self.close(out);
        self.ended = true;
        let status = status_of(reason);
        let end = End { usage: usage(stats), error: None };
        let response = self.meta.object(status, &self.output, Some(&end));
        let name =
            if status == "incomplete" { "response.incomplete" } else { "response.completed" };
        self.emit(out, name, json!({"response": response.clone()}));
        if let Some(on_finish) = self.on_finish.take() {
            let answer = answer_message(&self.content, &self.reasoning, &self.calls);
            on_finish(Finished { response, answer });
        }
    }
}

impl StreamWriter for ResponseStream {
    fn event(&mut self, _choice: usize, event: Event) -> Vec<Frame> {
        let mut out = Vec::new();
        if self.ended {
            return out;
        }
        match event {
            Event::Reasoning(text) => self.text(OpenKind::Reasoning, text, &mut out),
            Event::Content(text) => self.text(OpenKind::Message, text, &mut out),
            Event::Logprob(lp) => self.logprobs.push(logprob(&lp)),
            Event::ToolCall(call) => self.function_call(call, &mut out),
            Event::Error(e) => self.fail(&ApiError::from_engine(&e), &mut out),
            Event::Finished { reason: FinishReason::Cancelled, .. } => {
                self.fail(&ApiError::cancelled(), &mut out)
            }
            Event::Finished { reason: FinishReason::Error, .. } => {
                self.fail(&ApiError::engine_stopped(), &mut out)
            }
            Event::Finished { reason, stats } => self.finish(reason, &stats, &mut out),
            // these requests never score their prompt
            Event::Accepted | Event::Queued { .. } | Event::PromptLogprobs(_) => {}
        }
        out
    }

    fn engine_gone(&mut self, _choice: usize) -> Vec<Frame> {
        let mut out = Vec::new();
        if !self.ended {
            self.fail(&ApiError::engine_stopped(), &mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::tools::ToolCall;

    fn translate(body: Value) -> Result<Translated, ApiError> {
        to_chat(serde_json::from_value(body).unwrap(), Vec::new())
    }

    #[test]
    fn an_input_file_becomes_a_chat_file_part() {
        let t = translate(json!({"input": [{"role": "user", "content": [
            {"type": "input_file", "filename": "a.pdf", "file_data": "data:application/pdf;base64,JVBERi0="},
            {"type": "input_text", "text": "summarize"}]}]}))
        .unwrap();
        assert_eq!(
            t.chat.messages[0].content,
            Some(
                json!([{"type": "file", "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,JVBERi0="}},
                {"type": "text", "text": "summarize"}])
            )
        );
        let e = translate(json!({"input": [{"role": "user", "content": [
            {"type": "input_file", "file_url": "https://example.org/a.pdf"}]}]}))
        .err()
        .unwrap();
        assert!(e.message.contains("file_url"), "{e:?}");
    }

    #[test]
    fn items_become_chat_messages_with_calls_joined_to_their_turn() {
        let t = translate(json!({
            "model": "default", "instructions": "be brief",
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "weather?"},
                    {"type": "input_image", "image_url": "data:image/png;base64,AAEC", "detail": "auto"}]},
                {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "call it"}]},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
                {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": "{\"city\":\"Rome\"}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
                {"type": "function_call_output", "call_id": "call_2", "output": "rain"}
            ],
            "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": true}],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}, "strict": true}},
            "reasoning": {"effort": "low", "summary": "auto"},
            "max_output_tokens": 30, "store": false
        }))
        .unwrap();
        let chat = &t.chat;
        let roles: Vec<&str> = chat.messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "tool"]);
        assert_eq!(t.turn.len(), 4, "the turn has no instructions");
        assert_eq!(
            chat.messages[1].content,
            Some(json!([{"type": "text", "text": "weather?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAEC"}}]))
        );
        let assistant = &chat.messages[2];
        assert_eq!(assistant.reasoning_content.as_deref(), Some("call it"));
        let calls = assistant.tool_calls.as_ref().unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[1]["function"]["arguments"], "{\"city\":\"Rome\"}");
        assert_eq!(chat.messages[4].tool_call_id.as_deref(), Some("call_2"));
        assert_eq!(
            chat.tools,
            Some(vec![
                json!({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}, "strict": true}})
            ])
        );
        assert_eq!(
            chat.tool_choice,
            Some(json!({"type": "function", "function": {"name": "get_weather"}}))
        );
        assert_eq!(chat.response_format.as_ref().unwrap()["json_schema"]["name"], "w");
        assert_eq!(chat.reasoning_effort.as_deref(), Some("low"));
        assert_eq!(chat.max_completion_tokens, Some(30));
        assert_eq!(t.echo["store"], false);
        assert_eq!(t.echo["instructions"], "be brief");
    }

    #[test]
    fn a_continuation_follows_the_earlier_conversation_under_new_instructions() {
        let earlier = vec![
            RequestMessage {
                role: "user".into(),
                content: Some(json!("hi")),
                ..Default::default()
            },
            RequestMessage {
                role: "assistant".into(),
                content: Some(json!("hello")),
                ..Default::default()
            },
        ];
        let body: ResponsesRequest = serde_json::from_value(
            json!({"input": "and then?", "instructions": "new", "previous_response_id": "resp_1"}),
        )
        .unwrap();
        let t = to_chat(body, earlier).unwrap();
        let texts: Vec<&Value> =
            t.chat.messages.iter().map(|m| m.content.as_ref().unwrap()).collect();
        assert_eq!(texts, [&json!("new"), &json!("hi"), &json!("hello"), &json!("and then?")]);
        assert_eq!(t.echo["previous_response_id"], "resp_1");
    }

    #[test]
    fn what_cannot_be_carried_is_refused_by_name() {
        let cases = [
            (json!({}), "input is required"),
            (json!({"input": "x", "background": true}), "background"),
            (json!({"input": "x", "conversation": "c"}), "conversation"),
            (json!({"input": "x", "truncation": "auto"}), "truncation"),
            (json!({"input": "x", "tools": [{"type": "web_search"}]}), "tools[0]"),
            (json!({"input": "x", "include": ["everything"]}), "include"),
            (json!({"input": "x", "top_logprobs": 3}), "top_logprobs"),
            (json!({"input": "x", "text": {"format": {"type": "xml"}}}), "text.format.type"),
            (json!({"input": "x", "text": {"verbosity": "low"}}), "text.verbosity"),
            (json!({"input": [{"type": "item_reference", "id": "x"}]}), "input[0]"),
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}),
                "input[0].content[0]",
            ),
            (json!({"input": [{"role": "user", "content": "x", "colour": 1}]}), "input[0].colour"),
            (json!({"input": [{"role": "wizard", "content": "x"}]}), "input[0].role"),
        ];
        for (body, needle) in cases {
            let e = translate(body.clone()).err().unwrap_or_else(|| panic!("{body} passed"));
            assert_eq!(e.status, 400, "{body}");
            assert!(e.message.contains(needle), "{body}: {}", e.message);
        }
        translate(json!({"input": "x", "user": "u", "prompt_cache_key": "k",
            "include": ["reasoning.encrypted_content"], "text": {"verbosity": "medium"}}))
        .unwrap();
    }

    fn meta() -> ResponseMeta {
        ResponseMeta { id: "resp_1".into(), created_at: 7, model: "tiny".into(), echo: Map::new() }
    }

    fn stats() -> RequestStats {
        RequestStats {
            prompt_tokens: 11,
            cached_prompt_tokens: 4,
            generated_tokens: 5,
            reasoning_tokens: 2,
            ..Default::default()
        }
    }

    #[test]
    fn a_whole_response_has_reasoning_message_and_call_items() {
        let c = Completion {
            reasoning: "hmm".into(),
            content: "Sure.".into(),
            tool_calls: vec![ToolCall {
                id: "call_1".into(),
                name: "f".into(),
                arguments: "{}".into(),
            }],
            finish_reason: Some(FinishReason::ToolCalls),
            stats: stats(),
            ..Default::default()
        };
        let finished = whole_reply(&meta(), c).unwrap();
        let r = &finished.response;
        assert_eq!(
            (r["object"].as_str(), r["status"].as_str()),
            (Some("response"), Some("completed"))
        );
        let kinds: Vec<&str> =
            r["output"].as_array().unwrap().iter().map(|i| i["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["reasoning", "message", "function_call"]);
        assert_eq!(r["output"][0]["content"][0]["text"], "hmm");
        assert_eq!(r["output"][1]["content"][0]["text"], "Sure.");
        assert_eq!(r["output"][2]["call_id"], "call_1");
        assert_eq!(r["usage"]["input_tokens_details"]["cached_tokens"], 4);
        assert_eq!(r["usage"]["output_tokens_details"]["reasoning_tokens"], 2);
        assert_eq!(finished.answer.tool_calls.as_ref().unwrap()[0]["id"], "call_1");
        let cut = Completion {
            content: "ab".into(),
            finish_reason: Some(FinishReason::Length),
            ..Default::default()
        };
        let r = whole_reply(&meta(), cut).unwrap().response;
        assert_eq!(r["status"], "incomplete");
        assert_eq!(r["incomplete_details"]["reason"], "max_output_tokens");
    }

    #[test]
    fn a_stream_follows_the_documented_event_order() {
        let stored = std::sync::Arc::new(std::sync::Mutex::new(None));
        let keep = stored.clone();
        let mut w = ResponseStream::new(
            meta(),
            Some(Box::new(move |f: Finished| *keep.lock().unwrap() = Some(f))),
        );
        let mut frames = w.start();
        for event in [
            Event::Reasoning("hm".into()),
            Event::Content("Hi".into()),
            Event::Content("!".into()),
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
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.reasoning_text.delta",
                "response.reasoning_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        let data: Vec<Value> =
            frames.iter().map(|f| serde_json::from_str(&f.data).unwrap()).collect();
        for (i, d) in data.iter().enumerate() {
            assert_eq!(d["sequence_number"], i, "{d}");
            assert_eq!(d["type"], names[i]);
        }
        assert_eq!(data[12]["text"], "Hi!");
        assert_eq!(data[15]["output_index"], 2);
        let done = &data[19]["response"];
        assert_eq!(done["output"].as_array().unwrap().len(), 3);
        assert_eq!(done["usage"]["output_tokens"], 5);
        let kept = stored.lock().unwrap().take().expect("the finished response was handed over");
        assert_eq!(kept.response, *done);
        assert_eq!(kept.answer.content, Some(json!("Hi!")));
        assert_eq!(kept.answer.reasoning_content.as_deref(), Some("hm"));
    }
}
