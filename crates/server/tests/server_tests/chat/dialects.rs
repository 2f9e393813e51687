//! The other dialects over real HTTP against the same tiny llama: each
//! answer equals the chat-completions answer to the same conversation (one
//! inner request model), whole and streamed, with their own shapes, errors
//! and, for the Responses API, the stored conversation.
use super::common::{start, Setup, SseReader, TestServer, TOOL_TEMPLATE};
use engine::batch::{Prompt, Request};
use serde_json::{json, Value};
use server::ServerConfig;

/// The chat-completions answer and usage to `messages` (greedy, as every
/// dialect's request here).
async fn chat_answer(server: &TestServer, messages: Value, max_tokens: usize) -> (String, Value) {
    let reply = server.chat(&json!({"messages": messages, "max_tokens": max_tokens})).await;
    let text = reply["choices"][0]["message"]["content"].as_str().unwrap().to_owned();
    (text, reply["usage"].clone())
}

/// Every named event of a stream: (name, data).
async fn named_events(response: reqwest::Response) -> Vec<(String, Value)> {
    assert_eq!(response.status(), 200);
    let mut reader = SseReader::new(response);
    let mut out = Vec::new();
    while let Some((name, data)) = reader.next_named().await {
        out.push((name.expect("every event is named"), serde_json::from_str(&data).unwrap()));
    }
    out
}

async fn error_of(response: reqwest::Response, status: u16) -> Value {
    assert_eq!(response.status(), status);
    response.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_messages_answer_as_chat_completions_do() {
    let config = ServerConfig { port: 0, api_key: Some("sekrit".into()), ..Default::default() };
    let server = start(Setup { config, ..Default::default() }).await;
    let client = &server.client;
    let url = |path: &str| format!("{}{path}", server.url);
    let messages = json!([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]);
    let (expected, usage) = {
        let reply = client
            .post(url("/v1/chat/completions"))
            .header("x-api-key", "sekrit")
            .json(&json!({"messages": messages, "max_tokens": 12}))
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status(), 200, "x-api-key is accepted by every endpoint");
        let reply: Value = reply.json().await.unwrap();
        (
            reply["choices"][0]["message"]["content"].as_str().unwrap().to_owned(),
            reply["usage"].clone(),
        )
    };
    assert!(!expected.is_empty(), "an empty answer would prove nothing");
    let body = json!({"model": "default", "max_tokens": 12, "system": "be brief",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hello there"}]}]});
    let post = |body: &Value, path: &str| {
        client.post(url(path)).header("x-api-key", "sekrit").json(body).send()
    };

    let whole: Value = post(&body, "/v1/messages").await.unwrap().json().await.unwrap();
    assert_eq!(
        (whole["type"].as_str(), whole["role"].as_str()),
        (Some("message"), Some("assistant"))
    );
    assert!(whole["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(whole["content"], json!([{"type": "text", "text": expected}]));
    let prompt = usage["prompt_tokens"].as_u64().unwrap();
    let u = &whole["usage"];
    assert_eq!(
        u["input_tokens"].as_u64().unwrap() + u["cache_read_input_tokens"].as_u64().unwrap(),
        prompt
    );
    let generated = u["output_tokens"].as_u64().unwrap();
    assert_eq!(whole["stop_reason"], if generated == 12 { "max_tokens" } else { "end_turn" });

    let counted: Value =
        post(&body, "/v1/messages/count_tokens").await.unwrap().json().await.unwrap();
    assert_eq!(counted, json!({"input_tokens": prompt}));

    let mut streaming = body.clone();
    streaming["stream"] = json!(true);
    let events = named_events(post(&streaming, "/v1/messages").await.unwrap()).await;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"message_start"));
    assert_eq!(names[names.len() - 3..], ["content_block_stop", "message_delta", "message_stop"]);
    assert!(events.iter().all(|(name, data)| data["type"] == *name));
    let text: String = events
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, d)| d["delta"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, expected, "streamed text is the whole reply's");
    assert_eq!(events[events.len() - 2].1["usage"]["output_tokens"], generated);

    // Errors come in Anthropic's shape, the API key's too.
    let e = error_of(post(&json!({"messages": []}), "/v1/messages").await.unwrap(), 400).await;
    assert_eq!(e["type"], "error");
    assert_eq!(e["error"]["type"], "invalid_request_error");
    assert!(e["error"]["message"].as_str().unwrap().contains("max_tokens"), "{e}");
    let e = error_of(
        post(&json!({"max_tokens": 1, "messages": "x"}), "/v1/messages").await.unwrap(),
        400,
    )
    .await;
    assert_eq!(e["error"]["type"], "invalid_request_error", "a body that does not parse: {e}");
    let e = error_of(client.post(url("/v1/messages")).json(&body).send().await.unwrap(), 401).await;
    assert_eq!(e["error"]["type"], "authentication_error");
    let e = error_of(
        client
            .post(url("/v1/messages"))
            .header("x-api-key", "guess")
            .json(&body)
            .send()
            .await
            .unwrap(),
        401,
    )
    .await;
    assert_eq!(e["type"], "error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_answer_stream_are_stored_and_continue_a_conversation() {
    let server = start(Setup::default()).await;
    let first = json!({"model": "default", "instructions": "be brief", "input": "hello there",
        "max_output_tokens": 10});
    let (expected, usage) = chat_answer(
        &server,
        json!([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]),
        10,
    )
    .await;
    assert!(!expected.is_empty(), "an empty answer would prove nothing");
    let response = server.post("/v1/responses", &first).await;
    assert_eq!(response.status(), 200);
    let whole: Value = response.json().await.unwrap();
    assert_eq!(whole["object"], "response");
    let message =
        whole["output"].as_array().unwrap().iter().find(|i| i["type"] == "message").unwrap();
    assert_eq!(message["content"][0]["text"], expected.as_str());
    assert_eq!(whole["usage"]["input_tokens"], usage["prompt_tokens"]);
    assert_eq!(whole["usage"]["output_tokens"], usage["completion_tokens"]);
    let length = usage["completion_tokens"] == 10;
    assert_eq!(whole["status"], if length { "incomplete" } else { "completed" });

    let mut streaming = first.clone();
    streaming["stream"] = json!(true);
    let events = named_events(server.post("/v1/responses", &streaming).await).await;
    for (i, (name, data)) in events.iter().enumerate() {
        assert_eq!(
            (data["type"].as_str(), data["sequence_number"].as_u64()),
            (Some(name.as_str()), Some(i as u64))
        );
    }
    assert_eq!(events[0].0, "response.created");
    let text: String = events
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, expected);
    let (last, done) = events.last().unwrap();
    assert_eq!(last, if length { "response.incomplete" } else { "response.completed" });

    // Stored: read back, continued (without the first turn's instructions), deleted.
    let id = whole["id"].as_str().unwrap();
    let stored: Value = server.get(&format!("/v1/responses/{id}")).await.json().await.unwrap();
    assert_eq!(stored, whole);
    assert!(
        server
            .get(&format!("/v1/responses/{}", done["response"]["id"].as_str().unwrap()))
            .await
            .status()
            == 200
    );
    let next = json!({"input": "and then?", "previous_response_id": id, "max_output_tokens": 10});
    let continued: Value = server.post("/v1/responses", &next).await.json().await.unwrap();
    let (expected_next, usage_next) = chat_answer(
        &server,
        json!([{"role": "user", "content": "hello there"}, {"role": "assistant", "content": expected},
            {"role": "user", "content": "and then?"}]),
        10,
    )
    .await;
    let message =
        continued["output"].as_array().unwrap().iter().find(|i| i["type"] == "message").unwrap();
    assert_eq!(message["content"][0]["text"], expected_next.as_str());
    assert_eq!(continued["usage"]["input_tokens"], usage_next["prompt_tokens"]);
    assert_eq!(continued["previous_response_id"], id);

    let deleted: Value = server
        .client
        .delete(format!("{}/v1/responses/{id}", server.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(deleted, json!({"id": id, "object": "response", "deleted": true}));
    assert_eq!(server.get(&format!("/v1/responses/{id}")).await.status(), 404);
    let e = error_of(server.post("/v1/responses", &next).await, 404).await;
    assert_eq!(e["error"]["code"], "previous_response_not_found");
    let e = error_of(
        server.post("/v1/responses", &json!({"input": "x", "background": true})).await,
        400,
    )
    .await;
    assert!(e["error"]["message"].as_str().unwrap().contains("background"), "{e}");
    let unstored = json!({"input": "x", "store": false, "max_output_tokens": 2});
    let unstored: Value = server.post("/v1/responses", &unstored).await.json().await.unwrap();
    assert_eq!(
        server.get(&format!("/v1/responses/{}", unstored["id"].as_str().unwrap())).await.status(),
        404
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_completions_run_raw_prompts_with_n_echo_and_logprobs() {
    let server = start(Setup::default()).await;
    let direct =
        server.engine_run(Request::new(Prompt::Text("Once upon".into())).with_max_tokens(6)).await;
    let body =
        json!({"model": "default", "prompt": "Once upon", "max_tokens": 6, "n": 2, "echo": true});
    let whole: Value = server.post("/v1/completions", &body).await.json().await.unwrap();
    assert_eq!(whole["object"], "text_completion");
    let choices = whole["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 2);
    for (i, choice) in choices.iter().enumerate() {
        assert_eq!(choice["index"], i);
        assert_eq!(
            choice["text"],
            format!("Once upon{}", direct.content),
            "greedy: both the engine's answer"
        );
    }
    assert_eq!(whole["usage"]["prompt_tokens"], direct.stats.prompt_tokens);
    assert_eq!(whole["usage"]["completion_tokens"], 2 * direct.stats.generated_tokens);

    let mut streaming = body.clone();
    streaming["stream"] = json!(true);
    streaming["stream_options"] = json!({"include_usage": true});
    let mut reader = SseReader::new(server.post("/v1/completions", &streaming).await);
    let mut texts = [String::new(), String::new()];
    let mut finishes = 0;
    let mut payloads = Vec::new();
    while let Some(data) = reader.next().await {
        payloads.push(data);
    }
    assert_eq!(payloads.last().map(String::as_str), Some("[DONE]"));
    for data in &payloads[..payloads.len() - 1] {
        let chunk: Value = serde_json::from_str(data).unwrap();
        if let Some(choice) = chunk["choices"].get(0) {
            texts[choice["index"].as_u64().unwrap() as usize]
                .push_str(choice["text"].as_str().unwrap());
            finishes += choice["finish_reason"].is_string() as usize;
        } else {
            assert_eq!(chunk["usage"], whole["usage"]);
        }
    }
    assert_eq!(finishes, 2);
    assert!(texts.iter().all(|t| *t == choices[0]["text"].as_str().unwrap()), "{texts:?}");

    // Token ids, with the answer's log-probabilities.
    let ids: Value = server
        .post("/v1/completions", &json!({"prompt": [1, 5, 9], "max_tokens": 3, "logprobs": 2}))
        .await
        .json()
        .await
        .unwrap();
    let logprobs = &ids["choices"][0]["logprobs"];
    let tokens = logprobs["tokens"].as_array().unwrap();
    assert_eq!(tokens.len(), ids["usage"]["completion_tokens"].as_u64().unwrap() as usize);
    assert!(logprobs["token_logprobs"]
        .as_array()
        .unwrap()
        .iter()
        .all(|l| l.as_f64().unwrap() <= 0.0));
    assert!(logprobs["top_logprobs"].as_array().unwrap().iter().all(|t| t
        .as_object()
        .unwrap()
        .len()
        <= 2));
    // echo with logprobs (the prompt scored): server_tests::completions_echo
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_required_tool_call_comes_back_in_each_dialects_shape() {
    let server = start(Setup { template: Some(TOOL_TEMPLATE), ..Default::default() }).await;
    let schema = json!({"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}},
        "required": ["city"], "additionalProperties": false});
    let city_of = |args: &Value| args["city"].as_str().map(str::to_owned);

    // Anthropic: one tool_use block (no parallel calls), its input an object.
    let message: Value = server
        .post(
            "/v1/messages",
            &json!({"max_tokens": 120, "messages": [{"role": "user", "content": "weather?"}],
                "tools": [{"name": "get_weather", "input_schema": schema}],
                "tool_choice": {"type": "any", "disable_parallel_tool_use": true}}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(message["stop_reason"], "tool_use", "{message}");
    let uses: Vec<&Value> =
        message["content"].as_array().unwrap().iter().filter(|b| b["type"] == "tool_use").collect();
    assert_eq!(uses.len(), 1, "{message}");
    assert_eq!(uses[0]["name"], "get_weather");
    assert!(["Paris", "Rome"].contains(&city_of(&uses[0]["input"]).unwrap().as_str()), "{message}");

    // Responses, streamed: the call's item is added, its arguments stream, and it is done.
    let body = json!({"input": "weather?", "stream": true, "max_output_tokens": 120,
        "parallel_tool_calls": false, "tool_choice": "required",
        "tools": [{"type": "function", "name": "get_weather", "parameters": schema}]});
    let events = named_events(server.post("/v1/responses", &body).await).await;
    let done = events
        .iter()
        .find(|(n, d)| n == "response.output_item.done" && d["item"]["type"] == "function_call")
        .map(|(_, d)| d["item"].clone())
        .expect("a function_call item");
    let arguments: String = events
        .iter()
        .filter(|(n, _)| n == "response.function_call_arguments.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap())
        .collect();
    assert_eq!(done["arguments"], arguments.as_str());
    let args: Value = serde_json::from_str(&arguments).unwrap();
    assert!(["Paris", "Rome"].contains(&city_of(&args).unwrap().as_str()), "{args}");
    let (last, completed) = events.last().unwrap();
    assert_eq!(last, "response.completed");
    assert_eq!(completed["response"]["output"].as_array().unwrap().last().unwrap(), &done);
}
