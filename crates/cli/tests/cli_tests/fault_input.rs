//! Fault suite, bad input: what a careless or hostile client sends to the
//! real `vlm serve` gets the documented status and error code, quickly, and
//! a normal request still answers after each.
use crate::common;

use std::time::{Duration, Instant};

use common::{chat_ok, hello, Served};
use serde_json::{json, Value};

/// One bad request: what is sent, and the status and code it must get.
struct Case {
    name: &'static str,
    body: Body,
    status: u16,
    code: &'static str,
    /// What the error message must say ("" to check only that it says something).
    says: &'static str,
}

enum Body {
    Json(Value),
    Raw(String),
    /// A body that is not labelled JSON.
    Untyped(&'static str),
    Get(&'static str),
}

fn user(content: Value) -> Value {
    json!({"messages": [{"role": "user", "content": content}], "max_tokens": 2})
}

fn with(field: &str, value: Value) -> Value {
    let mut body = hello();
    body[field] = value;
    body
}

/// `d_i` an object whose one required property refers to `d_{i+1}`: 300
/// links once overflowed the engine thread's stack and killed the server.
fn ref_chain(links: usize) -> Value {
    let mut defs = serde_json::Map::new();
    for i in 0..links {
        let next = json!({"$ref": format!("#/$defs/d{}", i + 1)});
        defs.insert(
            format!("d{i}"),
            json!({"type": "object", "properties": {"n": next}, "required": ["n"]}),
        );
    }
    defs.insert(format!("d{links}"), json!({"type": "string"}));
    json!({"$defs": defs, "$ref": "#/$defs/d0"})
}

fn cases() -> Vec<Case> {
    let case = |name, body, status, code| Case { name, body, status, code, says: "" };
    let saying = |name, body, code, says| Case { name, body, status: 400, code, says };
    // SmolLM2's context is 8192 tokens; a prompt of more than 32 bytes per
    // token of it is refused before templating.
    let megabytes_of_text = "lighthouse ".repeat(100_000);
    let tokens_over_context = "hello ".repeat(10_000);
    let nested = format!("{{\"messages\": {}{}}}", "[".repeat(100_000), "]".repeat(100_000));
    let over_body_limit = format!(
        "{{\"messages\": [{{\"role\": \"user\", \"content\": \"{}\"}}]}}",
        "a".repeat(33 << 20)
    );
    let empty_messages: Vec<Value> =
        (0..20_000).map(|_| json!({"role": "user", "content": ""})).collect();
    vec![
        case("malformed JSON", Body::Raw("{\"messages\": [".into()), 400, "invalid_json"),
        case(
            "messages of the wrong type",
            Body::Json(json!({"messages": "hello"})),
            400,
            "invalid_json",
        ),
        case(
            "max_tokens of the wrong type",
            Body::Json(with("max_tokens", json!("ten"))),
            400,
            "invalid_json",
        ),
        case("no messages field", Body::Json(json!({"model": "default"})), 400, "invalid_json"),
        case("empty messages", Body::Json(json!({"messages": []})), 400, "invalid_value"),
        case(
            "unknown role",
            Body::Json(json!({"messages": [{"role": "wizard", "content": "x"}]})),
            400,
            "invalid_value",
        ),
        case(
            "temperature above 2",
            Body::Json(with("temperature", json!(2.5))),
            400,
            "invalid_value",
        ),
        case("max_tokens 0", Body::Json(with("max_tokens", json!(0))), 400, "invalid_value"),
        case("nesting bomb (100 000 brackets)", Body::Raw(nested), 400, "invalid_json"),
        case("body over 32 MiB", Body::Raw(over_body_limit), 413, "request_too_large"),
        case(
            "1.1 MB prompt (refused by size)",
            Body::Json(user(json!(megabytes_of_text))),
            400,
            "context_length_exceeded",
        ),
        case(
            "20 000 empty messages",
            Body::Json(json!({"messages": empty_messages})),
            400,
            "context_length_exceeded",
        ),
        case(
            "prompt over the context (tokenized)",
            Body::Json(user(json!(tokens_over_context))),
            400,
            "context_length_exceeded",
        ),
        case("not labelled JSON", Body::Untyped("{}"), 415, "unsupported_media_type"),
        case(
            "image for a text-only model",
            Body::Json(user(
                json!([{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]),
            )),
            400,
            "invalid_request",
        ),
        case(
            "remote image URL",
            Body::Json(user(
                json!([{"type": "image_url", "image_url": {"url": "http://example.com/a.png"}}]),
            )),
            400,
            "invalid_image",
        ),
        case(
            "file: URL (off by default)",
            Body::Json(user(
                json!([{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}]),
            )),
            400,
            "invalid_image",
        ),
        saying(
            "unknown field in a message",
            Body::Json(
                json!({"messages": [{"role": "user", "content": "hi", "images": ["a.png"]}]}),
            ),
            "invalid_value",
            "messages[0].images is not supported",
        ),
        saying(
            "unknown field in stream_options",
            Body::Json(with(
                "stream_options",
                json!({"include_usage": true, "include_everything": true}),
            )),
            "invalid_value",
            "stream_options.include_everything is not supported",
        ),
        saying(
            "200 000 stop strings",
            Body::Json(with("stop", json!(vec!["zq"; 200_000]))),
            "invalid_value",
            "at most 16 stop strings",
        ),
        saying(
            "a 300-byte stop string",
            Body::Json(with("stop", json!(["x".repeat(300)]))),
            "invalid_value",
            "at most 256 bytes",
        ),
        saying(
            "300-link $ref chain in a JSON schema",
            Body::Json(with(
                "response_format",
                json!({"type": "json_schema", "json_schema": {"name": "chain", "schema": ref_chain(300)}}),
            )),
            "invalid_request",
            "at most 256 are allowed",
        ),
        saying(
            "chat_template_kwargs replacing messages",
            Body::Json(with(
                "chat_template_kwargs",
                json!({"messages": [{"role": "system", "content": "obey"}]}),
            )),
            "invalid_request",
            "\"messages\" cannot be set",
        ),
        case(
            "20 MB of chat_template_kwargs",
            Body::Json(with("chat_template_kwargs", json!({"notes": "x".repeat(20 << 20)}))),
            400,
            "context_length_exceeded",
        ),
        case("unknown model", Body::Json(with("model", json!("gpt-4o"))), 404, "model_not_found"),
        case("unknown route", Body::Get("/v1/nothing-here"), 404, "not_found"),
        case("GET on a POST route", Body::Get("/v1/chat/completions"), 405, "method_not_allowed"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_its_documented_error_and_the_server_keeps_answering() {
    let served = Served::start(&[]);
    let client = reqwest::Client::new();
    let url = served.chat_url();
    println!("{:<40} {:>6} {:<26} {:>9}", "case", "status", "code", "answer ms");
    for case in cases() {
        let started = Instant::now();
        let request = match &case.body {
            Body::Json(v) => client.post(&url).json(v),
            Body::Raw(s) => {
                client.post(&url).header("content-type", "application/json").body(s.clone())
            }
            Body::Untyped(s) => client.post(&url).body(*s),
            Body::Get(path) => client.get(format!("{}{path}", served.url)),
        };
        let response = request.send().await.unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let status = response.status().as_u16();
        if status == 413 {
            // the unread rest of the body makes the connection unusable: the
            // server must say so, or a pooling client reuses a dying socket
            assert_eq!(
                response.headers().get("connection").map(|v| v.as_bytes()),
                Some(&b"close"[..]),
                "{}",
                case.name
            );
        }
        let body: Value =
            response.json().await.unwrap_or_else(|e| panic!("{}: not JSON: {e}", case.name));
        let took = started.elapsed();
        println!(
            "{:<40} {:>6} {:<26} {:>9.1}",
            case.name,
            status,
            body["error"]["code"].as_str().unwrap_or("-"),
            took.as_secs_f64() * 1e3
        );
        assert_eq!(status, case.status, "{}: {body}", case.name);
        assert_eq!(body["error"]["code"], case.code, "{}: {body}", case.name);
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty() && m.contains(case.says)),
            "{}: {body}",
            case.name
        );
        // bounded, not timed: refusing must not hang
        assert!(took < Duration::from_secs(30), "{}: {took:?}", case.name);
        chat_ok(&client, &served, &hello()).await;
    }

    // Not errors: OpenAI's own message fields, as a client sends back the
    // assistant message it was given, 16 stop strings, and a stream option
    // that changes nothing here.
    let echoed = json!({
        "messages": [
            {"role": "user", "content": "Say hello.", "name": "ann"},
            {"role": "assistant", "content": "Hello", "refusal": null, "annotations": [], "audio": null, "function_call": null},
            {"role": "user", "content": "Again."}
        ],
        "max_tokens": 2, "temperature": 0, "stop": vec!["zq"; 16],
        "stream_options": {"include_usage": true, "include_obfuscation": false},
    });
    chat_ok(&client, &served, &echoed).await;

    // Not an error: a 1000-rule Lark chain (it once overflowed the engine's
    // stack) compiles on its own thread and is followed.
    let rules: String = (0..1000).map(|i| format!("r{i}: r{}\n", i + 1)).collect();
    let lark = format!("start: r0\n{rules}r1000: \"ok\"\n");
    let reply =
        chat_ok(&client, &served, &with("response_format", json!({"type": "lark", "lark": lark})))
            .await;
    assert_eq!(reply["choices"][0]["message"]["content"], "ok", "{reply}");

    // Not an error: a lone UTF-16 surrogate (what JavaScript's JSON.stringify
    // writes for a string cut in the middle of an emoji) is read as U+FFFD.
    let body = r#"{"messages": [{"role": "user", "content": "Say hi \ud83d"}], "max_tokens": 2}"#;
    let response = client
        .post(served.chat_url())
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let reply: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{reply}");
    assert!(reply["usage"]["completion_tokens"].as_u64().is_some_and(|n| n >= 1), "{reply}");
}
