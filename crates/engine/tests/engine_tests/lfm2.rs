//! LFM2 beyond its parity with mlx-lm (`parity_mlx_lm.rs`) and the batch
//! tests every family runs (`families.rs`, `speculative.rs`): its chat
//! template through our minijinja path — the `<|startoftext|>` BOS, tools
//! listed in the system turn, tool results wrapped — and encoded with its
//! specials as single tokens, and KV quantization on its attention layers
//! beside the convolution states.
use engine::batch::{Prompt, Request, SchedulerConfig};
use engine::cache::KvQuantization;
use engine::model;
use engine::tokenizer::{ChatMessage, TemplateOptions};
use fixtures::{TinyFamily, LFM2_SPECIAL_TOKENS};
use serde_json::json;

use crate::common;

use common::{family_checkpoint, greedy_request, salted_prompt, Driver, LOAD};

fn weather_tool() -> serde_json::Value {
    json!({"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})
}

#[test]
fn lfm2_template_lists_tools_and_wraps_tool_results() {
    let dir = family_checkpoint(TinyFamily::Lfm2, 11);
    let loaded = model::load(dir.path(), &LOAD).unwrap();
    let tok = &loaded.tokenizer;
    assert!(loaded.info.has_chat_template);

    let plain = tok.apply_chat_template(&[ChatMessage::user("Hi")], &TemplateOptions::default());
    assert_eq!(
        plain.unwrap(),
        "<|startoftext|><|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );

    let messages = [
        ChatMessage::system("Be brief."),
        ChatMessage::user("Weather in Paris?"),
        ChatMessage::assistant("<|tool_call_start|>[get_weather(city=\"Paris\")]<|tool_call_end|>"),
        ChatMessage::tool("{\"temp\": 21}"),
    ];
    let options = TemplateOptions { tools: Some(vec![weather_tool()]), ..Default::default() };
    let rendered = tok.apply_chat_template(&messages, &options).unwrap();
    let tools = r#"[{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]"#;
    assert_eq!(
        rendered,
        format!(
            "<|startoftext|><|im_start|>system\nBe brief.\nList of tools: <|tool_list_start|>{tools}<|tool_list_end|><|im_end|>\n\
             <|im_start|>user\nWeather in Paris?<|im_end|>\n\
             <|im_start|>assistant\n<|tool_call_start|>[get_weather(city=\"Paris\")]<|tool_call_end|><|im_end|>\n\
             <|im_start|>tool\n<|tool_response_start|>{{\"temp\": 21}}<|tool_response_end|><|im_end|>\n\
             <|im_start|>assistant\n"
        )
    );
    // Each special the template writes is one token (text typed by the
    // user stays text: encode_chat guards it).
    let ids = tok.encode(&rendered, false).unwrap();
    for special in LFM2_SPECIAL_TOKENS.iter().filter(|t| !t.contains("tool_call")) {
        let id = tok.token_to_id(special).expect("in the vocabulary");
        assert!(ids.contains(&id), "{special} is not one token in {ids:?}");
    }
    // The tool-call tags are special tokens; decoding that skips specials
    // keeps them (the stream matcher must see them), not the others.
    let open = tok.token_to_id("<|tool_call_start|>").unwrap();
    let end = tok.token_to_id("<|im_end|>").unwrap();
    assert_eq!(tok.decode(&[open, 40, end], true).unwrap(), "<|tool_call_start|>%");
    assert_eq!(ids[0], tok.token_to_id("<|startoftext|>").unwrap(), "the template's BOS, once");
    assert_eq!(ids.iter().filter(|&&t| t == ids[0]).count(), 1);
}

/// 8-bit keys and values on the two attention layers (the convolution
/// layers keep their states, the last layer is a convolution): a batch of
/// rows of different lengths with one joining mid-decode gives each row the
/// answer it gets alone under the same setting.
#[test]
fn lfm2_kv_quantization_applies_to_its_attention_layers() {
    let dir = family_checkpoint(TinyFamily::Lfm2, 11);
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
    let mut d = Driver::new(dir.path(), config.clone());
    let status = d.scheduler.stats().kv_quantization;
    assert!(status.starts_with("8-bit") && status.contains("on 2 of 5 layers"), "{status}");
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

    // The same chat, float and quantized, runs through the template.
    let chat = Request::new(Prompt::Chat {
        messages: vec![ChatMessage::user("hello")],
        options: TemplateOptions::default(),
    })
    .with_max_tokens(6)
    .with_sampling(common::greedy_no_eos());
    let mut d = Driver::new(dir.path(), config);
    let row = d.submit(chat);
    d.run_to_end();
    assert_eq!(d.completion(row).stats.generated_tokens, 6);
}

/// The template's tool list makes the registry say the model calls tools
/// (in the pythonic format: `<|tool_call_start|>[f(a=1)]<|tool_call_end|>`);
/// a required call on the tiny model comes back as an OpenAI-shaped call
/// of the offered function, with arguments of its schema.
#[test]
fn lfm2_calls_tools_in_its_own_format() {
    let dir = family_checkpoint(TinyFamily::Lfm2, 11);
    let info = model::describe(dir.path()).unwrap();
    assert_eq!((info.family.as_deref(), info.architecture.as_str()), (Some("LFM2"), "lfm2"));
    let caps = info.capabilities;
    assert!(caps.tools && !caps.thinking && !caps.vision, "{caps:?}");

    // A closed set of cities and no other keys: random weights never end a
    // free string (a key's name included).
    let mut tool = weather_tool();
    tool["function"]["parameters"]["properties"]["city"]["enum"] = json!(["Paris", "Rome"]);
    tool["function"]["parameters"]["additionalProperties"] = json!(false);
    let options = TemplateOptions { tools: Some(vec![tool]), ..Default::default() };
    let mut request = Request::new(Prompt::Chat {
        messages: vec![ChatMessage::user("Weather in Paris?")],
        options,
    })
    .with_max_tokens(60)
    .with_sampling(engine::sample::SamplingParams::greedy());
    request.require_tool_call = true;
    // One call: the grammar closes the list after it (random weights would
    // otherwise add calls until the budget ends).
    request.parallel_tool_calls = false;
    let mut d = Driver::new(dir.path(), SchedulerConfig::default());
    let row = d.submit(request);
    d.run_to_end();
    let c = d.completion(row);
    assert!(c.error.is_none(), "{:?}", c.error);
    assert_eq!(c.tool_calls.len(), 1, "{c:?}");
    assert!(c.content.is_empty(), "the tags and the call are not content: {:?}", c.content);
    assert_eq!(c.tool_calls[0].name, "get_weather");
    let args: serde_json::Value = serde_json::from_str(&c.tool_calls[0].arguments).unwrap();
    assert!(["Paris", "Rome"].contains(&args["city"].as_str().unwrap()), "{args}");
}
