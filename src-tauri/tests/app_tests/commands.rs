//! The app's commands through Tauri's real IPC (mock runtime, no window):
//! a real store in a temp folder and a real tiny engine model written by
//! `fixtures::write_tiny_llama`.
use std::path::Path;
use std::time::Duration;

use fixtures::{write_tiny_qwen2_vl, QwenVlVariant, TinyQwenVl};
use serde_json::{json, Value};
use tauri::ipc::InvokeBody;

use crate::common;

use common::{harness, harness_with_clock, invoke, paths, tiny_models, Harness};

/// A 1×1 PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 0x0D, 0x49, 0x48, 0x44, 0x52, 0, 0, 0,
    1, 0, 0, 0, 1, 8, 6, 0, 0, 0, 0x1F, 0x15, 0xC4, 0x89, 0, 0, 0, 0x0D, 0x49, 0x44, 0x41, 0x54,
    0x78, 0x9C, 0x63, 0xF8, 0xCF, 0xC0, 0xF0, 0x1F, 0, 0x05, 0x00, 0x01, 0xFF, 0x89, 0x99, 0x3D,
    0x1D, 0, 0, 0, 0, 0x49, 0x45, 0x4E, 0x44, 0xAE, 0x42, 0x60, 0x82,
];

#[test]
fn chats_are_created_listed_renamed_searched_and_deleted() {
    let dir = tempfile::tempdir().unwrap();
    // activity is ordered by millisecond timestamps: a manual clock makes each step later
    let clock = store::Clock::manual(1_700_000_000_000);
    let h = harness_with_clock(dir.path(), clock.clone());
    let a = h.new_chat();
    clock.advance(3);
    let b = h.new_chat();
    clock.advance(3);
    h.ok("rename_chat", json!({"chatId": a, "title": "Holiday photos"}));
    let listed = h.ok("list_chats", json!({}));
    let ids: Vec<i64> =
        listed.as_array().unwrap().iter().map(|c| c["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, vec![b, a], "a rename does not move a chat to the top");
    let found = h.ok("list_chats", json!({"query": "holiday"}));
    assert_eq!(found.as_array().unwrap().len(), 1);
    assert_eq!(found[0]["title"], "Holiday photos");
    h.ok("delete_chat", json!({"chatId": a}));
    let left = h.ok("list_chats", json!({}));
    assert_eq!(left.as_array().unwrap().len(), 1);
    let err = h.call("rename_chat", json!({"chatId": a, "title": "x"})).unwrap_err();
    assert_eq!(err["code"], "CHAT_NOT_FOUND", "{err}");
}

#[test]
fn sending_without_a_model_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path());
    let chat = h.new_chat();
    let err = h
        .call(
            "send_message",
            json!({"chatId": chat, "message": {"text": "hi"}, "onEvent": "__CHANNEL__:1"}),
        )
        .unwrap_err();
    assert_eq!(err["code"], "NO_MODEL_LOADED", "{err}");
}

#[test]
fn a_reply_streams_into_the_store_with_stats_and_titles_the_chat() {
    let dir = tempfile::tempdir().unwrap();
    tiny_models(dir.path());
    let h = harness(dir.path());
    h.load_tiny();
    h.settings(|_| {});
    let chat = h.new_chat();
    let sent = h.send(chat, "Hello there, tiny model", &[]);
    assert_eq!(sent["user"]["content"], "Hello there, tiny model");
    assert_eq!(sent["reply"]["model"], "tiny");
    let reply = h.finished_reply(chat);
    assert_eq!(reply["status"], "complete", "{reply}");
    assert!(reply["stats"]["completion_tokens"].as_u64().unwrap() >= 1, "{reply}");
    assert!(
        ["stop", "length"].contains(&reply["stats"]["finish_reason"].as_str().unwrap()),
        "{reply}"
    );
    let chats = h.ok("list_chats", json!({}));
    assert_eq!(chats[0]["title"], "Hello there, tiny model");

    // regenerate keeps the first answer as a sibling of the new one
    let first = reply["id"].clone();
    h.ok("regenerate", json!({"chatId": chat, "onEvent": "__CHANNEL__:8"}));
    let again = h.finished_reply(chat);
    assert_eq!(again["status"], "complete", "{again}");
    assert_ne!(again["id"], first);
    assert_eq!(again["siblings"], json!([first, again["id"]]), "{again}");
    let messages = h.ok("list_messages", json!({"chatId": chat}));
    assert_eq!(messages.as_array().unwrap().len(), 2, "the shown branch: {messages}");
    // and the first one can be shown again
    let shown = h.ok("choose_branch", json!({"chatId": chat, "messageId": first}));
    assert_eq!(shown[1]["id"], first, "{shown}");
    assert_eq!(h.ok("list_messages", json!({"chatId": chat}))[1]["id"], first);

    // edit and resend forks beside the message; the old branch stays
    let user_id = messages[0]["id"].clone();
    h.ok(
        "edit_and_resend",
        json!({"chatId": chat, "messageId": user_id, "message": {"text": "Edited question"}, "onEvent": "__CHANNEL__:9"}),
    );
    h.finished_reply(chat);
    let messages = h.ok("list_messages", json!({"chatId": chat}));
    let roles: Vec<&str> =
        messages.as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant"]);
    assert_eq!(messages[0]["content"], "Edited question");
    assert_eq!(messages[0]["siblings"], json!([user_id, messages[0]["id"]]));
    let back = h.ok("choose_branch", json!({"chatId": chat, "messageId": user_id}));
    assert_eq!(back[0]["content"], "Hello there, tiny model");
    assert_eq!(back[1]["id"], first, "the old branch remembers its shown answer");
}

/// A first message makes its chat in the send command (Send is one round
/// trip), with the settings chosen before the chat existed; a message the
/// checks refuse makes none.
#[test]
fn a_first_message_makes_its_chat_with_the_settings_chosen_for_it() {
    let dir = tempfile::tempdir().unwrap();
    tiny_models(dir.path());
    let h = harness(dir.path());
    h.load_tiny();
    h.settings(|_| {});
    let sha = h.call_body("add_attachment_bytes", InvokeBody::Raw(PNG.to_vec())).unwrap()["sha256"]
        .clone();
    let first = |new_chat: Value, message: Value| {
        h.call(
            "send_message",
            json!({"chatId": null, "newChat": new_chat, "message": message, "onEvent": "__CHANNEL__:5"}),
        )
    };
    let refused = [
        (
            json!({}),
            json!({"text": "What is this?", "attachments": [sha]}),
            "MODEL_CANNOT_SEE_IMAGES",
        ),
        (json!({"temperature": -1.0}), json!({"text": "hi"}), "INVALID_SETTINGS"),
        (json!({"model": "dir:elsewhere"}), json!({"text": "hi"}), "CHAT_MODEL_NOT_LOADED"),
        (json!(null), json!({"text": "  "}), "EMPTY_MESSAGE"),
    ];
    for (new_chat, message, code) in refused {
        let e = first(new_chat, message).unwrap_err();
        assert_eq!(e["code"], code, "{e}");
    }
    assert_eq!(h.ok("list_chats", json!({})), json!([]), "a refused first message makes no chat");

    let sent =
        first(json!({"temperature": 0.5}), json!({"text": "Hello from a new chat"})).unwrap();
    let chat = sent["user"]["chat_id"].as_i64().unwrap();
    let chats = h.ok("list_chats", json!({}));
    assert_eq!(chats.as_array().unwrap().len(), 1, "{chats}");
    assert_eq!(chats[0]["id"], chat);
    assert_eq!(chats[0]["settings"], json!({"temperature": 0.5}));
    assert_eq!(chats[0]["title"], "Hello from a new chat");
    assert_eq!(h.finished_reply(chat)["status"], "complete");
}

/// Continue on an answer cut at its token limit extends that answer: the
/// same stored message grows, no "Continue." is sent, no new answer starts.
#[test]
fn continue_extends_the_cut_answer_in_place() {
    let dir = tempfile::tempdir().unwrap();
    tiny_models(dir.path());
    let h = harness(dir.path());
    h.load_tiny();
    h.settings(|s| s["max_tokens"] = json!(3));
    let chat = h.new_chat();
    h.send(chat, "Tell me a long story about the sea", &[]);
    let cut = h.finished_reply(chat);
    assert_eq!(cut["stats"]["finish_reason"], "length", "{cut}");
    let started = h.ok(
        "continue_reply",
        json!({"chatId": chat, "messageId": cut["id"], "onEvent": "__CHANNEL__:10"}),
    );
    assert_eq!(started["reply_id"], cut["id"]);
    let more = h.finished_reply(chat);
    assert_eq!(more["id"], cut["id"], "the same message: {more}");
    assert_eq!(more["status"], "complete", "{more}");
    assert!(more["stats"]["completion_tokens"].as_u64().unwrap() >= 1, "{more}");
    let (before, after) = (cut["content"].as_str().unwrap(), more["content"].as_str().unwrap());
    assert!(after.starts_with(before), "{before:?} → {after:?}");
    // The model went on from its own last token: the prompt is the first
    // one plus the cut answer's text (a token covers a byte at least), with
    // no end of turn and no new turn opened (4 tokens more at least).
    let prompt_tokens = |m: &Value| m["stats"]["prompt_tokens"].as_u64().unwrap();
    assert!(prompt_tokens(&more) <= prompt_tokens(&cut) + before.len() as u64, "{cut} → {more}");
    let messages = h.ok("list_messages", json!({"chatId": chat}));
    let roles: Vec<&str> =
        messages.as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant"], "nothing new was posted: {messages}");
    assert_eq!(messages[1]["siblings"], json!([cut["id"]]), "no new answer beside it");

    // a question is not an answer to continue; another chat's answer is not this chat's
    let question = messages[0]["id"].clone();
    let e = h
        .call(
            "continue_reply",
            json!({"chatId": chat, "messageId": question, "onEvent": "__CHANNEL__:11"}),
        )
        .unwrap_err();
    assert_eq!(e["code"], "NOT_CONTINUABLE", "{e}");
    let other = h.new_chat();
    let e = h
        .call(
            "continue_reply",
            json!({"chatId": other, "messageId": cut["id"], "onEvent": "__CHANNEL__:12"}),
        )
        .unwrap_err();
    assert_eq!(e["code"], "MESSAGE_NOT_FOUND", "{e}");
}

/// Only the shown branch is sent: an answer on a branch forked at the top
/// has a shorter prompt than one at the end of the old, longer branch.
#[test]
fn the_prompt_is_the_branch_answered_and_branches_can_be_deleted() {
    let dir = tempfile::tempdir().unwrap();
    tiny_models(dir.path());
    let h = harness(dir.path());
    h.load_tiny();
    h.settings(|_| {});
    let chat = h.new_chat();
    let first = h.send(chat, "one two three four five six", &[]);
    h.finished_reply(chat);
    h.send(chat, "seven eight nine ten eleven twelve", &[]);
    let long = h.finished_reply(chat);
    let long_prompt = long["stats"]["prompt_tokens"].as_u64().expect("the reply ran");
    h.ok(
        "edit_and_resend",
        json!({"chatId": chat, "messageId": first["user"]["id"], "message": {"text": "one two three four five six"}, "onEvent": "__CHANNEL__:3"}),
    );
    let short = h.finished_reply(chat);
    let short_prompt = short["stats"]["prompt_tokens"].as_u64().expect("the reply ran");
    assert!(
        short_prompt < long_prompt,
        "the fork's prompt ({short_prompt}) has only its own branch (the old one: {long_prompt})"
    );

    // a regenerate of an answer on a hidden branch is refused for a user message
    let err = h
        .call(
            "regenerate",
            json!({"chatId": chat, "messageId": first["user"]["id"], "onEvent": "__CHANNEL__:4"}),
        )
        .unwrap_err();
    assert_eq!(err["code"], "NOT_A_REPLY", "{err}");

    // deleting the new branch shows the old one again, whole
    let shown = h.ok("list_messages", json!({"chatId": chat}));
    let left = h.ok("delete_branch", json!({"chatId": chat, "messageId": shown[0]["id"]}));
    assert_eq!(left.as_array().unwrap().len(), 4, "{left}");
    assert_eq!(left[3]["id"], long["id"]);
}

#[test]
fn stop_ends_a_reply_as_interrupted_and_frees_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    tiny_models(dir.path());
    let h = harness(dir.path());
    h.load_tiny();
    h.settings(|s| s["max_tokens"] = json!(1500));
    let chat = h.new_chat();
    h.send(chat, "Tell me a long story", &[]);
    assert_eq!(h.ok("stop_reply", json!({"chatId": chat})), json!(true));
    let reply = h.finished_reply(chat);
    // the tiny random model may pick end-of-sequence before the stop arrives;
    // without a working stop it would run on to its 1500-token limit
    let stopped = reply["status"] == "interrupted" || reply["stats"]["finish_reason"] == "stop";
    assert!(stopped, "{reply}");
    assert_eq!(h.ok("stop_reply", json!({"chatId": chat})), json!(false), "nothing left to stop");
    let stats = h.ok("engine_stats", json!({}));
    assert_eq!(stats["engine"]["running"], 0, "{stats}");
}

#[test]
fn two_chats_answer_at_once() {
    let dir = tempfile::tempdir().unwrap();
    tiny_models(dir.path());
    let h = harness(dir.path());
    h.load_tiny();
    h.settings(|s| s["max_tokens"] = json!(24));
    let a = h.new_chat();
    let b = h.new_chat();
    h.send(a, "First chat", &[]);
    h.send(b, "Second chat", &[]);
    // a chat answering refuses a second message until it is done
    let busy = h.call(
        "send_message",
        json!({"chatId": a, "message": {"text": "again"}, "onEvent": "__CHANNEL__:3"}),
    );
    let ra = h.finished_reply(a);
    let rb = h.finished_reply(b);
    assert_eq!(ra["status"], "complete", "{ra}");
    assert_eq!(rb["status"], "complete", "{rb}");
    if let Err(e) = busy {
        assert_eq!(e["code"], "CHAT_BUSY", "{e}");
    }
}

#[test]
fn an_image_is_stored_from_a_path_or_from_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path());
    let file = dir.path().join("dot.png");
    std::fs::write(&file, PNG).unwrap();
    let from_path = h.ok("add_attachment_path", json!({"path": file}));
    let from_bytes = h.call_body("add_attachment_bytes", InvokeBody::Raw(PNG.to_vec())).unwrap();
    assert_eq!(from_path["sha256"], from_bytes["sha256"], "same bytes, same attachment");
    assert_eq!(from_path["mime"], "image/png");
    let not_image =
        h.call_body("add_attachment_bytes", InvokeBody::Raw(b"hello".to_vec())).unwrap_err();
    assert_eq!(not_image["code"], "NOT_AN_IMAGE");
    // a PNG cut short starts like a PNG: it is decoded as it is attached and
    // refused then, by path and by bytes, and nothing is stored for it
    let stored = std::fs::read_dir(h.state.store.attachments_dir()).unwrap().count();
    let cut = dir.path().join("cut.png");
    std::fs::write(&cut, &PNG[..PNG.len() / 2]).unwrap();
    let refused = h.call("add_attachment_path", json!({"path": cut})).unwrap_err();
    assert_eq!(refused["code"], "IMAGE_UNREADABLE", "{refused}");
    assert!(
        refused["message"].as_str().unwrap().starts_with("this PNG image cannot be read"),
        "{refused}"
    );
    let refused = h.call_body("add_attachment_bytes", InvokeBody::Raw(broken_png())).unwrap_err();
    assert_eq!(refused["code"], "IMAGE_UNREADABLE", "{refused}");
    assert_eq!(std::fs::read_dir(h.state.store.attachments_dir()).unwrap().count(), stored);
    // without the clipboard plugin (the mock runtime has none) paste says it cannot read the clipboard
    let paste = h.call("paste_clipboard_image", json!({})).unwrap_err();
    assert_eq!(paste["code"], "CLIPBOARD_UNAVAILABLE", "{paste}");
}

/// A PNG header followed by junk: the store takes it (it checks the magic
/// bytes only), the engine cannot decode it.
fn broken_png() -> Vec<u8> {
    let mut bytes = PNG[..16].to_vec();
    bytes.extend_from_slice(&[0x5A; 64]);
    bytes
}

#[test]
fn a_vision_model_sees_an_image_reuses_its_features_and_names_a_bad_one() {
    let dir = tempfile::tempdir().unwrap();
    tiny_models(dir.path());
    write_tiny_qwen2_vl(
        &dir.path().join("models").join("tiny-vl"),
        &TinyQwenVl::new(QwenVlVariant::Qwen2Vl),
    )
    .unwrap();
    let h = harness(dir.path());

    // the gallery says which local models can see images (config.json's vision tower)
    let g = h.ok("list_models", json!({}));
    let local = g["local"].as_array().unwrap();
    let vl = local.iter().find(|m| m["id"] == "dir:tiny-vl").expect("the VL model is found");
    assert_eq!(vl["vision"], true, "{vl}");
    assert_eq!(vl["supported"], true, "{vl}");
    assert_eq!(local.iter().find(|m| m["id"] == "dir:tiny").unwrap()["vision"], false);

    let status = h.ok("load_model", json!({"id": "dir:tiny-vl"}));
    assert_eq!(status["state"], "ready", "{status}");
    assert_eq!(status["model"]["vision"], true, "{status}");
    h.settings(|_| {});
    let image = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../crates/engine/tests/fixtures/images/qwen_parity_320x240.png"),
    )
    .unwrap();
    let sha = h.call_body("add_attachment_bytes", InvokeBody::Raw(image)).unwrap()["sha256"]
        .as_str()
        .unwrap()
        .to_string();
    let chat = h.new_chat();
    h.send(chat, "What is in this picture?", &[&sha]);
    let first = h.finished_reply(chat);
    assert_eq!(first["status"], "complete", "{first}");
    assert_eq!(first["error_code"], Value::Null);
    let vision = h.ok("engine_stats", json!({}))["engine"]["vision_cache"].clone();
    assert_eq!(
        (vision["hits"].as_u64(), vision["misses"].as_u64()),
        (Some(0), Some(1)),
        "{vision}"
    );

    // the image stays in the history: the next turn sends it again, and the
    // engine takes its features from the cache instead of encoding it anew
    h.send(chat, "And what colour is it?", &[]);
    let second = h.finished_reply(chat);
    assert_eq!(second["status"], "complete", "{second}");
    let vision = h.ok("engine_stats", json!({}))["engine"]["vision_cache"].clone();
    assert_eq!(
        (vision["hits"].as_u64(), vision["misses"].as_u64()),
        (Some(1), Some(1)),
        "{vision}"
    );

    // a damaged image is refused as it is attached; one stored before
    // attachments were decoded (by an older version) fails only its reply,
    // with INVALID_IMAGE
    let refused = h.call_body("add_attachment_bytes", InvokeBody::Raw(broken_png())).unwrap_err();
    assert_eq!(refused["code"], "IMAGE_UNREADABLE", "{refused}");
    let bad = serde_json::to_value(
        tauri::async_runtime::block_on(h.state.store.add_attachment(&broken_png())).unwrap(),
    )
    .unwrap();
    let other = h.new_chat();
    h.send(other, "And this one?", &[bad["sha256"].as_str().unwrap()]);
    let failed = h.finished_reply(other);
    assert_eq!(failed["status"], "error", "{failed}");
    assert_eq!(failed["error_code"], "INVALID_IMAGE", "{failed}");
}

#[test]
fn settings_and_the_selected_model_survive_a_restart_and_engine_settings_need_one() {
    let dir = tempfile::tempdir().unwrap();
    tiny_models(dir.path());
    {
        let h = harness(dir.path());
        h.load_tiny();
        let view = h.settings(|s| {
            s["system_prompt"] = json!("Answer in French.");
            s["max_running"] = json!(3);
        });
        assert_eq!(view["restart_needed"], true, "{view}");
        let bad = h.call("save_settings", json!({"settings": {"kv_bits": 3}})).unwrap_err();
        assert_eq!(bad["code"], "INVALID_SETTINGS");
        let view = h.ok("restart_engine", json!({}));
        assert_eq!(view["restart_needed"], false, "{view}");
        assert_eq!(h.ok("engine_status", json!({}))["knobs"]["max_running"], 3);
    }
    let h = harness(dir.path());
    let view = h.ok("get_settings", json!({}));
    assert_eq!(view["settings"]["system_prompt"], "Answer in French.");
    assert_eq!(view["settings"]["max_running"], 3);
    let selected = tauri::async_runtime::block_on(h.state.store.selected_model()).unwrap();
    assert_eq!(selected.as_deref(), Some("dir:tiny"));
}

/// The prefix cache's disk tier in the app: a chat's first answer leaves its
/// KV cache in the data folder, and after a restart the chat's next message
/// says how many tokens it reused from disk.
#[test]
fn a_chat_continued_after_a_restart_reuses_its_cache_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    tiny_models(dir.path());
    let chat = {
        let h = harness(dir.path());
        h.load_tiny();
        h.settings(|_| {});
        let chat = h.new_chat();
        h.send(
            chat,
            "Tell me about the lighthouse keeper and the storm that came in the night.",
            &[],
        );
        let first = h.finished_reply(chat);
        assert!(first["stats"].get("cached_from_disk_tokens").is_none(), "{first}");
        chat
    };
    let folder = paths(dir.path()).prefix_cache();
    let files: Vec<_> = walk(&folder)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    assert_eq!(files.len(), 1, "the first answer's cache is on disk: {files:?}");

    let h = harness(dir.path());
    h.load_tiny();
    h.send(chat, "And then?", &[]);
    let reply = h.finished_reply(chat);
    let from_disk = reply["stats"]["cached_from_disk_tokens"].as_u64().unwrap_or(0);
    assert!(from_disk >= 32, "{reply}");
    assert_eq!(reply["stats"]["cached_prompt_tokens"].as_u64(), Some(from_disk), "{reply}");
}

/// Every file under `dir`, recursively.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            all.extend(walk(&path));
        } else {
            all.push(path);
        }
    }
    all
}

#[test]
fn the_gallery_lists_the_catalog_and_models_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    tiny_models(dir.path());
    std::fs::create_dir_all(dir.path().join("models/odd")).unwrap();
    std::fs::write(dir.path().join("models/odd/config.json"), r#"{"model_type": "mamba"}"#)
        .unwrap();
    let h = harness(dir.path());
    let g = h.ok("list_models", json!({}));
    let local = g["local"].as_array().unwrap();
    let tiny = local.iter().find(|m| m["id"] == "dir:tiny").expect("tiny model found");
    assert_eq!(tiny["supported"], true);
    let odd = local.iter().find(|m| m["id"] == "dir:odd").expect("unsupported model listed");
    assert_eq!(odd["supported"], false);
    let catalog = g["catalog"].as_array().unwrap();
    assert!(catalog.iter().any(|m| m["is_default"] == true));
    // Every catalog family loads now; the marking is the local folder's above.
    let unsupported: Vec<&Value> = catalog.iter().filter(|m| m["supported"] != true).collect();
    assert!(unsupported.is_empty(), "catalog models marked unsupported: {unsupported:?}");
    let err = h.call("load_model", json!({"id": "dir:odd"})).unwrap_err();
    assert_eq!(err["code"], "UNSUPPORTED_MODEL", "{err}");
    let err = h.call("delete_model", json!({"id": "dir:nothing"})).unwrap_err();
    assert_eq!(err["code"], "MODEL_NOT_FOUND");
    let freed = h.ok("delete_model", json!({"id": "dir:odd"}));
    assert!(freed.as_u64().unwrap() > 0);
    assert!(!dir.path().join("models/odd").exists());
}

#[test]
fn a_reply_cut_by_a_crash_comes_back_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    {
        let h = harness(dir.path());
        let chat = h.new_chat();
        let store = h.state.store.clone();
        tauri::async_runtime::block_on(async {
            store.add_message(store::ChatId(chat), &store::NewMessage::user("hi")).await.unwrap();
            let reply = store.begin_reply(store::ChatId(chat), "m").await.unwrap();
            store.update_reply(reply, "partial answ", "").await.unwrap();
        });
    }
    let h = harness(dir.path());
    let chat = h.ok("list_chats", json!({}))[0]["id"].clone();
    let messages = h.ok("list_messages", json!({"chatId": chat}));
    assert_eq!(messages[1]["status"], "interrupted");
    assert_eq!(messages[1]["content"], "partial answ");
}

/// The gallery's badges and the loaded model's status come from the
/// engine's family registry and the model's chat template: a Qwen3 whose
/// template thinks shows Thinking, the plain ChatML llama does not, neither
/// sees images.
#[test]
fn gallery_and_status_show_the_registry_capabilities() {
    let dir = tempfile::tempdir().unwrap();
    tiny_models(dir.path());
    let qwen3 = dir.path().join("models/tiny-qwen3");
    fixtures::write_tiny_family(&qwen3, fixtures::TinyFamily::Qwen3, None, 11).unwrap();
    let config = qwen3.join("tokenizer_config.json");
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    cfg["chat_template"] = "{% for m in messages %}{{ m.content }}{% endfor %}\
        {% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
        .into();
    std::fs::write(&config, cfg.to_string()).unwrap();
    let h = harness(dir.path());
    let g = h.ok("list_models", json!({}));
    let local = g["local"].as_array().unwrap();
    let entry = |id: &str| {
        local.iter().find(|m| m["id"] == id).unwrap_or_else(|| panic!("{id} listed")).clone()
    };
    let (q, l) = (entry("dir:tiny-qwen3"), entry("dir:tiny"));
    assert_eq!(
        (q["supported"].clone(), q["thinking"].clone(), q["vision"].clone()),
        (json!(true), json!(true), json!(false))
    );
    assert_eq!((l["thinking"].clone(), l["vision"].clone()), (json!(false), json!(false)));
    let status = h.ok("load_model", json!({"id": "dir:tiny-qwen3"}));
    assert_eq!(status["model"]["architecture"], "qwen3", "{status}");
    assert_eq!(status["model"]["thinking"], true, "{status}");
    assert_eq!(status["model"]["vision"], false, "{status}");
    let catalog = g["catalog"].as_array().unwrap();
    let moe = catalog
        .iter()
        .find(|m| m["architecture"] == "qwen3_moe")
        .expect("Qwen3-MoE in the catalog");
    assert_eq!(moe["supported"], true);
    let gemma4 =
        catalog.iter().find(|m| m["architecture"] == "gemma4").expect("Gemma 4 in the catalog");
    assert_eq!(gemma4["supported"], true);
    assert_eq!(gemma4["vision"], true, "Gemma 4 sees images");
    let qwen35 =
        catalog.iter().find(|m| m["architecture"] == "qwen3_5").expect("Qwen3.5 in the catalog");
    assert_eq!(qwen35["supported"], true);
    assert_eq!(qwen35["vision"], true, "Qwen3.5 sees images");
}

#[test]
fn an_image_earlier_in_a_chat_does_not_fail_later_turns_on_a_model_that_cannot_see() {
    use engine::batch::Prompt;
    use engine::model::Capabilities;
    use store::{ChatId, NewMessage, ReplyOutcome};
    use vlm_chat::prompt::{build_request, IMAGE_PLACEHOLDER};
    use vlm_chat::settings::Settings;

    let dir = tempfile::tempdir().unwrap();
    tiny_models(dir.path());
    let h = harness(dir.path());
    h.load_tiny();
    h.settings(|_| {});
    let sha = h.call_body("add_attachment_bytes", InvokeBody::Raw(PNG.to_vec())).unwrap()["sha256"]
        .as_str()
        .unwrap()
        .to_string();
    let chat = h.new_chat();

    // a new message with an image is refused before anything is stored
    let refused = h
        .call(
            "send_message",
            json!({"chatId": chat, "message": {"text": "What is this?", "attachments": [sha]}, "onEvent": "__CHANNEL__:4"}),
        )
        .unwrap_err();
    assert_eq!(refused["code"], "MODEL_CANNOT_SEE_IMAGES", "{refused}");
    assert!(
        refused["message"].as_str().unwrap().starts_with("tiny cannot see images"),
        "{refused}"
    );
    assert_eq!(h.ok("list_messages", json!({"chatId": chat})), json!([]));

    // a chat where an image was sent earlier (to a model that saw it)
    let store = h.state.store.clone();
    let messages = tauri::async_runtime::block_on(async {
        store
            .add_message(
                ChatId(chat),
                &NewMessage::user("What is this?").with_attachments([sha.clone()]),
            )
            .await
            .unwrap();
        let reply = store.begin_reply(ChatId(chat), "a vision model").await.unwrap();
        store.finish_reply(reply, "A small dot.", "", None, ReplyOutcome::Complete).await.unwrap();
        store.list_messages(ChatId(chat)).await.unwrap()
    });
    // for a model without vision the image becomes a placeholder in the history
    let text_only = Capabilities::default();
    let request = tauri::async_runtime::block_on(build_request(
        &messages,
        &Settings::default(),
        text_only,
        None,
        &h.state.image_bytes,
    ))
    .unwrap();
    assert!(request.images.is_empty());
    let Prompt::Chat { messages: sent, .. } = &request.prompt else { panic!("a chat prompt") };
    let first = serde_json::to_value(&sent[0]).unwrap();
    assert_eq!(first["content"], json!(format!("{IMAGE_PLACEHOLDER}\nWhat is this?")), "{first}");
    // a model that sees keeps the image
    let sees = Capabilities { vision: true, ..Default::default() };
    let request = tauri::async_runtime::block_on(build_request(
        &messages,
        &Settings::default(),
        sees,
        None,
        &h.state.image_bytes,
    ))
    .unwrap();
    assert_eq!(request.images.len(), 1);

    // and the next turn, text only, is answered instead of failing on the old image
    h.send(chat, "And in words only?", &[]);
    let reply = h.finished_reply(chat);
    assert_eq!(reply["status"], "complete", "{reply}");
}

#[test]
fn the_loaded_model_says_what_it_can_do() {
    let dir = tempfile::tempdir().unwrap();
    tiny_models(dir.path());
    let h = harness(dir.path());
    h.load_tiny();
    let status = h.ok("engine_status", json!({}));
    let engine = h.state.engine().unwrap();
    let can = engine.model_info().capabilities;
    assert_eq!(status["model"]["vision"], json!(can.vision), "{status}");
    assert_eq!(status["model"]["thinking"], json!(can.thinking), "{status}");
    assert_eq!(status["model"]["vision"], false);
}

#[test]
fn the_server_says_why_it_cannot_start_on_a_taken_port() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path());
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    h.settings(|s| {
        s["server_enabled"] = json!(true);
        s["server_port"] = json!(port);
    });
    let status = h.ok("server_status", json!({}));
    assert_eq!(status["running"], false, "{status}");
    let error = status["error"].as_str().unwrap_or_default();
    assert!(error.starts_with(&format!("Port {port} is already in use")), "{status}");
    // a free port: running, and the old error is gone
    drop(taken);
    h.settings(|s| {
        s["server_enabled"] = json!(true);
        s["server_port"] = json!(port);
    });
    let status = h.ok("server_status", json!({}));
    assert_eq!(status["running"], true, "{status}");
    assert_eq!(status["error"], Value::Null, "{status}");
    h.settings(|s| s["server_enabled"] = json!(false));
    assert_eq!(
        h.ok("server_status", json!({})),
        json!({"running": false, "url": null, "error": null})
    );
}

#[test]
fn the_built_in_model_cannot_be_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    std::fs::create_dir_all(&models).unwrap();
    // the catalog's default file, as setup installs it (its content does not matter here)
    let built_in = models.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    std::fs::write(&built_in, b"GGUF not really").unwrap();
    let h = harness(dir.path());
    let err =
        h.call("delete_model", json!({"id": "dir:SmolLM2-135M-Instruct.Q4_1.gguf"})).unwrap_err();
    assert_eq!(err["code"], "BUILT_IN_MODEL", "{err}");
    assert!(built_in.exists());
}

#[test]
fn deleting_a_chat_mid_answer_ends_its_reply() {
    let dir = tempfile::tempdir().unwrap();
    tiny_models(dir.path());
    let h = harness(dir.path());
    h.load_tiny();
    h.settings(|s| s["max_tokens"] = json!(1500));
    let chat = h.new_chat();
    h.send(chat, "Tell me a long story", &[]);
    h.ok("delete_chat", json!({"chatId": chat}));
    assert_eq!(h.ok("active_replies", json!({})), json!([]));
    // the engine frees the row; a new chat answers as usual
    for _ in 0..6000 {
        if h.ok("engine_stats", json!({}))["engine"]["running"] == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(h.ok("engine_stats", json!({}))["engine"]["running"], 0);
    h.settings(|_| {});
    let other = h.new_chat();
    h.send(other, "Hello", &[]);
    assert_eq!(h.finished_reply(other)["status"], "complete");
}

#[test]
fn a_chat_answers_in_the_json_format_it_is_set_to_and_keeps_it() {
    let root = tempfile::tempdir().unwrap();
    tiny_models(root.path());
    let h = harness(root.path());
    h.load_tiny();
    h.settings(|s| s["max_tokens"] = json!(60));
    let chat = h.new_chat();
    // Enums keep a random model's answer short (free strings it would fill
    // to the token limit); the e2e suite asks the real model for named fields.
    let schema = json!({"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}, "country": {"enum": ["France", "Italy"]}},
        "required": ["city", "country"], "additionalProperties": false});
    let format = json!({"kind": "schema", "schema": schema});
    let set = h.ok("set_answer_format", json!({"chatId": chat, "format": format}));
    assert_eq!(set["answer_format"], format);
    // Random weights say anything; in this format they can only say it as JSON.
    h.send(chat, "Where is the Eiffel Tower?", &[]);
    let reply = h.finished_reply(chat);
    assert_eq!(reply["status"], "complete", "{reply}");
    assert_eq!(reply["stats"]["finish_reason"], "stop", "{reply}");
    let answer: Value = serde_json::from_str(reply["content"].as_str().unwrap())
        .unwrap_or_else(|e| panic!("{e}: {reply}"));
    let keys: Vec<&String> = answer.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["city", "country"], "{answer}");
    assert!(["Paris", "Rome"].contains(&answer["city"].as_str().unwrap()), "{answer}");
    let format = json!({"kind": "fields", "names": ["city", "country"]});
    h.ok("set_answer_format", json!({"chatId": chat, "format": format}));

    // Kept with the chat, listed with it; bad formats are refused; None is free text again.
    let listed = h.ok("list_chats", json!({}));
    assert_eq!(listed[0]["answer_format"], format);
    let bad = h
        .call(
            "set_answer_format",
            json!({"chatId": chat, "format": {"kind": "fields", "names": []}}),
        )
        .unwrap_err();
    assert_eq!(bad["code"], "INVALID_ANSWER_FORMAT");
    let cleared = h.ok("set_answer_format", json!({"chatId": chat, "format": null}));
    assert!(cleared["answer_format"].is_null());
}

/// Waits until the bulk job is no longer running; returns it. Bounded by a
/// count, not a clock: it fails only if the run never ends.
fn bulk_job_settled(h: &Harness, job: i64) -> Value {
    for _ in 0..6000 {
        let jobs = h.ok("list_bulk_jobs", json!({}));
        let j = jobs.as_array().unwrap().iter().find(|j| j["id"] == job).cloned().unwrap();
        if j["status"] != "running" {
            return j;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("bulk job {job} never finished");
}

fn row_statuses(h: &Harness, job: i64) -> Vec<String> {
    let rows = h.ok("bulk_job_rows", json!({"jobId": job}));
    rows.as_array().unwrap().iter().map(|r| r["status"].as_str().unwrap().to_string()).collect()
}

#[test]
fn a_bulk_job_runs_exports_and_after_a_crash_resumes_only_its_unanswered_rows() {
    let dir = tempfile::tempdir().unwrap();
    tiny_models(dir.path());
    write_tiny_qwen2_vl(
        &dir.path().join("models").join("tiny-vl"),
        &TinyQwenVl::new(QwenVlVariant::Qwen2Vl),
    )
    .unwrap();
    let photos = dir.path().join("photos");
    std::fs::create_dir(&photos).unwrap();
    let fixtures =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/engine/tests/fixtures/images");
    for name in ["pre_photo.jpg", "pre_gray.jpg", "qwen_parity_182x126.png", "pre_lossy.webp"] {
        std::fs::copy(fixtures.join(name), photos.join(name)).unwrap();
    }
    std::fs::write(photos.join("z_notes.png"), "not a picture").unwrap();

    let h = harness(dir.path());
    // a model that cannot see is refused before anything runs
    h.load_tiny();
    let job = h.ok(
        "create_bulk_job",
        json!({"prompt": "What is this?", "format": null, "maxTokens": 4, "paths": [photos]}),
    );
    let id = job["id"].as_i64().unwrap();
    assert_eq!(
        (job["total"].as_u64(), job["failed"].as_u64(), job["status"].as_str()),
        (Some(5), Some(1), Some("ready"))
    );
    let refused = h
        .call(
            "run_bulk_job",
            json!({"jobId": id, "pass": "unfinished", "onEvent": "__CHANNEL__:9"}),
        )
        .unwrap_err();
    assert_eq!(refused["code"], "MODEL_CANNOT_SEE_IMAGES", "{refused}");

    assert_eq!(h.ok("load_model", json!({"id": "dir:tiny-vl"}))["state"], "ready");
    h.ok("run_bulk_job", json!({"jobId": id, "pass": "unfinished", "onEvent": "__CHANNEL__:9"}));
    let finished = bulk_job_settled(&h, id);
    assert_eq!(
        (finished["status"].as_str(), finished["done"].as_u64()),
        (Some("finished"), Some(4)),
        "{finished}"
    );
    assert_eq!(row_statuses(&h, id), ["done", "done", "done", "done", "failed"]);
    let rows = h.ok("bulk_job_rows", json!({"jobId": id}));
    assert_eq!(rows[4]["error_code"], "NOT_AN_IMAGE", "{}", rows[4]);
    assert_eq!(rows[0]["generated_tokens"], 4, "{}", rows[0]);

    // the export reads back as the table
    let path = h.ok("export_bulk_job", json!({"jobId": id, "format": "csv"}));
    let path = Path::new(path.as_str().unwrap());
    assert!(path.starts_with(dir.path().join("data").join("exports")), "{}", path.display());
    let exported = bulk::export::read_file(path).unwrap();
    assert_eq!(
        exported.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
        [
            "pre_gray.jpg",
            "pre_lossy.webp",
            "pre_photo.jpg",
            "qwen_parity_182x126.png",
            "z_notes.png"
        ]
    );
    assert_eq!(exported[0].answer, rows[0]["answer"].as_str().unwrap());

    // A crash while two rows were being answered: the job was running, they were pending.
    let store = h.state.store.clone();
    tauri::async_runtime::block_on(async {
        let job = store::BulkJobId(id);
        for position in [1, 2] {
            store.save_bulk_row(job, position, &store::BulkRowResult::pending()).await.unwrap();
        }
        store.set_bulk_job_status(job, store::BulkJobStatus::Running, None).await.unwrap();
    });
    let kept = h.ok("bulk_job_rows", json!({"jobId": id}))[0].clone();
    drop(h);

    let h = harness(dir.path());
    let jobs = h.ok("list_bulk_jobs", json!({}));
    assert_eq!(jobs[0]["status"], "interrupted", "{jobs}");
    assert_eq!(
        h.ok("bulk_job_rows", json!({"jobId": id}))[0],
        kept,
        "done rows survive the restart"
    );
    assert_eq!(h.ok("load_model", json!({"id": "dir:tiny-vl"}))["state"], "ready");
    h.ok("run_bulk_job", json!({"jobId": id, "pass": "unfinished", "onEvent": "__CHANNEL__:9"}));
    assert_eq!(bulk_job_settled(&h, id)["status"], "finished");
    assert_eq!(row_statuses(&h, id), ["done", "done", "done", "done", "failed"]);
    // the fresh engine encoded exactly the two images that were pending
    let vision = h.ok("engine_stats", json!({}))["engine"]["vision_cache"].clone();
    assert_eq!(
        (vision["hits"].as_u64(), vision["misses"].as_u64()),
        (Some(0), Some(2)),
        "{vision}"
    );
    assert_eq!(
        h.ok("bulk_job_rows", json!({"jobId": id}))[0],
        kept,
        "a resume leaves done rows alone"
    );

    // retry-failed has nothing to run for a file that was never an image
    h.ok("run_bulk_job", json!({"jobId": id, "pass": "failed", "onEvent": "__CHANNEL__:9"}));
    assert_eq!(bulk_job_settled(&h, id)["status"], "finished");
    assert_eq!(row_statuses(&h, id)[4], "failed");
    h.ok("delete_bulk_job", json!({"jobId": id}));
    assert_eq!(h.ok("list_bulk_jobs", json!({})), json!([]));
}

#[test]
fn a_running_bulk_job_cancels_at_once_and_cannot_be_deleted_while_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_qwen2_vl(
        &dir.path().join("models").join("tiny-vl"),
        &TinyQwenVl::new(QwenVlVariant::Qwen2Vl),
    )
    .unwrap();
    let fixtures =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/engine/tests/fixtures/images");
    let images: Vec<_> = ["pre_photo.jpg", "pre_gray.jpg", "qwen_parity_182x126.png"]
        .iter()
        .map(|n| fixtures.join(n))
        .collect();
    let h = harness(dir.path());
    assert_eq!(h.ok("load_model", json!({"id": "dir:tiny-vl"}))["state"], "ready");
    // long answers: the run is still going when the cancel arrives
    let job = h.ok("create_bulk_job", json!({"prompt": "Describe it at length.", "format": null, "maxTokens": 4000, "paths": images}));
    let id = job["id"].as_i64().unwrap();
    assert_eq!(
        h.ok(
            "run_bulk_job",
            json!({"jobId": id, "pass": "unfinished", "onEvent": "__CHANNEL__:9"})
        )["status"],
        "running"
    );
    let again = h
        .call(
            "run_bulk_job",
            json!({"jobId": id, "pass": "unfinished", "onEvent": "__CHANNEL__:9"}),
        )
        .unwrap_err();
    assert_eq!(again["code"], "BULK_JOB_RUNNING");
    assert_eq!(
        h.call("delete_bulk_job", json!({"jobId": id})).unwrap_err()["code"],
        "BULK_JOB_RUNNING"
    );
    assert_eq!(h.ok("cancel_bulk_job", json!({"jobId": id})), true);
    assert_eq!(bulk_job_settled(&h, id)["status"], "cancelled");
    let statuses = row_statuses(&h, id);
    // (a random tiny model may end an answer early: that row is done, not cancelled)
    assert!(
        statuses.iter().all(|s| s == "cancelled" || s == "pending" || s == "done"),
        "{statuses:?}"
    );
    assert!(
        statuses.iter().any(|s| s != "done"),
        "the cancel came while answers were under way: {statuses:?}"
    );
    assert_eq!(h.ok("cancel_bulk_job", json!({"jobId": id})), false, "nothing runs any more");
    h.ok("delete_bulk_job", json!({"jobId": id}));
}

/// A chat's own settings reach its replies (its system prompt lengthens the
/// prompt, its answer length caps the reply), a chat set to another model
/// is refused before anything is stored, and a preset starts a chat with
/// its settings and answer format.
#[test]
fn a_chat_answers_with_its_own_settings_and_presets_start_chats() {
    let dir = tempfile::tempdir().unwrap();
    tiny_models(dir.path());
    let h = harness(dir.path());
    h.load_tiny();
    h.settings(|_| {});
    let plain = h.new_chat();
    h.send(plain, "Hello", &[]);
    let plain_reply = h.finished_reply(plain);

    let own = h.new_chat();
    let settings = json!({"system_prompt": "You are a careful assistant who always answers in French.", "max_tokens": 2});
    let chat = h.ok("set_chat_settings", json!({"chatId": own, "settings": settings}));
    assert_eq!(chat["settings"], settings);
    h.send(own, "Hello", &[]);
    let own_reply = h.finished_reply(own);
    let tokens = |r: &Value| r["stats"]["prompt_tokens"].as_u64().expect("the reply ran");
    assert!(
        tokens(&own_reply) > tokens(&plain_reply),
        "the chat's system prompt was sent: {own_reply}"
    );
    assert!(own_reply["stats"]["completion_tokens"].as_u64().unwrap() <= 2, "{own_reply}");

    let err = h
        .call("set_chat_settings", json!({"chatId": own, "settings": {"temperature": 9.0}}))
        .unwrap_err();
    assert_eq!(err["code"], "INVALID_SETTINGS", "{err}");

    // a chat set to a model that is not loaded: refused, and the message is not stored
    h.ok("set_chat_settings", json!({"chatId": own, "settings": {"model": "dir:elsewhere"}}));
    let before = h.ok("list_messages", json!({"chatId": own})).as_array().unwrap().len();
    let err = h
        .call(
            "send_message",
            json!({"chatId": own, "message": {"text": "again"}, "onEvent": "__CHANNEL__:2"}),
        )
        .unwrap_err();
    assert_eq!(err["code"], "CHAT_MODEL_NOT_LOADED", "{err}");
    assert_eq!(h.ok("list_messages", json!({"chatId": own})).as_array().unwrap().len(), before);
    h.ok("set_chat_settings", json!({"chatId": own, "settings": {"model": "dir:tiny"}}));
    h.send(own, "again", &[]);
    h.finished_reply(own);

    let preset = h.ok(
        "save_preset",
        json!({"name": "Terse JSON", "settings": {"temperature": 0.0, "thinking": false}, "answerFormat": {"kind": "json"}}),
    );
    assert_eq!(h.ok("list_presets", json!({})).as_array().unwrap().len(), 1);
    let started = h.ok("create_chat", json!({"presetId": preset["id"]}));
    assert_eq!(started["settings"], json!({"temperature": 0.0, "thinking": false}));
    assert_eq!(started["answer_format"], json!({"kind": "json"}));
    let err = h.call("create_chat", json!({"presetId": 999})).unwrap_err();
    assert_eq!(err["code"], "INVALID_INPUT", "{err}");
    assert!(h.ok("delete_preset", json!({"id": preset["id"]})).as_bool().unwrap());
}

/// Turns of about 60 bytes (the tiny model's byte-level tokens) until a
/// context of 200 tokens cannot hold the chat.
const LONG_TURN: &str = "Tell me more about the weather in the mountains this week, please";

/// Context policies on a context of 200 tokens: `stop` fails with
/// CONTEXT_LENGTH_EXCEEDED (today's behaviour), a rolling window answers by
/// leaving out the oldest exchange and says so on the reply, and truncating
/// the middle keeps the first exchange.
#[test]
fn a_chat_that_outgrows_the_context_stops_or_leaves_out_older_messages_as_set() {
    let dir = tempfile::tempdir().unwrap();
    tiny_models(dir.path());
    let h = harness(dir.path());
    h.settings(|s| s["max_context"] = json!(200));
    h.load_tiny();
    assert_eq!(h.ok("engine_status", json!({}))["knobs"]["max_context"], 200);

    let chat = h.new_chat();
    let mut failed = None;
    for _ in 0..6 {
        h.send(chat, LONG_TURN, &[]);
        let reply = h.finished_reply(chat);
        if reply["status"] == "error" {
            failed = Some(reply);
            break;
        }
        assert_eq!(
            reply["stats"].get("left_out_messages"),
            None,
            "stop leaves nothing out: {reply}"
        );
    }
    let failed = failed.expect("the chat outgrew a context of 200 tokens");
    assert_eq!(failed["error_code"], "CONTEXT_LENGTH_EXCEEDED", "{failed}");

    // the same question under a rolling window: answered, older messages left out
    h.ok(
        "set_chat_settings",
        json!({"chatId": chat, "settings": {"context_policy": "rolling_window"}}),
    );
    h.ok("regenerate", json!({"chatId": chat, "onEvent": "__CHANNEL__:5"}));
    let answered = h.finished_reply(chat);
    assert_eq!(answered["status"], "complete", "{answered}");
    let left_out =
        answered["stats"]["left_out_messages"].as_u64().expect("the reply says what was left out");
    assert!(left_out >= 2 && left_out.is_multiple_of(2), "whole exchanges: {answered}");
    assert!(answered["stats"]["prompt_tokens"].as_u64().unwrap() < 200, "{answered}");
    // the failed answer is kept beside it
    assert_eq!(answered["siblings"].as_array().unwrap().len(), 2);

    // truncating the middle: every turn answers, the later ones leaving out the middle
    let middle = h.new_chat();
    h.ok(
        "set_chat_settings",
        json!({"chatId": middle, "settings": {"context_policy": "truncate_middle"}}),
    );
    let mut most = 0;
    for _ in 0..4 {
        h.send(middle, LONG_TURN, &[]);
        let reply = h.finished_reply(middle);
        assert_eq!(reply["status"], "complete", "{reply}");
        most = most.max(reply["stats"]["left_out_messages"].as_u64().unwrap_or(0));
    }
    assert!(most >= 2, "the later turns left out the middle");
}

/// One message as (parent's index, role, content, images, status).
type MessageShape = (Option<usize>, String, String, Vec<String>, String);

/// A chat's tree as its messages' shapes, by position: the same for two
/// chats whatever their ids.
fn tree_shape(h: &Harness, chat: i64) -> Vec<MessageShape> {
    let all = tauri::async_runtime::block_on(h.state.store.list_all_messages(store::ChatId(chat)))
        .unwrap();
    let index = |id: store::MessageId| all.iter().position(|m| m.id == id);
    all.iter()
        .map(|m| {
            (
                m.parent_id.and_then(index),
                format!("{:?}", m.role),
                m.content.clone(),
                m.attachments.iter().map(|a| a.sha256.clone()).collect(),
                format!("{:?}", m.status),
            )
        })
        .collect()
}

/// Export → import gives the same tree (every branch), the same shown
/// branch, the same contents and images; the Markdown reads the shown
/// branch; a corrupt file, a changed image, an image that is a FIFO or a
/// link, or settings the app would refuse are refused at once and add
/// nothing — no chat, no image row, no image file — and a good import works after.
#[test]
fn a_chat_exports_to_markdown_and_json_and_imports_back_the_same() {
    use store::{NewMessage, ReplyOutcome};
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path());
    let store = h.state.store.clone();
    let chat = tauri::async_runtime::block_on(async {
        let chat = store.create_chat().await.unwrap().id;
        store.set_chat_settings(chat, Some(&json!({"temperature": 0.1}))).await.unwrap();
        let image = store.add_attachment(PNG).await.unwrap();
        let q = store
            .add_message(chat, &NewMessage::user("What is this?").with_attachments([image.sha256]))
            .await
            .unwrap();
        for (text, outcome) in [
            ("A dot.", ReplyOutcome::Complete),
            ("", ReplyOutcome::Failed { code: "MLX_ERROR".into(), message: "boom".into() }),
        ] {
            let r = store.begin_reply_under(chat, q.id, "tiny").await.unwrap();
            store.finish_reply(r, text, "thinking it over", None, outcome).await.unwrap();
        }
        let first = store.list_all_messages(chat).await.unwrap()[1].id;
        store.choose_message(chat, first).await.unwrap();
        store.add_message(chat, &NewMessage::user("Which colour?")).await.unwrap();
        let r = store.begin_reply(chat, "tiny").await.unwrap();
        store.finish_reply(r, "Black.", "", None, ReplyOutcome::Complete).await.unwrap();
        chat.0
    });
    let shown_before: Vec<String> = h
        .ok("list_messages", json!({"chatId": chat}))
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect();

    let exported = h.ok("export_chat", json!({"chatId": chat}));
    let json_path = std::path::PathBuf::from(exported["json"].as_str().unwrap());
    let markdown = std::fs::read_to_string(exported["markdown"].as_str().unwrap()).unwrap();
    assert!(markdown.contains("## You\n\n![image](images/"), "{markdown}");
    assert!(
        markdown.contains("A dot.")
            && markdown.contains("Black.")
            && markdown.contains("<summary>Thinking</summary>"),
        "{markdown}"
    );
    assert!(!markdown.contains("boom"), "the hidden failed branch is not in the Markdown");
    let folder = json_path.parent().unwrap();
    assert_eq!(std::fs::read_dir(folder.join("images")).unwrap().count(), 1);
    // where the save dialog said: a new folder of the name typed, never over what is there
    let chosen = dir.path().join("Documents").join("Dot chat");
    let saved = h.ok("export_chat", json!({"chatId": chat, "destination": chosen}));
    assert_eq!(std::path::PathBuf::from(saved["folder"].as_str().unwrap()), chosen);
    assert!(chosen.join("chat.json").is_file() && chosen.join("chat.md").is_file());
    assert_eq!(std::fs::read_dir(chosen.join("images")).unwrap().count(), 1);
    let again = h.ok("export_chat", json!({"chatId": chat, "destination": chosen}));
    assert_eq!(
        std::path::PathBuf::from(again["folder"].as_str().unwrap()),
        chosen.with_file_name("Dot chat-2")
    );
    let nowhere =
        h.call("export_chat", json!({"chatId": chat, "destination": "Dot chat"})).unwrap_err();
    assert_eq!(nowhere["code"], "INVALID_INPUT", "{nowhere}");

    let imported = h.ok("import_chat", json!({"path": json_path}));
    let copy = imported["id"].as_i64().unwrap();
    assert_ne!(copy, chat);
    assert_eq!(imported["settings"], json!({"temperature": 0.1}));
    assert_eq!(tree_shape(&h, copy), tree_shape(&h, chat));
    let shown_after: Vec<String> = h
        .ok("list_messages", json!({"chatId": copy}))
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(shown_after, shown_before);
    // the imported chat's images are the app's own: deleting the original keeps them
    h.ok("delete_chat", json!({"chatId": chat}));
    let first = &h.ok("list_messages", json!({"chatId": copy}))[0];
    assert!(std::path::Path::new(first["attachments"][0]["path"].as_str().unwrap()).is_file());

    let chats = || h.ok("list_chats", json!({})).as_array().unwrap().len();
    let count = chats();
    let stored_files = || std::fs::read_dir(dir.path().join("data/attachments")).unwrap().count();
    let files_before = stored_files();
    let refused = |path: &std::path::Path, says: &str| {
        let started = std::time::Instant::now();
        let err = h.call("import_chat", json!({"path": path})).unwrap_err();
        assert_eq!(err["code"], "INVALID_CHAT_FILE", "{says}: {err}");
        assert!(err["message"].as_str().unwrap().contains(says), "{says}: {err}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "{says}: refused, not waited on"
        );
    };
    let mkfifo = |path: &std::path::Path| {
        assert!(std::process::Command::new("mkfifo").arg(path).status().unwrap().success());
    };
    // a corrupt file
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"format\": \"vlm-chat\", \"version\": 1, \"title\": ").unwrap();
    refused(&bad, "not a chat file");
    // a chat file that is a FIFO: refused at once, never read
    let fifo_json = dir.path().join("fifo.json");
    mkfifo(&fifo_json);
    refused(&fifo_json, "FIFO");
    // settings or an answer format the app would refuse, named
    let good_text = std::fs::read_to_string(&json_path).unwrap();
    let mut file: Value = serde_json::from_str(&good_text).unwrap();
    for (field, value, says) in [
        ("settings", json!({"temprature": 0.5}), "temprature"),
        ("settings", json!({"temperature": 99}), "temperature must be between 0 and 5"),
        (
            "answer_format",
            json!({"kind": "fields", "names": []}),
            "its answer format: Name at least one field",
        ),
        ("answer_format", json!({"kind": "yaml"}), "its answer format"),
    ] {
        let mut wrong = file.clone();
        wrong[field] = value;
        std::fs::write(&json_path, wrong.to_string()).unwrap();
        refused(&json_path, says);
    }
    std::fs::write(&json_path, &good_text).unwrap();
    // an image that is not the one the file names: not even the changed image is stored
    let image = std::fs::read_dir(folder.join("images")).unwrap().next().unwrap().unwrap().path();
    let original = std::fs::read(&image).unwrap();
    let changed = b"\x89PNG\r\n\x1a\n another picture";
    std::fs::write(&image, changed).unwrap();
    refused(&json_path, "changed");
    let changed_sha = store::attachment_sha256(changed).unwrap();
    assert!(
        !tauri::async_runtime::block_on(store.has_attachment(&changed_sha)).unwrap(),
        "the changed image was stored"
    );
    // an image that is a FIFO, or a link (to a file outside the folder)
    std::fs::remove_file(&image).unwrap();
    mkfifo(&image);
    refused(&json_path, "FIFO");
    std::fs::remove_file(&image).unwrap();
    let outside = dir.path().join("outside.png");
    std::fs::write(&outside, &original).unwrap();
    std::os::unix::fs::symlink(&outside, &image).unwrap();
    refused(&json_path, "symbolic link");
    std::fs::remove_file(&image).unwrap();
    std::fs::write(&image, &original).unwrap();
    assert_eq!(stored_files(), files_before, "no image file was left by a refused import");
    // a file naming an image outside its folder
    file["messages"][0]["images"][0]["file"] = json!("../../data/chats.db");
    std::fs::write(&json_path, file.to_string()).unwrap();
    let err = h.call("import_chat", json!({"path": json_path})).unwrap_err();
    assert_eq!(err["code"], "INVALID_CHAT_FILE", "{err}");
    // a parent that does not come first
    file["messages"][0]["images"] = json!([]);
    file["messages"][0]["parent_id"] = json!(123456);
    std::fs::write(&json_path, file.to_string()).unwrap();
    let err = h.call("import_chat", json!({"path": json_path})).unwrap_err();
    assert_eq!(err["code"], "INVALID_CHAT_FILE", "{err}");
    assert_eq!(chats(), count, "nothing was added by the bad files");
    assert_eq!(stored_files(), files_before);
    // and the good file still imports
    std::fs::write(&json_path, &good_text).unwrap();
    h.ok("import_chat", json!({"path": json_path}));
    assert_eq!(chats(), count + 1);
}

/// Two sends to one chat at the same moment: the busy check and the start of
/// the reply are one step, so exactly one starts and the other is refused
/// (CHAT_BUSY) before it stores its message. Repeated, since it is a race.
#[test]
fn two_quick_sends_to_one_chat_cannot_both_start() {
    let dir = tempfile::tempdir().unwrap();
    tiny_models(dir.path());
    let h = harness(dir.path());
    h.load_tiny();
    h.settings(|_| {});
    for round in 0..12 {
        let chat = h.new_chat();
        let results: Vec<Result<Value, Value>> = std::thread::scope(|s| {
            let sends: Vec<_> = ["first", "second"]
                .into_iter()
                .map(|text| {
                    let webview = h.webview.clone();
                    s.spawn(move || {
                        let args = json!({"chatId": chat, "message": {"text": text}, "onEvent": "__CHANNEL__:6"});
                        invoke(&webview, "send_message", InvokeBody::Json(args))
                    })
                })
                .collect();
            sends.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let started = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(started, 1, "round {round}: {results:?}");
        let refused = results.iter().find_map(|r| r.as_ref().err()).unwrap();
        assert_eq!(refused["code"], "CHAT_BUSY", "{refused}");
        h.finished_reply(chat);
        let users = h.ok("list_messages", json!({"chatId": chat}));
        let users = users.as_array().unwrap().iter().filter(|m| m["role"] == "user").count();
        assert_eq!(users, 1, "round {round}: the refused send stored nothing");
    }
}

/// Every vision family the engine runs, as users get it in the app: the
/// gallery marks the folder as seeing images, it loads, and a chat with an
/// image dropped in gets an answer (one model after another in one app).
#[test]
fn each_vision_family_shows_its_badge_loads_and_answers_an_image() {
    use fixtures::{
        write_tiny_gemma3_vl, write_tiny_gemma4_vl, write_tiny_qwen35_vl, write_tiny_qwen3_vl,
    };
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    write_tiny_qwen35_vl(&models.join("tiny-qwen3_5"), None, 35).unwrap();
    write_tiny_qwen3_vl(&models.join("tiny-qwen3_vl"), None, 30).unwrap();
    write_tiny_gemma3_vl(&models.join("tiny-gemma3"), None, 3).unwrap();
    write_tiny_gemma4_vl(&models.join("tiny-gemma4"), None, 4).unwrap();
    let h = harness(dir.path());
    h.settings(|_| {});
    let image = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../crates/engine/tests/fixtures/images/qwen_parity_320x240.png"),
    )
    .unwrap();
    let sha = h.call_body("add_attachment_bytes", InvokeBody::Raw(image)).unwrap()["sha256"]
        .as_str()
        .unwrap()
        .to_string();
    let gallery = h.ok("list_models", json!({}));
    for (folder, architecture) in [
        ("tiny-qwen3_5", "qwen3_5"),
        ("tiny-qwen3_vl", "qwen3_vl"),
        ("tiny-gemma3", "gemma3"),
        ("tiny-gemma4", "gemma4"),
    ] {
        let id = format!("dir:{folder}");
        let entry = gallery["local"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == id.as_str())
            .expect("found");
        assert_eq!(
            (entry["vision"].as_bool(), entry["supported"].as_bool()),
            (Some(true), Some(true)),
            "{entry}"
        );
        let status = h.ok("load_model", json!({"id": id}));
        assert_eq!(status["state"], "ready", "{status}");
        assert_eq!(status["model"]["architecture"], architecture, "{status}");
        assert_eq!(status["model"]["vision"], true, "{status}");
        let chat = h.new_chat();
        h.send(chat, "What is in this picture?", &[&sha]);
        let reply = h.finished_reply(chat);
        assert_eq!(reply["status"], "complete", "{architecture}: {reply}");
        assert!(
            !reply["content"].as_str().unwrap_or_default().is_empty(),
            "{architecture}: {reply}"
        );
        // The same question without the image: the image's tokens were in the prompt.
        let text_only = h.new_chat();
        h.send(text_only, "What is in this picture?", &[]);
        let plain = h.finished_reply(text_only);
        let tokens = |m: &Value| m["stats"]["prompt_tokens"].as_u64().unwrap_or(0);
        assert!(
            tokens(&reply) >= tokens(&plain) + 4,
            "{architecture}: {} vs {} prompt tokens",
            tokens(&reply),
            tokens(&plain)
        );
    }
}

#[test]
fn a_model_folder_from_anywhere_is_checked_added_kept_after_a_restart_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = dir.path().join("my models/tiny llama");
    fixtures::write_tiny_llama(&elsewhere, &fixtures::TinyLlama::default()).unwrap();
    let id = format!("file:{}", elsewhere.display());
    {
        let h = harness(dir.path());
        // dropped paths: the folder goes to the models flow, an image to the chat
        let image = dir.path().join("cat.png");
        std::fs::write(&image, PNG).unwrap();
        let candidates = h.ok("model_candidates", json!({"paths": [image, elsewhere]}));
        assert_eq!(candidates, json!([elsewhere]));

        assert_eq!(h.ok("add_model", json!({"path": elsewhere})), json!(id));
        // twice is once
        assert_eq!(h.ok("add_model", json!({"path": elsewhere})), json!(id));
        let status = h.ok("load_model", json!({"id": id}));
        assert_eq!(
            (status["state"].clone(), status["model"]["name"].clone()),
            (json!("ready"), json!("tiny llama"))
        );

        // not a model: what is missing is named, nothing is added
        let empty = dir.path().join("holiday photos");
        std::fs::create_dir_all(&empty).unwrap();
        let err = h.call("add_model", json!({"path": empty})).unwrap_err();
        assert_eq!(err["code"], "NOT_A_MODEL", "{err}");
        assert!(
            err["message"]
                .as_str()
                .unwrap()
                .contains("holiday photos is not a model folder: it has no config.json"),
            "{err}"
        );
        // an architecture the engine's registry does not run
        let mamba = dir.path().join("mamba");
        std::fs::create_dir_all(&mamba).unwrap();
        std::fs::write(mamba.join("config.json"), r#"{"model_type": "mamba"}"#).unwrap();
        std::fs::write(mamba.join("model.safetensors"), b"").unwrap();
        std::fs::write(mamba.join("tokenizer.json"), b"{}").unwrap();
        let err = h.call("add_model", json!({"path": mamba})).unwrap_err();
        assert_eq!(err["code"], "UNSUPPORTED_MODEL", "{err}");
        assert!(err["message"].as_str().unwrap().contains("mamba"), "{err}");
        let err = h.call("add_model", json!({"path": dir.path().join("cat.png")})).unwrap_err();
        assert_eq!(err["code"], "NOT_A_MODEL", "{err}");
        let local = h.ok("list_models", json!({}))["local"].clone();
        let added: Vec<&Value> = local
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["location"]["kind"] == "user_file")
            .collect();
        assert_eq!(added.len(), 1, "{local}");
        assert_eq!(
            (added[0]["id"].clone(), added[0]["supported"].clone()),
            (json!(id), json!(true))
        );
    }
    // after a restart it is still there
    let h = harness(dir.path());
    let listed = |h: &Harness| {
        h.ok("list_models", json!({}))["local"].as_array().unwrap().iter().any(|m| m["id"] == id)
    };
    assert!(listed(&h));
    // a folder of the models folder is found anyway: its own id, not a second entry
    tiny_models(dir.path());
    assert_eq!(
        h.ok("add_model", json!({"path": dir.path().join("models/tiny")})),
        json!("dir:tiny")
    );
    // removed from the list, the files stay
    h.ok("remove_added_model", json!({"id": id}));
    assert!(!listed(&h));
    assert!(elsewhere.join("config.json").exists());
    assert_eq!(
        h.call("remove_added_model", json!({"id": id})).unwrap_err()["code"],
        "MODEL_NOT_FOUND"
    );
}
