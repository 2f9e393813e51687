//! Structured output on the real default model (SmolLM2-135M-Instruct):
//! answers constrained by JSON schemas, JSON mode, a regex and a Lark
//! grammar, alone and in one batch with free rows, with the scheduler
//! stepped by hand. Every JSON answer is checked by an independent
//! validator (the `jsonschema` crate), not by llguidance itself.
use crate::common;

use common::Driver;
use engine::batch::{FinishReason, Prompt, Request, SchedulerConfig};
use engine::constraint::Constraint;
use engine::model::{self, LoadOptions, LoadedModel, WeightFormat};
use engine::tokenizer::{ChatMessage, TemplateOptions};
use serde_json::{json, Value};

fn load() -> LoadedModel {
    let path =
        hub::default_model::locate().expect("run scripts/setup.sh to install the default model");
    model::load(&path, &LoadOptions { format: WeightFormat::Float32 }).unwrap()
}

fn ask(question: &str, max_tokens: usize) -> Request {
    let messages = vec![ChatMessage::user(question)];
    Request::new(Prompt::Chat { messages, options: TemplateOptions::default() })
        .with_max_tokens(max_tokens)
}

/// Every object closed to other keys, as OpenAI's strict mode requires of
/// its schemas (and the SDK's Pydantic schemas are): an open object lets a
/// 135M model ramble on in an extra key until the token limit.
fn strict(mut schema: Value) -> Value {
    fn close(v: &mut Value) {
        match v {
            Value::Object(o) => {
                if o.contains_key("properties") && !o.contains_key("additionalProperties") {
                    o.insert("additionalProperties".into(), Value::Bool(false));
                }
                o.values_mut().for_each(close);
            }
            Value::Array(a) => a.iter_mut().for_each(close),
            _ => {}
        }
    }
    close(&mut schema);
    schema
}

/// Ten schemas of the kinds users send: nested objects, arrays, enums,
/// bounded numbers, optional fields, `anyOf`, `$ref`s.
fn schemas() -> Vec<(&'static str, Value)> {
    let schemas = vec![
        (
            "Give the capital of France.",
            json!({
            "type": "object", "properties": {"country": {"type": "string"}, "capital": {"type": "string"}},
            "required": ["country", "capital"], "additionalProperties": false}),
        ),
        (
            "Describe a person named Ada, aged 36.",
            json!({
            "type": "object",
            "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
            "required": ["name", "age"]}),
        ),
        (
            "List three fruits.",
            json!({
            "type": "object", "properties": {"fruits": {"type": "array", "items": {"type": "string", "maxLength": 16}, "minItems": 3, "maxItems": 3}},
            "required": ["fruits"]}),
        ),
        (
            "Is the sky green? Answer with a verdict.",
            json!({
            "type": "object", "properties": {"verdict": {"enum": ["yes", "no", "unsure"]}}, "required": ["verdict"]}),
        ),
        (
            "Rate pizza from 1 to 5.",
            json!({
            "type": "object", "properties": {"score": {"type": "number", "minimum": 1, "maximum": 5}, "comment": {"type": "string", "maxLength": 40}},
            "required": ["score"]}),
        ),
        (
            "Give a book with its author.",
            json!({
            "type": "object",
            "properties": {"book": {"type": "object", "properties": {"title": {"type": "string", "maxLength": 40},
                "author": {"type": "object", "properties": {"first": {"type": "string", "maxLength": 20}, "last": {"type": "string", "maxLength": 20}},
                           "required": ["first", "last"]}}, "required": ["title", "author"]}},
            "required": ["book"]}),
        ),
        (
            "Give an id, either a number or a code.",
            json!({
            "type": "object", "properties": {"id": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": "^[A-Z]{3}$"}]}},
            "required": ["id"]}),
        ),
        (
            "Give two points on a line.",
            json!({
            "$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}}, "required": ["x", "y"]}},
            "type": "object", "properties": {"a": {"$ref": "#/$defs/point"}, "b": {"$ref": "#/$defs/point"}}, "required": ["a", "b"]}),
        ),
        (
            "Is water wet?",
            json!({
            "type": "object", "properties": {"answer": {"type": "boolean"}, "confidence": {"type": "number", "minimum": 0, "maximum": 1}},
            "required": ["answer", "confidence"]}),
        ),
        (
            "Name a colour and its hex code.",
            json!({
            "type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "hex": {"type": "string", "pattern": "^#[0-9a-f]{6}$"},
            "tags": {"type": "array", "items": {"enum": ["warm", "cool", "neutral"]}, "maxItems": 2}},
            "required": ["name", "hex"]}),
        ),
    ];
    schemas.into_iter().map(|(q, s)| (q, strict(s))).collect()
}

fn assert_valid(answer: &str, schema: &Value) {
    let value: Value =
        serde_json::from_str(answer).unwrap_or_else(|e| panic!("not JSON ({e}): {answer:?}"));
    let validator = jsonschema::validator_for(schema).expect("a valid schema");
    let errors: Vec<String> = validator.iter_errors(&value).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{answer} breaks its schema: {errors:?}");
}

#[test]
fn every_answer_follows_its_schema_alone_and_batched_with_free_rows() {
    let loaded = load();
    let mut driver = Driver::of(loaded, SchedulerConfig { max_running: 16, ..Default::default() });
    let schemas = schemas();
    // Free rows first: their greedy answers alone, to compare with the batch.
    let free_questions = ["What is the capital of France?", "Write a haiku about rain."];
    let alone: Vec<String> = free_questions
        .iter()
        .map(|q| {
            let i = driver.submit(ask(q, 24));
            driver.run_to_end();
            driver.completion(i).content.clone()
        })
        .collect();

    let constrained: Vec<usize> = schemas
        .iter()
        .map(|(q, schema)| {
            driver.submit(ask(q, 160).with_constraint(Constraint::JsonSchema(schema.clone())))
        })
        .collect();
    let free: Vec<usize> = free_questions.iter().map(|q| driver.submit(ask(q, 24))).collect();
    driver.run_to_end();

    for (&i, (question, schema)) in constrained.iter().zip(&schemas) {
        let c = driver.completion(i);
        assert!(c.error.is_none(), "{question}: {:?}", c.error);
        assert_eq!(
            c.finish_reason,
            Some(FinishReason::Stop),
            "{question}: ended by {:?}: {}",
            c.finish_reason,
            c.content
        );
        println!("{question} → {}", c.content);
        assert_valid(&c.content, schema);
    }
    for (&i, expected) in free.iter().zip(&alone) {
        assert_eq!(
            &driver.completion(i).content,
            expected,
            "a free row changed beside constrained ones"
        );
    }
}

#[test]
fn json_mode_regex_and_lark_grammars_hold() {
    let mut driver = Driver::of(load(), SchedulerConfig::default());
    let object = driver
        .submit(ask("Describe the Eiffel Tower.", 120).with_constraint(Constraint::JsonObject));
    let date = driver.submit(
        ask("When did the Berlin wall fall?", 30)
            .with_constraint(Constraint::Regex(r"\d{4}-\d{2}-\d{2}".into())),
    );
    let lark = r#"
        start: answer " because " reason "."
        answer: "yes" | "no"
        reason: /[a-z ]{1,40}/
    "#;
    let grammar =
        driver.submit(ask("Is the sun hot?", 60).with_constraint(Constraint::Lark(lark.into())));
    driver.run_to_end();

    let c = driver.completion(object);
    assert_eq!(c.finish_reason, Some(FinishReason::Stop), "{:?} {:?}", c.error, c.content);
    let value: Value = serde_json::from_str(&c.content)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", c.content));
    assert!(value.is_object(), "{value}");

    let c = driver.completion(date);
    assert_eq!(c.finish_reason, Some(FinishReason::Stop), "{:?} {:?}", c.error, c.content);
    let d = c.content.as_bytes();
    assert!(
        d.len() == 10
            && d[4] == b'-'
            && d[7] == b'-'
            && c.content.replace('-', "").bytes().all(|b| b.is_ascii_digit()),
        "{:?}",
        c.content
    );

    let c = driver.completion(grammar);
    assert_eq!(c.finish_reason, Some(FinishReason::Stop), "{:?} {:?}", c.error, c.content);
    let (answer, rest) =
        c.content.split_once(" because ").unwrap_or_else(|| panic!("{:?}", c.content));
    assert!(["yes", "no"].contains(&answer), "{:?}", c.content);
    assert!(
        rest.ends_with('.')
            && rest[..rest.len() - 1].bytes().all(|b| b.is_ascii_lowercase() || b == b' '),
        "{:?}",
        c.content
    );
}

#[test]
fn a_budget_too_small_ends_at_the_length_with_what_was_generated() {
    let mut driver = Driver::of(load(), SchedulerConfig::default());
    let schema = json!({"type": "object", "properties": {"story": {"type": "string", "minLength": 200}}, "required": ["story"]});
    let i = driver.submit(ask("Tell a story.", 12).with_constraint(Constraint::JsonSchema(schema)));
    driver.run_to_end();
    let c = driver.completion(i);
    assert_eq!(c.finish_reason, Some(FinishReason::Length));
    assert!(c.content.starts_with("{\"story\": \""), "{:?}", c.content);
    assert_eq!(c.stats.generated_tokens, 12);
}

#[test]
fn bad_schemas_and_grammars_are_refused_clearly_and_the_engine_goes_on() {
    let mut driver = Driver::of(load(), SchedulerConfig::default());
    let bad = [
        (
            Constraint::JsonSchema(
                json!({"type": "object", "properties": {"a": {"type": "no-such-type"}}}),
            ),
            "invalid JSON schema",
        ),
        (
            Constraint::JsonSchema(json!({"type": "integer", "minimum": 5, "maximum": 1})),
            "invalid JSON schema",
        ),
        (Constraint::Regex("(unclosed".into()), "invalid regular expression"),
        (Constraint::Lark("start: missing_rule".into()), "invalid Lark grammar"),
    ];
    let ids: Vec<usize> =
        bad.iter().map(|(c, _)| driver.submit(ask("hi", 8).with_constraint(c.clone()))).collect();
    let fine = driver.submit(ask("What is the capital of France?", 8));
    driver.run_to_end();
    for (&i, (constraint, needle)) in ids.iter().zip(&bad) {
        let c = driver.completion(i);
        assert_eq!(c.finish_reason, Some(FinishReason::Error), "{constraint:?}");
        let e = c.error.as_ref().expect("an error");
        assert_eq!(e.code, "INVALID_REQUEST", "{constraint:?}");
        assert!(e.message.contains(needle), "{constraint:?}: {}", e.message);
    }
    assert_eq!(driver.completion(fine).finish_reason, Some(FinishReason::Stop));
    assert!(driver.completion(fine).content.contains("Paris"));
}

/// `d_i` an object whose one required property refers to `d_{i+1}` (the
/// hardening report's schema: 300 links once overflowed the engine's stack).
fn ref_chain(links: usize) -> Value {
    let mut defs = serde_json::Map::new();
    for i in 0..links {
        let next = if i + 1 < links {
            json!({"$ref": format!("#/$defs/d{}", i + 1)})
        } else {
            json!({"enum": ["end"]})
        };
        defs.insert(format!("d{i}"), json!({"type": "object", "properties": {"n": next}, "required": ["n"], "additionalProperties": false}));
    }
    json!({"$defs": defs, "$ref": "#/$defs/d0"})
}

#[test]
fn hostile_grammars_are_refused_by_their_limit_and_deep_legal_ones_compile_off_the_engine_thread() {
    let mut driver = Driver::of(load(), SchedulerConfig::default());
    let mut nested_any_of = json!({"type": "integer"});
    for _ in 0..400 {
        nested_any_of = json!({"anyOf": [nested_any_of, {"type": "null"}]});
    }
    let rule_chain = {
        let rules: String = (0..1000).map(|i| format!("r{i}: r{}\n", i + 1)).collect();
        format!("start: r0\n{rules}r1000: \"ok\"\n")
    };
    let refused = [
        (Constraint::JsonSchema(ref_chain(300)), "at most 256 are allowed"),
        (Constraint::JsonSchema(nested_any_of), "at most 256 are allowed"),
        (
            Constraint::Regex(format!("{}a{}", "(".repeat(2000), ")".repeat(2000))),
            "at most 256 are allowed",
        ),
        (
            Constraint::Lark(format!("start: \"{}\"", "a".repeat(70_000))),
            "at most 65536 are allowed",
        ),
    ];
    let ids: Vec<usize> = refused
        .iter()
        .map(|(c, _)| driver.submit(ask("hi", 8).with_constraint(c.clone())))
        .collect();
    // Within the limits: the deepest chain allowed and a 1000-rule grammar
    // compile on their own thread's stack and are followed to the end.
    let deep = driver.submit(
        ask("Fill in the form.", 400).with_constraint(Constraint::JsonSchema(ref_chain(40))),
    );
    let rules = driver.submit(ask("Say ok.", 8).with_constraint(Constraint::Lark(rule_chain)));
    let fine = driver.submit(ask("What is the capital of France?", 8));
    driver.run_to_end();
    for (&i, (constraint, needle)) in ids.iter().zip(&refused) {
        let c = driver.completion(i);
        assert_eq!(c.finish_reason, Some(FinishReason::Error), "{}", constraint.kind());
        let e = c.error.as_ref().expect("an error");
        assert_eq!(e.code, "INVALID_REQUEST", "{}", constraint.kind());
        assert!(e.message.contains(needle), "{}: {}", constraint.kind(), e.message);
    }
    let deep = driver.completion(deep);
    assert_eq!(deep.finish_reason, Some(FinishReason::Stop), "{:?}", deep.error);
    assert_valid(&deep.content, &ref_chain(40));
    assert_eq!(driver.completion(rules).content, "ok");
    assert!(driver.completion(fine).content.contains("Paris"));
}

/// A ChatML template that thinks (opens `<think>` in the prompt) and offers
/// tools in the Hermes format, as Qwen3's does.
const THINKING_TOOLS_TEMPLATE: &str = "{% if tools %}<|im_start|>system\nTools: {{ tools | tojson }}. \
Call one as <tool_call>\n{\"name\": ..., \"arguments\": ...}\n</tool_call><|im_end|>\n{% endif %}\
{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and enable_thinking is false %}\
<think>\n\n</think>\n\n{% else %}<think>\n{% endif %}{% endif %}";

/// A tiny random Qwen3 with [`THINKING_TOOLS_TEMPLATE`]: random weights say
/// anything, so whatever they answer under a grammar is the grammar's doing.
fn tiny_thinking_qwen3() -> (tempfile::TempDir, LoadedModel) {
    let dir = tempfile::tempdir().unwrap();
    fixtures::write_tiny_family(dir.path(), fixtures::TinyFamily::Qwen3, None, 5).unwrap();
    let path = dir.path().join("tokenizer_config.json");
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    cfg["chat_template"] = THINKING_TOOLS_TEMPLATE.into();
    std::fs::write(&path, cfg.to_string()).unwrap();
    let loaded = model::load(dir.path(), &common::LOAD).unwrap();
    (dir, loaded)
}

fn chat(thinking: bool, tools: Option<Vec<Value>>) -> Request {
    let options = TemplateOptions { enable_thinking: Some(thinking), tools, ..Default::default() };
    Request::new(Prompt::Chat { messages: vec![ChatMessage::user("weather?")], options })
        .with_max_tokens(200)
}

#[test]
fn a_thinking_model_thinks_freely_and_answers_by_the_schema() {
    let (_dir, loaded) = tiny_thinking_qwen3();
    let schema = json!({"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "days"], "additionalProperties": false});
    let mut driver = Driver::of(loaded, SchedulerConfig::default());
    let mut thinking = chat(true, None).with_constraint(Constraint::JsonSchema(schema.clone()));
    // Random weights never close the block themselves: the budget does.
    thinking.thinking_budget = Some(6);
    let plain = chat(false, None).with_constraint(Constraint::JsonSchema(schema.clone()));
    let (t, p) = (driver.submit(thinking), driver.submit(plain));
    driver.run_to_end();
    for i in [t, p] {
        let c = driver.completion(i);
        assert_eq!(c.finish_reason, Some(FinishReason::Stop), "{c:?}");
        assert_valid(&c.content, &schema);
    }
    let c = driver.completion(t);
    assert!(c.stats.reasoning_tokens >= 6, "{c:?}");
    // Free text: the schema did not hold inside the thinking block.
    assert!(serde_json::from_str::<Value>(&c.reasoning).is_err(), "{c:?}");
}

#[test]
fn a_required_tool_call_is_always_a_valid_call() {
    let (_dir, loaded) = tiny_thinking_qwen3();
    required_tool_calls_are_valid_calls(loaded);
}

/// Mistral's v11 format (`[TOOL_CALLS]name[ARGS]{…}`, the markers special
/// tokens the grammar names by id), with the tiny Ministral 3's template and
/// tokenizer: the calls parse, name an offered function and keep its schema.
#[test]
fn a_required_tool_call_in_mistrals_format_is_a_valid_call() {
    let dir = tempfile::tempdir().unwrap();
    fixtures::write_tiny_mistral3(dir.path(), 3).unwrap();
    // Room for the tools' JSON (a byte per token in the tiny vocabulary)
    // beyond the tiny context of 128.
    let path = dir.path().join("config.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["text_config"]["max_position_embeddings"] = json!(4096);
    std::fs::write(&path, config.to_string()).unwrap();
    let loaded = model::load(dir.path(), &common::LOAD).unwrap();
    required_tool_calls_are_valid_calls(loaded);
}

/// Sampled calls, alone and in parallel, each a valid call to an offered
/// tool; a request that offers no tools is refused.
fn required_tool_calls_are_valid_calls(loaded: LoadedModel) {
    let tools = vec![
        json!({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
            "properties": {"city": {"enum": ["Paris", "Rome"]}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
            "required": ["city", "days"], "additionalProperties": false}}}),
        json!({"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
            "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"], "additionalProperties": false}}}),
    ];
    let mut driver = Driver::of(loaded, SchedulerConfig::default());
    let required = |parallel: bool, seed: u64| {
        let mut r =
            chat(false, Some(tools.clone())).with_sampling(engine::sample::SamplingParams {
                temperature: 1.0,
                seed: Some(seed),
                ..Default::default()
            });
        r.require_tool_call = true;
        r.parallel_tool_calls = parallel;
        r
    };
    let single: Vec<usize> = (0..4).map(|s| driver.submit(required(false, s))).collect();
    let parallel: Vec<usize> = (0..2).map(|s| driver.submit(required(true, 10 + s))).collect();
    let free = driver.submit(chat(false, Some(tools.clone())).with_max_tokens(20));
    driver.run_to_end();
    for &i in single.iter().chain(&parallel) {
        let c = driver.completion(i);
        assert_eq!(c.finish_reason, Some(FinishReason::ToolCalls), "{c:?}");
        assert!(!c.tool_calls.is_empty(), "{c:?}");
        if single.contains(&i) {
            assert_eq!(c.tool_calls.len(), 1, "parallel_tool_calls false: {c:?}");
        }
        for call in &c.tool_calls {
            let tool = tools
                .iter()
                .find(|t| t["function"]["name"] == call.name.as_str())
                .unwrap_or_else(|| panic!("{call:?}"));
            let args: Value = serde_json::from_str(&call.arguments).unwrap();
            let validator = jsonschema::validator_for(&tool["function"]["parameters"]).unwrap();
            assert!(validator.is_valid(&args), "{call:?}");
        }
    }
    // Offered but not required: random weights do not call anything.
    assert!(driver.completion(free).tool_calls.is_empty());

    let mut no_tools = chat(false, None);
    no_tools.require_tool_call = true;
    let i = driver.submit(no_tools);
    driver.run_to_end();
    assert_eq!(
        driver.completion(i).error.as_ref().map(|e| e.code.as_str()),
        Some("INVALID_REQUEST")
    );
}
