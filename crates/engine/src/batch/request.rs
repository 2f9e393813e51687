//! What callers send to the engine and what they get back.
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::constraint::Constraint;
use crate::sample::SamplingParams;
use crate::tokenizer::{ChatMessage, TemplateOptions};
use crate::tools::ToolCall;

/// Engine-wide unique request id.
pub type RequestId = u64;

/// The prompt of a request.
#[derive(Debug, Clone)]
pub enum Prompt {
    /// Token ids, used as they are.
    Tokens(Vec<u32>),
    /// Plain text, encoded without the chat template.
    Text(String),
    /// A conversation rendered through the model's chat template.
    Chat { messages: Vec<ChatMessage>, options: TemplateOptions },
}

/// One image of a request: the file's bytes and their SHA-256 (hex), the
/// key of the vision-feature cache and the name of the app's stored attachment.
#[derive(Clone)]
pub struct ImageInput {
    pub bytes: Arc<[u8]>,
    pub sha256: String,
}

impl ImageInput {
    pub fn from_bytes(bytes: impl Into<Arc<[u8]>>) -> Self {
        let bytes = bytes.into();
        let sha256 = hex_sha256(&bytes);
        Self { bytes, sha256 }
    }
}

impl std::fmt::Debug for ImageInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ImageInput({} bytes, sha256 {})", self.bytes.len(), &self.sha256)
    }
}

fn hex_sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

#[derive(Debug, Clone)]
pub struct Request {
    pub prompt: Prompt,
    /// The images of a chat prompt, in the order their `ContentPart::Image`
    /// parts appear in the messages.
    pub images: Vec<ImageInput>,
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Generation stops when the answer text contains one of these (not emitted).
    pub stop: Vec<String>,
    /// Most reasoning tokens before thinking is closed by force; `None` = no limit.
    pub thinking_budget: Option<usize>,
    /// What the answer must match (after any thinking); `None` = free text.
    pub constraint: Option<Constraint>,
    /// With tools offered: false ends the reply at its first tool call.
    pub parallel_tool_calls: bool,
    /// Log-probabilities of each generated token with this many most likely
    /// alternatives (0 to 20); `None` = none.
    pub logprobs: Option<usize>,
    /// Score the prompt: the log-probability of each prompt token after the
    /// first under the model given the tokens before it, with this many most
    /// likely alternatives (0 to 20), sent as one
    /// [`Event::PromptLogprobs`] before the first generated token; `None` =
    /// none (and no cost). Such a request does not reuse the prefix cache
    /// (a kept prefix has no logits to score) and may ask for no generated
    /// tokens (`max_tokens` 0).
    pub prompt_logprobs: Option<usize>,
    /// With tools offered: the reply must be a call of one of them
    /// (`tool_choice: "required"`, or the one named function), enforced by
    /// a grammar in the template's tool-call format.
    pub require_tool_call: bool,
    /// Someone watches this reply stream (a chat, an API client). While
    /// such replies decode, new work is paced so they keep their speed (see
    /// [`super::pacing`]); batch work (a bulk job) sets false and gets the
    /// machine's full throughput instead.
    pub interactive: bool,
    /// `false`: this row never drafts, whatever the engine's speculation
    /// (a client that measures plain decoding, or wants the step rhythm of
    /// one token per pass); its neighbours still speculate. The server's
    /// `"speculation": "off"`.
    pub speculate: bool,
}

impl Request {
    pub fn new(prompt: Prompt) -> Self {
        Self {
            prompt,
            images: Vec::new(),
            max_tokens: 256,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            thinking_budget: None,
            constraint: None,
            parallel_tool_calls: true,
            require_tool_call: false,
            logprobs: None,
            prompt_logprobs: None,
            interactive: true,
            speculate: true,
        }
    }

    pub fn with_constraint(mut self, constraint: Constraint) -> Self {
        self.constraint = Some(constraint);
        self
    }

    pub fn with_max_tokens(mut self, n: usize) -> Self {
        self.max_tokens = n;
        self
    }

    pub fn with_sampling(mut self, sampling: SamplingParams) -> Self {
        self.sampling = sampling;
        self
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// End-of-sequence token or a stop string.
    Stop,
    /// `max_tokens` (or the context) ran out.
    Length,
    /// The model finished with tool calls.
    ToolCalls,
    Cancelled,
    Error,
}

/// One generated token under the model's distribution (before sampling
/// settings and constraints), with its most likely alternatives.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TokenLogprob {
    pub token: TokenText,
    pub logprob: f32,
    /// Most likely first.
    pub top: Vec<(TokenText, f32)>,
}

/// A request's prompt scored by the model (see [`Request::prompt_logprobs`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PromptLogprobs {
    /// The prompt's first token: nothing before it to score it against.
    pub first: TokenText,
    /// Every later prompt token, in order, given the tokens before it.
    pub scored: Vec<TokenLogprob>,
}

/// A token's id, its bytes, and those bytes as text (lossy where a token is
/// part of a character).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TokenText {
    pub id: u32,
    pub text: String,
    pub bytes: Vec<u8>,
}

/// Figures for one finished request.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RequestStats {
    pub prompt_tokens: usize,
    /// Prompt tokens served from the prompt cache instead of prefilled.
    pub cached_prompt_tokens: usize,
    /// Of those, the ones read from disk (a chat continued after a restart).
    pub cached_from_disk_tokens: usize,
    pub generated_tokens: usize,
    /// Generated tokens that were thinking (part of `generated_tokens`).
    pub reasoning_tokens: usize,
    /// Generated tokens that came from a draft the target accepted
    /// (speculative decoding; part of `generated_tokens`).
    pub draft_tokens: usize,
    /// From submission to the first token.
    pub time_to_first_token: Duration,
    /// Prefill speed: prompt tokens over the time spent prefilling them.
    pub prompt_tps: f64,
    /// Decode speed: tokens after the first over the time they took.
    pub generation_tps: f64,
    /// KV-cache bytes this request's tokens took when it finished (its own
    /// columns of the batch cache, quantized or not; padding not counted).
    pub kv_cache_bytes: usize,
}

/// A clean error for one request; the engine keeps serving the others.
#[derive(Debug, Clone, Serialize)]
pub struct RequestError {
    /// Stable code, e.g. `CONTEXT_LENGTH_EXCEEDED` (see [`crate::Error::code`]).
    pub code: String,
    pub message: String,
}

impl From<&crate::Error> for RequestError {
    fn from(e: &crate::Error) -> Self {
        Self { code: e.code().to_string(), message: e.to_string() }
    }
}

/// What a request's stream carries, in order: `Accepted` (unless the request
/// was refused before it reached the engine), any `Queued`, text pieces, then
/// exactly one `Finished` (after an `Error` if it failed).
#[derive(Debug, Clone)]
pub enum Event {
    /// The engine took the request in: it is prepared (template, tokens,
    /// images decoded) and queued. Sent once, before anything else.
    Accepted,
    /// The batch is full: this request waits with `position - 1` requests
    /// ahead of it. Sent again whenever the position changes.
    Queued {
        position: usize,
    },
    /// Answer text.
    Content(String),
    /// The log-probability of the next generated token (sent before its
    /// text, which the matcher may hold back), when the request asked.
    Logprob(TokenLogprob),
    /// The prompt's tokens scored, when the request asked
    /// ([`Request::prompt_logprobs`]): once, before any generated token.
    PromptLogprobs(PromptLogprobs),
    /// Thinking text, kept apart from the answer.
    Reasoning(String),
    ToolCall(ToolCall),
    Error(RequestError),
    Finished {
        reason: FinishReason,
        stats: RequestStats,
    },
}
