//! Chat completions over real HTTP against a tiny seeded llama: whole and
//! streamed replies agree with the engine run directly, usage counts are the
//! engine's, stop strings, thinking, tools, and concurrent clients.
use crate::common;
#[path = "chat/dialects.rs"]
mod dialects;

use common::{engine_request, no_eos, read_stream, start, Setup, THINKING_TEMPLATE, TOOL_TEMPLATE};
use engine::tokenizer::{ChatMessage, TemplateOptions};
use serde_json::{json, Value};

fn ask(text: &str, max_tokens: usize) -> Value {
    json!({
        "model": "default",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "logit_bias": {"2": -100},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_reply_is_the_engines_answer_with_its_usage() {
    let server = start(Setup::default()).await;
    let reply = server.chat(&ask("hello there", 12)).await;
    let direct = server
        .engine_run(engine_request(
            vec![ChatMessage::user("hello there")],
            TemplateOptions::default(),
            12,
            no_eos(),
        ))
        .await;
    assert!(direct.error.is_none(), "{:?}", direct.error);

    assert!(reply["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(reply["object"], "chat.completion");
    assert!(reply["created"].as_u64().unwrap() > 1_600_000_000);
    assert_eq!(reply["model"], server.engine.model_info().name.as_str());
    let choice = &reply["choices"][0];
    assert_eq!(choice["index"], 0);
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["message"]["content"], direct.content.as_str());
    assert_eq!(choice["finish_reason"], "length");
    assert!(choice["message"].get("reasoning_content").is_none());
    let usage = &reply["usage"];
    assert_eq!(usage["prompt_tokens"], direct.stats.prompt_tokens);
    assert_eq!(usage["completion_tokens"], 12);
    assert_eq!(usage["total_tokens"], direct.stats.prompt_tokens + 12);
    assert!(usage["prompt_tokens_details"]["cached_tokens"].is_u64());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_reply_opens_with_the_role_and_ends_with_usage_and_done() {
    let server = start(Setup::default()).await;
    let whole = server.chat(&ask("stream me", 10)).await;

    let mut body = ask("stream me", 10);
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let streamed = read_stream(server.post("/v1/chat/completions", &body).await).await;
    assert!(streamed.done, "no [DONE]");
    assert_eq!(streamed.content, whole["choices"][0]["message"]["content"].as_str().unwrap());
    assert_eq!(streamed.finish_reason.as_deref(), Some("length"));
    let usage = streamed.usage.expect("a usage chunk");
    for field in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        assert_eq!(usage[field], whole["usage"][field], "{field}");
    }
    // The same prompt again may come from the engine's prompt cache.
    assert!(
        usage["prompt_tokens_details"]["cached_tokens"].as_u64() <= usage["prompt_tokens"].as_u64()
    );
    assert_eq!(
        streamed.chunks.last().unwrap()["choices"],
        json!([]),
        "usage comes last, without choices"
    );
    // Content arrives in several deltas, not all at the end.
    let deltas = streamed
        .chunks
        .iter()
        .filter(|c| c["choices"][0]["delta"]["content"].as_str().is_some_and(|t| !t.is_empty()));
    assert!(deltas.count() > 1);

    // Without include_usage there is no usage chunk.
    body["stream_options"] = json!({"include_usage": false});
    let plain = read_stream(server.post("/v1/chat/completions", &body).await).await;
    assert!(plain.usage.is_none() && plain.done);
    assert_eq!(plain.content, streamed.content);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_string_ends_the_answer_before_it() {
    let server = start(Setup::default()).await;
    let full = server.chat(&ask("tell me a story", 40)).await["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    let chars: Vec<char> = full.chars().collect();
    assert!(chars.len() > 16, "answer too short: {full:?}");
    let stop: String = chars[10..13].iter().collect();
    let expected = &full[..full.find(&stop).unwrap()];

    for stop_field in [json!(stop), json!(["never-appears", stop])] {
        let mut body = ask("tell me a story", 40);
        body["stop"] = stop_field;
        let reply = server.chat(&body).await;
        assert_eq!(reply["choices"][0]["message"]["content"], expected);
        assert_eq!(reply["choices"][0]["finish_reason"], "stop");

        body["stream"] = json!(true);
        let streamed = read_stream(server.post("/v1/chat/completions", &body).await).await;
        assert_eq!(streamed.content, expected);
        assert_eq!(streamed.finish_reason.as_deref(), Some("stop"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thinking_is_kept_apart_and_can_be_switched_off() {
    let server = start(Setup { template: Some(THINKING_TEMPLATE), ..Default::default() }).await;

    // The template opens <think>; random weights never close it, so all is reasoning.
    let thinking = server.chat(&ask("think first", 16)).await;
    let message = &thinking["choices"][0]["message"];
    assert!(!message["reasoning_content"].as_str().unwrap().is_empty(), "{thinking}");
    assert_eq!(message["content"], "");

    let mut body = ask("think first", 16);
    body["stream"] = json!(true);
    let streamed = read_stream(server.post("/v1/chat/completions", &body).await).await;
    assert_eq!(streamed.reasoning, message["reasoning_content"].as_str().unwrap());
    assert_eq!(streamed.content, "");

    for off in [
        json!({"chat_template_kwargs": {"enable_thinking": false}}),
        json!({"reasoning_effort": "none"}),
    ] {
        let mut body = ask("think first", 16);
        body.as_object_mut().unwrap().extend(off.as_object().unwrap().clone());
        let reply = server.chat(&body).await;
        let message = &reply["choices"][0]["message"];
        assert!(message.get("reasoning_content").is_none(), "{off}: {reply}");
        assert!(!message["content"].as_str().unwrap().is_empty(), "{off}: {reply}");
    }

    // A thinking budget closes thinking, and an answer follows.
    let mut body = ask("think first", 40);
    body["thinking_budget"] = json!(5);
    let reply = server.chat(&body).await;
    let message = &reply["choices"][0]["message"];
    assert!(!message["reasoning_content"].as_str().unwrap().is_empty());
    assert!(!message["content"].as_str().unwrap().is_empty(), "{reply}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_and_a_tool_result_render_and_run() {
    let server = start(Setup { template: Some(TOOL_TEMPLATE), ..Default::default() }).await;
    let tool = json!({"type": "function", "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    }});
    let messages = json!([
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 21, \"sky\": \"clear\"}"}
    ]);
    let body = json!({"messages": messages, "tools": [tool], "tool_choice": "auto", "max_tokens": 8, "logit_bias": {"2": -100}});
    let reply = server.chat(&body).await;
    assert_eq!(reply["choices"][0]["finish_reason"], "length");

    // The same conversation on the engine, with the call's arguments as the
    // object templates expect: the prompts match token for token.
    let mut call = ChatMessage::assistant("");
    call.tool_calls = Some(vec![json!({"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}})]);
    let mut result = ChatMessage::tool("{\"temperature\": 21, \"sky\": \"clear\"}");
    result.tool_call_id = Some("call_1".into());
    let conversation = vec![ChatMessage::user("What is the weather in Paris?"), call, result];
    let options = TemplateOptions { tools: Some(vec![tool.clone()]), ..Default::default() };
    let direct = server.engine_run(engine_request(conversation, options, 8, no_eos())).await;
    assert!(direct.error.is_none(), "{:?}", direct.error);
    assert_eq!(reply["usage"]["prompt_tokens"], direct.stats.prompt_tokens);
    assert_eq!(reply["choices"][0]["message"]["content"], direct.content.as_str());

    // tool_choice "none" leaves the tools out of the prompt.
    let mut none = body.clone();
    none["tool_choice"] = json!("none");
    let without = server.chat(&none).await;
    assert!(without["usage"]["prompt_tokens"].as_u64() < reply["usage"]["prompt_tokens"].as_u64());

    // Streamed, the same request ends well-formed.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let s = read_stream(server.post("/v1/chat/completions", &streamed).await).await;
    assert!(s.done);
    assert_eq!(s.content, direct.content);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_are_batched_and_each_gets_its_own_answer() {
    let server = start(Setup::default()).await;
    let prompts = ["first question", "a second, longer question here", "3", "the fourth one"];
    let mut alone = Vec::new();
    for p in prompts {
        alone.push(
            server.chat(&ask(p, 48)).await["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let steps_before = server.engine.stats_async().await.unwrap().decode_steps;
    let together = futures_util::future::join_all(prompts.iter().map(|p| {
        let mut body = ask(p, 48);
        body["stream"] = json!(true);
        let server = &server;
        async move { read_stream(server.post("/v1/chat/completions", &body).await).await }
    }))
    .await;
    for (streamed, expected) in together.iter().zip(&alone) {
        assert_eq!(&streamed.content, expected);
        assert_eq!(streamed.finish_reason.as_deref(), Some("length"));
    }
    // Four replies of 48 tokens one after another take 4 × 47 decode steps
    // (the first token comes from prefill); batched, they share steps. The
    // bound leaves room for clients that arrive a little apart.
    let steps = server.engine.stats_async().await.unwrap().decode_steps - steps_before;
    assert!(steps < 3 * 47, "{steps} decode steps: the requests were not batched");
}

/// What a tiny random model answers under `response_format` is the grammar's
/// doing: it must parse and follow the schema, whole and streamed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_format_holds_whole_and_streamed() {
    let server = start(Setup::default()).await;
    let schema = json!({"type": "object", "properties": {"size": {"enum": ["S", "M", "L"]}, "count": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["size", "count"], "additionalProperties": false});
    let mut body = ask("pick", 60);
    body["response_format"] = json!({"type": "json_schema", "json_schema": {"name": "pick", "schema": schema, "strict": true}});
    // The answer is done when the grammar is: end-of-sequence banned or not.
    let reply = server.chat(&body).await;
    assert_eq!(reply["choices"][0]["finish_reason"], "stop", "{reply}");
    let whole = reply["choices"][0]["message"]["content"].as_str().unwrap().to_string();
    let value: Value = serde_json::from_str(&whole).unwrap_or_else(|e| panic!("{e}: {whole:?}"));
    assert!(["S", "M", "L"].contains(&value["size"].as_str().unwrap()), "{value}");
    assert!(value["count"].as_u64().unwrap() <= 9, "{value}");
    assert_eq!(value.as_object().unwrap().len(), 2, "{value}");

    body["stream"] = json!(true);
    let streamed = read_stream(server.post("/v1/chat/completions", &body).await).await;
    assert!(streamed.done);
    assert_eq!(streamed.content, whole, "greedy: the stream is the same answer");

    let mut regex = ask("digits", 30);
    regex["response_format"] = json!({"type": "regex", "regex": "[0-9]{3}-[0-9]{2}"});
    let reply = server.chat(&regex).await;
    let text = reply["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(text.len() == 6 && text.as_bytes()[3] == b'-', "{text:?}");

    // A refused schema is the client's 400, named.
    let mut bad = ask("x", 4);
    bad["response_format"] = json!({"type": "json_schema", "json_schema": {"name": "bad", "schema": {"type": "no-such-type"}}});
    let response = server.post("/v1/chat/completions", &bad).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert!(error["error"]["message"].as_str().unwrap().contains("invalid JSON schema"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_required_tool_call_comes_back_as_a_valid_call() {
    let server = start(Setup { template: Some(TOOL_TEMPLATE), ..Default::default() }).await;
    let tools = json!([
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
            "properties": {"city": {"enum": ["Paris", "Rome"]}}, "required": ["city"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
            "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"], "additionalProperties": false}}}
    ]);
    for (choice, parallel) in [
        (json!("required"), false),
        (json!({"type": "function", "function": {"name": "get_time"}}), true),
    ] {
        let body = json!({"messages": [{"role": "user", "content": "weather?"}], "tools": tools, "tool_choice": choice,
            "parallel_tool_calls": parallel, "max_tokens": 80});
        let reply = server.chat(&body).await;
        let choice_out = &reply["choices"][0];
        let calls = choice_out["message"]["tool_calls"].as_array().unwrap();
        assert!(!calls.is_empty(), "{reply}");
        if parallel {
            // Random weights may go on calling until the token limit.
            assert!(
                ["tool_calls", "length"].contains(&choice_out["finish_reason"].as_str().unwrap()),
                "{reply}"
            );
        } else {
            assert_eq!(choice_out["finish_reason"], "tool_calls", "{reply}");
            assert_eq!(calls.len(), 1, "{reply}");
        }
        for call in calls {
            let name = call["function"]["name"].as_str().unwrap();
            let args: Value =
                serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
            match name {
                "get_weather" => {
                    assert!(["Paris", "Rome"].contains(&args["city"].as_str().unwrap()), "{args}")
                }
                "get_time" => {
                    assert!(["UTC", "CET"].contains(&args["zone"].as_str().unwrap()), "{args}")
                }
                other => panic!("{other}"),
            }
            if body["tool_choice"].is_object() {
                assert_eq!(name, "get_time", "the named function");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logprobs_come_with_every_token_whole_and_streamed() {
    let server = start(Setup::default()).await;
    let mut body = ask("hello there", 6);
    body["logprobs"] = json!(true);
    body["top_logprobs"] = json!(2);
    let reply = server.chat(&body).await;
    let content = reply["choices"][0]["logprobs"]["content"].as_array().unwrap().clone();
    assert_eq!(content.len(), 6, "{reply}");
    let mut spelled = Vec::new();
    for entry in &content {
        let logprob = entry["logprob"].as_f64().unwrap();
        assert!(logprob <= 0.0, "{entry}");
        let top = entry["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 2, "{entry}");
        assert!(top[0]["logprob"].as_f64() >= top[1]["logprob"].as_f64(), "{entry}");
        spelled
            .extend(entry["bytes"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap() as u8));
    }
    assert_eq!(
        String::from_utf8_lossy(&spelled),
        reply["choices"][0]["message"]["content"].as_str().unwrap()
    );

    // streamed: the same entries, spread over the chunks
    body["stream"] = json!(true);
    let response = server.post("/v1/chat/completions", &body).await;
    let text = response.text().await.unwrap();
    let streamed: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .flat_map(|chunk| {
            chunk["choices"][0]["logprobs"]["content"].as_array().cloned().unwrap_or_default()
        })
        .collect();
    // (the second request reuses the first one's prompt cache: the same
    // tokens, log-probabilities equal to float rounding)
    assert_eq!(streamed.len(), content.len());
    for (s, w) in streamed.iter().zip(&content) {
        assert_eq!((&s["token"], &s["bytes"]), (&w["token"], &w["bytes"]));
        assert!(
            (s["logprob"].as_f64().unwrap() - w["logprob"].as_f64().unwrap()).abs() < 1e-4,
            "{s} vs {w}"
        );
        assert_eq!(s["top_logprobs"].as_array().unwrap().len(), 2);
    }

    // asked for nothing: null, as OpenAI sends it
    let plain = server.chat(&ask("hello there", 3)).await;
    assert!(plain["choices"][0]["logprobs"].is_null());
}
