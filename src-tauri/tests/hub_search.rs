//! The gallery's Hub commands through Tauri's real IPC (mock runtime, no
//! window) against the fake Hub on 127.0.0.1 (`hub::testing`, reached
//! through HF_ENDPOINT as the app reaches the real one): search with the
//! engine registry's verdict, a model's details, the fit check before a
//! download and before a load, and a search result downloaded by its
//! `hf:` id, loaded and answering.
//!
//! HF_ENDPOINT and the Hugging Face cache are process-wide, so they are set
//! once for this binary (its own process: the other command tests keep
//! their environment).
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use fixtures::{write_tiny_llama, TinyLlama};
use hub::testing::{FakeFile, FakeHub, FakeRepo};
use serde_json::{json, Value};

mod common;

use common::Harness;

const TINY: &str = "test-org/tiny-llama";
const MAMBA: &str = "someone/mamba-130m";
const GGUF: &str = "ggml-org/tiny-GGUF";

/// The fake Hub, its runtime and the cache folder, shared by the tests here.
struct Env {
    _runtime: tokio::runtime::Runtime,
    hub: FakeHub,
    _dir: tempfile::TempDir,
}

fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
        let hub = runtime.block_on(FakeHub::start());
        let model = dir.path().join("tiny-src");
        write_tiny_llama(&model, &TinyLlama::default()).unwrap();
        let mut files = vec![];
        for entry in std::fs::read_dir(&model).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            let content = std::fs::read(entry.path()).unwrap();
            files.push(if name.ends_with(".safetensors") {
                FakeFile::lfs(&name, content)
            } else {
                FakeFile::new(&name, content)
            });
        }
        let config: Value =
            serde_json::from_slice(&std::fs::read(model.join("config.json")).unwrap()).unwrap();
        let mut tiny = FakeRepo::new(files);
        tiny.info = json!({"downloads": 900, "likes": 12, "tags": ["mlx", "license:mit"],
                           "config": {"model_type": config["model_type"]}});
        hub.add_repo(TINY, tiny);

        let mut mamba = FakeRepo::new(vec![
            FakeFile::new("config.json", json!({"model_type": "mamba"}).to_string()),
            FakeFile::lfs("model.safetensors", vec![7u8; 10_000]),
        ]);
        mamba.info = json!({"downloads": 100, "tags": ["mlx"], "config": {"model_type": "mamba"}});
        hub.add_repo(MAMBA, mamba);

        let mut gguf = FakeRepo::new(vec![
            FakeFile::lfs("tiny-q4_k_m.gguf", vec![1u8; 3000]),
            FakeFile::lfs("tiny-q8_0.gguf", vec![2u8; 6000]),
        ]);
        gguf.info = json!({"downloads": 50, "tags": ["gguf"], "gguf": {"architecture": "llama"}});
        hub.add_repo(GGUF, gguf);

        std::env::set_var("HF_ENDPOINT", &hub.endpoint);
        std::env::set_var("HF_HUB_CACHE", dir.path().join("hf-cache"));
        // a token of the developer's (HF_TOKEN, `hf auth login`) must not reach the fake Hub
        std::env::set_var("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1");
        Env { _runtime: runtime, hub, _dir: dir }
    })
}

fn harness(root: &Path) -> Harness {
    env();
    common::harness(root)
}

fn result<'a>(page: &'a Value, repo: &str) -> &'a Value {
    page["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["repo"] == repo)
        .unwrap_or_else(|| panic!("no {repo} in {page}"))
}

#[test]
fn search_says_which_results_the_engine_runs_and_why_not() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path());
    let page = h.ok("search_hub", json!({"query": {}}));
    let order: Vec<&str> =
        page["results"].as_array().unwrap().iter().map(|m| m["repo"].as_str().unwrap()).collect();
    assert_eq!(order, [TINY, MAMBA, GGUF], "by downloads");

    let tiny = result(&page, TINY);
    assert_eq!(tiny["support"]["supported"], true, "{tiny}");
    assert_eq!(tiny["support"]["family"], "Llama", "the engine registry's family name");
    assert_eq!((tiny["downloads"].as_u64(), tiny["likes"].as_u64()), (Some(900), Some(12)));
    assert_eq!(tiny["license"], "mit");
    assert_eq!(tiny["gated"], "no");

    let mamba = result(&page, MAMBA);
    assert_eq!(mamba["support"]["supported"], false);
    let reason = mamba["support"]["reason"].as_str().unwrap();
    assert!(reason.contains("no model family for the mamba architecture"), "{reason}");

    // a GGUF's architecture is asked of the registry's GGUF imports
    assert_eq!(result(&page, GGUF)["support"]["family"], "Llama");

    // "More results": the next page follows on from the one shown
    let repos = |page: &Value| -> Vec<String> {
        page["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["repo"].as_str().unwrap().to_string())
            .collect()
    };
    let first = h.ok("search_hub", json!({"query": {"limit": 2}}));
    assert_eq!(
        (repos(&first), first["has_more"].clone()),
        (vec![TINY.to_string(), MAMBA.to_string()], json!(true))
    );
    let next = h.ok("search_hub", json!({"query": {"limit": 2, "offset": 2}}));
    assert_eq!((repos(&next), next["has_more"].clone()), (vec![GGUF.to_string()], json!(false)));

    // the query's fields are optional: the UI sends what the user set
    let page = h.ok("search_hub", json!({"query": {"text": "mamba", "file_sizes": true}}));
    assert_eq!(page["results"].as_array().unwrap().len(), 1, "{page}");
    let config_len = json!({"model_type": "mamba"}).to_string().len() as u64;
    assert_eq!(
        page["results"][0]["variants"][0]["bytes"],
        10_000 + config_len,
        "sizes from the file listing: {page}"
    );

    let err = h.call("hub_model_details", json!({"repo": "nobody/nothing"})).unwrap_err();
    assert_eq!(err["code"], "NOT_FOUND", "{err}");
}

#[test]
fn the_fit_check_gives_the_numbers_before_a_download_and_before_a_load() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path());
    let details = h.ok("hub_model_details", json!({"repo": TINY}));
    let shape = &details["shape"];
    let layers = shape["layers"].as_array().unwrap();
    assert!(!layers.is_empty(), "{details}");

    let fit = h.ok("fit_check", json!({"target": {"kind": "hub", "repo": TINY}, "context": 256, "kvBits": 0, "maxRunning": 1}));
    assert_eq!(fit["level"], "green", "a tiny model fits any machine: {fit}");
    let estimate = &fit["estimate"];
    let sum: u64 = ["weights", "kv_cache", "vision", "overhead"]
        .iter()
        .map(|k| estimate[k].as_u64().unwrap())
        .sum();
    assert_eq!(estimate["total"].as_u64().unwrap(), sum, "{fit}");
    // K and V for every layer and KV head, at the checkpoint's float width (the tiny model is float32), 256 tokens
    let dim = |k: &str| shape[k].as_u64().unwrap();
    assert_eq!(dim("kv_element_bytes"), 4, "{shape}");
    let kv: u64 = layers
        .iter()
        .map(|l| 2 * l["kv_heads"].as_u64().unwrap() * l["head_dim"].as_u64().unwrap())
        .sum::<u64>()
        * dim("kv_element_bytes")
        * 256;
    assert_eq!(estimate["kv_cache"].as_u64().unwrap(), kv, "{fit}");
    assert!(fit["limit_bytes"].as_u64().unwrap() > 0);
    assert!(fit["max_green_context"].as_u64().unwrap() >= 256, "{fit}");
    assert!(fit["summary"].as_str().unwrap().contains("KV cache at 256 tokens"), "{fit}");

    // 8-bit KV takes less than float KV for the same context
    let q8 = h.ok("fit_check", json!({"target": {"kind": "hub", "repo": TINY}, "context": 256, "kvBits": 8, "maxRunning": 1}));
    assert!(q8["estimate"]["kv_cache"].as_u64() < estimate["kv_cache"].as_u64(), "{q8}");

    let err = h
        .call("fit_check", json!({"target": {"kind": "hub", "repo": TINY, "variant": "Q2_K"}}))
        .unwrap_err();
    assert_eq!(err["code"], "MODEL_NOT_FOUND", "{err}");
    let err = h
        .call("fit_check", json!({"target": {"kind": "hub", "repo": TINY}, "kvBits": 3}))
        .unwrap_err();
    assert_eq!(err["code"], "INVALID_SETTINGS", "{err}");

    // a model on disk, by its gallery id
    write_tiny_llama(&dir.path().join("models").join("tiny"), &TinyLlama::default()).unwrap();
    let local =
        h.ok("fit_check", json!({"target": {"kind": "local", "id": "dir:tiny"}, "context": 256}));
    // asked nothing: the verdict is one chat's, every running sequence of
    // the Settings' is the worst case
    let running = h.ok("get_settings", json!({}))["settings"]["max_running"].as_u64().unwrap();
    assert_eq!(local["settings"]["sequences"].as_u64(), Some(1), "{local}");
    assert_eq!(local["estimate"]["kv_cache"].as_u64().unwrap(), kv, "{local}");
    assert_eq!(local["worst"]["settings"]["sequences"].as_u64(), Some(running), "{local}");
    assert_eq!(local["worst"]["estimate"]["kv_cache"].as_u64().unwrap(), kv * running, "{local}");
    assert_eq!(local["level"], "green", "{local}");
    let err =
        h.call("fit_check", json!({"target": {"kind": "local", "id": "dir:nothing"}})).unwrap_err();
    assert_eq!(err["code"], "MODEL_NOT_FOUND", "{err}");
}

#[test]
fn a_search_result_downloads_by_its_hf_id_loads_and_answers() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path());
    let id = format!("hf:{TINY}");
    h.ok("download_model", json!({"id": id}));
    // bounded by a count: fails only if the download never lands
    let mut found = None;
    for _ in 0..1500 {
        let gallery = h.ok("list_models", json!({}));
        found = gallery["local"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == id && m["partial"] == false)
            .cloned();
        if found.is_some() && h.state.downloads.lock().unwrap().is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let found = found.unwrap_or_else(|| panic!("{id} never appeared on disk"));
    assert_eq!(found["supported"], true, "{found}");
    let status = h.ok("load_model", json!({"id": id}));
    assert_eq!(status["state"], "ready", "{status}");

    // one quantization of a GGUF repository: only its file is fetched
    h.ok("download_model", json!({"id": format!("hf:{GGUF}"), "files": ["tiny-q4_k_m.gguf"]}));
    for _ in 0..1500 {
        if h.state.downloads.lock().unwrap().is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(env().hub.file_requests("tiny-q4_k_m.gguf").len(), 1);
    assert!(env().hub.file_requests("tiny-q8_0.gguf").is_empty());

    let err = h.call("download_model", json!({"id": "hf:../evil"})).unwrap_err();
    assert_eq!(err["code"], "INVALID_REPO_ID", "{err}");
    let err = h.call("download_model", json!({"id": "no-such-catalog-entry"})).unwrap_err();
    assert_eq!(err["code"], "MODEL_NOT_FOUND", "{err}");
}
