//! Tool calls in model output: which format a model uses, and turning the raw
//! text of a call (as [`crate::stop::StreamMatcher`] cuts it out) into
//! OpenAI-shaped calls.
//!
//! Supported formats:
//! - **Hermes** (Qwen2.5, Qwen3, Hermes): `<tool_call>{"name": …, "arguments":
//!   {…}}</tool_call>`, one block per call.
//! - **Llama 3** (3.1, 3.2, 3.3): `<|python_tag|>{"name": …, "parameters":
//!   {…}}` until the end, or the same JSON as the bare answer; several calls
//!   separated by `;`. Llama 3.1's built-in tools in Python-call syntax
//!   (`brave_search.call(query="…")`) are not supported: they come back as a
//!   parse error, so the text reaches the user as content.
//! - **Pythonic** (LFM2): `<|tool_call_start|>[get_weather(city="Paris"),
//!   …]<|tool_call_end|>`, a Python list of calls with keyword arguments
//!   ([`pythonic`]); the JSON shapes above inside the same tags are read too.
//! - **Harmony** (gpt-oss): a message to `functions.NAME` in the `commentary`
//!   channel, `<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{…}<|call|>`;
//!   [`crate::stop::harmony`] cuts out its header and body, the name is the
//!   recipient's and the body the arguments.
//!
//! One parser reads them all: the raw text is one or more JSON objects (or arrays
//! of them) separated by blanks or `;`; each has a `name` and `arguments` or
//! `parameters`, given as an object or as a JSON string of one, possibly in an
//! OpenAI-style `{"type": "function", "function": {…}}` wrapper — or, when it
//! is no JSON, a Python list of calls. Small models
//! mix these shapes up across formats, and a lenient parser loses fewer calls;
//! so the caller needs no style to parse, only the tags to cut the text out.
mod pythonic;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::Result;

/// A tool-call format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum ToolCallStyle {
    /// `<tool_call>{…}</tool_call>`: Qwen2.5, Qwen3, Hermes.
    Hermes,
    /// `<|python_tag|>{…}` or a bare JSON answer, `;`-separated: Llama 3.1+.
    Llama3,
    /// `<|tool_call_start|>[f(a=1), …]<|tool_call_end|>`: LFM2.
    Pythonic,
    /// A harmony message to `functions.NAME` in the `commentary` channel: gpt-oss.
    Harmony,
    /// `[TOOL_CALLS]name[ARGS]{…}` per call: Ministral 3, Mistral Small 3.2,
    /// Magistral (Mistral's tokenizers v11 and later).
    Mistral,
    /// `[TOOL_CALLS][{"name": …, "arguments": {…}}, …]`: Mistral Small 3.1
    /// and older Mistral templates.
    MistralJson,
}

/// Mistral's markers inside a call (single special tokens, kept by decoding).
pub const MISTRAL_ARGS: &str = "[ARGS]";
pub const MISTRAL_CALL_ID: &str = "[CALL_ID]";
pub const MISTRAL_TOOL_CALLS: &str = "[TOOL_CALLS]";

impl ToolCallStyle {
    /// The format a chat template asks for, judged by what it tells the
    /// model (Llama 3.2's template never prints `<|python_tag|>`, only the
    /// `{"name": …, "parameters": …}` instruction).
    pub fn for_template(template_source: &str) -> Option<Self> {
        if crate::stop::harmony::is_harmony_template(template_source) {
            Some(ToolCallStyle::Harmony)
        } else if template_source.contains(MISTRAL_TOOL_CALLS) {
            // v11+ templates write a past call as `[TOOL_CALLS]name[ARGS]…`.
            Some(if template_source.contains(MISTRAL_ARGS) {
                ToolCallStyle::Mistral
            } else {
                ToolCallStyle::MistralJson
            })
        } else if template_source.contains("<tool_call>") {
            Some(ToolCallStyle::Hermes)
        } else if template_source.contains("<|tool_list_start|>")
            || template_source.contains("<|tool_call_start|>")
            // LFM2.5's templates list the tools without the tags
            || template_source.contains("List of tools: ")
        {
            Some(ToolCallStyle::Pythonic)
        } else if template_source.contains("<|python_tag|>")
            || (template_source.contains("<|start_header_id|>")
                && template_source.contains("\"parameters\""))
        {
            Some(ToolCallStyle::Llama3)
        } else {
            None
        }
    }

    /// Special tokens inside a call that decoding must keep (besides the
    /// open and close tags) for the call to be read.
    pub fn inner_markers(self) -> &'static [&'static str] {
        match self {
            ToolCallStyle::Mistral => &[MISTRAL_ARGS, MISTRAL_CALL_ID],
            _ => &[],
        }
    }
}

/// One call, as the OpenAI API sends it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolCall {
    /// `call_` and a string unique in this process (and unlikely to repeat
    /// across runs), so clients can match the tool's answer to its call.
    pub id: String,
    /// The function name.
    pub name: String,
    /// The arguments object, serialized as JSON (OpenAI sends a string).
    pub arguments: String,
}

/// The model's text was not a tool call we can read. Not an engine failure:
/// the caller shows the text as content ([`Self::into_content`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read the model's tool call: {reason}")]
pub struct ToolCallParseError {
    /// The raw text of the call, unchanged.
    pub raw: String,
    /// Why it was not read, for logs.
    pub reason: String,
}

impl ToolCallParseError {
    /// The model's text, to send as content instead.
    pub fn into_content(self) -> String {
        self.raw
    }
}

/// Parses the raw text of one tool-call block (between the tags, or the bare
/// JSON answer) into one or more calls. All or nothing: if any part fails,
/// the whole block is returned as an error, so no text goes missing.
pub fn parse_tool_calls(raw: &str) -> Result<Vec<ToolCall>, ToolCallParseError> {
    if let Some((header, body)) = raw.split_once(crate::stop::harmony::MESSAGE) {
        return parse_harmony_call(header, body)
            .map(|call| vec![call])
            .map_err(|reason| ToolCallParseError { raw: raw.to_owned(), reason });
    }
    if raw.contains(MISTRAL_ARGS) {
        return parse_mistral_calls(raw)
            .map_err(|reason| ToolCallParseError { raw: raw.to_owned(), reason });
    }
    let json = parse_json_calls(raw);
    if json.is_err() {
        if let Ok(calls) = pythonic::parse(raw) {
            return Ok(calls
                .into_iter()
                .map(|(name, args)| ToolCall {
                    id: new_call_id(),
                    name,
                    arguments: object_to_string(&args),
                })
                .collect());
        }
    }
    json.map_err(|reason| ToolCallParseError { raw: raw.to_owned(), reason })
}

/// Mistral's calls after the first `[TOOL_CALLS]`: `name[ARGS]{…}`, the
/// next ones each after their own `[TOOL_CALLS]`; a `[CALL_ID]id` may
/// follow the name.
fn parse_mistral_calls(raw: &str) -> std::result::Result<Vec<ToolCall>, String> {
    let mut calls = Vec::new();
    for part in raw.split(MISTRAL_TOOL_CALLS).map(str::trim).filter(|p| !p.is_empty()) {
        let (head, body) = part
            .split_once(MISTRAL_ARGS)
            .ok_or_else(|| format!("a Mistral tool call without {MISTRAL_ARGS}: {part:?}"))?;
        let name = head.split_once(MISTRAL_CALL_ID).map_or(head, |(name, _)| name).trim();
        if name.is_empty() {
            return Err("a Mistral tool call without a function name".to_owned());
        }
        let arguments = match serde_json::from_str::<Value>(body.trim()) {
            Ok(Value::Object(map)) => object_to_string(&map),
            Ok(other) => {
                return Err(format!("the arguments of {name:?} are not a JSON object: {other}"))
            }
            Err(e) => return Err(format!("the arguments of {name:?} are not JSON: {e}")),
        };
        calls.push(ToolCall { id: new_call_id(), name: name.to_owned(), arguments });
    }
    if calls.is_empty() {
        return Err("the tool call is empty".to_owned());
    }
    Ok(calls)
}

/// The calls of a block of JSON values.
fn parse_json_calls(raw: &str) -> std::result::Result<Vec<ToolCall>, String> {
    parse_values(raw).and_then(|values| {
        let mut calls = Vec::new();
        for value in values {
            match value {
                Value::Array(items) => {
                    for item in items {
                        calls.push(call_from_value(item)?);
                    }
                }
                other => calls.push(call_from_value(other)?),
            }
        }
        if calls.is_empty() {
            return Err("the tool call is empty".to_owned());
        }
        Ok(calls)
    })
}

/// One harmony call: the recipient names the function (`functions.NAME`;
/// another namespace is kept whole), the body is its arguments as JSON
/// (`<|constrain|>json`, the only content type the template offers).
fn parse_harmony_call(header: &str, body: &str) -> std::result::Result<ToolCall, String> {
    let recipient = crate::stop::harmony::recipient_of(header)
        .ok_or_else(|| format!("a harmony message with no recipient: {header:?}"))?;
    let name = recipient.strip_prefix("functions.").unwrap_or(recipient);
    let arguments = match serde_json::from_str::<Value>(body.trim()) {
        Ok(Value::Object(map)) => object_to_string(&map),
        Ok(other) => {
            return Err(format!("the arguments of {name:?} are not a JSON object: {other}"))
        }
        Err(e) => return Err(format!("the arguments of {name:?} are not JSON: {e}")),
    };
    Ok(ToolCall { id: new_call_id(), name: name.to_owned(), arguments })
}

/// Like [`parse_tool_calls`] for a block that must hold exactly one call.
pub fn parse_tool_call(raw: &str) -> Result<ToolCall, ToolCallParseError> {
    let mut calls = parse_tool_calls(raw)?;
    if calls.len() != 1 {
        return Err(ToolCallParseError {
            raw: raw.to_owned(),
            reason: format!("expected one tool call, found {}", calls.len()),
        });
    }
    Ok(calls.remove(0))
}

/// The JSON values in `raw`, separated by blanks and `;`.
fn parse_values(raw: &str) -> std::result::Result<Vec<Value>, String> {
    let is_separator = |c: char| c.is_whitespace() || c == ';';
    let mut values = Vec::new();
    let mut rest = raw.trim_start_matches(is_separator);
    while !rest.is_empty() {
        if !rest.starts_with(['{', '[']) {
            let shown: String = rest.chars().take(40).collect();
            return Err(format!("expected a JSON object, found {shown:?}"));
        }
        let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
        match stream.next() {
            Some(Ok(value)) => values.push(value),
            Some(Err(e)) => return Err(format!("invalid JSON: {e}")),
            None => break,
        }
        rest = rest[stream.byte_offset()..].trim_start_matches(is_separator);
    }
    Ok(values)
}

fn call_from_value(value: Value) -> std::result::Result<ToolCall, String> {
    let mut obj = match value {
        Value::Object(obj) => obj,
        other => return Err(format!("expected a JSON object, found {other}")),
    };
    // OpenAI's own shape, echoed from the tool definitions or history.
    if let Some(Value::Object(inner)) = obj.remove("function") {
        obj = inner;
    }
    let name = match obj.remove("name") {
        Some(Value::String(name)) if !name.trim().is_empty() => name.trim().to_owned(),
        Some(other) => return Err(format!("\"name\" must be a non-empty string, found {other}")),
        None => return Err("the tool call has no \"name\"".to_owned()),
    };
    let args = obj.remove("arguments").or_else(|| obj.remove("parameters"));
    let arguments = match args {
        None | Some(Value::Null) => "{}".to_owned(),
        Some(Value::Object(map)) => object_to_string(&map),
        // Some models write the arguments as a JSON string, as OpenAI sends them.
        Some(Value::String(s)) => match serde_json::from_str::<Value>(&s) {
            Ok(Value::Object(map)) => object_to_string(&map),
            _ => return Err(format!("the arguments of {name:?} are not a JSON object: {s:?}")),
        },
        Some(other) => {
            return Err(format!("the arguments of {name:?} are not a JSON object: {other}"))
        }
    };
    Ok(ToolCall { id: new_call_id(), name, arguments })
}

fn object_to_string(map: &Map<String, Value>) -> String {
    // Serializing a map of JSON values cannot fail; key order is kept
    // (serde_json's preserve_order), as the model wrote it.
    serde_json::to_string(map).unwrap_or_else(|_| "{}".to_owned())
}

/// `call_` + a per-process random salt + a counter: unique within the
/// process without a random-number dependency.
fn new_call_id() -> String {
    static SALT: OnceLock<u32> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let salt = *SALT.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        // RandomState is seeded from the OS; mixing in the time covers
        // platforms where that seed is fixed.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        h.write_u128(nanos);
        h.finish() as u32
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("call_{salt:08x}{n:06x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stop::{MatcherConfig, Segment, StreamMatcher, ThinkingTags, ToolCallTags};

    /// Runs recorded output through the matcher as the engine would, token
    /// piece by token piece, and parses its tool-call segments.
    fn route(output: &[&str], tags: ToolCallTags) -> (String, String, Vec<Parsed>) {
        let mut m = StreamMatcher::new(MatcherConfig {
            thinking: Some(ThinkingTags::think()),
            tool_call: Some(tags),
            ..Default::default()
        });
        let mut segments = Vec::new();
        for piece in output {
            segments.extend(m.push(piece));
        }
        segments.extend(m.finish());
        let (mut content, mut reasoning, mut calls) = (String::new(), String::new(), Vec::new());
        for s in segments {
            match s {
                Segment::Content(t) => content.push_str(&t),
                Segment::Reasoning(t) => reasoning.push_str(&t),
                Segment::ToolCall(raw) => calls.push(parse_tool_calls(&raw)),
                Segment::Stop => panic!("no stop strings configured"),
            }
        }
        (content, reasoning, calls)
    }

    type Parsed = Result<Vec<ToolCall>, ToolCallParseError>;

    fn name_args(calls: &[ToolCall]) -> Vec<(&str, &str)> {
        calls.iter().map(|c| (c.name.as_str(), c.arguments.as_str())).collect()
    }

    #[test]
    fn qwen25_hermes_single_call() {
        // Qwen2.5-7B-Instruct, "What's the weather in Paris?" with get_current_weather.
        let out = [
            "<tool_call>",
            "\n",
            "{\"",
            "name",
            "\":",
            " \"",
            "get",
            "_current",
            "_weather",
            "\",",
            " \"",
            "arguments",
            "\":",
            " {\"",
            "location",
            "\":",
            " \"",
            "Paris",
            ",",
            " France",
            "\",",
            " \"",
            "unit",
            "\":",
            " \"",
            "c",
            "elsius",
            "\"}}\n",
            "</tool_call>",
        ];
        let (content, reasoning, calls) = route(&out, ToolCallTags::hermes());
        assert_eq!((content.as_str(), reasoning.as_str()), ("", ""));
        let calls = calls.into_iter().map(|c| c.unwrap()).collect::<Vec<_>>();
        assert_eq!(calls.len(), 1);
        assert_eq!(
            name_args(&calls[0]),
            [("get_current_weather", r#"{"location":"Paris, France","unit":"celsius"}"#)]
        );
        assert!(calls[0][0].id.starts_with("call_"));
    }

    #[test]
    fn qwen3_thinking_then_two_calls() {
        // Qwen3-8B with thinking on: reasoning, a short preface, two parallel calls.
        let out = [
            "<think>",
            "\n",
            "The user wants the weather in Tokyo and Osaka",
            ".",
            " I",
            " should",
            " call",
            " get_weather",
            " twice",
            ".\n",
            "</think>",
            "\n\n",
            "I'll",
            " check",
            " both",
            " cities",
            ".\n",
            "<tool_call>",
            "\n",
            "{\"name\": \"get_weather\", \"arguments\": ",
            "{\"city\": \"Tokyo\"}}",
            "\n",
            "</tool_call>",
            "\n",
            "<tool_call>",
            "\n",
            "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Osaka\"}}",
            "\n",
            "</tool_call>",
        ];
        let (content, reasoning, calls) = route(&out, ToolCallTags::hermes());
        assert_eq!(
            reasoning,
            "The user wants the weather in Tokyo and Osaka. I should call get_weather twice."
        );
        assert_eq!(content, "I'll check both cities.\n");
        let calls: Vec<ToolCall> = calls.into_iter().flat_map(|c| c.unwrap()).collect();
        assert_eq!(
            name_args(&calls),
            [("get_weather", r#"{"city":"Tokyo"}"#), ("get_weather", r#"{"city":"Osaka"}"#)]
        );
        assert_ne!(calls[0].id, calls[1].id);
    }

    #[test]
    fn nested_object_arguments_keep_their_structure_and_order() {
        // Qwen2.5-14B-Instruct with a calendar tool.
        let raw = "\n{\"name\": \"create_event\", \"arguments\": {\"title\": \"Standup\", \
                   \"time\": {\"start\": \"2025-03-03T09:00\", \"end\": \"2025-03-03T09:15\"}, \
                   \"attendees\": [\"ana@example.com\", \"bo@example.com\"], \"remind\": true}}\n";
        let call = parse_tool_call(raw).unwrap();
        assert_eq!(call.name, "create_event");
        assert_eq!(
            call.arguments,
            r#"{"title":"Standup","time":{"start":"2025-03-03T09:00","end":"2025-03-03T09:15"},"attendees":["ana@example.com","bo@example.com"],"remind":true}"#
        );
        let back: Value = serde_json::from_str(&call.arguments).unwrap();
        assert_eq!(back["time"]["end"], "2025-03-03T09:15");
    }

    #[test]
    fn bad_json_comes_back_as_content() {
        // Qwen2.5-0.5B-Instruct writing Python dict syntax.
        let out = [
            "Sure",
            ".\n",
            "<tool_call>",
            "\n",
            "{'name': 'get_weather', 'arguments': {'city': 'Paris'}}",
            "\n",
            "</tool_call>",
        ];
        let (content, _, mut calls) = route(&out, ToolCallTags::hermes());
        assert_eq!(content, "Sure.\n");
        let err = calls.remove(0).unwrap_err();
        assert!(err.reason.contains("invalid JSON"), "{err}");
        assert_eq!(
            err.into_content(),
            "\n{'name': 'get_weather', 'arguments': {'city': 'Paris'}}\n"
        );
        // A call cut off by max_tokens never closes: it is content already.
        let out = ["<tool_call>", "\n{\"name\": \"get_weather\", \"arguments\": {\"ci"];
        let (content, _, calls) = route(&out, ToolCallTags::hermes());
        assert_eq!(content, "\n{\"name\": \"get_weather\", \"arguments\": {\"ci");
        assert!(calls.is_empty());
    }

    #[test]
    fn llama32_bare_json_answer() {
        // Llama-3.2-3B-Instruct given tools: the whole answer is the call.
        let out = [
            "{\"",
            "name",
            "\":",
            " \"",
            "get",
            "_weather",
            "\",",
            " \"",
            "parameters",
            "\":",
            " {\"",
            "city",
            "\":",
            " \"",
            "San",
            " Francisco",
            "\",",
            " \"",
            "unit",
            "\":",
            " \"",
            "f",
            "ahrenheit",
            "\"}}",
        ];
        let (content, _, calls) = route(&out, ToolCallTags::llama3());
        assert_eq!(content, "");
        let calls = calls.into_iter().next().unwrap().unwrap();
        assert_eq!(
            name_args(&calls),
            [("get_weather", r#"{"city":"San Francisco","unit":"fahrenheit"}"#)]
        );
    }

    #[test]
    fn llama32_plain_answer_with_tools_is_content() {
        let out = ["The", " capital", " of", " France", " is", " Paris", "."];
        let (content, _, calls) = route(&out, ToolCallTags::llama3());
        assert_eq!(content, "The capital of France is Paris.");
        assert!(calls.is_empty());
    }

    #[test]
    fn llama32_json_that_is_no_call_falls_back_to_content() {
        // Asked for JSON output while tools were offered.
        let out = ["{\"", "answer", "\":", " 4", "}"];
        let (_, _, mut calls) = route(&out, ToolCallTags::llama3());
        let err = calls.remove(0).unwrap_err();
        assert!(err.reason.contains("no \"name\""), "{err}");
        assert_eq!(err.into_content(), "{\"answer\": 4}");
    }

    #[test]
    fn llama31_python_tag_with_several_calls() {
        // Llama-3.1-8B-Instruct, special tokens kept in the text.
        let out = [
            "<|python_tag|>",
            "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}",
            "; ",
            "{\"type\": \"function\", \"name\": \"get_time\", \"parameters\": {\"tz\": \"Europe/Rome\"}}",
        ];
        let (content, _, calls) = route(&out, ToolCallTags::llama3());
        assert_eq!(content, "");
        let calls = calls.into_iter().next().unwrap().unwrap();
        assert_eq!(
            name_args(&calls),
            [("get_weather", r#"{"city":"Rome"}"#), ("get_time", r#"{"tz":"Europe/Rome"}"#)]
        );
    }

    #[test]
    fn llama31_builtin_python_call_is_not_supported() {
        let err = parse_tool_calls("brave_search.call(query=\"rust\")").unwrap_err();
        assert_eq!(err.raw, "brave_search.call(query=\"rust\")");
    }

    #[test]
    fn lenient_shapes() {
        let p = |raw: &str| {
            parse_tool_calls(raw).map(|c| {
                c.iter().map(|c| format!("{} {}", c.name, c.arguments)).collect::<Vec<_>>()
            })
        };
        // Arguments as a JSON string, as OpenAI sends them.
        assert_eq!(p(r#"{"name": "f", "arguments": "{\"a\": 1}"}"#).unwrap(), ["f {\"a\":1}"]);
        // "parameters" in the Hermes format, missing and null arguments.
        assert_eq!(
            p(r#"{"name": "f", "parameters": {"a": [1, 2]}}"#).unwrap(),
            ["f {\"a\":[1,2]}"]
        );
        assert_eq!(p(r#"{"name": "f"}"#).unwrap(), ["f {}"]);
        assert_eq!(p(r#"{"name": "f", "arguments": null}"#).unwrap(), ["f {}"]);
        // OpenAI's wrapper, and a list of calls in one block.
        assert_eq!(
            p(r#"{"type": "function", "function": {"name": "f", "arguments": {}}}"#).unwrap(),
            ["f {}"]
        );
        assert_eq!(p(r#"[{"name": "f"}, {"name": "g"}]"#).unwrap(), ["f {}", "g {}"]);
        // Blank- or ';'-separated objects in one block.
        assert_eq!(p("{\"name\": \"f\"}\n{\"name\": \"g\"}").unwrap(), ["f {}", "g {}"]);
        assert_eq!(p("{\"name\": \"f\"};{\"name\": \"g\"};").unwrap(), ["f {}", "g {}"]);
    }

    #[test]
    fn malformed_calls_are_errors_with_the_raw_text() {
        for raw in [
            "",
            "   ",
            r#"{"arguments": {}}"#,
            r#"{"name": "", "arguments": {}}"#,
            r#"{"name": 3}"#,
            r#"{"name": "f", "arguments": "Paris"}"#,
            r#"{"name": "f", "arguments": [1]}"#,
            r#"{"name": "f"} trailing words"#,
            r#"{"name": "f", "arguments": {"a": 1}"#,
            "[1]",
        ] {
            let err = parse_tool_calls(raw).unwrap_err();
            assert_eq!(err.raw, raw);
            assert!(!err.reason.is_empty());
        }
        let err = parse_tool_call(r#"{"name": "f"}; {"name": "g"}"#).unwrap_err();
        assert!(err.reason.contains("expected one"), "{err}");
    }

    #[test]
    fn ids_are_unique() {
        let ids: std::collections::HashSet<String> = (0..1000).map(|_| new_call_id()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(ids.iter().all(|id| id.starts_with("call_") && id.len() >= 19));
    }

    #[test]
    fn style_for_template() {
        assert_eq!(
            ToolCallStyle::for_template("... <tool_call>\n{...}\n</tool_call>"),
            Some(ToolCallStyle::Hermes)
        );
        assert_eq!(
            ToolCallStyle::for_template("{{- '<|python_tag|>' + tool_call.name }}"),
            Some(ToolCallStyle::Llama3)
        );
        assert_eq!(
            ToolCallStyle::for_template("List of tools: <|tool_list_start|>[{{ tools }}]"),
            Some(ToolCallStyle::Pythonic)
        );
        assert_eq!(
            ToolCallStyle::for_template("\"List of tools: \" + (tools | tojson)"),
            Some(ToolCallStyle::Pythonic)
        );
        assert_eq!(ToolCallStyle::for_template("<|im_start|>{{ m.content }}"), None);
    }

    /// LFM2 calls in a Python list between its tags, several at once; the
    /// JSON shapes in the same tags are read as well.
    #[test]
    fn pythonic_calls_between_their_tags() {
        let out = [
            "Let me check.",
            "<|tool_call_start|>",
            "[get",
            "_weather(city=\"",
            "Paris\", days=2), get_time(tz='Europe/Paris')]",
            "<|tool_call_end|>",
        ];
        let tags = ToolCallTags::for_style(ToolCallStyle::Pythonic);
        let (content, reasoning, calls) = route(&out, tags.clone());
        assert_eq!((content.as_str(), reasoning.as_str()), ("Let me check.", ""));
        let calls = calls.into_iter().next().unwrap().unwrap();
        assert_eq!(
            name_args(&calls),
            [
                ("get_weather", r#"{"city":"Paris","days":2}"#),
                ("get_time", r#"{"tz":"Europe/Paris"}"#)
            ]
        );
        let json =
            ["<|tool_call_start|>[{\"name\": \"f\", \"arguments\": {\"a\": 1}}]<|tool_call_end|>"];
        let (_, _, calls) = route(&json, tags.clone());
        assert_eq!(name_args(calls[0].as_ref().unwrap()), [("f", r#"{"a":1}"#)]);
        let (_, _, calls) = route(&["<|tool_call_start|>[f(x=]<|tool_call_end|>"], tags);
        assert_eq!(calls[0].as_ref().unwrap_err().raw, "[f(x=]");
    }

    /// gpt-oss reasons, then calls a tool in the commentary channel (pieces
    /// as its tokenizer cuts them, harmony's markers one token each); the
    /// recipient-first header the template renders for past calls reads the
    /// same; a body that is no JSON object stays text.
    #[test]
    fn harmony_calls_reach_the_openai_fields() {
        let out = [
            "<|channel|>",
            "analysis",
            "<|message|>",
            "Need",
            " weather",
            ".",
            "<|end|>",
            "<|start|>",
            "assistant",
            "<|channel|>",
            "comment",
            "ary",
            " to",
            "=",
            "functions",
            ".get",
            "_weather",
            " ",
            "<|constrain|>",
            "json",
            "<|message|>",
            "{\"",
            "city",
            "\":\"",
            "Paris",
            "\"}",
        ];
        let mut m = StreamMatcher::new(MatcherConfig {
            thinking: Some(ThinkingTags::harmony()),
            tool_call: Some(ToolCallTags::harmony()),
            ..Default::default()
        });
        let mut segments: Vec<Segment> = out.iter().flat_map(|p| m.push(p)).collect();
        segments.extend(m.finish());
        let reasoning: String = segments
            .iter()
            .filter_map(|s| if let Segment::Reasoning(t) = s { Some(t.as_str()) } else { None })
            .collect();
        assert_eq!(reasoning, "Need weather.");
        let raws: Vec<&String> = segments
            .iter()
            .filter_map(|s| if let Segment::ToolCall(raw) = s { Some(raw) } else { None })
            .collect();
        assert_eq!(raws.len(), 1, "{segments:?}");
        let calls = parse_tool_calls(raws[0]).unwrap();
        assert_eq!(name_args(&calls), [("get_weather", r#"{"city":"Paris"}"#)]);
        assert!(calls[0].id.starts_with("call_"));

        let past = r#"<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>{"q": "x"}"#;
        assert_eq!(name_args(&parse_tool_calls(past).unwrap()), [("lookup", r#"{"q":"x"}"#)]);
        let bad = "<|channel|>commentary to=functions.f <|constrain|>json<|message|>not json";
        assert_eq!(parse_tool_calls(bad).unwrap_err().into_content(), bad);
        let nobody = "<|channel|>commentary<|message|>{}";
        assert!(parse_tool_calls(nobody).is_err());
    }

    /// Mistral's v11+ calls (Ministral 3): `[TOOL_CALLS]name[ARGS]{…}`, a
    /// second call after its own `[TOOL_CALLS]`, a `[CALL_ID]` after the
    /// name; the older JSON list; the templates that ask for each.
    #[test]
    fn mistral_calls_until_the_end_of_the_reply() {
        let out = [
            "Sure.",
            "[TOOL_CALLS]",
            "get",
            "_weather",
            "[ARGS]",
            "{\"city\": \"Par",
            "is\"}",
            "[TOOL_CALLS]",
            "get_time",
            "[CALL_ID]",
            "a1b2c3d4e",
            "[ARGS]",
            "{}",
        ];
        let tags = ToolCallTags::for_style(ToolCallStyle::Mistral);
        let (content, _, calls) = route(&out, tags.clone());
        assert_eq!(content, "Sure.");
        let calls = calls.into_iter().next().unwrap().unwrap();
        assert_eq!(name_args(&calls), [("get_weather", r#"{"city":"Paris"}"#), ("get_time", "{}")]);
        let json = ["[TOOL_CALLS]", "[{\"name\": \"f\", \"arguments\": {\"a\": 1}}]"];
        let (_, _, calls) = route(&json, ToolCallTags::for_style(ToolCallStyle::MistralJson));
        assert_eq!(name_args(calls[0].as_ref().unwrap()), [("f", r#"{"a":1}"#)]);
        // Not JSON arguments: the whole block comes back as text.
        let bad = "f[ARGS]{oops";
        assert_eq!(parse_tool_calls(bad).unwrap_err().into_content(), bad);
        assert!(parse_tool_calls("[ARGS]{}").is_err());

        let v11 = "{%- for t in tools %}[AVAILABLE_TOOLS]{%- endfor %}\
                   {{- '[TOOL_CALLS]' + call.name + '[ARGS]' + call.arguments }}";
        assert_eq!(ToolCallStyle::for_template(v11), Some(ToolCallStyle::Mistral));
        assert_eq!(ToolCallStyle::Mistral.inner_markers(), ["[ARGS]", "[CALL_ID]"]);
        let v7 = "{{- '[TOOL_CALLS][' }}{%- for c in calls %}{{ c | tojson }}{%- endfor %}";
        assert_eq!(ToolCallStyle::for_template(v7), Some(ToolCallStyle::MistralJson));
    }
}
