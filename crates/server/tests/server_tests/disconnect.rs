//! A client that goes away cancels its sequence at once, streamed or not.
use crate::common;

use std::time::Duration;

use common::{start, Setup, SseReader};
use fixtures::TinyLlama;
use serde_json::json;

/// A context so long that 100 000 tokens fit: a request that is not
/// cancelled keeps the engine busy for minutes, far past the waits below.
fn long_context() -> Setup {
    Setup {
        model: TinyLlama { max_context: 1_000_000, ..Default::default() },
        ..Default::default()
    }
}

fn endless(stream: bool) -> serde_json::Value {
    json!({
        "messages": [{"role": "user", "content": "never stop"}],
        "max_tokens": 100_000,
        "logit_bias": {"2": -100},
        "stream": stream,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_stream_cancels_its_sequence() {
    let server = start(long_context()).await;
    let response = server.post("/v1/chat/completions", &endless(true)).await;
    assert_eq!(response.status(), 200);
    let mut reader = SseReader::new(response);
    for _ in 0..5 {
        let data = reader.next().await.expect("chunks keep coming");
        assert_ne!(data, "[DONE]");
    }
    assert_eq!(server.running().await, 1);
    drop(reader);
    assert!(
        server.wait_idle(Duration::from_secs(5)).await,
        "the sequence kept running after the client left"
    );

    // The server and engine serve the next client as usual.
    let reply = server
        .chat(&json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}))
        .await;
    assert!(reply["choices"][0]["finish_reason"].is_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_gives_up_on_a_whole_reply_cancels_it() {
    let server = start(long_context()).await;
    let impatient =
        reqwest::Client::builder().timeout(Duration::from_millis(1500)).build().unwrap();
    let url = format!("{}/v1/chat/completions", server.url);
    let request = impatient.post(url).json(&endless(false)).send();
    let watcher = async {
        // The request is decoding while the client waits...
        let deadline = std::time::Instant::now() + Duration::from_secs(1);
        while server.running().await == 0 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        server.running().await
    };
    let (result, running_while_waiting) = tokio::join!(request, watcher);
    assert_eq!(running_while_waiting, 1);
    assert!(result.unwrap_err().is_timeout());
    // ...and stops once it hangs up.
    assert!(
        server.wait_idle(Duration::from_secs(5)).await,
        "the sequence kept running after the client left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn some_clients_leaving_do_not_disturb_the_others() {
    let server = start(long_context()).await;
    let finite = json!({
        "messages": [{"role": "user", "content": "stay"}],
        "max_tokens": 30, "logit_bias": {"2": -100}, "stream": true,
    });
    let leavers = (0..2).map(|_| async {
        let mut reader = SseReader::new(server.post("/v1/chat/completions", &endless(true)).await);
        for _ in 0..3 {
            reader.next().await.unwrap();
        }
    });
    let stayers = (0..2).map(|_| async {
        common::read_stream(server.post("/v1/chat/completions", &finite).await).await
    });
    let (_, stayed) = tokio::join!(
        futures_util::future::join_all(leavers),
        futures_util::future::join_all(stayers)
    );
    for s in &stayed {
        assert!(s.done);
        assert_eq!(s.finish_reason.as_deref(), Some("length"));
        assert_eq!(s.content, stayed[0].content, "same prompt, same greedy answer");
    }
    assert!(server.wait_idle(Duration::from_secs(5)).await);
}
