//! How answers are shaped: free text (no format), any JSON object, JSON with
//! the fields the user names, or a JSON schema the user pastes. A chat keeps
//! one (the app) and a bulk job has one (the app and `vlm bulk`); either way
//! it becomes the engine's constraint, so the model can only answer in that
//! shape, and a bulk job's table gets one column per named field.
use engine::constraint::Constraint;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use ts_rs::TS;

/// The stable code of every refusal below.
pub const INVALID_ANSWER_FORMAT: &str = "INVALID_ANSWER_FORMAT";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum AnswerFormat {
    /// Any JSON object.
    Json,
    /// An object with exactly these keys, each a string.
    Fields { names: Vec<String> },
    /// A JSON Schema.
    Schema { schema: Value },
}

/// Why a format cannot be used; its code is [`INVALID_ANSWER_FORMAT`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatError {
    pub message: String,
}

impl std::fmt::Display for FormatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for FormatError {}

fn refuse<T>(message: impl Into<String>) -> Result<T, FormatError> {
    Err(FormatError { message: message.into() })
}

impl AnswerFormat {
    /// Named fields from "city, country" (commas or new lines), as the app's
    /// panel and `vlm bulk --columns` take them.
    pub fn fields_from_list(list: &str) -> Self {
        let names = list
            .split([',', '\n'])
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(String::from)
            .collect();
        AnswerFormat::Fields { names }
    }

    /// Refuses what could never be an answer format (the engine refuses a
    /// schema it cannot compile when the request is submitted).
    pub fn validate(&self) -> Result<(), FormatError> {
        match self {
            AnswerFormat::Json => Ok(()),
            AnswerFormat::Fields { names } => {
                if names.is_empty() || names.iter().any(|n| n.trim().is_empty()) {
                    return refuse("Name at least one field, and no empty ones.");
                }
                let mut unique: Vec<&str> = names.iter().map(|n| n.trim()).collect();
                unique.sort_unstable();
                unique.dedup();
                if unique.len() != names.len() {
                    return refuse("Each field name can appear once.");
                }
                Ok(())
            }
            AnswerFormat::Schema { schema } if schema.is_object() => Ok(()),
            AnswerFormat::Schema { .. } => {
                refuse("A JSON schema is an object, such as {\"type\": \"object\", …}.")
            }
        }
    }

    pub fn constraint(&self) -> Constraint {
        match self {
            AnswerFormat::Json => Constraint::JsonObject,
            AnswerFormat::Fields { names } => Constraint::JsonSchema(fields_schema(names)),
            AnswerFormat::Schema { schema } => Constraint::JsonSchema(schema.clone()),
        }
    }

    /// The table columns an answer of this format splits into: the named
    /// fields, or a schema's top-level properties; `None` when answers stay
    /// whole (any JSON, or a schema that names no properties).
    pub fn columns(&self) -> Option<Vec<String>> {
        match self {
            AnswerFormat::Json => None,
            AnswerFormat::Fields { names } => {
                Some(names.iter().map(|n| n.trim().to_string()).collect())
            }
            AnswerFormat::Schema { schema } => {
                let properties = schema.get("properties")?.as_object()?;
                (!properties.is_empty()).then(|| properties.keys().cloned().collect())
            }
        }
    }

    /// The stored form, as the app's store keeps it.
    pub fn from_stored(stored: &Value) -> Result<Self, FormatError> {
        serde_json::from_value(stored.clone())
            .map_err(|e| FormatError { message: format!("The answer format cannot be read: {e}") })
    }
}

/// An object with the named string fields, all required, nothing else.
fn fields_schema(names: &[String]) -> Value {
    let properties: Map<String, Value> =
        names.iter().map(|n| (n.trim().to_string(), json!({"type": "string"}))).collect();
    let required: Vec<&str> = names.iter().map(|n| n.trim()).collect();
    json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_fields_become_a_closed_object_of_strings_in_their_order() {
        let f = AnswerFormat::Fields { names: vec![" city".into(), "country ".into()] };
        f.validate().unwrap();
        let Constraint::JsonSchema(schema) = f.constraint() else { panic!("a schema") };
        assert_eq!(
            schema.to_string(),
            r#"{"type":"object","properties":{"city":{"type":"string"},"country":{"type":"string"}},"required":["city","country"],"additionalProperties":false}"#
        );
        assert_eq!(f.columns().unwrap(), ["city", "country"]);
    }

    #[test]
    fn a_list_of_names_is_split_on_commas_and_new_lines() {
        assert_eq!(
            AnswerFormat::fields_from_list(" colour, shape\nsize,, "),
            AnswerFormat::Fields { names: vec!["colour".into(), "shape".into(), "size".into()] }
        );
    }

    #[test]
    fn a_schema_splits_into_its_top_level_properties_in_their_order() {
        let schema: Value =
            serde_json::from_str(r#"{"type":"object","properties":{"zebra":{"type":"number"},"apple":{"type":"string"}}}"#)
                .unwrap();
        assert_eq!(AnswerFormat::Schema { schema }.columns().unwrap(), ["zebra", "apple"]);
        assert_eq!(AnswerFormat::Schema { schema: json!({"type": "object"}) }.columns(), None);
        assert_eq!(AnswerFormat::Json.columns(), None);
    }

    #[test]
    fn formats_round_trip_through_their_stored_form_and_bad_ones_are_refused() {
        for f in [
            AnswerFormat::Json,
            AnswerFormat::Fields { names: vec!["a".into()] },
            AnswerFormat::Schema { schema: json!({"type": "object"}) },
        ] {
            assert_eq!(AnswerFormat::from_stored(&serde_json::to_value(&f).unwrap()).unwrap(), f);
        }
        for bad in [
            AnswerFormat::Fields { names: vec![] },
            AnswerFormat::Fields { names: vec!["a".into(), " a".into()] },
            AnswerFormat::Fields { names: vec!["".into()] },
            AnswerFormat::Schema { schema: json!("object") },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        assert!(AnswerFormat::from_stored(&json!({"kind": "yaml"})).is_err());
    }
}
