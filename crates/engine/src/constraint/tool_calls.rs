//! `tool_choice: "required"` (or one named function) as a grammar: the reply
//! is a tool call in the chat template's own format, naming one of the
//! offered functions, its arguments following that function's JSON schema;
//! several calls where the request allows parallel calls.
use serde_json::{json, Value};

use super::with_json_layout;
use crate::error::{Error, Result};
use crate::tools::ToolCallStyle;

/// The Lark grammar of the calls. `is_special` says whether a tag is one
/// special token of the vocabulary (then the grammar names the token: its
/// text cannot be spelled out of ordinary tokens).
pub fn tool_call_grammar(
    style: ToolCallStyle,
    tools: &[Value],
    parallel: bool,
    is_special: impl Fn(&str) -> bool,
) -> Result<String> {
    let arguments_key = match style {
        ToolCallStyle::Hermes | ToolCallStyle::Pythonic => "arguments",
        ToolCallStyle::Llama3 => "parameters",
        ToolCallStyle::Harmony => return harmony_grammar(tools, is_special),
        // Mistral's markers are special tokens with bracketed names, which
        // the grammar cannot name yet.
        ToolCallStyle::Mistral | ToolCallStyle::MistralJson => {
            return Err(Error::InvalidRequest(
                "a required tool call is not supported for Mistral's tool-call format yet".into(),
            ))
        }
    };
    let calls: Vec<Value> = tools
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
            Ok(json!({
                "type": "object",
                "properties": {"name": {"const": name}, arguments_key: parameters},
                "required": ["name", arguments_key],
                "additionalProperties": false,
            }))
        })
        .collect::<Result<_>>()?;
    let schema = match calls.len() {
        0 => {
            return Err(Error::InvalidRequest(
                "a required tool call needs at least one tool".into(),
            ))
        }
        1 => calls.into_iter().next().expect("one"),
        _ => json!({"anyOf": calls}),
    };
    let call_json = format!("%json {}", with_json_layout(schema));
    let tag = |t: &str| if is_special(t) { t.to_string() } else { format!("{t:?}") };
    let (call, separator) = match style {
        ToolCallStyle::Hermes => (
            format!("{} \"\\n\" arguments \"\\n\" {}", tag("<tool_call>"), tag("</tool_call>")),
            "\"\\n\"",
        ),
        // Llama 3's answer is the bare JSON object; several are `;`-separated.
        ToolCallStyle::Llama3 => ("arguments".to_string(), "\"; \""),
        // The pythonic tags hold a list: the calls as JSON objects in it
        // (the parser reads JSON there too), several in the one list.
        ToolCallStyle::Pythonic => {
            let more = if parallel { " (\", \" arguments)*" } else { "" };
            let call = format!(
                "{} \"[\" arguments{more} \"]\" {}",
                tag("<|tool_call_start|>"),
                tag("<|tool_call_end|>")
            );
            return Ok(format!("start: call\ncall: {call}\narguments: {call_json}\n"));
        }
        ToolCallStyle::Harmony | ToolCallStyle::Mistral | ToolCallStyle::MistralJson => {
            unreachable!("returned above")
        }
    };
    let start = if parallel { format!("call ({separator} call)*") } else { "call".to_string() };
    Ok(format!("start: {start}\ncall: {call}\narguments: {call_json}\n"))
}

/// Harmony names the function in the message's header and writes the
/// arguments alone as its body: one alternative per tool (one call per
/// message; the turn ends at the call).
fn harmony_grammar(tools: &[Value], is_special: impl Fn(&str) -> bool) -> Result<String> {
    if tools.is_empty() {
        return Err(Error::InvalidRequest("a required tool call needs at least one tool".into()));
    }
    let tag = |t: &str| if is_special(t) { t.to_string() } else { format!("{t:?}") };
    let mut rules = Vec::new();
    let mut names = Vec::new();
    for (i, tool) in tools.iter().enumerate() {
        let function = tool.get("function").unwrap_or(tool);
        let name = function.get("name").and_then(Value::as_str).ok_or_else(|| {
            Error::InvalidRequest(
                "a required tool call needs every tool to have a function name".into(),
            )
        })?;
        let parameters =
            function.get("parameters").cloned().unwrap_or_else(|| json!({"type": "object"}));
        let header = format!("commentary to=functions.{name} ");
        rules.push(format!(
            "call_{i}: {} {header:?} {} \"json\" {} args_{i}\nargs_{i}: %json {}",
            tag("<|channel|>"),
            tag("<|constrain|>"),
            tag("<|message|>"),
            with_json_layout(parameters)
        ));
        names.push(format!("call_{i}"));
    }
    Ok(format!("start: {}\n{}\n", names.join(" | "), rules.join("\n")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weather() -> Value {
        json!({"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})
    }

    #[test]
    fn hermes_calls_are_tagged_and_name_their_function() {
        let g = tool_call_grammar(ToolCallStyle::Hermes, &[weather()], false, |_| false).unwrap();
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
        let g = tool_call_grammar(ToolCallStyle::Hermes, &[weather(), other], true, |t| {
            t.contains("tool_call")
        })
        .unwrap();
        assert!(g.starts_with("start: call (\"\\n\" call)*\n"), "{g}");
        assert!(g.contains("call: <tool_call> \"\\n\" arguments \"\\n\" </tool_call>"), "{g}");
        assert!(g.contains("\"anyOf\""), "{g}");
    }

    #[test]
    fn llama3_calls_are_bare_objects_with_parameters() {
        let g = tool_call_grammar(ToolCallStyle::Llama3, &[weather()], true, |_| false).unwrap();
        assert!(g.starts_with("start: call (\"; \" call)*\ncall: arguments\n"), "{g}");
        assert!(g.contains(r#""parameters":{"#), "{g}");
    }

    #[test]
    fn pythonic_calls_are_a_json_list_between_the_tags() {
        let g = tool_call_grammar(ToolCallStyle::Pythonic, &[weather()], true, |t| {
            t.contains("tool_call")
        })
        .unwrap();
        assert!(
            g.starts_with(
                "start: call\ncall: <|tool_call_start|> \"[\" arguments (\", \" arguments)* \"]\" <|tool_call_end|>\n"
            ),
            "{g}"
        );
        assert!(g.contains(r#""arguments":{"type":"object""#), "{g}");
        let one =
            tool_call_grammar(ToolCallStyle::Pythonic, &[weather()], false, |_| false).unwrap();
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
        let g = tool_call_grammar(ToolCallStyle::Harmony, &[weather(), other], true, |t| {
            t.starts_with("<|")
        })
        .unwrap();
        assert!(g.starts_with("start: call_0 | call_1\n"), "{g}");
        assert!(
            g.contains(
                "call_0: <|channel|> \"commentary to=functions.get_weather \" <|constrain|> \"json\" <|message|> args_0\n"
            ),
            "{g}"
        );
        assert!(g.contains(r#"args_0: %json {"type":"object","properties":{"city""#), "{g}");
        assert!(g.contains(r#"args_1: %json {"type":"object","x-guidance""#), "{g}");
    }

    #[test]
    fn tools_without_names_are_refused() {
        let e =
            tool_call_grammar(ToolCallStyle::Hermes, &[json!({"type": "function"})], false, |_| {
                false
            })
            .unwrap_err();
        assert!(e.to_string().contains("function name"), "{e}");
    }
}
