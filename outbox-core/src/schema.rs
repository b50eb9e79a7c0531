//! The JSON Schema of an event: what consumers may rely on, generated from the payload type.
//!
//! Schemas are JSON Schema 2020-12 and describe the payload as it is *serialized* (schemars' serialize
//! contract), which is what the relay publishes. Sensitive properties carry `x-sensitive: true`, and the root
//! carries the event's metadata as `x-outbox-event-type`, `x-outbox-aggregate` and `x-outbox-version`.

use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::{JsonSchema, Schema};
use serde_json::Value;

use crate::event::OutboxEvent;

/// The keyword marking a sensitive property.
pub const SENSITIVE: &str = "x-sensitive";
/// The root keyword holding [`OutboxEvent::EVENT_TYPE`].
pub const EVENT_TYPE: &str = "x-outbox-event-type";
/// The root keyword holding [`OutboxEvent::AGGREGATE_TYPE`].
pub const AGGREGATE: &str = "x-outbox-aggregate";
/// The root keyword holding [`OutboxEvent::VERSION`].
pub const VERSION: &str = "x-outbox-version";

/// Why an event's schema could not be generated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// A sensitive path names no property of the schema, so the schema could not mark it: the type's
    /// `JsonSchema` and `Serialize` impls disagree (a hand-written impl, or a `#[schemars(...)]` attribute that
    /// serde does not share).
    #[error("event `{event_type}`: the sensitive path `{path}` names no property of the schema, so it cannot be marked `x-sensitive`")]
    SensitivePathNotInSchema {
        /// The event whose schema failed.
        event_type: &'static str,
        /// The sensitive JSON pointer that was not found.
        path: String,
    },
}

/// The schema generator the contracts use: JSON Schema 2020-12, serialize contract.
#[must_use]
pub fn generator() -> SchemaGenerator {
    SchemaSettings::draft2020_12().for_serialize().into_generator()
}

/// The JSON Schema of event `E`, with `x-sensitive: true` on each sensitive property (also inside `$defs`) and
/// the event's type, aggregate and version at the root.
///
/// # Errors
///
/// [`SchemaError::SensitivePathNotInSchema`] when a pointer of [`OutboxEvent::sensitive_paths`] names nothing
/// in the schema.
///
/// # Example
///
/// ```
/// use outbox_core::OutboxEvent;
/// use schemars::JsonSchema;
/// use serde::Serialize;
///
/// #[derive(Serialize, JsonSchema, OutboxEvent)]
/// #[outbox(event_type = "user.signed_up", aggregate = "user", version = 2)]
/// struct UserSignedUp {
///     #[outbox(aggregate_id)]
///     user_id: u64,
///     #[outbox(sensitive)]
///     email: String,
/// }
///
/// let schema = outbox_core::schema::event_schema::<UserSignedUp>()?;
/// assert_eq!(schema.get("x-outbox-event-type"), Some(&"user.signed_up".into()));
/// assert_eq!(schema.get("x-outbox-version"), Some(&2.into()));
/// assert_eq!(schema.pointer("/properties/email/x-sensitive"), Some(&true.into()));
/// # Ok::<(), outbox_core::schema::SchemaError>(())
/// ```
pub fn event_schema<E: OutboxEvent + JsonSchema + ?Sized>() -> Result<Schema, SchemaError> {
    let mut schema = generator().into_root_schema_for::<E>();
    for path in E::sensitive_paths() {
        if !mark_sensitive(&mut schema, &path) {
            return Err(SchemaError::SensitivePathNotInSchema { event_type: E::EVENT_TYPE, path });
        }
    }
    schema.insert(EVENT_TYPE.to_owned(), E::EVENT_TYPE.into());
    schema.insert(AGGREGATE.to_owned(), E::AGGREGATE_TYPE.into());
    schema.insert(VERSION.to_owned(), E::VERSION.into());
    Ok(schema)
}

/// The locations, as JSON pointers into `schema`, of the subschemas that describe the payload value at
/// `payload_path` (a pointer into the payload, `*` for every element). `$ref`s into the document, `allOf`,
/// `anyOf` and `oneOf` are followed; several locations come back when branches both describe the value.
///
/// # Example
///
/// ```
/// let schema: schemars::Schema = serde_json::json!({
///     "type": "object",
///     "properties": { "card": { "$ref": "#/$defs/Card" } },
///     "$defs": { "Card": { "type": "object", "properties": { "number": { "type": "string" } } } }
/// }).try_into()?;
/// assert_eq!(outbox_core::schema::locate(&schema, "/card/number"), ["/$defs/Card/properties/number"]);
/// # Ok::<(), serde_json::Error>(())
/// ```
pub fn locate(schema: &Schema, payload_path: &str) -> Vec<String> {
    let segments: Vec<String> = match payload_path.strip_prefix('/') {
        Some(rest) => rest.split('/').map(unescape).collect(),
        None if payload_path.is_empty() => Vec::new(),
        None => return Vec::new(),
    };
    let mut found = Vec::new();
    walk(schema.as_value(), String::new(), &segments, &mut found, 0);
    found.sort();
    found.dedup();
    found
}

/// Adds `x-sensitive: true` to every subschema [`locate`] finds for `payload_path`; `false` when there is none.
pub fn mark_sensitive(schema: &mut Schema, payload_path: &str) -> bool {
    let locations = locate(schema, payload_path);
    for location in &locations {
        let Some(target) = schema.pointer_mut(location) else { continue };
        if target.as_bool() == Some(true) {
            *target = Value::Object(serde_json::Map::new());
        }
        if let Value::Object(keywords) = target {
            keywords.insert(SENSITIVE.to_owned(), Value::Bool(true));
        }
    }
    !locations.is_empty()
}

/// Deeper than this, a `$ref` chain is taken as a cycle.
const MAX_DEPTH: usize = 64;

fn walk(root: &Value, at: String, segments: &[String], found: &mut Vec<String>, depth: usize) {
    if segments.is_empty() {
        found.push(at);
        return;
    }
    if depth > MAX_DEPTH {
        return;
    }
    let Some(node) = pointer(root, &at).and_then(Value::as_object) else { return };
    if let Some(target) = node.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix('#')) {
        walk(root, target.to_owned(), segments, found, depth + 1);
    }
    for keyword in ["allOf", "anyOf", "oneOf"] {
        if let Some(branches) = node.get(keyword).and_then(Value::as_array) {
            for index in 0..branches.len() {
                walk(root, format!("{at}/{keyword}/{index}"), segments, found, depth + 1);
            }
        }
    }
    let (segment, rest) = (&segments[0], &segments[1..]);
    let is_index = segment == "*" || segment.parse::<usize>().is_ok();
    if is_index && node.get("items").is_some_and(|items| !items.is_boolean()) {
        walk(root, format!("{at}/items"), rest, found, depth + 1);
    }
    // A tuple: one schema per position.
    if let Some(items) = node.get("prefixItems").and_then(Value::as_array) {
        let positions: Vec<usize> = match segment.parse::<usize>() {
            Ok(index) => vec![index],
            Err(_) if segment == "*" => (0..items.len()).collect(),
            Err(_) => Vec::new(),
        };
        for index in positions.into_iter().filter(|index| *index < items.len()) {
            walk(root, format!("{at}/prefixItems/{index}"), rest, found, depth + 1);
        }
    }
    if segment == "*" {
        // A map's values: any key (`additionalProperties`, or `unevaluatedProperties` beside a flattened enum), keys
        // of a pattern (`patternProperties`: integer keys), or the fixed keys of a map keyed by a unit enum
        // (`properties` of a closed object).
        for keyword in ["additionalProperties", "unevaluatedProperties"] {
            if node.get(keyword).is_some_and(Value::is_object) {
                walk(root, format!("{at}/{keyword}"), rest, found, depth + 1);
            }
        }
        for pattern in node.get("patternProperties").and_then(Value::as_object).into_iter().flat_map(|p| p.keys()) {
            walk(root, format!("{at}/patternProperties/{}", escape(pattern)), rest, found, depth + 1);
        }
        if node.get("additionalProperties") == Some(&Value::Bool(false)) {
            for key in node.get("properties").and_then(Value::as_object).into_iter().flat_map(|p| p.keys()) {
                walk(root, format!("{at}/properties/{}", escape(key)), rest, found, depth + 1);
            }
        }
    }
    if node.get("properties").and_then(Value::as_object).is_some_and(|p| p.contains_key(segment.as_str())) {
        walk(root, format!("{at}/properties/{}", escape(segment)), rest, found, depth + 1);
    }
}

fn pointer<'v>(root: &'v Value, at: &str) -> Option<&'v Value> {
    if at.is_empty() {
        Some(root)
    } else {
        root.pointer(at)
    }
}

fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

fn unescape(segment: &str) -> String {
    segment.replace("~1", "/").replace("~0", "~")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{locate, mark_sensitive};

    fn schema(value: serde_json::Value) -> schemars::Schema {
        value.try_into().unwrap()
    }

    #[test]
    fn nullable_refs_and_array_items_are_followed() {
        let schema = schema(json!({
            "properties": {
                "billing": { "anyOf": [{ "$ref": "#/$defs/Card" }, { "type": "null" }] },
                "cards": { "type": "array", "items": { "$ref": "#/$defs/Card" } }
            },
            "$defs": { "Card": { "properties": { "number": { "type": "string" } } } }
        }));
        assert_eq!(locate(&schema, "/billing/number"), ["/$defs/Card/properties/number"]);
        assert_eq!(locate(&schema, "/cards/*/number"), ["/$defs/Card/properties/number"]);
        assert_eq!(locate(&schema, "/cards"), ["/properties/cards"]);
        assert!(locate(&schema, "/cards/*/cvv").is_empty());
    }

    #[test]
    fn tuple_positions_are_followed() {
        let schema = schema(json!({
            "properties": {
                "pairs": { "type": "array", "items": {
                    "type": "array", "prefixItems": [{ "type": "integer" }, { "$ref": "#/$defs/Card" }]
                } }
            },
            "$defs": { "Card": { "properties": { "number": { "type": "string" } } } }
        }));
        assert_eq!(locate(&schema, "/pairs/*/1/number"), ["/$defs/Card/properties/number"]);
        assert!(locate(&schema, "/pairs/*/2/number").is_empty());
    }

    #[test]
    fn marking_a_missing_path_reports_false_and_changes_nothing() {
        let mut marked = schema(json!({ "properties": { "a": { "type": "string" } } }));
        let original = marked.clone();
        assert!(!mark_sensitive(&mut marked, "/b"));
        assert_eq!(marked, original);
        assert!(mark_sensitive(&mut marked, "/a"));
        assert_eq!(marked.pointer("/properties/a/x-sensitive"), Some(&json!(true)));
    }

    #[test]
    fn a_true_schema_becomes_an_object_when_marked() {
        let mut marked = schema(json!({ "properties": { "any": true } }));
        assert!(mark_sensitive(&mut marked, "/any"));
        assert_eq!(marked.pointer("/properties/any"), Some(&json!({ "x-sensitive": true })));
    }
}
