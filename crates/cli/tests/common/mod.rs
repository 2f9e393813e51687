//! The fault suite's harness: the real `vlm serve` binary (built by cargo for
//! these tests) on a free loopback port with the default model, and small
//! HTTP helpers around it.
#![allow(dead_code)] // each test file uses its own part of this

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Loading the default model takes a second or two; a busy 2-core machine
/// building something else can take much longer.
const START_TIMEOUT: Duration = Duration::from_secs(180);

/// A running `vlm serve`. Dropping it kills the process.
pub struct Served {
    child: Child,
    pub port: u16,
    /// `http://127.0.0.1:PORT`
    pub url: String,
    /// The server's log (stderr), printed when a test fails.
    log: Arc<Mutex<String>>,
    /// From spawning to the "listening on" line.
    pub startup: Duration,
}

impl Served {
    /// `vlm serve --model default --port 0` plus `args`.
    pub fn start(args: &[&str]) -> Self {
        Self::start_with(args, &[])
    }

    /// [`Self::start`] with environment variables for the server.
    pub fn start_with(args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_on("default", args, env)
    }

    /// [`Self::start_with`] on `model` (a folder, a .gguf file, `default`).
    pub fn start_on(model: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut all = vec!["serve", "--model", model];
        if !args.contains(&"--port") {
            all.extend(["--port", "0"]);
        }
        all.extend(args);
        let started = Instant::now();
        let mut child = Command::new(env!("CARGO_BIN_EXE_vlm"))
            .args(&all)
            // one request per log line would drown the test output
            .env("VLM_LOG", "warn")
            .env("OPENBLAS_NUM_THREADS", "1")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("vlm starts");
        let log = Arc::new(Mutex::new(String::new()));
        let mut stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        // The one stdout line: "listening on http://127.0.0.1:PORT (model)".
        let (tx, rx) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let first = lines.next().and_then(Result::ok);
            let _ = tx.send(first);
            for _ in lines {} // keep the pipe drained
        });
        let line = match rx.recv_timeout(START_TIMEOUT) {
            Ok(Some(line)) => line,
            other => {
                let _ = child.kill();
                panic!("vlm serve did not start ({other:?}); its log:\n{}", log.lock().unwrap());
            }
        };
        let url = line
            .strip_prefix("listening on ")
            .and_then(|rest| rest.split(' ').next())
            .unwrap_or_else(|| panic!("unexpected first line: {line}"))
            .to_owned();
        let port = url.rsplit(':').next().unwrap().parse().unwrap();
        Self { child, port, url, log, startup: started.elapsed() }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Sends `signal` (SIGTERM, SIGINT) to the server process.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        let sent = unsafe { libc::kill(self.pid(), signal) };
        assert_eq!(sent, 0, "kill({}, {signal}) failed", self.pid());
    }

    /// kill -9, and reap it.
    pub fn kill_hard(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Waits up to `limit` for the process to exit by itself.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// Resident memory (VmRSS), in bytes.
    pub fn rss_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .expect("VmRSS in /proc/PID/status");
        kb * 1024
    }

    /// The server's open file descriptors (sockets included).
    pub fn open_files(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid())).map(|d| d.count()).unwrap_or(0)
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub fn chat_url(&self) -> String {
        format!("{}/v1/chat/completions", self.url)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- vlm serve log ---\n{}", self.log());
        }
    }
}

/// A short, greedy request that always answers.
pub fn hello() -> Value {
    json!({"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 2, "temperature": 0})
}

/// A streamed request that runs until it is stopped: the end-of-text tokens
/// of SmolLM2 (`<|endoftext|>` 0, `<|im_end|>` 2) are banned.
pub fn endless_stream(max_tokens: u32) -> Value {
    json!({
        "messages": [{"role": "user", "content": "Tell me a long story about a lighthouse."}],
        "max_tokens": max_tokens, "temperature": 0, "stream": true,
        "logit_bias": {"0": -100, "2": -100},
    })
}

/// A non-streamed chat completion that must succeed.
pub async fn chat_ok(client: &reqwest::Client, served: &Served, body: &Value) -> Value {
    let response =
        client.post(served.chat_url()).json(body).send().await.expect("the server answers");
    let status = response.status();
    let reply: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["choices"][0]["message"]["role"], "assistant", "{reply}");
    reply
}

/// `running` and `waiting` from `/health`.
pub async fn load(client: &reqwest::Client, served: &Served) -> (u64, u64) {
    let health: Value =
        client.get(format!("{}/health", served.url)).send().await.unwrap().json().await.unwrap();
    (health["running"].as_u64().unwrap(), health["waiting"].as_u64().unwrap())
}

/// Waits (bounded) until the engine has nothing running or waiting.
pub async fn wait_idle(client: &reqwest::Client, served: &Served, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if load(client, served).await == (0, 0) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
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
        loop {
            if let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = self.buffer.drain(..end + 2).collect();
                let text = String::from_utf8(event).expect("SSE is UTF-8");
                let data: Vec<&str> = text
                    .lines()
                    .filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
                    .collect();
                if !data.is_empty() {
                    return Some(data.join("\n"));
                }
                continue;
            }
            match self.response.chunk().await.expect("the stream reads to its end") {
                Some(bytes) => self.buffer.extend_from_slice(&bytes),
                None => return None,
            }
        }
    }
}

/// How a stream read to its end finished.
#[derive(Debug, Default)]
pub struct StreamEnd {
    pub chunks: usize,
    pub finish_reason: Option<String>,
    /// The `code` of an error event.
    pub error: Option<String>,
    /// `[DONE]` came, and last.
    pub done: bool,
}

/// Reads the rest of a stream, checking that nothing follows `[DONE]`.
pub async fn read_to_end(reader: &mut SseReader) -> StreamEnd {
    let mut end = StreamEnd::default();
    while let Some(data) = reader.next().await {
        assert!(!end.done, "an event after [DONE]: {data}");
        if data == "[DONE]" {
            end.done = true;
            continue;
        }
        let event: Value = serde_json::from_str(&data).unwrap_or_else(|e| panic!("{e}: {data}"));
        if let Some(code) = event["error"]["code"].as_str() {
            end.error = Some(code.to_owned());
        } else if let Some(reason) = event["choices"][0]["finish_reason"].as_str() {
            end.finish_reason = Some(reason.to_owned());
        }
        end.chunks += 1;
    }
    end
}
