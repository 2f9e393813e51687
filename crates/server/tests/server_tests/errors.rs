//! Bad requests, a missing model, the API key, CORS and the model list: the
//! right status, OpenAI's error shape, and a server that keeps serving.
use crate::common;

use common::{start, Setup};
use engine::batch::SchedulerConfig;
use fixtures::{write_tiny_llama, TinyLlama};
use serde_json::{json, Value};
use server::ServerConfig;

/// Checks status and shape; returns the error object.
async fn expect_error(response: reqwest::Response, status: u16) -> Value {
    assert_eq!(response.status(), status);
    let content_type =
        response.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(content_type.as_deref(), Some("application/json"));
    let body: Value = response.json().await.unwrap();
    let error = &body["error"];
    assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
    assert!(error["type"].is_string() && error["code"].is_string(), "{body}");
    error.clone()
}

fn hello() -> Value {
    json!({"messages": [{"role": "user", "content": "hello"}], "max_tokens": 3})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_openai_errors_and_the_server_keeps_serving() {
    let setup = Setup {
        scheduler: SchedulerConfig { max_context: 128, ..Default::default() },
        ..Default::default()
    };
    let server = start(setup).await;
    let url = format!("{}/v1/chat/completions", server.url);
    let raw = |body: &'static str| {
        server.client.post(&url).header("content-type", "application/json").body(body).send()
    };

    let e = expect_error(raw("{\"messages\": [").await.unwrap(), 400).await;
    assert_eq!(
        (e["type"].as_str(), e["code"].as_str()),
        (Some("invalid_request_error"), Some("invalid_json"))
    );

    let e = expect_error(raw("{\"model\": \"default\"}").await.unwrap(), 400).await;
    assert!(e["message"].as_str().unwrap().contains("messages"), "{e}");

    let e = expect_error(raw("{\"messages\": \"hello\"}").await.unwrap(), 400).await;
    assert_eq!(e["code"], "invalid_json");

    let mut unknown = hello();
    unknown["model"] = json!("gpt-4o");
    let e = expect_error(server.post("/v1/chat/completions", &unknown).await, 404).await;
    assert_eq!(e["code"], "model_not_found");
    assert!(e["message"].as_str().unwrap().contains("gpt-4o"));

    let mut negative = hello();
    negative["max_tokens"] = json!(-5);
    let e = expect_error(server.post("/v1/chat/completions", &negative).await, 400).await;
    assert!(e["message"].as_str().unwrap().contains("max_tokens"), "{e}");

    let mut hot = hello();
    hot["temperature"] = json!(-1.0);
    expect_error(server.post("/v1/chat/completions", &hot).await, 400).await;

    let image = json!({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is in this picture?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    ]}]});
    let e = expect_error(server.post("/v1/chat/completions", &image).await, 400).await;
    // The engine refuses it: the tiny model has no vision tower.
    assert_eq!(e["code"], "invalid_request");
    assert!(e["message"].as_str().unwrap().contains("does not accept images"), "{e}");

    // Longer than the context: refused before any stream starts, streamed or not.
    for stream in [false, true] {
        let long = json!({"messages": [{"role": "user", "content": "word ".repeat(100)}], "stream": stream});
        let e = expect_error(server.post("/v1/chat/completions", &long).await, 400).await;
        assert_eq!(e["code"], "context_length_exceeded", "stream: {stream}");
    }

    let e = expect_error(server.client.post(&url).body("{}").send().await.unwrap(), 415).await;
    assert_eq!(e["code"], "unsupported_media_type");

    // Just over the 32 MiB limit.
    let huge = format!(
        "{{\"messages\": [{{\"role\": \"user\", \"content\": \"{}\"}}]}}",
        "a".repeat(32 * 1024 * 1024)
    );
    let response = server
        .client
        .post(&url)
        .header("content-type", "application/json")
        .body(huge)
        .send()
        .await
        .unwrap();
    let e = expect_error(response, 413).await;
    assert_eq!(e["code"], "request_too_large");

    expect_error(server.get("/v1/nothing-here").await, 404).await;
    expect_error(server.get("/v1/chat/completions").await, 405).await;

    // Still serving.
    let reply = server.chat(&hello()).await;
    assert_eq!(reply["choices"][0]["message"]["role"], "assistant");
    assert!(server.wait_idle(std::time::Duration::from_secs(5)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_model_requests_get_503_until_one_is_loaded() {
    let server = start(Setup { no_model: true, ..Default::default() }).await;
    let e = expect_error(server.post("/v1/chat/completions", &hello()).await, 503).await;
    assert_eq!(e["code"], "model_not_loaded");
    let models: Value = server.get("/v1/models").await.json().await.unwrap();
    assert_eq!(models, json!({"object": "list", "data": []}));
    let health: Value = server.get("/health").await.json().await.unwrap();
    assert_eq!(health["model"], Value::Null);

    assert!(server.state.set_engine(Some(server.engine.clone())).is_none());
    server.chat(&hello()).await;
    let health: Value = server.get("/health").await.json().await.unwrap();
    assert_eq!(health["model"], server.engine.model_info().name.as_str());
    assert_eq!(health["running"], 0);
    let models: Value = server.get("/v1/models").await.json().await.unwrap();
    assert_eq!(models["data"][0]["loaded"], true);
    assert_eq!(models["data"][0]["speculation"], "off", "{models}");

    assert!(server.state.unload().is_some());
    expect_error(server.post("/v1/chat/completions", &hello()).await, 503).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_key_is_required_when_set() {
    let config = ServerConfig { port: 0, api_key: Some("sekrit".into()), ..Default::default() };
    let server = start(Setup { config, ..Default::default() }).await;
    let url = format!("{}/v1/chat/completions", server.url);

    let e = expect_error(server.post("/v1/chat/completions", &hello()).await, 401).await;
    assert_eq!(e["type"], "authentication_error");
    let wrong = server.client.post(&url).bearer_auth("guess").json(&hello()).send().await.unwrap();
    expect_error(wrong, 401).await;
    expect_error(server.get("/v1/models").await, 401).await;

    let right = server.client.post(&url).bearer_auth("sekrit").json(&hello()).send().await.unwrap();
    assert_eq!(right.status(), 200);
    let models = server
        .client
        .get(format!("{}/v1/models", server.url))
        .bearer_auth("sekrit")
        .send()
        .await
        .unwrap();
    assert_eq!(models.status(), 200);
    // Health probes need no key.
    assert_eq!(server.get("/health").await.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_server_refuses_foreign_host_names() {
    let server = start(Setup::default()).await;
    // What a page on a rebinding domain would send: its own name as Host.
    let rebound =
        server.client.get(format!("{}/v1/models", server.url)).header("host", "evil.example:8080");
    let e = expect_error(rebound.send().await.unwrap(), 403).await;
    assert_eq!(e["code"], "host_not_allowed");
    let local = server
        .client
        .get(format!("{}/health", server.url))
        .header("host", "localhost")
        .send()
        .await
        .unwrap();
    assert_eq!(local.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_is_off_unless_enabled() {
    let preflight = |server: &common::TestServer| {
        server
            .client
            .request(reqwest::Method::OPTIONS, format!("{}/v1/chat/completions", server.url))
            .header("origin", "http://example.test")
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "authorization,content-type")
            .send()
    };
    let closed = start(Setup::default()).await;
    let response = preflight(&closed).await.unwrap();
    assert!(response.headers().get("access-control-allow-origin").is_none());

    let config =
        ServerConfig { port: 0, cors: true, api_key: Some("k".into()), ..Default::default() };
    let open = start(Setup { config, ..Default::default() }).await;
    let response = preflight(&open).await.unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    assert_eq!(response.headers()["access-control-allow-origin"], "*");
    let allowed =
        response.headers()["access-control-allow-headers"].to_str().unwrap().to_ascii_lowercase();
    assert!(allowed.contains("authorization"), "{allowed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_lists_the_loaded_model_then_those_on_disk() {
    let disk = tempfile::tempdir().unwrap();
    write_tiny_llama(&disk.path().join("another-llama"), &TinyLlama::default()).unwrap();
    std::fs::write(disk.path().join("some-model.Q4_0.gguf"), b"GGUF").unwrap();
    std::fs::write(disk.path().join("notes.txt"), b"not a model").unwrap();
    std::fs::create_dir(disk.path().join("empty-folder")).unwrap();
    let config =
        ServerConfig { port: 0, models_dir: Some(disk.path().to_path_buf()), ..Default::default() };
    let server = start(Setup { config, ..Default::default() }).await;

    let models: Value = server.get("/v1/models").await.json().await.unwrap();
    assert_eq!(models["object"], "list");
    let ids: Vec<&str> =
        models["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        [server.engine.model_info().name.as_str(), "another-llama", "some-model.Q4_0.gguf"]
    );
    let loaded: Vec<bool> =
        models["data"].as_array().unwrap().iter().map(|m| m["loaded"].as_bool().unwrap()).collect();
    assert_eq!(loaded, [true, false, false]);
    assert!(models["data"]
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m["object"] == "model" && m["owned_by"].is_string()));

    // The loaded model's listed id is accepted as `model`.
    let mut body = hello();
    body["model"] = models["data"][0]["id"].clone();
    server.chat(&body).await;
}

/// `/v1/models` says what speculative decoding does for the loaded model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loaded_model_says_how_it_speculates() {
    let scheduler = SchedulerConfig {
        speculation: Some(engine::batch::speculation::SpeculationConfig::prompt_lookup()),
        ..Default::default()
    };
    let server = start(Setup { scheduler, ..Default::default() }).await;
    let models: Value = server.get("/v1/models").await.json().await.unwrap();
    assert_eq!(models["data"][0]["speculation"], "prompt lookup", "{models}");
}
