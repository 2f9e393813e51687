//! OpenAI's legacy completions (`POST /v1/completions`) at the edge: raw
//! prompts (text or token ids, one or several, `n` answers each) become
//! engine requests without a chat template; the engine's events become
//! `text_completion` choices with the legacy `logprobs` shape. Sampling and
//! stop strings are checked by the same code as chat completions'.
//!
//! `echo` with `logprobs` scores the prompt (what evaluation harnesses such
//! as lm-eval's `local-completions` send to rank answers): the engine's
//! prompt log-probabilities come first in `logprobs` (the first token's
//! `null`, nothing comes before it), then the generated tokens'; with
//! `max_tokens: 0` only the prompt's. Streamed, the echoed prompt and its
//! figures are one chunk before the answer's, as OpenAI sent them.
use engine::batch::logprobs::MAX_TOP_LOGPROBS;
use engine::batch::{
    Event, FinishReason, Prompt, PromptLogprobs, Request, RequestStats, TokenLogprob,
};
use engine::handle::Completion;
use engine::sample::SamplingParams;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::api_error::ApiError;
use crate::convert::{self, ModelLimits, MAX_BYTES_PER_TOKEN};
use crate::openai::{ChatCompletionRequest, StreamOptions};
use crate::routes::chunks::{failure, new_id, unix_now, DONE};
use crate::routes::sse::{Frame, StreamWriter};

/// `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    #[serde(default)]
    pub model: Option<String>,
    /// A string, a list of strings, a list of token ids, or a list of lists
    /// of token ids.
    pub prompt: Value,
    /// 16 when absent, as OpenAI's default.
    #[serde(default)]
    pub max_tokens: Option<i64>,
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
    #[serde(default)]
    pub stop: Option<Value>,
    #[serde(default)]
    pub logit_bias: Option<Map<String, Value>>,
    /// Answers per prompt.
    #[serde(default)]
    pub n: Option<i64>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// Log-probabilities of the answer's tokens with this many alternatives.
    #[serde(default)]
    pub logprobs: Option<i64>,
    /// The prompt's text comes back before the answer.
    #[serde(default)]
    pub echo: Option<bool>,
    /// Everything else the client sent, checked by name.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// OpenAI's default `max_tokens` for completions.
const DEFAULT_MAX_TOKENS: usize = 16;

/// The most prompts × answers one request may ask for: each is a sequence
/// in the engine's batch.
pub const MAX_CHOICES: usize = 64;

/// A checked request: one engine request per choice, in choice order.
pub struct Translated {
    pub requests: Vec<Request>,
    /// Each choice's prompt text, when `echo` asked for it back (a prompt
    /// of token ids that is scored: `None`, its text comes with its scores).
    pub echoes: Vec<Option<String>>,
    /// Answers per prompt (usage counts each prompt once).
    pub n: usize,
    pub stream: bool,
    pub include_usage: bool,
}

pub fn translate(
    body: CompletionRequest,
    limits: ModelLimits,
    defaults: &SamplingParams,
) -> Result<Translated, ApiError> {
    refuse_unsupported(&body.other)?;
    let echo = body.echo.unwrap_or(false);
    let logprobs = match body.logprobs {
        None => None,
        Some(n) if (0..=MAX_TOP_LOGPROBS as i64).contains(&n) => Some(n as usize),
        Some(n) => {
            return Err(ApiError::invalid_param(format!(
                "logprobs must be between 0 and {MAX_TOP_LOGPROBS}, got {n}"
            )))
        }
    };
    // echo with logprobs: the prompt's tokens are scored too
    let scores_prompt = echo && logprobs.is_some();
    let n = match body.n {
        None => 1,
        Some(n) if n >= 1 => n as usize,
        Some(n) => return Err(ApiError::invalid_param(format!("n must be at least 1, got {n}"))),
    };
    let prompts = prompts(body.prompt, limits)?;
    if prompts.len().saturating_mul(n) > MAX_CHOICES {
        return Err(ApiError::invalid_param(format!(
            "{} prompts × n = {n} is more than {MAX_CHOICES} answers in one request",
            prompts.len()
        )));
    }
    let max_tokens = match body.max_tokens {
        None => DEFAULT_MAX_TOKENS,
        Some(m) if m >= 1 || (m == 0 && scores_prompt) => usize::try_from(m).unwrap_or(usize::MAX),
        Some(m) => {
            return Err(ApiError::invalid_param(format!(
                "max_tokens must be at least 1 (0 only with echo and logprobs: the prompt scored), got {m}"
            )))
        }
    };
    if let Some(options) = &body.stream_options {
        if let Some((name, _)) =
            options.other.iter().find(|(k, v)| !v.is_null() && *k != "include_obfuscation")
        {
            return Err(ApiError::invalid_param(format!(
                "stream_options.{name} is not supported by this server"
            )));
        }
    }
    // The same checks as chat completions', on the same fields.
    let fields = ChatCompletionRequest {
        temperature: body.temperature,
        top_p: body.top_p,
        top_k: body.top_k,
        min_p: body.min_p,
        repetition_penalty: body.repetition_penalty,
        seed: body.seed,
        logit_bias: body.logit_bias,
        ..ChatCompletionRequest::default()
    };
    let sampling = convert::sampling(&fields, limits, defaults)?;
    let stop = convert::stop_strings(body.stop.as_ref())?;
    let stream = body.stream.unwrap_or(false);
    let mut requests = Vec::with_capacity(prompts.len() * n);
    let mut echoes = Vec::with_capacity(prompts.len() * n);
    for prompt in &prompts {
        let text = match prompt {
            Prompt::Text(text) => Some(text.clone()),
            _ => None,
        };
        if echo && text.is_none() && !scores_prompt {
            return Err(ApiError::invalid_param(
                "echo of token ids needs logprobs here (their text comes from the scored prompt)",
            ));
        }
        for j in 0..n {
            let mut sampling = sampling.clone();
            // Each answer its own random stream, all of them repeatable.
            sampling.seed = sampling.seed.map(|s| s.wrapping_add(j as u64));
            let mut request =
                Request::new(prompt.clone()).with_max_tokens(max_tokens).with_sampling(sampling);
            request.stop = stop.clone();
            request.logprobs = logprobs;
            request.prompt_logprobs = if scores_prompt { logprobs } else { None };
            request.interactive = stream;
            requests.push(request);
            echoes.push(if echo { text.clone() } else { None });
        }
    }
    Ok(Translated {
        requests,
        echoes,
        n,
        stream,
        include_usage: body.stream_options.is_some_and(|o| o.include_usage),
    })
}

/// Fields of the legacy API not acted on: refused by name, except what asks
/// for nothing (a zero penalty, `best_of` equal to 1, an empty `suffix`).
fn refuse_unsupported(other: &Map<String, Value>) -> Result<(), ApiError> {
    for (name, value) in other {
        let harmless = value.is_null()
            || name == "user"
            || (matches!(name.as_str(), "presence_penalty" | "frequency_penalty")
                && value.as_f64() == Some(0.0))
            || (name == "best_of" && value.as_i64() == Some(1))
            || (name == "suffix" && value.as_str() == Some(""));
        if !harmless {
            return Err(ApiError::invalid_param(format!("{name} is not supported by this server")));
        }
    }
    Ok(())
}

/// The prompts: a string, strings, token ids, or lists of token ids.
fn prompts(prompt: Value, limits: ModelLimits) -> Result<Vec<Prompt>, ApiError> {
    let bad = || {
        ApiError::invalid_param(
            "prompt must be a string, a list of strings, a list of token ids or a list of lists of token ids",
        )
    };
    let tokens = |items: &[Value]| -> Result<Prompt, ApiError> {
        let ids = items
            .iter()
            .map(|v| v.as_u64().and_then(|id| u32::try_from(id).ok()))
            .collect::<Option<Vec<u32>>>()
            .ok_or_else(bad)?;
        if ids.iter().any(|&id| id as i64 >= limits.vocab_size as i64) {
            return Err(ApiError::invalid_param(format!(
                "prompt token ids must be below the vocabulary size {}",
                limits.vocab_size
            )));
        }
        Ok(Prompt::Tokens(ids))
    };
    let text = |s: String| -> Result<Prompt, ApiError> {
        let max_bytes = limits.max_context.saturating_mul(MAX_BYTES_PER_TOKEN);
        if s.len() > max_bytes {
            return Err(ApiError::prompt_too_long(s.len(), max_bytes, limits.max_context));
        }
        Ok(Prompt::Text(s))
    };
    let prompts = match prompt {
        Value::String(s) => vec![text(s)?],
        Value::Array(items) if items.is_empty() => return Err(bad()),
        Value::Array(items) => match &items[0] {
            Value::Number(_) => vec![tokens(&items)?],
            Value::String(_) => items
                .into_iter()
                .map(|v| match v {
                    Value::String(s) => text(s),
                    _ => Err(bad()),
                })
                .collect::<Result<_, _>>()?,
            Value::Array(_) => items
                .iter()
                .map(|v| v.as_array().ok_or_else(bad).and_then(|ids| tokens(ids)))
                .collect::<Result<_, _>>()?,
            _ => return Err(bad()),
        },
        _ => return Err(bad()),
    };
    if prompts.iter().any(|p| matches!(p, Prompt::Tokens(ids) if ids.is_empty())) {
        return Err(ApiError::invalid_param("a prompt of token ids must not be empty"));
    }
    Ok(prompts)
}

// ---------------------------------------------------------------- replies

/// What every object of one reply repeats.
#[derive(Debug, Clone)]
pub struct ReplyMeta {
    pub id: String,
    pub created: u64,
    pub model: String,
}

impl ReplyMeta {
    pub fn new(model: String) -> Self {
        Self { id: new_id("cmpl-"), created: unix_now(), model }
    }
}

fn finish_reason(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Length => "length",
        _ => "stop",
    }
}

/// The legacy `logprobs` object, built token by token: `text_offset` counts
/// characters of the choice's text.
#[derive(Default)]
struct LegacyLogprobs {
    tokens: Vec<String>,
    token_logprobs: Vec<Value>,
    top_logprobs: Vec<Value>,
    text_offset: Vec<usize>,
    /// Where the next token's text starts.
    offset: usize,
}

impl LegacyLogprobs {
    fn starting_at(offset: usize) -> Self {
        Self { offset, ..Self::default() }
    }

    /// The prompt's tokens: the first with `null`s (nothing before it), then the scored ones.
    fn prompt(mut self, prompt: &PromptLogprobs) -> Self {
        self.push(&prompt.first.text, Value::Null, Value::Null);
        self.tokens(&prompt.scored)
    }

    fn tokens(mut self, tokens: &[TokenLogprob]) -> Self {
        for t in tokens {
            let top: Map<String, Value> =
                t.top.iter().map(|(tok, lp)| (tok.text.clone(), json!(lp))).collect();
            self.push(&t.token.text, json!(t.logprob), Value::Object(top));
        }
        self
    }

    fn push(&mut self, text: &str, logprob: Value, top: Value) {
        self.tokens.push(text.to_owned());
        self.token_logprobs.push(logprob);
        self.top_logprobs.push(top);
        self.text_offset.push(self.offset);
        self.offset += text.chars().count();
    }

    fn into_json(self) -> Value {
        json!({
            "tokens": self.tokens,
            "token_logprobs": self.token_logprobs,
            "top_logprobs": self.top_logprobs,
            "text_offset": self.text_offset,
        })
    }
}

/// The legacy `logprobs` object for generated tokens starting at character
/// `offset` of the choice's text.
fn logprobs_object(tokens: &[TokenLogprob], offset: usize) -> Value {
    LegacyLogprobs::starting_at(offset).tokens(tokens).into_json()
}

/// A scored prompt's text: its tokens' bytes (the echo of a prompt of token ids).
fn prompt_text(prompt: &PromptLogprobs) -> String {
    let mut bytes = prompt.first.bytes.clone();
    for t in &prompt.scored {
        bytes.extend(&t.token.bytes);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Usage over every choice: each prompt counted once, every answer's tokens.
fn usage(stats: &[&RequestStats], n: usize) -> Value {
    let prompt: usize = stats.iter().step_by(n.max(1)).map(|s| s.prompt_tokens).sum();
    let completion: usize = stats.iter().map(|s| s.generated_tokens).sum();
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

/// The whole reply, or the first error a choice ended with.
pub fn whole_reply(
    meta: &ReplyMeta,
    completions: Vec<Completion>,
    echoes: &[Option<String>],
    n: usize,
    logprobs: bool,
) -> Result<Value, ApiError> {
    if let Some(e) = completions.iter().find_map(failure) {
        return Err(e);
    }
    let mut choices = Vec::with_capacity(completions.len());
    for (index, (c, echo)) in completions.iter().zip(echoes).enumerate() {
        let prefix = match (echo, &c.prompt_logprobs) {
            (Some(text), _) => text.clone(),
            (None, Some(scored)) => prompt_text(scored),
            (None, None) => String::new(),
        };
        let logprobs = match (&c.prompt_logprobs, logprobs) {
            (_, false) => Value::Null,
            // the prompt's tokens, then the answer's after the echoed text
            (Some(scored), true) => {
                let mut l = LegacyLogprobs::default().prompt(scored);
                l.offset = prefix.chars().count();
                l.tokens(&c.logprobs).into_json()
            }
            (None, true) => logprobs_object(&c.logprobs, prefix.chars().count()),
        };
        choices.push(json!({
            "index": index,
            "text": format!("{prefix}{}", c.content),
            "logprobs": logprobs,
            "finish_reason": c.finish_reason.map_or("stop", finish_reason),
        }));
    }
    let stats: Vec<&RequestStats> = completions.iter().map(|c| &c.stats).collect();
    Ok(json!({
        "id": meta.id, "object": "text_completion", "created": meta.created, "model": meta.model,
        "choices": choices, "usage": usage(&stats, n),
    }))
}

/// One choice of a streamed reply.
#[derive(Default)]
struct ChoiceState {
    /// The prompt text still to send (echo), before the first answer text.
    echo: Option<String>,
    /// Characters sent so far (for `text_offset`).
    chars: usize,
    /// Logprobs of tokens whose text has not gone out yet.
    logprobs: Vec<TokenLogprob>,
    stats: Option<RequestStats>,
}

/// The `data:` payloads of a streamed reply: a chunk per piece of text of
/// any choice, a last chunk per choice with its finish reason, the usage
/// chunk when asked, then `[DONE]`.
pub struct CompletionStream {
    meta: ReplyMeta,
    choices: Vec<ChoiceState>,
    n: usize,
    logprobs: bool,
    include_usage: bool,
    /// An error was sent; only `[DONE]` follows.
    failed: bool,
}

impl CompletionStream {
    pub fn new(
        meta: ReplyMeta,
        echoes: Vec<Option<String>>,
        n: usize,
        logprobs: bool,
        include_usage: bool,
    ) -> Self {
        let choices =
            echoes.into_iter().map(|echo| ChoiceState { echo, ..Default::default() }).collect();
        Self { meta, choices, n, logprobs, include_usage, failed: false }
    }

    fn chunk(&self, choices: Value, usage: Option<Value>) -> Frame {
        let mut chunk = json!({
            "id": self.meta.id, "object": "text_completion", "created": self.meta.created,
            "model": self.meta.model, "choices": choices,
        });
        if let Some(usage) = usage {
            chunk["usage"] = usage;
        }
        Frame::data(chunk.to_string())
    }

    fn text(&mut self, index: usize, text: String, finish: Option<&'static str>) -> Frame {
        let logprobs_wanted = self.logprobs;
        let state = &mut self.choices[index];
        let echo = state.echo.take().unwrap_or_default();
        let text = format!("{echo}{text}");
        let start = state.chars + echo.chars().count();
        state.chars += text.chars().count();
        let logprobs = if logprobs_wanted {
            logprobs_object(&std::mem::take(&mut state.logprobs), start)
        } else {
            Value::Null
        };
        self.chunk(
            json!([{"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}]),
            None,
        )
    }

    /// The echoed prompt and its scores, one chunk before the answer's text.
    fn prompt(&mut self, index: usize, scored: PromptLogprobs) -> Frame {
        let state = &mut self.choices[index];
        let text = state.echo.take().unwrap_or_else(|| prompt_text(&scored));
        state.chars += text.chars().count();
        let logprobs = LegacyLogprobs::default().prompt(&scored).into_json();
        self.chunk(
            json!([{"index": index, "text": text, "logprobs": logprobs, "finish_reason": null}]),
            None,
        )
    }

    fn error(&mut self, e: &ApiError) -> Vec<Frame> {
        self.failed = true;
        vec![Frame::data(serde_json::to_string(&e.body()).expect("an error body serializes"))]
    }
}

impl StreamWriter for CompletionStream {
    fn event(&mut self, choice: usize, event: Event) -> Vec<Frame> {
        if self.failed {
            return Vec::new();
        }
        match event {
            Event::Content(text) => vec![self.text(choice, text, None)],
            Event::Logprob(lp) => {
                self.choices[choice].logprobs.push(lp);
                Vec::new()
            }
            Event::PromptLogprobs(scored) => vec![self.prompt(choice, scored)],
            Event::Error(e) => self.error(&ApiError::from_engine(&e)),
            Event::Finished { reason: FinishReason::Cancelled, .. } => {
                self.error(&ApiError::cancelled())
            }
            Event::Finished { reason: FinishReason::Error, .. } => {
                self.error(&ApiError::engine_stopped())
            }
            Event::Finished { reason, stats } => {
                self.choices[choice].stats = Some(stats);
                vec![self.text(choice, String::new(), Some(finish_reason(reason)))]
            }
            // A raw prompt opens no thinking and offers no tools.
            Event::Reasoning(_) | Event::ToolCall(_) | Event::Accepted | Event::Queued { .. } => {
                Vec::new()
            }
        }
    }

    fn engine_gone(&mut self, _choice: usize) -> Vec<Frame> {
        if self.failed {
            return Vec::new();
        }
        self.error(&ApiError::engine_stopped())
    }

    fn end(&mut self) -> Vec<Frame> {
        let mut out = Vec::new();
        if self.include_usage && !self.failed {
            let stats: Vec<&RequestStats> =
                self.choices.iter().filter_map(|c| c.stats.as_ref()).collect();
            out.push(self.chunk(json!([]), Some(usage(&stats, self.n))));
        }
        out.push(Frame::data(DONE.to_owned()));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::batch::TokenText;

    const LIMITS: ModelLimits = ModelLimits { vocab_size: 300, max_context: 2048 };

    fn translate_json(body: Value) -> Result<Translated, ApiError> {
        translate(serde_json::from_value(body).unwrap(), LIMITS, &SamplingParams::default())
    }

    #[test]
    fn prompts_of_every_shape_become_one_request_per_answer() {
        let t =
            translate_json(json!({"prompt": "Once", "max_tokens": 5, "stop": ["\n"], "seed": 7,
            "n": 2, "echo": true, "temperature": 0.5}))
            .unwrap();
        assert_eq!(t.requests.len(), 2);
        assert!(matches!(&t.requests[0].prompt, Prompt::Text(s) if s == "Once"));
        assert_eq!(t.requests[0].max_tokens, 5);
        assert_eq!(t.requests[1].stop, vec!["\n".to_owned()]);
        assert_eq!((t.requests[0].sampling.seed, t.requests[1].sampling.seed), (Some(7), Some(8)));
        assert_eq!(t.echoes, vec![Some("Once".to_owned()), Some("Once".to_owned())]);
        let ids = translate_json(json!({"prompt": [1, 2, 3]})).unwrap();
        assert!(matches!(&ids.requests[0].prompt, Prompt::Tokens(t) if t == &[1, 2, 3]));
        assert_eq!(ids.requests[0].max_tokens, DEFAULT_MAX_TOKENS);
        let many = translate_json(json!({"prompt": [[1, 2], [3]], "logprobs": 2})).unwrap();
        assert_eq!(many.requests.len(), 2);
        assert_eq!(many.requests[1].logprobs, Some(2));
        let texts = translate_json(json!({"prompt": ["a", "b", "c"], "n": 1})).unwrap();
        assert_eq!(texts.requests.len(), 3);
    }

    #[test]
    fn bad_requests_are_refused_by_name() {
        for (body, needle) in [
            (json!({"prompt": [1, 2], "echo": true}), "echo of token ids needs logprobs"),
            (json!({"prompt": "x", "echo": true, "max_tokens": 0}), "max_tokens"),
            (json!({"prompt": "x", "logprobs": 21}), "logprobs"),
            (json!({"prompt": "x", "n": 0}), "n must be"),
            (json!({"prompt": "x", "n": 65}), "more than 64"),
            (json!({"prompt": []}), "prompt must be"),
            (json!({"prompt": [1, "a"]}), "prompt must be"),
            (json!({"prompt": [[]]}), "must not be empty"),
            (json!({"prompt": [9999]}), "vocabulary"),
            (json!({"prompt": "x", "best_of": 3}), "best_of"),
            (json!({"prompt": "x", "suffix": "end"}), "suffix"),
            (json!({"prompt": "x", "presence_penalty": 1}), "presence_penalty"),
            (json!({"prompt": "x", "temperature": 3}), "temperature"),
            (json!({"prompt": "x", "stop": 5}), "stop"),
            (json!({"prompt": "x", "max_tokens": 0}), "max_tokens"),
        ] {
            let e = translate_json(body.clone()).err().unwrap_or_else(|| panic!("{body} passed"));
            assert_eq!(e.status, 400, "{body}");
            assert!(e.message.contains(needle), "{body}: {}", e.message);
        }
        translate_json(
            json!({"prompt": "x", "best_of": 1, "presence_penalty": 0, "user": "u", "suffix": ""}),
        )
        .unwrap();
    }

    #[test]
    fn echo_with_logprobs_scores_the_prompt() {
        let t =
            translate_json(json!({"prompt": "Once", "echo": true, "logprobs": 1, "max_tokens": 0}))
                .unwrap();
        assert_eq!((t.requests[0].prompt_logprobs, t.requests[0].max_tokens), (Some(1), 0));
        let ids = translate_json(json!({"prompt": [[1, 2]], "echo": true, "logprobs": 0})).unwrap();
        assert_eq!(ids.requests[0].prompt_logprobs, Some(0));
        assert_eq!(ids.echoes, vec![None], "the text comes with the scores");
        // without echo, or without logprobs: the prompt is not scored
        for body in [json!({"prompt": "x", "logprobs": 1}), json!({"prompt": "x", "echo": true})] {
            assert_eq!(translate_json(body).unwrap().requests[0].prompt_logprobs, None);
        }
    }

    fn lp(text: &str, logprob: f32) -> TokenLogprob {
        let token = TokenText { id: 1, text: text.into(), bytes: text.as_bytes().to_vec() };
        TokenLogprob { token: token.clone(), logprob, top: vec![(token, logprob)] }
    }

    #[test]
    fn a_whole_reply_echoes_and_places_logprobs_after_the_prompt() {
        let stats = RequestStats { prompt_tokens: 3, generated_tokens: 2, ..Default::default() };
        let c = Completion {
            content: "ab".into(),
            logprobs: vec![lp("a", -0.5), lp("b", -1.0)],
            finish_reason: Some(FinishReason::Length),
            stats: stats.clone(),
            ..Default::default()
        };
        let meta = ReplyMeta { id: "cmpl-1".into(), created: 7, model: "tiny".into() };
        let reply = whole_reply(
            &meta,
            vec![c.clone(), c],
            &[Some("Hé ".into()), Some("Hé ".into())],
            2,
            true,
        )
        .unwrap();
        assert_eq!(reply["object"], "text_completion");
        assert_eq!(reply["choices"][1]["index"], 1);
        assert_eq!(reply["choices"][0]["text"], "Hé ab");
        assert_eq!(reply["choices"][0]["finish_reason"], "length");
        let logprobs = &reply["choices"][0]["logprobs"];
        assert_eq!(logprobs["tokens"], json!(["a", "b"]));
        assert_eq!(logprobs["token_logprobs"], json!([-0.5, -1.0]));
        assert_eq!(logprobs["top_logprobs"][1], json!({"b": -1.0}));
        assert_eq!(logprobs["text_offset"], json!([3, 4]), "characters, after the echoed prompt");
        assert_eq!(
            reply["usage"],
            json!({"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7})
        );
    }

    fn scored_prompt() -> PromptLogprobs {
        let first = TokenText { id: 7, text: "Hé".into(), bytes: "Hé".as_bytes().to_vec() };
        PromptLogprobs { first, scored: vec![lp(" ", -2.0)] }
    }

    #[test]
    fn a_scored_prompt_comes_first_with_a_null_for_its_first_token() {
        let c = Completion {
            content: "a".into(),
            logprobs: vec![lp("a", -0.5)],
            prompt_logprobs: Some(scored_prompt()),
            finish_reason: Some(FinishReason::Length),
            ..Default::default()
        };
        let meta = ReplyMeta { id: "cmpl-1".into(), created: 7, model: "tiny".into() };
        // a prompt of token ids: its text is its tokens'
        let reply = whole_reply(&meta, vec![c.clone()], &[None], 1, true).unwrap();
        assert_eq!(reply["choices"][0]["text"], "Hé a");
        let logprobs = &reply["choices"][0]["logprobs"];
        assert_eq!(logprobs["tokens"], json!(["Hé", " ", "a"]));
        assert_eq!(logprobs["token_logprobs"], json!([null, -2.0, -0.5]));
        assert_eq!(logprobs["top_logprobs"], json!([null, {" ": -2.0}, {"a": -0.5}]));
        assert_eq!(logprobs["text_offset"], json!([0, 2, 3]));

        // streamed: the prompt and its scores in one chunk, then the answer's
        let mut w = CompletionStream::new(meta, vec![Some("Hé ".into())], 1, true, false);
        let mut frames = w.event(0, Event::PromptLogprobs(scored_prompt()));
        frames.extend(w.event(0, Event::Logprob(lp("a", -0.5))));
        frames.extend(w.event(0, Event::Content("a".into())));
        let chunks: Vec<Value> =
            frames.iter().map(|f| serde_json::from_str(&f.data).unwrap()).collect();
        assert_eq!(chunks.len(), 2);
        let (prompt, answer) = (&chunks[0]["choices"][0], &chunks[1]["choices"][0]);
        assert_eq!((prompt["text"].as_str(), answer["text"].as_str()), (Some("Hé "), Some("a")));
        assert_eq!(prompt["logprobs"]["token_logprobs"], json!([null, -2.0]));
        assert_eq!(answer["logprobs"]["text_offset"], json!([3]));
    }

    #[test]
    fn a_stream_interleaves_choices_and_ends_with_usage_and_done() {
        let meta = ReplyMeta { id: "cmpl-1".into(), created: 7, model: "tiny".into() };
        let mut w = CompletionStream::new(meta, vec![Some("P:".into()), None], 1, false, true);
        let stats = RequestStats { prompt_tokens: 2, generated_tokens: 1, ..Default::default() };
        let mut frames = Vec::new();
        frames.extend(w.event(1, Event::Content("y".into())));
        frames.extend(w.event(0, Event::Content("x".into())));
        frames.extend(
            w.event(0, Event::Finished { reason: FinishReason::Stop, stats: stats.clone() }),
        );
        frames.extend(w.event(1, Event::Finished { reason: FinishReason::Length, stats }));
        frames.extend(w.end());
        assert_eq!(frames.last().unwrap().data, DONE);
        let chunks: Vec<Value> = frames[..frames.len() - 1]
            .iter()
            .map(|f| serde_json::from_str(&f.data).unwrap())
            .collect();
        let texts: Vec<(u64, &str)> = chunks[..4]
            .iter()
            .map(|c| {
                (
                    c["choices"][0]["index"].as_u64().unwrap(),
                    c["choices"][0]["text"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(texts, [(1, "y"), (0, "P:x"), (0, ""), (1, "")]);
        assert_eq!(chunks[2]["choices"][0]["finish_reason"], "stop");
        assert_eq!(chunks[3]["choices"][0]["finish_reason"], "length");
        assert_eq!(chunks[4]["choices"], json!([]));
        assert_eq!(chunks[4]["usage"]["prompt_tokens"], 4);
    }
}
