//! Thinking, thinking budgets and stop strings through the whole engine
//! (template → matcher → events) on a tiny seeded llama.
use engine::batch::{FinishReason, Prompt, Request};
use engine::handle::{EngineConfig, EngineHandle};
use engine::model::{LoadOptions, WeightFormat};
use engine::sample::SamplingParams;
use engine::tokenizer::{ChatMessage, TemplateOptions};
use fixtures::{write_tiny_llama, TinyLlama};

/// A ChatML template that opens `<think>` in the prompt when thinking is on,
/// as Qwen3-style templates do.
const THINKING_TEMPLATE: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and enable_thinking is false %}\
<think>\n\n</think>\n\n{% else %}<think>\n{% endif %}{% endif %}";

fn engine_with_template(template: Option<&str>) -> (tempfile::TempDir, EngineHandle) {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlama::default()).unwrap();
    if let Some(t) = template {
        let path = dir.path().join("tokenizer_config.json");
        let mut cfg: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        cfg["chat_template"] = t.into();
        std::fs::write(&path, cfg.to_string()).unwrap();
    }
    let config =
        EngineConfig { load: LoadOptions { format: WeightFormat::AsStored }, ..Default::default() };
    let handle = EngineHandle::start(dir.path(), config).unwrap();
    (dir, handle)
}

fn no_eos() -> SamplingParams {
    SamplingParams {
        logit_bias: [(2, f32::NEG_INFINITY)].into_iter().collect(),
        ..Default::default()
    }
}

fn chat(enable_thinking: Option<bool>) -> Prompt {
    Prompt::Chat {
        messages: vec![ChatMessage::user("hello there")],
        options: TemplateOptions { enable_thinking, ..Default::default() },
    }
}

#[test]
fn a_prompt_that_opens_think_streams_reasoning_apart_from_the_answer() {
    let (_dir, engine) = engine_with_template(Some(THINKING_TEMPLATE));
    let c = engine
        .submit(Request::new(chat(None)).with_max_tokens(20).with_sampling(no_eos()))
        .collect_blocking();
    assert!(c.error.is_none(), "{:?}", c.error);
    // Random weights never write </think>: everything stays reasoning.
    assert!(!c.reasoning.is_empty());
    assert_eq!(c.content, "");
    assert_eq!(c.finish_reason, Some(FinishReason::Length));
}

#[test]
fn a_thinking_budget_closes_thinking_and_the_answer_follows() {
    let (_dir, engine) = engine_with_template(Some(THINKING_TEMPLATE));
    let mut req = Request::new(chat(None)).with_max_tokens(40).with_sampling(no_eos());
    req.thinking_budget = Some(5);
    let c = engine.submit(req).collect_blocking();
    assert!(c.error.is_none(), "{:?}", c.error);
    assert!(!c.reasoning.is_empty(), "no reasoning");
    assert!(!c.content.is_empty(), "thinking was not closed by the budget");
    assert!(
        !c.content.contains("think>") && !c.reasoning.contains("think>"),
        "a tag leaked: {c:?}"
    );
}

#[test]
fn thinking_off_sends_everything_to_the_answer() {
    let (_dir, engine) = engine_with_template(Some(THINKING_TEMPLATE));
    let c = engine
        .submit(Request::new(chat(Some(false))).with_max_tokens(20).with_sampling(no_eos()))
        .collect_blocking();
    assert!(c.error.is_none(), "{:?}", c.error);
    assert_eq!(c.reasoning, "");
    assert!(!c.content.is_empty());
}

#[test]
fn a_stop_string_ends_the_answer_before_it() {
    let (_dir, engine) = engine_with_template(None);
    let req = || Request::new(chat(None)).with_max_tokens(40).with_sampling(no_eos());
    let full = engine.submit(req()).collect_blocking().content;
    // A stop string taken from the middle of the answer (on char boundaries).
    let chars: Vec<char> = full.chars().collect();
    assert!(chars.len() > 12, "answer too short: {full:?}");
    let stop: String = chars[8..11].iter().collect();
    let before: String = full[..full.find(&stop).unwrap()].to_string();
    let mut with_stop = req();
    with_stop.stop = vec![stop.clone()];
    let c = engine.submit(with_stop).collect_blocking();
    assert_eq!(c.finish_reason, Some(FinishReason::Stop));
    assert_eq!(c.content, before, "stop {stop:?}");
}
