//! A real server on a random loopback port over a tiny seeded llama, and a
//! few helpers to talk to it over real HTTP.
#![allow(dead_code)] // each test file uses its own part of this

use std::time::{Duration, Instant};

use engine::batch::{Prompt, Request, SchedulerConfig};
use engine::handle::{Completion, EngineConfig, EngineHandle};
use engine::model::{LoadOptions, WeightFormat};
use engine::sample::SamplingParams;
use engine::tokenizer::{ChatMessage, TemplateOptions};
use fixtures::{write_tiny_llama, write_tiny_qwen2_vl, QwenVlVariant, TinyLlama, TinyQwenVl};
use serde_json::Value;
use server::{RunningServer, ServerConfig, ServerState};

/// A ChatML template that opens `<think>` in the prompt unless thinking is
/// switched off, as Qwen3-style templates do.
pub const THINKING_TEMPLATE: &str =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and enable_thinking is false %}\
<think>\n\n</think>\n\n{% else %}<think>\n{% endif %}{% endif %}";

/// A Hermes-style template: tools in the system turn, earlier calls as
/// `<tool_call>` blocks with their arguments printed as JSON, tool results
/// in their own turn.
pub const TOOL_TEMPLATE: &str = "{% if tools %}<|im_start|>system\nTools:{% for t in tools %} {{ t | tojson }}{% endfor %}<|im_end|>\n{% endif %}\
{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.tool_calls is defined %}{% for c in m.tool_calls %}\
<tool_call>{\"name\": \"{{ c.function.name }}\", \"arguments\": {{ c.function.arguments | tojson }}}</tool_call>{% endfor %}\
{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

pub struct Setup {
    pub model: TinyLlama,
    /// Replaces tokenizer_config.json's chat template.
    pub template: Option<&'static str>,
    pub scheduler: SchedulerConfig,
    pub config: ServerConfig,
    /// Start with no model loaded.
    pub no_model: bool,
    /// Serve a tiny Qwen2-VL (a vision model) instead of the tiny llama.
    pub vision: bool,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            model: TinyLlama::default(),
            template: None,
            scheduler: SchedulerConfig::default(),
            config: ServerConfig { port: 0, ..Default::default() },
            no_model: false,
            vision: false,
        }
    }
}

pub struct TestServer {
    pub url: String,
    pub client: reqwest::Client,
    pub state: ServerState,
    /// The engine behind the server (also when `no_model`: loaded, not served).
    pub engine: EngineHandle,
    pub dir: tempfile::TempDir,
    /// Dropping it would stop the server.
    _running: RunningServer,
}

pub async fn start(setup: Setup) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let model_dir = dir.path().join("tiny-llama");
    if setup.vision {
        write_tiny_qwen2_vl(&model_dir, &TinyQwenVl::new(QwenVlVariant::Qwen2Vl)).unwrap();
    } else {
        write_tiny_llama(&model_dir, &setup.model).unwrap();
    }
    if let Some(template) = setup.template {
        let path = model_dir.join("tokenizer_config.json");
        let mut cfg: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        cfg["chat_template"] = template.into();
        std::fs::write(&path, cfg.to_string()).unwrap();
    }
    let config = EngineConfig {
        load: LoadOptions { format: WeightFormat::AsStored },
        scheduler: setup.scheduler,
    };
    let path = model_dir.clone();
    let engine = tokio::task::spawn_blocking(move || EngineHandle::start(&path, config))
        .await
        .unwrap()
        .unwrap();
    let state = if setup.no_model {
        ServerState::empty()
    } else {
        ServerState::with_engine(engine.clone())
    };
    let running = server::serve(setup.config, state.clone()).await.unwrap();
    assert!(running.addr().ip().is_loopback());
    TestServer {
        url: format!("http://{}", running.addr()),
        client: reqwest::Client::new(),
        state,
        engine,
        dir,
        _running: running,
    }
}

impl TestServer {
    pub async fn post(&self, path: &str, body: &Value) -> reqwest::Response {
        self.client.post(format!("{}{path}", self.url)).json(body).send().await.unwrap()
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client.get(format!("{}{path}", self.url)).send().await.unwrap()
    }

    /// A non-streamed chat completion that must succeed.
    pub async fn chat(&self, body: &Value) -> Value {
        let response = self.post("/v1/chat/completions", body).await;
        let status = response.status();
        let json: Value = response.json().await.unwrap();
        assert_eq!(status, 200, "{json}");
        json
    }

    /// Runs a request on the engine directly (the server's reference).
    pub async fn engine_run(&self, request: Request) -> Completion {
        let stream = self.engine.submit(request);
        tokio::task::spawn_blocking(move || stream.collect_blocking()).await.unwrap()
    }

    /// Waits until the engine has nothing running or waiting.
    pub async fn wait_idle(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            let stats = self.engine.stats_async().await.unwrap();
            if stats.running == 0 && stats.waiting == 0 {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    pub async fn running(&self) -> usize {
        self.engine.stats_async().await.unwrap().running
    }
}

/// The engine request that the server should make of a plain user message.
pub fn engine_request(
    messages: Vec<ChatMessage>,
    options: TemplateOptions,
    max_tokens: usize,
    sampling: SamplingParams,
) -> Request {
    let mut r = Request::new(Prompt::Chat { messages, options }).with_max_tokens(max_tokens);
    r.sampling = sampling;
    r
}

/// Greedy with the end-of-sequence token banned (EOS id 2 in the tiny
/// vocabulary), so replies run to `max_tokens`.
pub fn no_eos() -> SamplingParams {
    SamplingParams { logit_bias: [(2, -100.0)].into_iter().collect(), ..Default::default() }
}

/// Reads a server-sent-event body as it arrives.
pub struct SseReader {
    response: reqwest::Response,
    buffer: Vec<u8>,
}

impl SseReader {
    pub fn new(response: reqwest::Response) -> Self {
        Self { response, buffer: Vec::new() }
    }

    /// The next `data:` payload (comments skipped); `None` at the end.
    pub async fn next(&mut self) -> Option<String> {
        self.next_named().await.map(|(_, data)| data)
    }

    /// The next event's name (its `event:` line, if any) and `data:`
    /// payload (comments skipped); `None` at the end.
    pub async fn next_named(&mut self) -> Option<(Option<String>, String)> {
        loop {
            if let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = self.buffer.drain(..end + 2).collect();
                let text = String::from_utf8(event).expect("SSE is UTF-8");
                let field = |name: &str| -> Vec<String> {
                    text.lines()
                        .filter_map(|l| l.strip_prefix(name))
                        .map(|v| v.strip_prefix(' ').unwrap_or(v).to_owned())
                        .collect()
                };
                let data = field("data:");
                if !data.is_empty() {
                    return Some((field("event:").into_iter().next(), data.join("\n")));
                }
                continue;
            }
            match self.response.chunk().await.expect("the stream reads") {
                Some(bytes) => self.buffer.extend_from_slice(&bytes),
                None => {
                    assert!(
                        self.buffer.iter().all(|b| b.is_ascii_whitespace()),
                        "a partial event at the end"
                    );
                    return None;
                }
            }
        }
    }

    /// Every payload to the end.
    pub async fn all(mut self) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(data) = self.next().await {
            out.push(data);
        }
        out
    }
}

/// A streamed reply, put together.
#[derive(Debug, Default)]
pub struct Streamed {
    pub content: String,
    pub reasoning: String,
    pub finish_reason: Option<String>,
    pub usage: Option<Value>,
    pub chunks: Vec<Value>,
    pub done: bool,
}

/// Reads a whole streamed reply, checking the shape of every chunk.
pub async fn read_stream(response: reqwest::Response) -> Streamed {
    assert_eq!(response.status(), 200);
    let content_type = response.headers().get("content-type").unwrap().to_str().unwrap().to_owned();
    assert!(content_type.starts_with("text/event-stream"), "{content_type}");
    let payloads = SseReader::new(response).all().await;
    let mut s = Streamed::default();
    for (i, data) in payloads.iter().enumerate() {
        if data == "[DONE]" {
            assert_eq!(i, payloads.len() - 1, "[DONE] is the last event");
            s.done = true;
            continue;
        }
        let chunk: Value = serde_json::from_str(data).unwrap();
        assert_eq!(chunk["object"], "chat.completion.chunk", "{chunk}");
        assert!(chunk["id"].as_str().unwrap().starts_with("chatcmpl-"));
        assert!(
            s.finish_reason.is_none() || chunk["choices"] == serde_json::json!([]),
            "a chunk after the finish: {chunk}"
        );
        if let Some(choice) = chunk["choices"].get(0) {
            let delta = &choice["delta"];
            if i == 0 {
                assert_eq!(delta["role"], "assistant", "{chunk}");
            } else {
                assert!(delta.get("role").is_none(), "{chunk}");
            }
            s.content.push_str(delta["content"].as_str().unwrap_or(""));
            s.reasoning.push_str(delta["reasoning_content"].as_str().unwrap_or(""));
            if let Some(reason) = choice["finish_reason"].as_str() {
                s.finish_reason = Some(reason.to_owned());
            }
        }
        if chunk.get("usage").is_some_and(|u| !u.is_null()) {
            s.usage = Some(chunk["usage"].clone());
        }
        s.chunks.push(chunk);
    }
    s
}
