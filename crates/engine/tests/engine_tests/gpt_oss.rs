//! gpt-oss beyond its parity with mlx-lm (`parity_mlx_lm.rs`): its own chat
//! template (the harmony format) through our minijinja path, with tools,
//! a past tool call and its result, and `reasoning_effort`; harmony's
//! markers as single tokens that decoding keeps for the stream router; and
//! a required tool call on the tiny model coming back as an OpenAI call.
use engine::batch::{Prompt, Request, SchedulerConfig};
use engine::cache::KvQuantization;
use engine::model;
use engine::tokenizer::{ChatMessage, TemplateOptions};
use fixtures::{TinyFamily, GPT_OSS_SPECIAL_TOKENS};
use serde_json::json;

use crate::common;

use common::{family_checkpoint, greedy_request, salted_prompt, Driver, LOAD};

fn weather_tool() -> serde_json::Value {
    json!({"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})
}

#[test]
fn gpt_oss_template_renders_harmony() {
    let dir = family_checkpoint(TinyFamily::GptOss, 11);
    let loaded = model::load(dir.path(), &LOAD).unwrap();
    let tok = &loaded.tokenizer;
    assert!(loaded.info.has_chat_template);

    let today = chrono::Local::now().format("%Y-%m-%d").to_string();
    let plain = tok.apply_chat_template(&[ChatMessage::user("Hi")], &TemplateOptions::default());
    assert_eq!(
        plain.unwrap(),
        format!(
            "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n\
             Knowledge cutoff: 2024-06\nCurrent date: {today}\n\nReasoning: medium\n\n\
             # Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>\
             <|start|>user<|message|>Hi<|end|><|start|>assistant"
        )
    );

    let mut call = ChatMessage::assistant("");
    call.reasoning_content = Some("Need the weather.".into());
    call.tool_calls = Some(vec![json!({"type": "function", "id": "call_1",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}})]);
    let messages = [
        ChatMessage::system("Be brief."),
        ChatMessage::user("Weather in Paris?"),
        call,
        ChatMessage::tool("{\"temp\": 21}"),
    ];
    let mut options = TemplateOptions { tools: Some(vec![weather_tool()]), ..Default::default() };
    options.extra.insert("reasoning_effort".into(), json!("high"));
    let rendered = tok.apply_chat_template(&messages, &options).unwrap();
    println!("{rendered}");
    let system_end = rendered.find("<|end|>").unwrap();
    assert!(rendered[..system_end].contains("Reasoning: high\n\n"), "{rendered}");
    assert!(
        rendered[..system_end]
            .ends_with("\nCalls to these tools must go to the commentary channel: 'functions'."),
        "{rendered}"
    );
    assert_eq!(
        &rendered[system_end..],
        "<|end|><|start|>developer<|message|># Instructions\n\nBe brief.\n\n# Tools\n\n## functions\n\n\
         namespace functions {\n\n// Weather in a city\ntype get_weather = (_: {\ncity: string,\n}) => any;\n\n\
         } // namespace functions<|end|>\
         <|start|>user<|message|>Weather in Paris?<|end|>\
         <|start|>assistant<|channel|>analysis<|message|>Need the weather.<|end|>\
         <|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>\
         <|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>\"{\\\"temp\\\": 21}\"<|end|>\
         <|start|>assistant"
    );
    // Each marker the template writes is one token, and decoding that skips
    // specials keeps them all (the harmony router reads them), not `<|endoftext|>`.
    let ids = tok.encode(&rendered, false).unwrap();
    for special in ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|call|>"] {
        let id = tok.token_to_id(special).expect("in the vocabulary");
        assert!(ids.contains(&id), "{special} is not one token in {ids:?}");
    }
    let id = |t: &str| tok.token_to_id(t).unwrap();
    let pieces = [id("<|channel|>"), 40, id("<|message|>"), 41, id("<|end|>"), 0];
    assert_eq!(tok.decode(&pieces, true).unwrap(), "<|channel|>%<|message|>&<|end|>");
    assert_eq!(GPT_OSS_SPECIAL_TOKENS.len(), 8);
}

/// The registry says gpt-oss thinks and calls tools; a required call on the
/// tiny model is written in harmony's commentary channel and comes back as
/// an OpenAI-shaped call of the offered function, with arguments of its schema.
#[test]
fn gpt_oss_calls_tools_in_the_commentary_channel() {
    let dir = family_checkpoint(TinyFamily::GptOss, 11);
    let info = model::describe(dir.path()).unwrap();
    assert_eq!((info.family.as_deref(), info.architecture.as_str()), (Some("gpt-oss"), "gpt_oss"));
    let caps = info.capabilities;
    assert!(caps.tools && caps.thinking && !caps.vision, "{caps:?}");

    // A closed set of cities and no other keys: random weights never end a
    // free string.
    let mut tool = weather_tool();
    tool["function"]["parameters"]["properties"]["city"]["enum"] = json!(["Paris", "Rome"]);
    tool["function"]["parameters"]["additionalProperties"] = json!(false);
    let options = TemplateOptions { tools: Some(vec![tool]), ..Default::default() };
    let mut request = Request::new(Prompt::Chat {
        messages: vec![ChatMessage::user("Weather in Paris?")],
        options,
    })
    // The tiny vocabulary spells the header and the JSON byte by byte.
    .with_max_tokens(100)
    .with_sampling(engine::sample::SamplingParams::greedy());
    request.require_tool_call = true;
    request.parallel_tool_calls = false;
    let mut d = Driver::new(dir.path(), SchedulerConfig::default());
    let row = d.submit(request);
    d.run_to_end();
    let c = d.completion(row);
    assert!(c.error.is_none(), "{:?}", c.error);
    assert_eq!(c.tool_calls.len(), 1, "{c:?}");
    assert!(c.content.is_empty(), "the header and the call are not content: {:?}", c.content);
    assert_eq!(c.tool_calls[0].name, "get_weather");
    let args: serde_json::Value = serde_json::from_str(&c.tool_calls[0].arguments).unwrap();
    assert!(["Paris", "Rome"].contains(&args["city"].as_str().unwrap()), "{args}");
}

/// 8-bit keys and values on its full-attention layer (the sliding layers
/// keep float windows, the last layer stays float): attention sinks over the
/// quantized cache. A batch of rows of different lengths, one joining
/// mid-decode, gives each row the answer it gets alone under the same setting.
#[test]
fn gpt_oss_kv_quantization_keeps_its_sinks() {
    let dir = family_checkpoint(TinyFamily::GptOss, 11);
    let kv = KvQuantization { bits: 8, group_size: 32, start: 0 };
    let config =
        SchedulerConfig { kv_quantization: Some(kv), prefill_budget: 6, ..Default::default() };
    let requests =
        [(salted_prompt(7, 1), 14), (salted_prompt(19, 2), 10), (salted_prompt(11, 3), 12)];
    let alone: Vec<String> = requests
        .iter()
        .map(|(ids, n)| {
            let mut d = Driver::new(dir.path(), config.clone());
            let row = d.submit(greedy_request(ids, *n));
            d.run_to_end();
            d.completion(row).content.clone()
        })
        .collect();
    let mut d = Driver::new(dir.path(), config);
    let status = d.scheduler.stats().kv_quantization;
    assert!(status.starts_with("8-bit") && status.contains("on 1 of 4 layers"), "{status}");
    let mut rows: Vec<usize> =
        requests[..2].iter().map(|(ids, n)| d.submit(greedy_request(ids, *n))).collect();
    for _ in 0..6 {
        d.step();
    }
    assert!(d.scheduler.stats().decode_steps > 0, "the first rows decode when the last joins");
    rows.push(d.submit(greedy_request(&requests[2].0, requests[2].1)));
    d.run_to_end();
    for (i, row) in rows.into_iter().enumerate() {
        let c = d.completion(row);
        assert!(c.error.is_none(), "{:?}", c.error);
        assert_eq!(c.content, alone[i], "row {i}");
    }
}
