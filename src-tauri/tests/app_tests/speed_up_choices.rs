//! "Speed up replies" beyond prompt lookup, through the app's real IPC: a
//! model's own MTP heads are offered only when its checkpoint ships `mtp.*`
//! tensors (and the gallery marks it); a draft model only when it tokenizes
//! exactly as the target (recurrent layers or not), the others named with why;
//! a chosen draft loads beside the model and drafts for it; a change of the
//! choice asks for a reload like the other load settings.
use std::path::Path;

use fixtures::{write_family, write_tiny_llama, Dims, TinyFamily, TinyLlama};
use serde_json::{json, Value};

use crate::common;

use common::{harness, tiny_models};

/// Swaps the ids of two byte tokens in a model's tokenizer.json: the same
/// size, another vocabulary.
fn swap_two_ids(dir: &Path) {
    let path = dir.join("tokenizer.json");
    let mut tokenizer: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let vocab = tokenizer["model"]["vocab"].as_object_mut().unwrap();
    let (a, b) = (vocab["a"].clone(), vocab["b"].clone());
    vocab.insert("a".into(), b);
    vocab.insert("b".into(), a);
    std::fs::write(&path, tokenizer.to_string()).unwrap();
}

/// `dir:tiny` (the target), a smaller llama with its tokenizer, the same
/// llama with two ids swapped, and a Qwen3.5 with an MTP head (recurrent
/// layers, the target's vocabulary: it can draft).
fn models(root: &Path) {
    tiny_models(root);
    let models = root.join("models");
    write_tiny_llama(
        &models.join("draft"),
        &TinyLlama { layers: 1, seed: 7, ..TinyLlama::default() },
    )
    .unwrap();
    write_tiny_llama(&models.join("other-vocab"), &TinyLlama::default()).unwrap();
    swap_two_ids(&models.join("other-vocab"));
    let mut dims = Dims::tiny(TinyFamily::Qwen35);
    dims.qwen35.mtp_layers = 1;
    write_family(&models.join("qwen35-mtp"), TinyFamily::Qwen35, dims, None, 3).unwrap();
}

fn ids(list: &Value) -> Vec<String> {
    let mut ids: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_owned())
        .filter(|id| id.starts_with("dir:"))
        .collect();
    ids.sort();
    ids
}

fn reason<'a>(list: &'a Value, id: &str) -> &'a str {
    let found = list.as_array().unwrap().iter().find(|d| d["id"] == id);
    found.and_then(|d| d["reason"].as_str()).unwrap_or_else(|| panic!("{id} in {list}"))
}

#[test]
fn only_what_the_model_can_use_is_offered_and_a_draft_model_drafts() {
    let dir = tempfile::tempdir().unwrap();
    models(dir.path());
    let h = harness(dir.path());
    h.settings(|s| s["max_tokens"] = json!(12));

    let choices =
        h.ok("get_model_load_settings", json!({"id": "dir:tiny"}))["speed_up_choices"].clone();
    assert_eq!(choices["mtp"], false, "{choices}");
    assert_eq!(ids(&choices["draft_models"]), ["dir:draft", "dir:qwen35-mtp"], "{choices}");
    assert_eq!(ids(&choices["not_listed"]), ["dir:other-vocab"], "{choices}");
    assert!(reason(&choices["not_listed"], "dir:other-vocab").contains("other ids"), "{choices}");
    let qwen = h.ok("get_model_load_settings", json!({"id": "dir:qwen35-mtp"}));
    assert_eq!(qwen["speed_up_choices"]["mtp"], true, "{qwen}");

    // the gallery marks the checkpoint with heads, and only it
    let gallery = h.ok("list_models", json!({}));
    let marked: Vec<&str> = gallery["local"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["mtp_heads"] == true)
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(marked, ["dir:qwen35-mtp"], "{gallery}");

    // what is not offered is refused, saying why
    let record = |speed_up: Value| json!({"max_context": 0, "kv_bits": 0, "max_running": 2, "speed_up": speed_up});
    for (speed_up, words) in [
        (json!("mtp"), "has no MTP heads"),
        (json!({"draft_model": "dir:other-vocab"}), "another vocabulary"),
        (json!({"draft_model": "dir:gone"}), "not on disk"),
    ] {
        let err = h
            .call(
                "save_model_load_settings",
                json!({"id": "dir:tiny", "settings": record(speed_up.clone())}),
            )
            .unwrap_err();
        assert_eq!(err["code"], "INVALID_SETTINGS", "{speed_up}: {err}");
        assert!(err["message"].as_str().unwrap().contains(words), "{speed_up}: {err}");
    }

    // a draft with recurrent layers is taken
    let recurrent = record(json!({"draft_model": "dir:qwen35-mtp"}));
    let view =
        h.ok("save_model_load_settings", json!({"id": "dir:tiny", "settings": recurrent.clone()}));
    assert_eq!(view["settings"], recurrent, "{view}");

    // the compatible draft: saved, loaded beside the model, drafting
    let draft = record(json!({"draft_model": "dir:draft"}));
    let view =
        h.ok("save_model_load_settings", json!({"id": "dir:tiny", "settings": draft.clone()}));
    assert_eq!(view["settings"], draft, "{view}");
    h.load_tiny();
    let status = h.ok("engine_status", json!({}));
    assert_eq!(status["knobs"]["speed_up"], json!({"draft_model": "dir:draft"}), "{status}");
    let chat = h.new_chat();
    h.send(chat, "the cat sat on the mat, the cat sat on the", &[]);
    let reply = h.finished_reply(chat);
    assert_eq!(reply["error_code"], Value::Null, "{reply}");
    let stats = h.ok("engine_stats", json!({}));
    let speculation = &stats["engine"]["speculation"];
    assert!(speculation["status"].as_str().unwrap().starts_with("draft model"), "{stats}");
    assert!(speculation["verify_passes"].as_u64().unwrap() > 0, "{stats}");
    // the draft's own prefix cache, for the engine panel: the chat's prompt is kept
    let draft_cache = &speculation["draft_prefix_cache"];
    assert_eq!(draft_cache["misses"], 1, "{stats}");
    assert_eq!(draft_cache["entries"], 1, "{stats}");

    // another choice for the loaded model applies at its next load
    let view = h.ok(
        "save_model_load_settings",
        json!({"id": "dir:tiny", "settings": record(json!("prompt_lookup"))}),
    );
    assert_eq!(view["reload_needed"], true, "{view}");
}

/// Settings apply to every model, so their "Speed up replies" takes off or
/// prompt lookup only (the form offers nothing else). A model's own heads, a
/// draft model or a drafter sent to `save_settings` directly, or a value that
/// is no choice at all, is refused in the app's error shape (INVALID_SETTINGS,
/// the words to act on) and nothing of that save is kept, in memory or in
/// the store; a wrong type elsewhere gets the same shape.
#[test]
fn settings_take_only_a_speed_up_that_suits_every_model() {
    let dir = tempfile::tempdir().unwrap();
    let settings = {
        let h = harness(dir.path());
        let saved = h.settings(|s| s["speed_up"] = json!("prompt_lookup"))["settings"].clone();
        assert_eq!(saved["speed_up"], "prompt_lookup", "{saved}");
        // a model's choice says where it belongs; no choice says which there are
        let one_model = "fits one model";
        let where_to = "choose it in that model's Load settings on the Models page";
        let choices = r#"must be "off" or "prompt_lookup", not"#;
        for (speed_up, words) in [
            (json!("mtp"), [r#""mtp" (a model's own MTP heads)"#, one_model, where_to]),
            (
                json!({"draft_model": "dir:draft"}),
                ["the draft model dir:draft", one_model, where_to],
            ),
            (
                json!({"drafter": "dir:assistant"}),
                ["the drafter dir:assistant", one_model, where_to],
            ),
            (json!("fast"), [choices, r#""fast""#, "Speed up replies"]),
            (json!({"draft_model": 3}), [choices, r#"{"draft_model":3}"#, "Speed up replies"]),
        ] {
            let mut bad = saved.clone();
            bad["speed_up"] = speed_up.clone();
            bad["temperature"] = json!(0.3); // must not be saved either
            let err = h.call("save_settings", json!({"settings": bad})).unwrap_err();
            assert_eq!(err["code"], "INVALID_SETTINGS", "{speed_up}: {err}");
            let message = err["message"].as_str().unwrap();
            for w in words {
                assert!(message.contains(w), "{speed_up}: {w:?} in {message}");
            }
            let now = h.ok("get_settings", json!({}))["settings"].clone();
            assert_eq!(now, saved, "{speed_up}: nothing of a refused save is kept");
        }
        let mut bad = saved.clone();
        bad["max_tokens"] = json!("many");
        let err = h.call("save_settings", json!({"settings": bad})).unwrap_err();
        assert_eq!(err["code"], "INVALID_SETTINGS", "{err}");
        assert!(err["message"].as_str().unwrap().contains("could not be read"), "{err}");
        saved
    };
    // a fresh start reads the store: the last save that was taken
    let h = harness(dir.path());
    assert_eq!(h.ok("get_settings", json!({}))["settings"], settings);
}
