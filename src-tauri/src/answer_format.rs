//! A chat's answer format: free text (none), any JSON object, JSON with the
//! fields the user names, or a JSON schema the user pastes. Kept with the
//! chat; each reply turns it into the engine's constraint, so the model can
//! only answer in that shape.
use engine::constraint::Constraint;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::error::{AppError, AppResult};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum AnswerFormat {
    /// Any JSON object.
    Json,
    /// An object with exactly these keys, each a string.
    Fields { names: Vec<String> },
    /// A JSON Schema.
    Schema { schema: Value },
}

impl AnswerFormat {
    /// Refuses what could never be an answer format (the engine refuses a
    /// schema it cannot compile when the message is sent).
    pub fn validate(&self) -> AppResult<()> {
        let bad = |m: &str| Err(AppError::new("INVALID_ANSWER_FORMAT", m));
        match self {
            AnswerFormat::Json => Ok(()),
            AnswerFormat::Fields { names } => {
                if names.is_empty() || names.iter().any(|n| n.trim().is_empty()) {
                    return bad("Name at least one field, and no empty ones.");
                }
                let mut unique: Vec<&str> = names.iter().map(|n| n.trim()).collect();
                unique.sort_unstable();
                unique.dedup();
                if unique.len() != names.len() {
                    return bad("Each field name can appear once.");
                }
                Ok(())
            }
            AnswerFormat::Schema { schema } if schema.is_object() => Ok(()),
            AnswerFormat::Schema { .. } => bad("A JSON schema is an object, such as {\"type\": \"object\", …}."),
        }
    }

    pub fn constraint(&self) -> Constraint {
        match self {
            AnswerFormat::Json => Constraint::JsonObject,
            AnswerFormat::Fields { names } => Constraint::JsonSchema(fields_schema(names)),
            AnswerFormat::Schema { schema } => Constraint::JsonSchema(schema.clone()),
        }
    }

    /// The stored form, as the store keeps it.
    pub fn from_stored(stored: &Value) -> AppResult<Self> {
        serde_json::from_value(stored.clone())
            .map_err(|e| AppError::new("INVALID_ANSWER_FORMAT", format!("The chat's answer format cannot be read: {e}")))
    }
}

/// An object with the named string fields, all required, nothing else.
fn fields_schema(names: &[String]) -> Value {
    let properties: Map<String, Value> = names.iter().map(|n| (n.trim().to_string(), json!({"type": "string"}))).collect();
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
            assert_eq!(bad.validate().unwrap_err().code, "INVALID_ANSWER_FORMAT", "{bad:?}");
        }
        assert!(AnswerFormat::from_stored(&json!({"kind": "yaml"})).is_err());
    }
}
