//! `tool_choice: "required"` (or one named function) as a grammar: the reply
//! is a tool call in the chat template's own format, naming one of the
//! offered functions, its arguments following that function's JSON schema;
//! several calls where the request allows parallel calls.
use serde_json::{json, Value};

use super::with_json_layout;
use crate::error::{Error, Result};
use crate::tools::{ToolCallStyle, MISTRAL_ARGS, MISTRAL_TOOL_CALLS};

/// The Lark grammar of the calls. `special_id` gives the id of a tag that
/// is one special token of the vocabulary: the grammar then names that token
/// (`<[id]>`), as its text cannot be spelled out of ordinary tokens.
pub fn tool_call_grammar(
    style: ToolCallStyle,
    tools: &[Value],
    parallel: bool,
    special_id: impl Fn(&str) -> Option<u32>,
) -> Result<String> {
    let tag = |t: &str| match special_id(t) {
        Some(id) => format!("<[{id}]>"),
        None => format!("{t:?}"),
    };
    let functions = functions(tools)?;
    let arguments_key = match style {
        ToolCallStyle::Hermes | ToolCallStyle::Pythonic | ToolCallStyle::MistralJson => "arguments",
        ToolCallStyle::Llama3 => "parameters",
        ToolCallStyle::Harmony => {
            let header = |name: &str| {
                format!(
                    "{} {:?} {} \"json\" {}",
                    tag("<|channel|>"),
                    format!("commentary to=functions.{name} "),
                    tag("<|constrain|>"),
                    tag("<|message|>")
                )
            };
            // One call per message: the turn ends at the call.
            return Ok(named_calls(&functions, header, false));
        }
        ToolCallStyle::Mistral => {
            let header =
                |name: &str| format!("{} {name:?} {}", tag(MISTRAL_TOOL_CALLS), tag(MISTRAL_ARGS));
            return Ok(named_calls(&functions, header, parallel));
        }
    };
    let calls: Vec<Value> = functions
        .iter()
        .map(|(name, parameters)| {
            json!({
                "type": "object",
                "properties": {"name": {"const": name}, arguments_key: parameters},
                "required": ["name", arguments_key],
                "additionalProperties": false,
            })
        })
        .collect();
    let schema = match calls.len() {
        1 => calls.into_iter().next().expect("one"),
        _ => json!({"anyOf": calls}),
    };
    let call_json = format!("%json {}", with_json_layout(schema));
    let (call, separator) = match style {
        ToolCallStyle::Hermes => (
            format!("{} \"\\n\" arguments \"\\n\" {}", tag("<tool_call>"), tag("</tool_call>")),
            "\"\\n\"",
        ),
        // Llama 3's answer is the bare JSON object; several are `;`-separated.
        ToolCallStyle::Llama3 => ("arguments".to_string(), "\"; \""),
        // The pythonic tags hold a list: the calls as JSON objects in it
        // (the parser reads JSON there too), several in the one list; older
        // Mistral templates write the same list after `[TOOL_CALLS]`.
        ToolCallStyle::Pythonic | ToolCallStyle::MistralJson => {
            let more = if parallel { " (\", \" arguments)*" } else { "" };
            let call = match style {
                ToolCallStyle::Pythonic => format!(
                    "{} \"[\" arguments{more} \"]\" {}",
                    tag("<|tool_call_start|>"),
                    tag("<|tool_call_end|>")
                ),
                _ => format!("{} \"[\" arguments{more} \"]\"", tag(MISTRAL_TOOL_CALLS)),
            };
            return Ok(format!("start: call\ncall: {call}\narguments: {call_json}\n"));
        }
        ToolCallStyle::Harmony | ToolCallStyle::Mistral => unreachable!("returned above"),
    };
    let start = if parallel { format!("call ({separator} call)*") } else { "call".to_string() };
    Ok(format!("start: {start}\ncall: {call}\narguments: {call_json}\n"))
}

/// Each tool's function name and parameters' schema (any object when it
/// gives none).
fn functions(tools: &[Value]) -> Result<Vec<(&str, Value)>> {
    if tools.is_empty() {
        return Err(Error::InvalidRequest("a required tool call needs at least one tool".into()));
    }
    tools
        .iter()
        .map(|tool| {
            let function = tool.get("function").unwrap_or(tool);
            let name = function.get("name").and_then(Value::as_str).ok_or_else(|| {
                Error::InvalidRequest(
                    "a required tool call needs every tool to have a function name".into(),
                )
            })?;
            let parameters =
                function.get("parameters").cloned().unwrap_or_else(|| json!({"type": "object"}));
            Ok((name, parameters))
        })
        .collect()
}

/// Formats that name the function outside the arguments (harmony's message
/// header, Mistral's `[TOOL_CALLS]name[ARGS]`): one alternative per tool,
/// its header then its arguments alone; `repeat`: several calls in a row.
fn named_calls(
    functions: &[(&str, Value)],
    header: impl Fn(&str) -> String,
    repeat: bool,
) -> String {
    let mut rules = Vec::new();
    let mut names = Vec::new();
    for (i, (name, parameters)) in functions.iter().enumerate() {
        rules.push(format!(
            "call_{i}: {} args_{i}\nargs_{i}: %json {}",
            header(name),
            with_json_layout(parameters.clone())
        ));
        names.push(format!("call_{i}"));
    }
    let start = if repeat { "call+" } else { "call" };
    format!("start: {start}\ncall: {}\n{}\n", names.join(" | "), rules.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weather() -> Value {
        json!({"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})
    }

    /// A vocabulary where the tags in `specials` are special tokens 100, 101, …
    fn specials<'a>(specials: &'a [&str]) -> impl Fn(&str) -> Option<u32> + 'a {
        move |t| specials.iter().position(|s| *s == t).map(|i| 100 + i as u32)
    }

    #[test]
    fn hermes_calls_are_tagged_and_name_their_function() {
        let g = tool_call_grammar(ToolCallStyle::Hermes, &[weather()], false, |_| None).unwrap();
        assert!(g.starts_with("start: call\n"), "{g}");
        assert!(
            g.contains("call: \"<tool_call>\" \"\\n\" arguments \"\\n\" \"</tool_call>\""),
            "{g}"
        );
        assert!(g.contains(r#""name":{"const":"get_weather"}"#), "{g}");
        assert!(g.contains(r#""arguments":{"type":"object","properties":{"city""#), "{g}");
    }

    #[test]
    fn special_tags_are_named_as_tokens_and_parallel_calls_repeat() {
        let other = json!({"type": "function", "function": {"name": "now"}});
        let tags = ["<tool_call>", "</tool_call>"];
        let g =
            tool_call_grammar(ToolCallStyle::Hermes, &[weather(), other], true, specials(&tags))
                .unwrap();
        assert!(g.starts_with("start: call (\"\\n\" call)*\n"), "{g}");
        assert!(g.contains("call: <[100]> \"\\n\" arguments \"\\n\" <[101]>"), "{g}");
        assert!(g.contains("\"anyOf\""), "{g}");
    }

    #[test]
    fn llama3_calls_are_bare_objects_with_parameters() {
        let g = tool_call_grammar(ToolCallStyle::Llama3, &[weather()], true, |_| None).unwrap();
        assert!(g.starts_with("start: call (\"; \" call)*\ncall: arguments\n"), "{g}");
        assert!(g.contains(r#""parameters":{"#), "{g}");
    }

    #[test]
    fn pythonic_calls_are_a_json_list_between_the_tags() {
        let tags = ["<|tool_call_start|>", "<|tool_call_end|>"];
        let g = tool_call_grammar(ToolCallStyle::Pythonic, &[weather()], true, specials(&tags))
            .unwrap();
        assert!(
            g.starts_with(
                "start: call\ncall: <[100]> \"[\" arguments (\", \" arguments)* \"]\" <[101]>\n"
            ),
            "{g}"
        );
        assert!(g.contains(r#""arguments":{"type":"object""#), "{g}");
        let one =
            tool_call_grammar(ToolCallStyle::Pythonic, &[weather()], false, |_| None).unwrap();
        assert!(
            one.contains(
                "call: \"<|tool_call_start|>\" \"[\" arguments \"]\" \"<|tool_call_end|>\"\n"
            ),
            "{one}"
        );
    }

    #[test]
    fn harmony_calls_name_the_function_in_the_header() {
        let other = json!({"type": "function", "function": {"name": "now"}});
        let tags = ["<|channel|>", "<|constrain|>", "<|message|>"];
        let g =
            tool_call_grammar(ToolCallStyle::Harmony, &[weather(), other], true, specials(&tags))
                .unwrap();
        assert!(g.starts_with("start: call\ncall: call_0 | call_1\n"), "{g}");
        assert!(
            g.contains(
                "call_0: <[100]> \"commentary to=functions.get_weather \" <[101]> \"json\" <[102]> args_0\n"
            ),
            "{g}"
        );
        assert!(g.contains(r#"args_0: %json {"type":"object","properties":{"city""#), "{g}");
        assert!(g.contains(r#"args_1: %json {"type":"object","x-guidance""#), "{g}");
    }

    #[test]
    fn mistral_calls_name_the_function_between_its_markers() {
        let other = json!({"type": "function", "function": {"name": "now"}});
        let tags = [MISTRAL_TOOL_CALLS, MISTRAL_ARGS];
        let g =
            tool_call_grammar(ToolCallStyle::Mistral, &[weather(), other], true, specials(&tags))
                .unwrap();
        assert!(g.starts_with("start: call+\ncall: call_0 | call_1\n"), "{g}");
        assert!(g.contains("call_0: <[100]> \"get_weather\" <[101]> args_0\n"), "{g}");
        let one = tool_call_grammar(ToolCallStyle::Mistral, &[weather()], false, specials(&tags))
            .unwrap();
        assert!(one.starts_with("start: call\n"), "{one}");
        let list =
            tool_call_grammar(ToolCallStyle::MistralJson, &[weather()], true, specials(&tags))
                .unwrap();
        assert!(
            list.starts_with(
                "start: call\ncall: <[100]> \"[\" arguments (\", \" arguments)* \"]\"\n"
            ),
            "{list}"
        );
    }

    #[test]
    fn tools_without_names_are_refused() {
        let e =
            tool_call_grammar(ToolCallStyle::Hermes, &[json!({"type": "function"})], false, |_| {
                None
            })
            .unwrap_err();
        assert!(e.to_string().contains("function name"), "{e}");
        let e = tool_call_grammar(ToolCallStyle::Mistral, &[], false, |_| None).unwrap_err();
        assert!(e.to_string().contains("at least one tool"), "{e}");
    }
}
