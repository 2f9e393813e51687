//! The app's commands through Tauri's real IPC (mock runtime, no window), on
//! a real store in a temp folder: the harness the command tests share.
#![allow(dead_code)] // each test file uses its own part of this

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tauri::ipc::{CallbackFn, InvokeBody};
use tauri::test::{get_ipc_response, mock_builder, mock_context, noop_assets, INVOKE_KEY};
use tauri::webview::InvokeRequest;
use tauri::{App, WebviewWindow, WebviewWindowBuilder};
use vlm_chat::paths::Paths;
use vlm_chat::state::AppState;

pub struct Harness {
    _app: App<tauri::test::MockRuntime>,
    pub webview: WebviewWindow<tauri::test::MockRuntime>,
    pub state: Arc<AppState>,
}

impl Drop for Harness {
    fn drop(&mut self) {
        // the engine thread must not be inside MLX when the test process exits
        self.state.shutdown_blocking();
    }
}

/// The data and models folders under `root`.
pub fn paths(root: &Path) -> Paths {
    Paths { data_dir: root.join("data"), models_dir: root.join("models") }
}

/// The app on the folders under `root`.
pub fn harness(root: &Path) -> Harness {
    harness_with_clock(root, store::Clock::System)
}

/// [`harness`] with the store's timestamps from `clock`.
pub fn harness_with_clock(root: &Path, clock: store::Clock) -> Harness {
    let state =
        tauri::async_runtime::block_on(AppState::open_with_clock(paths(root), clock)).unwrap();
    let app = vlm_chat::configure(mock_builder(), state.clone())
        .build(mock_context(noop_assets()))
        .unwrap();
    let webview = WebviewWindowBuilder::new(&app, "main", Default::default()).build().unwrap();
    Harness { _app: app, webview, state }
}

/// One command through the IPC of `webview` (any thread: the harness itself is not `Sync`).
pub fn invoke(
    webview: &WebviewWindow<tauri::test::MockRuntime>,
    cmd: &str,
    body: InvokeBody,
) -> Result<Value, Value> {
    let request = InvokeRequest {
        cmd: cmd.into(),
        callback: CallbackFn(0),
        error: CallbackFn(1),
        url: "tauri://localhost".parse().unwrap(),
        body,
        headers: Default::default(),
        invoke_key: INVOKE_KEY.to_string(),
    };
    get_ipc_response(webview, request).map(|b| b.deserialize::<Value>().unwrap())
}

impl Harness {
    pub fn call(&self, cmd: &str, args: Value) -> Result<Value, Value> {
        self.call_body(cmd, InvokeBody::Json(args))
    }

    pub fn call_body(&self, cmd: &str, body: InvokeBody) -> Result<Value, Value> {
        invoke(&self.webview, cmd, body)
    }

    pub fn ok(&self, cmd: &str, args: Value) -> Value {
        self.call(cmd, args).unwrap_or_else(|e| panic!("{cmd} failed: {e}"))
    }
}

/// The tiny Llama as `dir:tiny` in the models folder under `root`.
pub fn tiny_models(root: &Path) {
    fixtures::write_tiny_llama(&root.join("models").join("tiny"), &fixtures::TinyLlama::default())
        .unwrap();
}

impl Harness {
    pub fn load_tiny(&self) {
        let status = self.ok("load_model", json!({"id": "dir:tiny"}));
        assert_eq!(status["state"], "ready", "{status}");
        assert_eq!(status["model"]["id"], "dir:tiny");
    }

    /// Short greedy answers, so the tests do not wait on long ones.
    pub fn settings(&self, change: impl FnOnce(&mut Value)) -> Value {
        let mut s = self.ok("get_settings", json!({}))["settings"].clone();
        s["temperature"] = json!(0.0);
        s["max_tokens"] = json!(8);
        change(&mut s);
        self.ok("save_settings", json!({"settings": s}))
    }

    pub fn new_chat(&self) -> i64 {
        self.ok("create_chat", json!({}))["id"].as_i64().unwrap()
    }

    pub fn send(&self, chat: i64, text: &str, attachments: &[&str]) -> Value {
        self.ok(
            "send_message",
            json!({"chatId": chat, "message": {"text": text, "attachments": attachments}, "onEvent": "__CHANNEL__:7"}),
        )
    }

    /// Waits until the chat's last reply is no longer streaming and returns it.
    /// Bounded by a count, not a clock: it fails only if the reply never ends.
    pub fn finished_reply(&self, chat: i64) -> Value {
        for _ in 0..6000 {
            let messages = self.ok("list_messages", json!({"chatId": chat}));
            let last = messages.as_array().unwrap().last().cloned().unwrap();
            let active = self.ok("active_replies", json!({}));
            if last["role"] == "assistant"
                && last["status"] != "streaming"
                && !active.as_array().unwrap().contains(&json!(chat))
            {
                return last;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("the reply in chat {chat} never finished");
    }
}
