//! The app's commands through Tauri's real IPC (mock runtime, no window), on
//! a real store in a temp folder: the harness the command tests share.
#![allow(dead_code)] // each test file uses its own part of this

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;
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
    let state = tauri::async_runtime::block_on(AppState::open(paths(root))).unwrap();
    let app = vlm_chat::configure(mock_builder(), state.clone()).build(mock_context(noop_assets())).unwrap();
    let webview = WebviewWindowBuilder::new(&app, "main", Default::default()).build().unwrap();
    Harness { _app: app, webview, state }
}

/// One command through the IPC of `webview` (any thread: the harness itself is not `Sync`).
pub fn invoke(webview: &WebviewWindow<tauri::test::MockRuntime>, cmd: &str, body: InvokeBody) -> Result<Value, Value> {
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
