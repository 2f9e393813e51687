//! Engine events → OpenAI reply objects: the chunks of a streamed reply and
//! the body of a whole one. Pure functions of the events, so the wire shape
//! is tested without a model.
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use engine::batch::{Event, FinishReason, RequestStats, TokenLogprob};
use engine::handle::Completion;
use engine::tools::ToolCall;

use crate::api_error::ApiError;
use crate::openai::{
    AssistantMessage, ChatCompletion, ChatCompletionChunk, Choice, ChoiceLogprobs, ChunkChoice,
    CompletionTokensDetails, Delta, FunctionCallOut, PromptTokensDetails, TokenLogprobOut,
    ToolCallOut, TopLogprobOut, Usage,
};

/// What every object of one reply repeats.
#[derive(Debug, Clone)]
pub struct ReplyMeta {
    pub id: String,
    pub created: u64,
    pub model: String,
}

impl ReplyMeta {
    pub fn new(model: String) -> Self {
        Self { id: new_reply_id(), created: unix_now(), model }
    }
}

/// `chatcmpl-` + time and a counter.
fn new_reply_id() -> String {
    new_id("chatcmpl-")
}

/// `prefix` + time and a counter: unique in this process, and unlikely to
/// repeat across restarts, without a random-number dependency.
pub(crate) fn new_id(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos =
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    format!("{prefix}{nanos:x}{:04x}", NEXT.fetch_add(1, Ordering::Relaxed) & 0xffff)
}

pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

pub fn usage(stats: &RequestStats) -> Usage {
    Usage {
        prompt_tokens: stats.prompt_tokens,
        completion_tokens: stats.generated_tokens,
        total_tokens: stats.prompt_tokens + stats.generated_tokens,
        prompt_tokens_details: PromptTokensDetails { cached_tokens: stats.cached_prompt_tokens },
        completion_tokens_details: CompletionTokensDetails {
            reasoning_tokens: stats.reasoning_tokens,
        },
    }
}

fn tool_call(call: ToolCall, index: Option<u32>) -> ToolCallOut {
    ToolCallOut {
        index,
        id: call.id,
        kind: "function",
        function: FunctionCallOut { name: call.name, arguments: call.arguments },
    }
}

fn logprob(lp: TokenLogprob) -> TokenLogprobOut {
    TokenLogprobOut {
        token: lp.token.text,
        logprob: lp.logprob,
        bytes: lp.token.bytes,
        top_logprobs: lp
            .top
            .into_iter()
            .map(|(t, logprob)| TopLogprobOut { token: t.text, logprob, bytes: t.bytes })
            .collect(),
    }
}

/// OpenAI's name for a finish; `None` for the ends that are errors instead.
fn finish_reason(reason: FinishReason) -> Option<&'static str> {
    match reason {
        FinishReason::Stop => Some("stop"),
        FinishReason::Length => Some("length"),
        FinishReason::ToolCalls => Some("tool_calls"),
        FinishReason::Cancelled | FinishReason::Error => None,
    }
}

/// The error for a request that ended without an answer.
pub(crate) fn failure(c: &Completion) -> Option<ApiError> {
    if let Some(e) = &c.error {
        return Some(ApiError::from_engine(e));
    }
    match c.finish_reason {
        None => Some(ApiError::engine_stopped()),
        Some(FinishReason::Cancelled) => Some(ApiError::cancelled()),
        Some(FinishReason::Error) => Some(ApiError::engine_stopped()),
        Some(_) => None,
    }
}

/// The body of a non-streamed reply, or the error it ended with.
pub fn whole_reply(meta: ReplyMeta, c: Completion) -> Result<ChatCompletion, ApiError> {
    if let Some(e) = failure(&c) {
        return Err(e);
    }
    let reason = c.finish_reason.and_then(finish_reason).unwrap_or("stop");
    let tool_calls: Vec<ToolCallOut> =
        c.tool_calls.into_iter().map(|t| tool_call(t, None)).collect();
    let content =
        if c.content.is_empty() && !tool_calls.is_empty() { None } else { Some(c.content) };
    let reasoning_content = if c.reasoning.is_empty() { None } else { Some(c.reasoning) };
    Ok(ChatCompletion {
        id: meta.id,
        object: "chat.completion",
        created: meta.created,
        model: meta.model,
        choices: vec![Choice {
            index: 0,
            message: AssistantMessage { role: "assistant", content, reasoning_content, tool_calls },
            finish_reason: reason,
            logprobs: logprobs_of(c.logprobs),
        }],
        usage: usage(&c.stats),
    })
}

fn logprobs_of(tokens: Vec<TokenLogprob>) -> Option<ChoiceLogprobs> {
    (!tokens.is_empty())
        .then(|| ChoiceLogprobs { content: tokens.into_iter().map(logprob).collect() })
}

/// The `data:` payloads of a streamed reply, event by event.
pub struct ChunkWriter {
    meta: ReplyMeta,
    include_usage: bool,
    /// Tool calls sent so far: the next call's `index`.
    tool_calls: u32,
    /// An error was sent; the end is then only `[DONE]`.
    failed: bool,
    /// Log-probabilities of tokens whose text has not gone out yet: they
    /// ride on the next chunk (the matcher may hold a token's text back).
    logprobs: Vec<TokenLogprob>,
}

pub const DONE: &str = "[DONE]";

impl ChunkWriter {
    pub fn new(meta: ReplyMeta, include_usage: bool) -> Self {
        Self { meta, include_usage, tool_calls: 0, failed: false, logprobs: Vec::new() }
    }

    /// The opening chunk: the role, with empty content, as OpenAI sends it.
    pub fn start(&mut self) -> String {
        self.chunk(
            Delta { role: Some("assistant"), content: Some(String::new()), ..Delta::default() },
            None,
        )
    }

    /// The payloads for one engine event; `Finished` ends with [`DONE`].
    pub fn event(&mut self, event: Event) -> Vec<String> {
        match event {
            Event::Content(text) => {
                vec![self.chunk(Delta { content: Some(text), ..Delta::default() }, None)]
            }
            Event::Reasoning(text) => {
                vec![self.chunk(Delta { reasoning_content: Some(text), ..Delta::default() }, None)]
            }
            Event::ToolCall(call) => {
                let call = tool_call(call, Some(self.tool_calls));
                self.tool_calls += 1;
                vec![self.chunk(Delta { tool_calls: Some(vec![call]), ..Delta::default() }, None)]
            }
            Event::Logprob(lp) => {
                self.logprobs.push(lp);
                Vec::new()
            }
            // The opening chunk already went out with the headers; a chat never scores its prompt.
            Event::Accepted | Event::Queued { .. } | Event::PromptLogprobs(_) => Vec::new(),
            Event::Error(e) => self.error(&ApiError::from_engine(&e)),
            Event::Finished { reason, stats } => self.finish(reason, &stats),
        }
    }

    /// The stream ended without `Finished`: the engine went away.
    pub fn engine_gone(&mut self) -> Vec<String> {
        let mut out = self.error(&ApiError::engine_stopped());
        out.push(DONE.to_owned());
        out
    }

    fn finish(&mut self, reason: FinishReason, stats: &RequestStats) -> Vec<String> {
        let mut out = Vec::new();
        match finish_reason(reason) {
            _ if self.failed => {}
            Some(name) => {
                out.push(self.chunk(Delta::default(), Some(name)));
                if self.include_usage {
                    out.push(self.usage_chunk(stats));
                }
            }
            None if reason == FinishReason::Cancelled => {
                out.extend(self.error(&ApiError::cancelled()))
            }
            None => out.extend(self.error(&ApiError::engine_stopped())),
        }
        out.push(DONE.to_owned());
        out
    }

    /// OpenAI streams a failure as one event holding the error object.
    fn error(&mut self, e: &ApiError) -> Vec<String> {
        self.failed = true;
        vec![serde_json::to_string(&e.body()).expect("an error body serializes")]
    }

    fn chunk(&mut self, delta: Delta, finish_reason: Option<&'static str>) -> String {
        let logprobs = logprobs_of(std::mem::take(&mut self.logprobs));
        let choice = ChunkChoice { index: 0, delta, finish_reason, logprobs };
        self.serialize(vec![choice], None)
    }

    fn usage_chunk(&self, stats: &RequestStats) -> String {
        self.serialize(Vec::new(), Some(usage(stats)))
    }

    fn serialize(&self, choices: Vec<ChunkChoice>, usage: Option<Usage>) -> String {
        let chunk = ChatCompletionChunk {
            id: self.meta.id.clone(),
            object: "chat.completion.chunk",
            created: self.meta.created,
            model: self.meta.model.clone(),
            choices,
            usage,
        };
        serde_json::to_string(&chunk).expect("a chunk serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::batch::RequestError;
    use serde_json::{json, Value};

    fn meta() -> ReplyMeta {
        ReplyMeta { id: "chatcmpl-1".into(), created: 7, model: "tiny".into() }
    }

    fn stats() -> RequestStats {
        RequestStats {
            prompt_tokens: 11,
            cached_prompt_tokens: 4,
            generated_tokens: 5,
            reasoning_tokens: 3,
            ..Default::default()
        }
    }

    fn call() -> ToolCall {
        ToolCall {
            id: "call_9".into(),
            name: "get_weather".into(),
            arguments: "{\"city\":\"Paris\"}".into(),
        }
    }

    fn parse(payloads: &[String]) -> Vec<Value> {
        payloads.iter().filter(|p| *p != DONE).map(|p| serde_json::from_str(p).unwrap()).collect()
    }

    #[test]
    fn a_whole_reply_keeps_thinking_apart_and_counts_tokens() {
        let c = Completion {
            content: "Paris.".into(),
            reasoning: "The capital...".into(),
            finish_reason: Some(FinishReason::Stop),
            stats: stats(),
            ..Default::default()
        };
        let body = serde_json::to_value(whole_reply(meta(), c).unwrap()).unwrap();
        assert_eq!(
            body,
            json!({
                "id": "chatcmpl-1", "object": "chat.completion", "created": 7, "model": "tiny",
                "choices": [{"index": 0, "finish_reason": "stop", "logprobs": null,
                    "message": {"role": "assistant", "content": "Paris.", "reasoning_content": "The capital..."}}],
                "usage": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16,
                    "prompt_tokens_details": {"cached_tokens": 4},
                    "completion_tokens_details": {"reasoning_tokens": 3}}
            })
        );
    }

    #[test]
    fn a_tool_call_reply_has_null_content_and_string_arguments() {
        let c = Completion {
            tool_calls: vec![call()],
            finish_reason: Some(FinishReason::ToolCalls),
            stats: stats(),
            ..Default::default()
        };
        let body = serde_json::to_value(whole_reply(meta(), c).unwrap()).unwrap();
        let choice = &body["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls");
        assert_eq!(choice["message"]["content"], Value::Null);
        assert_eq!(
            choice["message"]["tool_calls"],
            json!([{"id": "call_9", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}])
        );
        assert!(choice["message"].get("reasoning_content").is_none());
    }

    #[test]
    fn engine_errors_become_api_errors() {
        let c = Completion {
            error: Some(RequestError {
                code: "CONTEXT_LENGTH_EXCEEDED".into(),
                message: "too long".into(),
            }),
            finish_reason: Some(FinishReason::Error),
            ..Default::default()
        };
        let e = whole_reply(meta(), c).unwrap_err();
        assert_eq!((e.status.as_u16(), e.code.as_str()), (400, "context_length_exceeded"));
        let cancelled =
            Completion { finish_reason: Some(FinishReason::Cancelled), ..Default::default() };
        assert_eq!(whole_reply(meta(), cancelled).unwrap_err().code, "cancelled");
        assert_eq!(whole_reply(meta(), Completion::default()).unwrap_err().code, "engine_stopped");
    }

    #[test]
    fn a_stream_opens_with_the_role_and_ends_with_reason_usage_and_done() {
        let mut w = ChunkWriter::new(meta(), true);
        let mut payloads = vec![w.start()];
        payloads.extend(w.event(Event::Reasoning("hmm".into())));
        payloads.extend(w.event(Event::Content("Hi".into())));
        payloads.extend(w.event(Event::ToolCall(call())));
        payloads.extend(w.event(Event::ToolCall(call())));
        payloads
            .extend(w.event(Event::Finished { reason: FinishReason::ToolCalls, stats: stats() }));
        assert_eq!(payloads.last().map(String::as_str), Some(DONE));
        let chunks = parse(&payloads);
        assert!(chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk" && c["id"] == "chatcmpl-1"));
        assert_eq!(chunks[0]["choices"][0]["delta"], json!({"role": "assistant", "content": ""}));
        assert_eq!(chunks[1]["choices"][0]["delta"], json!({"reasoning_content": "hmm"}));
        assert_eq!(chunks[2]["choices"][0]["delta"], json!({"content": "Hi"}));
        assert_eq!(chunks[3]["choices"][0]["delta"]["tool_calls"][0]["index"], 0);
        assert_eq!(chunks[4]["choices"][0]["delta"]["tool_calls"][0]["index"], 1);
        assert_eq!(
            chunks[4]["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"],
            "{\"city\":\"Paris\"}"
        );
        assert_eq!(chunks[5]["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(chunks[5]["choices"][0]["delta"], json!({}));
        assert_eq!(chunks[6]["choices"], json!([]));
        assert_eq!(chunks[6]["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
        assert_eq!(chunks.len(), 7);
        assert!(chunks[..6].iter().all(|c| c.get("usage").is_none()));
    }

    #[test]
    fn a_stream_without_usage_option_has_no_usage_chunk() {
        let mut w = ChunkWriter::new(meta(), false);
        let payloads = w.event(Event::Finished { reason: FinishReason::Length, stats: stats() });
        let chunks = parse(&payloads);
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0]["choices"][0]["finish_reason"], "length");
        assert_eq!(payloads.last().map(String::as_str), Some(DONE));
    }

    #[test]
    fn a_failing_stream_sends_one_error_then_done() {
        let mut w = ChunkWriter::new(meta(), true);
        let mut payloads = w
            .event(Event::Error(RequestError { code: "MLX_ERROR".into(), message: "boom".into() }));
        payloads.extend(w.event(Event::Finished { reason: FinishReason::Error, stats: stats() }));
        let chunks = parse(&payloads);
        assert_eq!(
            chunks,
            vec![
                json!({"error": {"message": "boom", "type": "server_error", "code": "mlx_error"}})
            ]
        );
        assert_eq!(payloads.last().map(String::as_str), Some(DONE));
        let mut gone = ChunkWriter::new(meta(), false);
        let payloads = gone.engine_gone();
        assert_eq!(parse(&payloads)[0]["error"]["code"], "engine_stopped");
        assert_eq!(payloads.last().map(String::as_str), Some(DONE));
    }
}
