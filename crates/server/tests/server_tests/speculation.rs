//! `"speculation": "off"` on a chat completion keeps that request from
//! drafting on a server that speculates; `"auto"` (the default) drafts; any
//! other value is a 400 that names the field.
use crate::common;

use common::{start, Setup};
use engine::batch::speculation::SpeculationConfig;
use engine::batch::SchedulerConfig;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_can_turn_speculation_off_and_bad_values_are_named() {
    let scheduler = SchedulerConfig {
        speculation: Some(SpeculationConfig::prompt_lookup()),
        ..Default::default()
    };
    let server = start(Setup { scheduler, ..Default::default() }).await;

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
