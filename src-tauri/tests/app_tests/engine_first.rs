//! Send gives the engine the new message's prompt before the message and
//! the reply's row are written (the writes run while the engine reads it;
//! issue 29's first token). A write that fails then still loses nothing and
//! leaves nothing half done: the send fails with the write's error, nothing
//! is stored, the page hears nothing of a reply, and the chat is free.
use std::sync::{Arc, Mutex};

use serde_json::json;
use store::{ChatId, Message, NewMessage};
use tauri::Manager;
use vlm_chat::generation::{Sink, StreamEvent};
use vlm_chat::replies::{post_and_reply, reserve};

use crate::common::{harness, tiny_models};

#[test]
fn a_message_whose_write_fails_after_the_engine_has_it_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    tiny_models(dir.path());
    let h = harness(dir.path());
    h.load_tiny();
    h.settings(|_| {});
    let elsewhere = h.new_chat();
    h.send(elsewhere, "A message in another chat", &[]);
    h.finished_reply(elsewhere);
    let foreign: Vec<Message> =
        serde_json::from_value(h.ok("list_messages", json!({"chatId": elsewhere}))).unwrap();

    // the line above the new message ends in another chat's answer: the draft
    // (and so the prompt) takes it, the write refuses it (MESSAGE_NOT_FOUND)
    let chat = h.new_chat();
    let events: Arc<Mutex<Vec<String>>> = Arc::default();
    let heard = events.clone();
    let sink: Sink = Arc::new(move |e: StreamEvent| heard.lock().unwrap().push(format!("{e:?}")));
    let state = h.state.clone();
    let app = h.webview.app_handle().clone();
    let result = tauri::async_runtime::block_on(async {
        let turn = reserve(&state, ChatId(chat)).unwrap();
        post_and_reply(
            &app,
            state.clone(),
            &turn,
            ChatId(chat),
            foreign,
            NewMessage::user("Hello"),
            sink,
        )
        .await
    });
    let e = result.expect_err("the message cannot go under another chat's answer");
    assert_eq!(e.code, "MESSAGE_NOT_FOUND", "{e:?}");
    assert_eq!(*events.lock().unwrap(), Vec::<String>::new(), "no `started`, no piece");
    assert_eq!(h.ok("list_messages", json!({"chatId": chat})), json!([]), "nothing stored");
    assert_eq!(h.ok("active_replies", json!({})), json!([]), "no reply under way");

    // the chat is free, and answers the next message
    h.send(chat, "Hello again", &[]);
    assert_eq!(h.finished_reply(chat)["status"], "complete");
    let shown = h.ok("list_messages", json!({"chatId": chat}));
    assert_eq!(shown[0]["content"], "Hello again", "{shown}");
    assert_eq!(shown.as_array().unwrap().len(), 2, "{shown}");
}
