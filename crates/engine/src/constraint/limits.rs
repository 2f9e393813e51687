//! Bounds on what a request may ask the grammar compiler to build, checked
//! before it runs: llguidance recurses through a schema's nesting (following
//! its `$ref`s) and through grammar rules, so depth is what costs stack, and
//! size is what costs time. Real schemas stay far inside these (OpenAI's
//! structured outputs allow 10 levels of nesting); the limits are named in
//! the error so a client knows what to change.
use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::Constraint;
use crate::error::{Error, Result};

/// Bytes of a schema (as compact JSON), a regular expression or a grammar.
pub const MAX_SOURCE_BYTES: usize = 64 * 1024;

/// Levels of JSON nesting in a schema, counted through its local `$ref`s (a
/// reference enters its target one level down; a recursive reference counts
/// once, as the compiler builds each definition once).
pub const MAX_SCHEMA_DEPTH: usize = 256;

/// Levels of brackets in a regular expression or a Lark grammar.
pub const MAX_NESTING: usize = 256;

pub fn check(constraint: &Constraint) -> Result<()> {
    let kind = constraint.kind();
    match constraint {
        Constraint::JsonSchema(schema) => {
            // Depth first: writing out a schema nested thousands deep would
            // itself recurse that deep.
            check_schema_depth(schema)?;
            check_source_size(kind, serde_json::to_string(schema).map_or(usize::MAX, |s| s.len()))
        }
        Constraint::JsonObject => Ok(()),
        Constraint::Regex(source) | Constraint::Lark(source) => {
            check_source_size(kind, source.len())?;
            check_nesting(kind, source)
        }
    }
}

pub fn check_source_size(kind: &str, bytes: usize) -> Result<()> {
    if bytes > MAX_SOURCE_BYTES {
        return Err(Error::InvalidRequest(format!(
            "the {kind} is {bytes} bytes; at most {MAX_SOURCE_BYTES} are allowed"
        )));
    }
    Ok(())
}

fn check_schema_depth(schema: &Value) -> Result<()> {
    let mut walk = DepthWalk { root: schema, memo: HashMap::new(), entered: HashSet::new() };
    match walk.deepest(schema, 1) {
        Ok(_) => Ok(()),
        Err(TooDeep) => Err(Error::InvalidRequest(format!(
            "the JSON schema nests more than {MAX_SCHEMA_DEPTH} levels deep (counting through its $refs); \
             at most {MAX_SCHEMA_DEPTH} are allowed"
        ))),
    }
}

struct TooDeep;

/// The deepest level a schema reaches. Stops as soon as it passes the limit,
/// so its own recursion is bounded by [`MAX_SCHEMA_DEPTH`]; each reference's
/// depth is remembered, so a schema of diamonds costs linear time.
struct DepthWalk<'a> {
    root: &'a Value,
    /// Depth below each reference target already measured.
    memo: HashMap<&'a str, usize>,
    /// References being measured on the current path (recursion).
    entered: HashSet<&'a str>,
}

impl<'a> DepthWalk<'a> {
    fn deepest(&mut self, value: &'a Value, level: usize) -> std::result::Result<usize, TooDeep> {
        if level > MAX_SCHEMA_DEPTH {
            return Err(TooDeep);
        }
        let mut deepest = level;
        match value {
            Value::Object(map) => {
                if let Some(Value::String(reference)) = map.get("$ref") {
                    deepest = deepest.max(self.through_reference(reference, level)?);
                }
                for child in map.values() {
                    deepest = deepest.max(self.deepest(child, level + 1)?);
                }
            }
            Value::Array(items) => {
                for child in items {
                    deepest = deepest.max(self.deepest(child, level + 1)?);
                }
            }
            _ => {}
        }
        Ok(deepest)
    }

    fn through_reference(
        &mut self,
        reference: &'a str,
        level: usize,
    ) -> std::result::Result<usize, TooDeep> {
        // Only references into this document are followed (others the
        // compiler refuses on its own).
        let Some(target) =
            reference.strip_prefix('#').and_then(|pointer| self.root.pointer(pointer))
        else {
            return Ok(level);
        };
        if self.entered.contains(reference) {
            return Ok(level);
        }
        if let Some(&below) = self.memo.get(reference) {
            return if level + below > MAX_SCHEMA_DEPTH { Err(TooDeep) } else { Ok(level + below) };
        }
        self.entered.insert(reference);
        let reached = self.deepest(target, level + 1);
        self.entered.remove(reference);
        let reached = reached?;
        self.memo.insert(reference, reached - level);
        Ok(reached)
    }
}

/// Brackets nested in a regex or grammar source (escaped ones and those in
/// quoted strings do not count).
fn check_nesting(kind: &str, source: &str) -> Result<()> {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut quote: Option<char> = None;
    let mut chars = source.chars();
    while let Some(c) = chars.next() {
        match (c, quote) {
            ('\\', _) => {
                chars.next();
            }
            ('"', None) => quote = Some('"'),
            ('"', Some('"')) => quote = None,
            ('(' | '[' | '{', None) => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            (')' | ']' | '}', None) => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    if deepest > MAX_NESTING {
        return Err(Error::InvalidRequest(format!(
            "the {kind} nests {deepest} levels of brackets; at most {MAX_NESTING} are allowed"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The schema from the hardening report: `d_i` an object whose one
    /// required property refers to `d_{i+1}`.
    fn ref_chain(links: usize) -> Value {
        let mut defs = serde_json::Map::new();
        for i in 0..links {
            let next = if i + 1 < links {
                json!({"$ref": format!("#/$defs/d{}", i + 1)})
            } else {
                json!({"type": "string"})
            };
            defs.insert(
                format!("d{i}"),
                json!({"type": "object", "properties": {"next": next}, "required": ["next"]}),
            );
        }
        json!({"$defs": defs, "$ref": "#/$defs/d0"})
    }

    #[test]
    fn a_long_ref_chain_is_too_deep_and_a_short_one_is_not() {
        assert!(check(&Constraint::JsonSchema(ref_chain(10))).is_ok());
        let err = check(&Constraint::JsonSchema(ref_chain(300))).unwrap_err().to_string();
        assert!(err.contains("256 levels"), "{err}");
    }

    #[test]
    fn recursive_and_diamond_schemas_are_measured_once() {
        // A tree: a node's children are nodes. Fine however deep answers go.
        let tree = json!({
            "$defs": {"node": {"type": "object", "properties": {
                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
            "$ref": "#/$defs/node"
        });
        assert!(check(&Constraint::JsonSchema(tree)).is_ok());
        // 40 levels of diamonds (each level refers twice to the next): 2^40
        // paths, measured in linear time, and 40 x 4 levels is within bounds.
        let mut defs = serde_json::Map::new();
        for i in 0..40 {
            let next = json!({"$ref": format!("#/$defs/d{}", i + 1)});
            defs.insert(format!("d{i}"), json!({"properties": {"a": next.clone(), "b": next}}));
        }
        defs.insert("d40".into(), json!({"type": "integer"}));
        assert!(
            check(&Constraint::JsonSchema(json!({"$defs": defs, "$ref": "#/$defs/d0"}))).is_ok()
        );
    }

    #[test]
    fn sizes_and_bracket_nesting_are_bounded() {
        let big = "a".repeat(MAX_SOURCE_BYTES + 1);
        assert!(check(&Constraint::Regex(big)).unwrap_err().to_string().contains("65536"));
        let deep = format!("{}a{}", "(".repeat(300), ")".repeat(300));
        assert!(check(&Constraint::Regex(deep)).unwrap_err().to_string().contains("300 levels"));
        // Brackets inside a quoted string or escaped are text.
        let quoted = format!("start: \"{}\"", "(".repeat(300));
        assert!(check(&Constraint::Lark(quoted)).is_ok());
        assert!(check(&Constraint::Regex(format!("{}x", r"\(".repeat(300)))).is_ok());
    }
}
