//! `"speculation": "off"` on a chat completion keeps that request from
//! drafting on a server that speculates; `"auto"` (the default) drafts; any
//! other value is a 400 that names the field. `/health` reports a draft
//! model's own prefix cache.
use crate::common;

use common::{start, Setup};
use engine::batch::speculation::SpeculationConfig;
use engine::batch::SchedulerConfig;
use fixtures::{write_tiny_llama, TinyLlama};
use serde_json::{json, Value};

/// A conversation whose generation prompt (`<|im_start|>assistant\n`) came
/// before, followed by a reply: prompt lookup has a draft from the first step.
fn repeating(speculation: Option<&str>) -> Value {
    let text = "the cat sat on the mat and the dog sat on the log";
    let mut body = json!({
        "messages": [
            {"role": "user", "content": text},
            {"role": "assistant", "content": text},
            {"role": "user", "content": text},
        ],
        "max_tokens": 12,
        "temperature": 0,
    });
    if let Some(s) = speculation {
        body["speculation"] = json!(s);
    }
    body
}

async fn drafted(server: &common::TestServer) -> u64 {
    let health: Value = server.get("/health").await.json().await.unwrap();
    health["speculation"]["drafted_tokens"].as_u64().unwrap_or_else(|| panic!("{health}"))
}

async fn draft_cache(server: &common::TestServer) -> Value {
    let health: Value = server.get("/health").await.json().await.unwrap();
    let cache = health["speculation"]["draft_prefix_cache"].clone();
    assert!(cache.is_object(), "a draft model's cache: {health}");
    cache
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_can_turn_speculation_off_and_bad_values_are_named() {
    let scheduler = SchedulerConfig {
        speculation: Some(SpeculationConfig::prompt_lookup()),
        ..Default::default()
    };
    let server = start(Setup { scheduler, ..Default::default() }).await;
    let health: Value = server.get("/health").await.json().await.unwrap();
    assert_eq!(
        health["speculation"]["draft_prefix_cache"],
        Value::Null,
        "no draft model: {health}"
    );

    let off = server.chat(&repeating(Some("off"))).await;
    assert_eq!(drafted(&server).await, 0, "a request with speculation off drafted");
    let auto = server.chat(&repeating(Some("auto"))).await;
    let after_auto = drafted(&server).await;
    assert!(after_auto > 0, "the same request with speculation on drafted nothing");
    // Greedy: the reply is the model's either way.
    assert_eq!(off["choices"][0]["message"], auto["choices"][0]["message"]);
    server.chat(&repeating(None)).await;
    assert!(drafted(&server).await > after_auto, "the default is to speculate");

    for bad in [json!("fast"), json!(false), json!({"kind": "off"})] {
        let mut body = repeating(None);
        body["speculation"] = bad.clone();
        let response = server.post("/v1/chat/completions", &body).await;
        assert_eq!(response.status(), 400, "{bad}");
        let error: Value = response.json().await.unwrap();
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains("speculation must be \"off\" or \"auto\""), "{bad}: {message}");
        assert!(message.contains(&bad.to_string()), "the value is named: {message}");
    }
}

/// The draft model's own prefix cache in `/health`
/// (`speculation.draft_prefix_cache`): after a first turn it keeps that
/// prompt and has no hit; the chat's next turn starts with it, so the draft
/// reads it from there: one hit, and the tokens it did not read again (at
/// most the first prompt: the draft keeps prompts, not replies).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_reports_the_draft_models_own_prefix_cache() {
    let folder = tempfile::tempdir().unwrap();
    let draft = folder.path().join("draft");
    // The server's tiny llama's tokenizer, one layer, other weights.
    write_tiny_llama(&draft, &TinyLlama { layers: 1, seed: 7, ..TinyLlama::default() }).unwrap();
    let scheduler = SchedulerConfig {
        speculation: Some(SpeculationConfig::draft_model(draft)),
        ..Default::default()
    };
    let server = start(Setup { scheduler, ..Default::default() }).await;

    let question =
        json!({"role": "user", "content": "the cat sat on the mat and the dog sat on the log"});
    let first = server
        .chat(&json!({"messages": [question.clone()], "max_tokens": 6, "temperature": 0}))
        .await;
    let cache = draft_cache(&server).await;
    assert_eq!((cache["hits"].as_u64(), cache["misses"].as_u64()), (Some(0), Some(1)), "{cache}");
    assert_eq!(cache["entries"], 1, "{cache}");
    let first_bytes = cache["bytes"].as_u64().unwrap();
    assert!(first_bytes > 0, "{cache}");

    let reply = first["choices"][0]["message"]["content"].clone();
    let next = json!({
        "messages": [question, {"role": "assistant", "content": reply}, {"role": "user", "content": "and the bird?"}],
        "max_tokens": 6,
        "temperature": 0,
    });
    server.chat(&next).await;
    let cache = draft_cache(&server).await;
    assert_eq!((cache["hits"].as_u64(), cache["misses"].as_u64()), (Some(1), Some(1)), "{cache}");
    let reused = cache["reused_tokens"].as_u64().unwrap();
    let first_prompt = first["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!((4..=first_prompt).contains(&reused), "{reused} of {first_prompt}: {cache}");
    // The next turn's prompt is kept too (in place of the first where it serves it in full).
    assert!(cache["entries"].as_u64().unwrap() >= 1, "{cache}");
    assert!(cache["bytes"].as_u64().unwrap() >= first_bytes, "{cache}");
}
