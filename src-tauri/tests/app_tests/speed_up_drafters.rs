//! "Speed up replies" with the drafter folders the engine reads, through
//! the app's real IPC: a Gemma 4 assistant and a Qwen3.5 multi-token-
//! prediction head split from its checkpoint (mlx-vlm's drafter folders,
//! written by the engine's own test writers). The gallery lists them as
//! drafters, not chat models; a model's choices offer the ones made for it
//! and name the others with why; a chosen assistant or head drafts at load;
//! a record saved before drafters existed still loads.
use std::path::Path;

use fixtures::{
    split_mtp_head, write_family, write_gemma4_echo_assistant, write_gguf_header, write_mtp_target,
    write_tiny_family, Dims, GgufValue, TinyFamily,
};
use serde_json::{json, Value};

use crate::common::{harness, tiny_models};

/// In the models folder: `dir:tiny` (a llama), `dir:gemma` (a tiny Gemma 4)
/// with `dir:assistant` made for it, `dir:wide-gemma` (a Gemma 4 of hidden
/// size 96), `dir:qwen35` (a Qwen3.5 with its own head), `dir:head` (that
/// head split from it) and `dir:gemma.gguf` (a GGUF header naming Gemma 4).
fn models(root: &Path) {
    tiny_models(root);
    let models = root.join("models");
    write_tiny_family(&models.join("gemma"), TinyFamily::Gemma4, None, 11).unwrap();
    write_gemma4_echo_assistant(&models.join("gemma"), &models.join("assistant"), 5).unwrap();
    let dims = Dims { hidden: 96, ..Dims::tiny(TinyFamily::Gemma4) };
    write_family(&models.join("wide-gemma"), TinyFamily::Gemma4, dims, None, 11).unwrap();
    let scratch = root.join("scratch");
    let qwen = write_mtp_target(&scratch).unwrap();
    std::fs::rename(qwen, models.join("qwen35")).unwrap();
    split_mtp_head(&models.join("qwen35"), &models.join("head")).unwrap();
    let arch = [("general.architecture", GgufValue::Str("gemma4".into()))];
    write_gguf_header(&models.join("gemma.gguf"), 3, &arch).unwrap();
}

fn ids(list: &Value) -> Vec<&str> {
    let mut ids: Vec<&str> =
        list.as_array().unwrap().iter().map(|d| d["id"].as_str().unwrap()).collect();
    ids.sort();
    ids
}

fn reason<'a>(list: &'a Value, id: &str) -> &'a str {
    let found = list.as_array().unwrap().iter().find(|d| d["id"] == id);
    found.and_then(|d| d["reason"].as_str()).unwrap_or_else(|| panic!("{id} in {list}"))
}

fn choices(h: &crate::common::Harness, id: &str) -> Value {
    h.ok("get_model_load_settings", json!({"id": id}))["speed_up_choices"].clone()
}

#[test]
fn drafter_folders_are_offered_to_the_model_they_fit_and_draft_at_load() {
    let dir = tempfile::tempdir().unwrap();
    models(dir.path());
    let h = harness(dir.path());
    h.settings(|s| s["max_tokens"] = json!(12));

    // the gallery: drafters, not chat models that fail to load
    let gallery = h.ok("list_models", json!({}));
    let local = gallery["local"].as_array().unwrap();
    let entry = |id: &str| local.iter().find(|m| m["id"] == id).unwrap_or_else(|| panic!("{id}"));
    assert_eq!(entry("dir:assistant")["drafter"], "assistant", "{gallery}");
    assert_eq!(entry("dir:head")["drafter"], "mtp_head", "{gallery}");
    assert_eq!(entry("dir:gemma")["drafter"], Value::Null, "{gallery}");
    for id in ["dir:assistant", "dir:head"] {
        assert_eq!(entry(id)["supported"], false, "{gallery}");
        let err = h.call("load_model", json!({"id": id})).unwrap_err();
        assert!(err["message"].as_str().unwrap().contains("is a drafter"), "{err}");
    }

    // each is offered to the model it was made for, and only to it
    let gemma = choices(&h, "dir:gemma");
    assert_eq!(ids(&gemma["drafters"]), ["dir:assistant"], "{gemma}");
    assert_eq!(gemma["drafters"][0]["drafter"], "assistant", "{gemma}");
    assert!(reason(&gemma["not_listed"], "dir:head").contains("drafts for Qwen3.5"), "{gemma}");
    let qwen = choices(&h, "dir:qwen35");
    assert_eq!(ids(&qwen["drafters"]), ["dir:head"], "{qwen}");
    assert!(reason(&qwen["not_listed"], "dir:assistant").contains("drafts for Gemma 4"), "{qwen}");
    let wide = choices(&h, "dir:wide-gemma");
    assert_eq!(ids(&wide["drafters"]), Vec::<&str>::new(), "{wide}");
    assert!(reason(&wide["not_listed"], "dir:assistant").contains("hidden size"), "{wide}");
    let llama = choices(&h, "dir:tiny");
    assert_eq!(ids(&llama["drafters"]), Vec::<&str>::new(), "{llama}");
    assert!(reason(&llama["not_listed"], "dir:assistant").contains("Gemma 4"), "{llama}");
    // a drafter is matched to a model folder's config.json, not a GGUF's
    let gguf = choices(&h, "dir:gemma.gguf");
    assert!(reason(&gguf["not_listed"], "dir:assistant").contains(".gguf file"), "{gguf}");

    // what does not fit is refused in the form's words
    let record = |speed_up: Value| json!({"max_context": 0, "kv_bits": 0, "max_running": 2, "speed_up": speed_up});
    for (id, speed_up, words) in [
        ("dir:wide-gemma", json!({"drafter": "dir:assistant"}), "hidden size"),
        ("dir:tiny", json!({"drafter": "dir:head"}), "drafts for Qwen3.5"),
        ("dir:gemma", json!({"drafter": "dir:tiny"}), "not a drafter folder"),
        ("dir:gemma", json!({"drafter": "dir:gone"}), "not a drafter folder"),
        ("dir:gemma", json!({"draft_model": "dir:assistant"}), "choose it as a drafter"),
    ] {
        let err = h
            .call(
                "save_model_load_settings",
                json!({"id": id, "settings": record(speed_up.clone())}),
            )
            .unwrap_err();
        assert_eq!(err["code"], "INVALID_SETTINGS", "{speed_up}: {err}");
        assert!(err["message"].as_str().unwrap().contains(words), "{speed_up}: {err}");
    }

    // the assistant: saved, loaded with the model, drafting
    let chosen = record(json!({"drafter": "dir:assistant"}));
    let view =
        h.ok("save_model_load_settings", json!({"id": "dir:gemma", "settings": chosen.clone()}));
    assert_eq!(view["settings"], chosen, "{view}");
    let status = h.ok("load_model", json!({"id": "dir:gemma"}));
    assert_eq!(status["state"], "ready", "{status}");
    assert_eq!(status["knobs"]["speed_up"], json!({"drafter": "dir:assistant"}), "{status}");
    let chat = h.new_chat();
    h.send(chat, "the cat sat on the mat, the cat sat on the", &[]);
    let reply = h.finished_reply(chat);
    assert_eq!(reply["error_code"], Value::Null, "{reply}");
    let stats = h.ok("engine_stats", json!({}));
    let speculation = &stats["engine"]["speculation"];
    assert!(speculation["status"].as_str().unwrap().contains("assistant"), "{stats}");
    assert!(speculation["verify_passes"].as_u64().unwrap() > 0, "{stats}");
    assert!(speculation["drafted_tokens"].as_u64().unwrap() > 0, "{stats}");

    // the split head: loaded with its Qwen3.5 in place of the model's own
    let chosen = record(json!({"drafter": "dir:head"}));
    h.ok("save_model_load_settings", json!({"id": "dir:qwen35", "settings": chosen}));
    let status = h.ok("load_model", json!({"id": "dir:qwen35"}));
    assert_eq!(status["state"], "ready", "{status}");
    let chat = h.new_chat();
    h.send(chat, "the cat sat on the mat, the cat sat on the", &[]);
    assert_eq!(h.finished_reply(chat)["error_code"], Value::Null);
    let stats = h.ok("engine_stats", json!({}));
    let speculation = &stats["engine"]["speculation"];
    let said = speculation["status"].as_str().unwrap();
    assert!(said.contains("multi-token-prediction head in") && said.contains("head"), "{stats}");
    assert!(speculation["verify_passes"].as_u64().unwrap() > 0, "{stats}");
}

/// A model's record saved before drafters existed (no `speed_up`, or a
/// draft model) reads back and loads as it did.
#[test]
fn a_record_saved_before_drafters_still_loads() {
    let dir = tempfile::tempdir().unwrap();
    models(dir.path());
    let h = harness(dir.path());
    let old = json!({"max_context": 0, "kv_bits": 0, "max_running": 2});
    tauri::async_runtime::block_on(h.state.store.set_setting("model_load:dir:gemma", &old))
        .unwrap();
    let view = h.ok("get_model_load_settings", json!({"id": "dir:gemma"}));
    assert_eq!(view["settings"]["speed_up"], "off", "{view}");
    let status = h.ok("load_model", json!({"id": "dir:gemma"}));
    assert_eq!(status["state"], "ready", "{status}");
}

/// "Add model…" takes a drafter folder from elsewhere (it has no tokenizer
/// of its own) and the gallery lists it as a drafter.
#[test]
fn add_model_takes_a_drafter_folder() {
    let dir = tempfile::tempdir().unwrap();
    models(dir.path());
    let elsewhere = dir.path().join("elsewhere");
    std::fs::rename(dir.path().join("models/assistant"), &elsewhere).unwrap();
    let h = harness(dir.path());
    let id = h.ok("add_model", json!({"path": elsewhere}));
    let gallery = h.ok("list_models", json!({}));
    let added = gallery["local"].as_array().unwrap().iter().find(|m| m["id"] == id).unwrap();
    assert_eq!(added["drafter"], "assistant", "{gallery}");
    assert_eq!(added["error"], Value::Null, "{gallery}");
    assert_eq!(ids(&choices(&h, "dir:gemma")["drafters"]), [id.as_str().unwrap()]);
}
