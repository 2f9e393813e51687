//! Images over the API: a tiny Qwen2-VL behind a real server on a loopback
//! port. Image parts (base64 data URLs, and file URLs in an allowed folder)
//! reach the engine in their place; the answer is the engine's own; a
//! repeated image reuses the prompt cache; a bad image is a 400 naming it,
//! and the server keeps serving.
use crate::common;

use base64::Engine as _;
use common::{start, Setup, SseReader};
use engine::batch::{ImageInput, Prompt, Request};
use engine::tokenizer::{ChatMessage, ContentPart, MessageContent, TemplateOptions};
use serde_json::{json, Value};
use server::ServerConfig;

fn fixture(name: &str) -> std::path::PathBuf {
    [env!("CARGO_MANIFEST_DIR"), "..", "engine", "tests", "fixtures", "images", name]
        .iter()
        .collect()
}

fn data_url(bytes: &[u8]) -> String {
    format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(bytes))
}

fn image_question(url: &str, stream: bool) -> Value {
    json!({
        "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": url}},
            {"type": "text", "text": "What is in this picture?"}
        ]}],
        "max_tokens": 8,
        "stream": stream,
        "stream_options": {"include_usage": true},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_message_gets_the_engines_answer_and_a_repeat_reuses_the_prompt() {
    // file: URLs are off unless a folder is allowed: the fixtures' one is.
    let config =
        ServerConfig { port: 0, file_url_folders: vec![fixture("")], ..Default::default() };
    let server = start(Setup { vision: true, config, ..Default::default() }).await;
    let bytes = std::fs::read(fixture("qwen_parity_320x240.png")).unwrap();

    // The engine's own answer to the same message.
    let image = ImageInput::from_bytes(bytes.clone());
    let parts = vec![
        ContentPart::Image { image: Some(image.sha256.clone()) },
        ContentPart::text("What is in this picture?"),
    ];
    let message = ChatMessage { content: MessageContent::Parts(parts), ..ChatMessage::user("") };
    let mut request =
        Request::new(Prompt::Chat { messages: vec![message], options: TemplateOptions::default() })
            .with_max_tokens(8);
    request.images = vec![image];
    let want = server.engine_run(request).await;
    assert!(want.error.is_none(), "{:?}", want.error);

    let reply = server.chat(&image_question(&data_url(&bytes), false)).await;
    assert_eq!(reply["choices"][0]["message"]["content"], want.content.as_str());
    let usage = &reply["usage"];
    assert_eq!(usage["prompt_tokens"], want.stats.prompt_tokens);
    assert!(want.stats.prompt_tokens > 40, "the image's placeholder was expanded");
    // The same image again: its prompt is in the prefix cache.
    assert!(usage["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap() > 0, "{usage}");
    let stats = server.engine.stats_async().await.unwrap();
    assert!(stats.vision_cache.hits >= 1 || stats.prefix_cache.hits >= 1);

    // Streamed, from a file URL, the same answer.
    let url = url::Url::from_file_path(fixture("qwen_parity_320x240.png")).unwrap().to_string();
    let response = server.post("/v1/chat/completions", &image_question(&url, true)).await;
    assert_eq!(response.status(), 200);
    let mut content = String::new();
    for data in SseReader::new(response).all().await {
        if data == "[DONE]" {
            continue;
        }
        let chunk: Value = serde_json::from_str(&data).unwrap();
        if let Some(delta) = chunk["choices"][0]["delta"]["content"].as_str() {
            content.push_str(delta);
        }
    }
    assert_eq!(content, want.content);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_image_is_a_400_naming_it_and_the_server_keeps_serving() {
    let server = start(Setup { vision: true, ..Default::default() }).await;
    let response = server
        .post("/v1/chat/completions", &image_question(&data_url(b"not a png at all"), false))
        .await;
    assert_eq!(response.status(), 400);
    let e: Value = response.json().await.unwrap();
    assert_eq!(e["error"]["code"], "invalid_image", "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("#1"), "{e}");

    let good = std::fs::read(fixture("qwen_parity_182x126.png")).unwrap();
    let reply = server.chat(&image_question(&data_url(&good), false)).await;
    assert!(reply["choices"][0]["finish_reason"].as_str().is_some(), "{reply}");
}
