//! OpenAI's chat-completions wire format: what clients send and what they
//! get back. Fields whose shape varies (message content, stop, tool choice)
//! stay as JSON here and are checked in `convert.rs`, which can then say
//! exactly what is wrong instead of serde's "did not match any variant".
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `POST /v1/chat/completions`. A field we do not act on is refused by name
/// (see `convert::refuse_unsupported`) rather than silently ignored, except
/// bookkeeping that cannot change the answer (`user`, `metadata`, `store`).
///
/// It is also the server's inner request model: the other dialects
/// (`anthropic.rs`, `responses.rs`) translate their requests into one.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ChatCompletionRequest {
    /// Optional here: a local server has one model, and a missing name means it.
    #[serde(default)]
    pub model: Option<String>,
    pub messages: Vec<RequestMessage>,
    /// Signed so a negative value gets a clear message instead of a type error.
    #[serde(default)]
    pub max_tokens: Option<i64>,
    /// OpenAI's newer name for `max_tokens`; it wins when both are given.
    #[serde(default)]
    pub max_completion_tokens: Option<i64>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub top_k: Option<i64>,
    #[serde(default)]
    pub min_p: Option<f32>,
    #[serde(default)]
    pub repetition_penalty: Option<f32>,
    #[serde(default)]
    pub seed: Option<i64>,
    /// A string or a list of strings.
    #[serde(default)]
    pub stop: Option<Value>,
    /// Token id (as a string key, JSON has no integer keys) → bias in [-100, 100].
    #[serde(default)]
    pub logit_bias: Option<Map<String, Value>>,
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
    /// `"auto"`, `"none"`, `"required"` or `{"type": "function", "function": {"name"}}`.
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// Extra chat-template variables; `enable_thinking` among them switches thinking.
    #[serde(default)]
    pub chat_template_kwargs: Option<Map<String, Value>>,
    /// `"none"` turns thinking off, any other effort turns it on.
    #[serde(default)]
    pub reasoning_effort: Option<String>,
    /// Not OpenAI: most thinking tokens before thinking is closed by force.
    #[serde(default)]
    pub thinking_budget: Option<u64>,
    #[serde(default)]
    pub n: Option<i64>,
    /// Log-probabilities of the answer's tokens (and `top_logprobs` alternatives).
    #[serde(default)]
    pub logprobs: Option<bool>,
    #[serde(default)]
    pub top_logprobs: Option<i64>,
    /// `{"type": "text" | "json_object" | "json_schema", ...}`, and our own
    /// `{"type": "regex", "regex"}` and `{"type": "lark", "lark"}`.
    #[serde(default)]
    pub response_format: Option<Value>,
    /// false: the reply ends at its first tool call.
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// Not OpenAI (vLLM's name): the last message is an assistant answer the
    /// model continues in place, instead of opening a new turn. Anthropic's
    /// Messages API does this whenever the last message is the assistant's.
    #[serde(default)]
    pub continue_final_message: Option<bool>,
    /// Not OpenAI: `"off"` keeps this request from speculating (its tokens
    /// come one target pass each, beside rows that do speculate); `"auto"`,
    /// the default, speculates as the server was started to (`--draft-kind`).
    /// Any other value is refused by name (`convert::speculation`).
    #[serde(default)]
    pub speculation: Option<Value>,
    /// Everything else the client sent, checked by name.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
    /// Everything else the client sent, checked by name.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct RequestMessage {
    pub role: String,
    /// A string, a list of content parts, or null (an assistant turn that only
    /// called tools).
    #[serde(default)]
    pub content: Option<Value>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Vec<Value>>,
    #[serde(default)]
    pub tool_call_id: Option<String>,
    /// Thinking of an earlier assistant turn (some templates show it again).
    #[serde(default, alias = "reasoning")]
    pub reasoning_content: Option<String>,
    /// Everything else the client sent, checked by name (a misspelled or
    /// invented field such as `images` is refused, not silently dropped).
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// A whole (non-streamed) reply.
#[derive(Debug, Clone, Serialize)]
pub struct ChatCompletion {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<Choice>,
    pub usage: Usage,
}

#[derive(Debug, Clone, Serialize)]
pub struct Choice {
    pub index: u32,
    pub message: AssistantMessage,
    pub finish_reason: &'static str,
    /// Null unless the request asked for `logprobs`.
    pub logprobs: Option<ChoiceLogprobs>,
}

/// `choices[].logprobs`: one entry per generated token.
#[derive(Debug, Clone, Serialize)]
pub struct ChoiceLogprobs {
    pub content: Vec<TokenLogprobOut>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TokenLogprobOut {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<TopLogprobOut>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TopLogprobOut {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AssistantMessage {
    pub role: &'static str,
    /// Null when the reply is only tool calls, as OpenAI sends it.
    pub content: Option<String>,
    /// The model's thinking, kept apart from the answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallOut>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ToolCallOut {
    /// Position among the reply's calls; only in streamed deltas.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionCallOut,
}

#[derive(Debug, Clone, Serialize)]
pub struct FunctionCallOut {
    pub name: String,
    /// The arguments object as a JSON string, as OpenAI sends it.
    pub arguments: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    pub prompt_tokens_details: PromptTokensDetails,
    pub completion_tokens_details: CompletionTokensDetails,
}

#[derive(Debug, Clone, Serialize)]
pub struct CompletionTokensDetails {
    /// Completion tokens spent thinking (the text in `reasoning_content`).
    pub reasoning_tokens: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens served from the engine's prompt cache.
    pub cached_tokens: usize,
}

/// One server-sent event of a streamed reply.
#[derive(Debug, Clone, Serialize)]
pub struct ChatCompletionChunk {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    /// Empty in the usage chunk at the end.
    pub choices: Vec<ChunkChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChunkChoice {
    pub index: u32,
    pub delta: Delta,
    pub finish_reason: Option<&'static str>,
    /// The log-probabilities of the tokens since the last chunk, when asked for.
    pub logprobs: Option<ChoiceLogprobs>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallOut>>,
}

/// `GET /v1/models`.
#[derive(Debug, Clone, Serialize)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelEntry>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelEntry {
    /// The name to send as `model`.
    pub id: String,
    pub object: &'static str,
    /// Unix seconds: when the model was loaded, or the file's modification time.
    pub created: u64,
    pub owned_by: &'static str,
    /// Not OpenAI: whether requests can use it now (models on disk are listed
    /// but must be loaded by the app first).
    pub loaded: bool,
    /// Not OpenAI: the model's context length, when loaded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_length: Option<usize>,
    /// Not OpenAI: for the loaded model, what speculative decoding does
    /// ("off", the proposer, or why it does not apply).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speculation: Option<String>,
}
