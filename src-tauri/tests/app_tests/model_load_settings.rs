//! Load settings remembered per model (context, KV bits, running sequences)
//! through the app's real IPC: a model with a record of its own loads with
//! it, any other with the Settings; the record outlives the app; the fit
//! check counts the model's running sequences.
use std::path::Path;

use serde_json::{json, Value};

use crate::common;

use common::{harness, tiny_models, Harness};

fn second_model(root: &Path) {
    fixtures::write_tiny_llama(&root.join("models").join("other"), &fixtures::TinyLlama::default())
        .unwrap();
}

impl Harness {
    fn load_settings(&self, id: &str) -> Value {
        self.ok("get_model_load_settings", json!({"id": id}))
    }

    fn remember(&self, id: &str, settings: Value) -> Result<Value, Value> {
        self.call("save_model_load_settings", json!({"id": id, "settings": settings}))
    }

    fn knobs(&self) -> Value {
        let status = self.ok("engine_status", json!({}));
        let k = &status["knobs"];
        json!({"max_context": k["max_context"], "kv_bits": k["kv_bits"], "max_running": k["max_running"],
               "speed_up": k["speed_up"]})
    }
}

#[test]
fn a_model_loads_with_its_own_settings_and_others_with_the_defaults() {
    let dir = tempfile::tempdir().unwrap();
    tiny_models(dir.path());
    second_model(dir.path());
    let h = harness(dir.path());
    h.settings(|s| {
        s["max_context"] = json!(0);
        s["kv_bits"] = json!(0);
        s["max_running"] = json!(4);
    });
    let defaults = json!({"max_context": 0, "kv_bits": 0, "max_running": 4, "speed_up": "off"});

    // nothing remembered: the Settings' values
    let view = h.load_settings("dir:tiny");
    assert_eq!(
        (view["remembered"].clone(), view["settings"].clone()),
        (json!(false), defaults.clone()),
        "{view}"
    );
    assert_eq!(view["defaults"], defaults);

    let own =
        json!({"max_context": 96, "kv_bits": 8, "max_running": 2, "speed_up": "prompt_lookup"});
    let view = h.remember("dir:tiny", own.clone()).unwrap();
    assert_eq!(
        (view["remembered"].clone(), view["settings"].clone()),
        (json!(true), own.clone()),
        "{view}"
    );
    for bad in [
        json!({"max_context": 0, "kv_bits": 3, "max_running": 1}),
        json!({"max_context": 0, "kv_bits": 0, "max_running": 0}),
    ] {
        let err = h.remember("dir:tiny", bad).unwrap_err();
        assert_eq!(err["code"], "INVALID_SETTINGS", "{err}");
    }
    assert_eq!(h.load_settings("dir:tiny")["settings"], own, "a refused record changes nothing");
    // the Models page sees which models have their own
    let gallery = h.ok("list_models", json!({}));
    let entry = |id: &str| {
        gallery["local"].as_array().unwrap().iter().find(|m| m["id"] == id).cloned().unwrap()
    };
    assert_eq!(entry("dir:tiny")["load_settings"], own, "{gallery}");
    assert_eq!(entry("dir:other")["load_settings"], Value::Null);

    h.load_tiny();
    assert_eq!(h.knobs(), own, "the model loads with its own record");
    let settings = h.ok("get_settings", json!({}));
    assert_eq!(settings["restart_needed"], false, "{settings}");
    assert_eq!(settings["model_has_own_load_settings"], "tiny", "{settings}");

    // the engine holds to the record's context: a prompt past 96 tokens is refused
    let chat = h.new_chat();
    h.send(chat, &"word ".repeat(200), &[]);
    let reply = h.finished_reply(chat);
    assert_eq!(reply["error_code"], "CONTEXT_LENGTH_EXCEEDED", "{reply}");

    // a change to the loaded model's record applies at its next load
    let changed = json!({"max_context": 0, "kv_bits": 4, "max_running": 3, "speed_up": "off"});
    let view = h.remember("dir:tiny", changed.clone()).unwrap();
    assert_eq!(view["reload_needed"], true, "{view}");
    assert_eq!(h.ok("get_settings", json!({}))["restart_needed"], true);
    h.ok("restart_engine", json!({}));
    assert_eq!(h.knobs(), changed);
    assert_eq!(h.load_settings("dir:tiny")["reload_needed"], false);

    // a model without a record loads with the Settings
    let status = h.ok("load_model", json!({"id": "dir:other"}));
    assert_eq!(status["model"]["id"], "dir:other", "{status}");
    assert_eq!(h.knobs(), defaults);
    assert_eq!(h.ok("get_settings", json!({}))["model_has_own_load_settings"], Value::Null);

    // forgetting the record: the model follows the Settings again
    let view = h.ok("forget_model_load_settings", json!({"id": "dir:tiny"}));
    assert_eq!((view["remembered"].clone(), view["settings"].clone()), (json!(false), defaults));
}

#[test]
fn the_record_outlives_the_app() {
    let dir = tempfile::tempdir().unwrap();
    tiny_models(dir.path());
    let own =
        json!({"max_context": 512, "kv_bits": 4, "max_running": 1, "speed_up": "prompt_lookup"});
    {
        let h = harness(dir.path());
        h.remember("dir:tiny", own.clone()).unwrap();
    }
    let h = harness(dir.path());
    let view = h.load_settings("dir:tiny");
    assert_eq!(
        (view["remembered"].clone(), view["settings"].clone()),
        (json!(true), own.clone()),
        "{view}"
    );
    h.load_tiny();
    assert_eq!(h.knobs(), own);
}

#[test]
fn the_fit_check_counts_every_running_sequence() {
    let dir = tempfile::tempdir().unwrap();
    tiny_models(dir.path());
    let h = harness(dir.path());
    let fit = |args: Value| {
        let mut body = json!({"target": {"kind": "local", "id": "dir:tiny"}});
        body.as_object_mut().unwrap().extend(args.as_object().unwrap().clone());
        h.ok("fit_check", body)
    };
    let kv = |f: &Value| f["estimate"]["kv_cache"].as_u64().unwrap();
    let one = fit(json!({"context": 256, "kvBits": 0, "maxRunning": 1}));
    assert_eq!(one["settings"]["sequences"], 1, "{one}");
    assert!(!one["summary"].as_str().unwrap().contains("sequences"), "{one}");
    // the verdict is one chat's; three sequences at once are the worst case
    let three = fit(json!({"context": 256, "kvBits": 0, "maxRunning": 3}));
    assert_eq!(kv(&three), kv(&one), "{three}");
    assert_eq!(three["worst"]["estimate"]["kv_cache"].as_u64().unwrap(), 3 * kv(&one), "{three}");
    assert!(
        three["summary"].as_str().unwrap().contains("(3 running sequences × 256 tokens)"),
        "{three}"
    );

    // asked nothing: the model's own record, else the Settings
    h.settings(|s| s["max_running"] = json!(5));
    assert_eq!(fit(json!({"context": 256}))["worst"]["settings"]["sequences"], 5);
    h.remember(
        "dir:tiny",
        json!({"max_context": 128, "kv_bits": 8, "max_running": 2, "speed_up": "off"}),
    )
    .unwrap();
    let remembered = fit(json!({}));
    assert_eq!(
        remembered["worst"]["settings"],
        json!({"context": 128, "kv_bits": 8, "sequences": 2}),
        "{remembered}"
    );
    assert_eq!(
        remembered["settings"],
        json!({"context": 128, "kv_bits": 8, "sequences": 1}),
        "{remembered}"
    );

    let err = h
        .call("fit_check", json!({"target": {"kind": "local", "id": "dir:tiny"}, "maxRunning": 0}))
        .unwrap_err();
    assert_eq!(err["code"], "INVALID_SETTINGS", "{err}");
}
