//! `$ref` resolution: every reference into the document is replaced by what it points to, so the differ
//! compares shapes, not names (renaming a Rust type renames its `$defs` entry, which is not a change).

use serde_json::{Map, Value};

/// Where a reference would recurse into itself, the resolved tree holds `{ RECURSIVE: "<the $ref>", LEVELS_UP: n }`.
pub(crate) const RECURSIVE: &str = "x-outbox-recursive";
/// Beside [`RECURSIVE`]: how many levels of the value (properties, items, map values; not the branches of a
/// union) lie between the marker and the place where the type it repeats was expanded. The `$ref` names a
/// definition, which a rename changes; the levels tell which ancestor the value repeats.
pub(crate) const LEVELS_UP: &str = "x-outbox-levels-up";

/// Keywords whose value is one subschema.
const SCHEMA_KEYWORDS: &[&str] = &[
    "additionalProperties",
    "additionalItems",
    "items",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contentSchema",
];
/// Keywords whose value is an array of subschemas.
const ARRAY_KEYWORDS: &[&str] = &["anyOf", "oneOf", "allOf", "prefixItems", "items"];
/// Keywords whose value is a map of subschemas.
const MAP_KEYWORDS: &[&str] = &["properties", "patternProperties", "dependentSchemas"];
/// Keywords whose subschemas apply to the value itself, not to a part of it: they do not count as a level.
const SAME_VALUE_KEYWORDS: &[&str] = &["anyOf", "oneOf", "allOf", "not", "if", "then", "else", "dependentSchemas"];
/// Keywords dropped from the resolved tree: definitions are inlined where used, identifiers mean nothing there.
const DROPPED: &[&str] = &["$defs", "definitions", "$schema", "$id", "$anchor", "$comment", "$dynamicAnchor"];

/// More nested than this, or more nodes than [`BUDGET`], and a reference is left unresolved as recursive.
const MAX_DEPTH: usize = 96;
const BUDGET: usize = 200_000;

/// The resolved schema and the references that pointed to nothing.
#[derive(Debug)]
pub(crate) struct Resolved {
    pub(crate) schema: Value,
    pub(crate) dangling: Vec<String>,
}

/// Resolves every `$ref` of `root` that points into `root` (`#`, `#/$defs/...`, any JSON pointer). A dangling
/// reference becomes `true` (any value) and is listed in [`Resolved::dangling`].
pub(crate) fn resolve(root: &Value) -> Resolved {
    let mut resolver = Resolver { root, stack: Vec::new(), dangling: Vec::new(), nodes: 0 };
    let schema = resolver.schema(root, 0, 0);
    Resolved { schema, dangling: resolver.dangling }
}

struct Resolver<'r> {
    root: &'r Value,
    /// The references being expanded, each with the level of the value where it was.
    stack: Vec<(String, usize)>,
    dangling: Vec<String>,
    nodes: usize,
}

impl Resolver<'_> {
    /// `node` resolved; `level` is how deep in the value it applies (see [`LEVELS_UP`]).
    fn schema(&mut self, node: &Value, depth: usize, level: usize) -> Value {
        self.nodes += 1;
        let Value::Object(map) = node else { return node.clone() };
        let mut out = Map::new();
        for (key, value) in map {
            if DROPPED.contains(&key.as_str()) || key == "$ref" {
                continue;
            }
            let key_str = key.as_str();
            let below = if SAME_VALUE_KEYWORDS.contains(&key_str) { level } else { level + 1 };
            let resolved = match value {
                Value::Array(items) if ARRAY_KEYWORDS.contains(&key_str) => {
                    Value::Array(items.iter().map(|item| self.schema(item, depth + 1, below)).collect())
                }
                Value::Object(children) if MAP_KEYWORDS.contains(&key_str) => Value::Object(
                    children.iter().map(|(name, child)| (name.clone(), self.schema(child, depth + 1, below))).collect(),
                ),
                Value::Object(_) if SCHEMA_KEYWORDS.contains(&key_str) => self.schema(value, depth + 1, below),
                _ => value.clone(),
            };
            out.insert(key.clone(), resolved);
        }
        let Some(reference) = map.get("$ref").and_then(Value::as_str) else { return Value::Object(out) };
        let base = self.reference(reference, depth, level);
        match base {
            Value::Object(mut target) => {
                // Keywords beside `$ref` apply too; on a clash (a `description`, an `x-sensitive`) they win.
                target.extend(out);
                Value::Object(target)
            }
            Value::Bool(true) => Value::Object(out),
            other => other,
        }
    }

    fn reference(&mut self, reference: &str, depth: usize, level: usize) -> Value {
        let Some(pointer) = reference.strip_prefix('#') else {
            self.dangling.push(reference.to_owned());
            return Value::Bool(true);
        };
        let pointer = pointer.replace("%25", "%").replace("%22", "\"");
        let target = if pointer.is_empty() { Some(self.root) } else { self.root.pointer(&pointer) };
        let Some(target) = target else {
            self.dangling.push(reference.to_owned());
            return Value::Bool(true);
        };
        let expanded = self.stack.iter().find(|(r, _)| r == reference).map(|(_, at)| *at);
        if expanded.is_some() || depth > MAX_DEPTH || self.nodes > BUDGET {
            let mut marker = Map::from_iter([(RECURSIVE.to_owned(), Value::String(reference.to_owned()))]);
            if let Some(at) = expanded {
                marker.insert(LEVELS_UP.to_owned(), Value::from(level - at));
            }
            return Value::Object(marker);
        }
        self.stack.push((reference.to_owned(), level));
        let resolved = self.schema(target, depth + 1, level);
        self.stack.pop();
        resolved
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{resolve, LEVELS_UP, RECURSIVE};

    #[test]
    fn references_are_inlined_and_definitions_dropped() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": { "card": { "$ref": "#/$defs/Card", "description": "the card" } },
            "$defs": { "Card": { "type": "object", "properties": { "number": { "type": "string" } } } }
        });
        let resolved = resolve(&schema);
        assert!(resolved.dangling.is_empty());
        assert_eq!(
            resolved.schema,
            json!({
                "type": "object",
                "properties": { "card": {
                    "type": "object", "description": "the card",
                    "properties": { "number": { "type": "string" } }
                } }
            })
        );
    }

    #[test]
    fn a_recursive_type_stops_at_the_second_visit() {
        let schema = json!({
            "$ref": "#/$defs/Node",
            "$defs": { "Node": { "type": "object", "properties": { "next": { "$ref": "#/$defs/Node" } } } }
        });
        let resolved = resolve(&schema);
        assert_eq!(
            resolved.schema.pointer("/properties/next"),
            Some(&json!({ RECURSIVE: "#/$defs/Node", LEVELS_UP: 1 }))
        );
    }

    #[test]
    fn a_recursion_marker_counts_the_levels_up_to_the_type_it_repeats() {
        // A { b: Option<B> }, B { next: Option<A>, again: Vec<B> }: `next` repeats A two levels up (`b`, then
        // `next`; the union of `Option` is no level), an item of `again` repeats B two levels up (`again`, then
        // its items).
        let schema = json!({
            "$ref": "#/$defs/A",
            "$defs": {
                "A": { "type": "object", "properties": {
                    "b": { "anyOf": [{ "$ref": "#/$defs/B" }, { "type": "null" }] }
                } },
                "B": { "type": "object", "properties": {
                    "next": { "anyOf": [{ "$ref": "#/$defs/A" }, { "type": "null" }] },
                    "again": { "type": "array", "items": { "$ref": "#/$defs/B" } }
                } }
            }
        });
        let resolved = resolve(&schema).schema;
        let b = "/properties/b/anyOf/0/properties";
        assert_eq!(resolved.pointer(&format!("{b}/next/anyOf/0/{LEVELS_UP}")), Some(&json!(2)));
        assert_eq!(resolved.pointer(&format!("{b}/again/items/{LEVELS_UP}")), Some(&json!(2)));
    }

    #[test]
    fn a_dangling_reference_is_reported() {
        let resolved = resolve(&json!({ "properties": { "a": { "$ref": "#/$defs/Missing" } } }));
        assert_eq!(resolved.dangling, ["#/$defs/Missing"]);
        let resolved = resolve(&json!({ "$ref": "other.json#/x" }));
        assert_eq!(resolved.dangling, ["other.json#/x"]);
    }

    #[test]
    fn const_and_enum_values_are_not_resolved() {
        let schema = json!({ "const": { "$ref": "#/nowhere" } });
        let resolved = resolve(&schema);
        assert!(resolved.dangling.is_empty());
        assert_eq!(resolved.schema, schema);
    }
}
