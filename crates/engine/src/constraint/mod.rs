//! Structured output: a request may constrain its answer to a JSON schema,
//! any JSON object, a regular expression or a Lark grammar. The grammar
//! engine is `llguidance` (Earley parser + token trie, the library behind
//! structured output in several servers); this module builds its view of
//! our vocabulary ([`GrammarVocabulary`], once per loaded model), compiles a
//! request's grammar within bounds before it reaches the engine thread
//! ([`compile`], [`limits`]), and keeps one parser per constrained sequence
//! ([`ConstrainedDecoder`]), which gives the set of tokens allowed next as a
//! mask applied to that row's logits before sampling ([`LogitsMasker`]).
//! Rows without a constraint pay nothing.
//!
//! What we use of llguidance: JSON schema compilation (`$ref`s through its
//! `referencing` feature; compact separators, no free whitespace — small
//! models otherwise loop on newlines), its regex-to-Lark rewrite, Lark
//! grammars (with `%json` for a required tool call's arguments and special
//! tokens by name), `Matcher` (mask, consume, stop). Not used: rayon
//! (masks of a step are computed in turn: one per constrained row), token
//! healing/backtracking, fast-forward tokens.
mod compile;
mod decoder;
pub(crate) mod limits;
mod logits_mask;
mod tool_calls;
mod vocabulary;

pub use compile::{compile, compile_tool_calls, CompiledGrammar, COMPILE_TIME_LIMIT};
pub use decoder::ConstrainedDecoder;
pub use logits_mask::LogitsMasker;
pub use tool_calls::tool_call_grammar;
pub(crate) use vocabulary::token_bytes;
pub use vocabulary::GrammarVocabulary;

use serde_json::{json, Value};

/// What a request's answer must match.
#[derive(Debug, Clone, PartialEq)]
pub enum Constraint {
    /// A JSON Schema (draft 2020-12 and older drafts' common keywords).
    JsonSchema(Value),
    /// Any JSON object (OpenAI's `json_object` mode).
    JsonObject,
    /// A regular expression the whole answer matches.
    Regex(String),
    /// A grammar in llguidance's Lark dialect (start rule `start`).
    Lark(String),
}

/// The separators every JSON answer uses: OpenAI's and Python's
/// `json.dumps` defaults, so answers look like what clients expect.
const JSON_LAYOUT: &str = "x-guidance";

impl Constraint {
    /// The grammar llguidance compiles. JSON answers get a fixed layout
    /// unless the schema sets its own `x-guidance` options.
    pub(crate) fn grammar(&self) -> llguidance::api::TopLevelGrammar {
        use llguidance::api::TopLevelGrammar;
        match self {
            Constraint::JsonSchema(schema) => {
                TopLevelGrammar::from_json_schema(with_json_layout(schema.clone()))
            }
            Constraint::JsonObject => {
                TopLevelGrammar::from_json_schema(with_json_layout(json!({"type": "object"})))
            }
            Constraint::Regex(rx) => TopLevelGrammar::from_regex(rx),
            Constraint::Lark(lark) => TopLevelGrammar::from_lark(lark.clone()),
        }
    }

    /// A short name for logs and errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Constraint::JsonSchema(_) => "JSON schema",
            Constraint::JsonObject => "JSON object",
            Constraint::Regex(_) => "regular expression",
            Constraint::Lark(_) => "Lark grammar",
        }
    }
}

pub(crate) fn with_json_layout(mut schema: Value) -> Value {
    if let Some(obj) = schema.as_object_mut() {
        obj.entry(JSON_LAYOUT).or_insert_with(
            || json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "}),
        );
    }
    schema
}
