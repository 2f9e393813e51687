//! Unloading the model after the idle time (Settings), through the app's
//! real IPC and a real engine: the idle check is asked at instants the test
//! steps (no sleeping); the chats stay; the next message, or the local
//! OpenAI server's next request, loads the model again by itself, with its
//! own load settings; a model the user unloaded stays unloaded.
use std::io::{Read, Write};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tauri::Manager;

use crate::common;

use common::{harness, tiny_models, Harness};

impl Harness {
    /// The idle check at `now`; whether it unloaded the model.
    fn idle_tick(&self, now: Instant) -> bool {
        let app = self.webview.app_handle().clone();
        tauri::async_runtime::block_on(vlm_chat::idle::tick(&app, &self.state, now)).unwrap()
    }

    fn status(&self) -> Value {
        self.ok("engine_status", json!({}))
    }
}

const MINUTE: Duration = Duration::from_secs(60);

#[test]
fn an_idle_model_is_unloaded_and_the_next_message_loads_it_again() {
    let dir = tempfile::tempdir().unwrap();
    tiny_models(dir.path());
    let h = harness(dir.path());
    h.settings(|s| s["unload_after_idle_minutes"] = json!(1));
    h.ok(
        "save_model_load_settings",
        json!({"id": "dir:tiny", "settings": {"max_context": 0, "kv_bits": 0, "max_running": 2}}),
    );
    h.load_tiny();
    let chat = h.new_chat();
    h.send(chat, "Hello", &[]);
    assert_eq!(h.finished_reply(chat)["status"], "complete");

    // the reply ended before `start`: idle from then on, at most
    let start = Instant::now();
    assert!(!h.idle_tick(start));
    assert!(!h.idle_tick(start + MINUTE / 2), "half the idle time");
    assert_eq!(h.status()["state"], "ready");
    assert!(h.idle_tick(start + 2 * MINUTE), "well past the idle time");
    let status = h.status();
    assert_eq!(status["state"], "unloaded", "{status}");
    assert_eq!(status["model"], Value::Null);
    assert_eq!(
        status["idle_unloaded"]["id"], "dir:tiny",
        "the UI can say which model sleeps: {status}"
    );
    assert_eq!(h.ok("engine_stats", json!({})), Value::Null, "the engine is gone");
    assert!(!h.idle_tick(start + 3 * MINUTE), "nothing left to unload");

    // the chat is kept, and its next message loads the model again
    assert_eq!(h.ok("list_messages", json!({"chatId": chat})).as_array().unwrap().len(), 2);
    h.send(chat, "Hello again", &[]);
    assert_eq!(h.finished_reply(chat)["status"], "complete");
    let status = h.status();
    assert_eq!(
        (status["state"].clone(), status["model"]["id"].clone()),
        (json!("ready"), json!("dir:tiny")),
        "{status}"
    );
    assert_eq!(status["idle_unloaded"], Value::Null);
    assert_eq!(status["knobs"]["max_running"], 2, "loaded again with its own load settings");
    assert_eq!(h.ok("list_messages", json!({"chatId": chat})).as_array().unwrap().len(), 4);

    // the user's own unload is not undone by a message
    h.ok("unload_model", json!({}));
    assert_eq!(h.status()["idle_unloaded"], Value::Null);
    let err = h
        .call("send_message", json!({"chatId": chat, "message": {"text": "hi", "attachments": []}, "onEvent": "__CHANNEL__:7"}))
        .unwrap_err();
    assert_eq!(err["code"], "NO_MODEL_LOADED", "{err}");
}

#[test]
fn a_reply_under_way_or_the_setting_at_never_keeps_the_model() {
    let dir = tempfile::tempdir().unwrap();
    tiny_models(dir.path());
    let h = harness(dir.path());
    let long_answers = |minutes: u32| {
        move |s: &mut Value| {
            s["unload_after_idle_minutes"] = json!(minutes);
            s["max_tokens"] = json!(2000);
            s["temperature"] = json!(1.0);
        }
    };
    h.settings(long_answers(0));
    h.load_tiny();
    assert!(!h.idle_tick(Instant::now() + 1000 * MINUTE), "0 = never");

    h.settings(long_answers(1));
    let base = Instant::now();
    assert!(!h.idle_tick(base), "loaded less than a minute ago");
    let chat = h.new_chat();
    h.send(chat, "Tell me a long story", &[]);
    // looks ten minutes apart while the reply runs: none may cut it (a look
    // that finds the engine working counts it as active)
    let mut at = base;
    let mut looks = 0;
    while h.ok("active_replies", json!({})).as_array().unwrap().contains(&json!(chat)) {
        at += 10 * MINUTE;
        looks += 1;
        if h.idle_tick(at) {
            break;
        }
        assert!(looks < 100_000, "the reply never ended");
    }
    let reply = h.finished_reply(chat);
    assert_eq!(
        (reply["status"].clone(), reply["error_code"].clone()),
        (json!("complete"), Value::Null),
        "{reply}"
    );
    // once it has ended, the model goes within two looks: the first may
    // still see the last of its work
    if h.status()["state"] == "ready" {
        assert!(
            h.idle_tick(at + 2 * MINUTE) || h.idle_tick(at + 4 * MINUTE),
            "after {looks} looks"
        );
    }
    assert_eq!(h.status()["idle_unloaded"]["id"], "dir:tiny");
}

/// One HTTP request to the local server; the status code and body.
fn post(port: u16, path: &str, body: &Value) -> (u16, Value) {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let body = body.to_string();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status = answer.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let json = answer
        .split("\r\n\r\n")
        .nth(1)
        .and_then(|b| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    (status, json)
}

#[test]
fn a_server_request_loads_the_idle_model_again() {
    let dir = tempfile::tempdir().unwrap();
    tiny_models(dir.path());
    let h = harness(dir.path());
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    h.settings(|s| {
        s["unload_after_idle_minutes"] = json!(5);
        s["server_enabled"] = json!(true);
        s["server_port"] = json!(port);
    });
    assert_eq!(h.ok("server_status", json!({}))["running"], true);
    h.load_tiny();
    let start = Instant::now();
    assert!(!h.idle_tick(start));
    assert!(h.idle_tick(start + 6 * MINUTE));
    assert_eq!(h.status()["state"], "unloaded");

    let request =
        json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0});
    let (code, body) = post(port, "/v1/chat/completions", &request);
    assert_eq!(code, 200, "{body}");
    assert!(body["choices"][0]["message"]["content"].is_string(), "{body}");
    assert_eq!(h.status()["model"]["id"], "dir:tiny");
}
