//! The AsyncAPI 3.0 document of a contract set: one channel per event type, one message per version.

use serde_json::{json, Map, Value};

use super::{Contracts, RESERVED};
use crate::schema::AGGREGATE;

/// The file name of the AsyncAPI document in a contracts folder.
pub const ASYNCAPI_FILE: &str = "asyncapi.json";

/// The message header that carries the aggregate id (CloudEvents' `subject`, as the relay sends it): the
/// AsyncAPI `correlationId` of every message.
pub(crate) const AGGREGATE_ID_HEADER: &str = "ce_subject";

/// The AsyncAPI 3.0 document for `contracts`, titled `title`.
///
/// - `channels`: one per event type, addressed by the event type, listing one message per version
///   (`<event_type>.v<N>`).
/// - `operations`: one `send` operation per event type (the program publishes them through the outbox).
/// - `components.messages`: `<event_type>.v<N>`, JSON payload, the aggregate id as correlation id (header
///   `ce_subject`) and as the Kafka message key, CloudEvents headers, and the `x-outbox-*` metadata.
/// - `components.schemas`: each payload schema, with its `$defs` moved beside it (`<event_type>.v<N>.<Def>`) and
///   references rewritten, `x-sensitive` kept.
///
/// # Example
///
/// ```
/// use outbox_core::contracts::{asyncapi_document, Contracts};
/// use serde_json::json;
///
/// let mut contracts = Contracts::new();
/// contracts.insert("order.placed", 1, json!({ "type": "object", "x-outbox-aggregate": "order" }));
/// let document = asyncapi_document(&contracts, "Shop events");
/// assert_eq!(document["asyncapi"], "3.0.0");
/// assert_eq!(document["channels"]["order.placed"]["address"], "order.placed");
/// assert_eq!(
///     document["channels"]["order.placed"]["messages"]["order.placed.v1"]["$ref"],
///     "#/components/messages/order.placed.v1"
/// );
/// ```
pub fn asyncapi_document(contracts: &Contracts, title: &str) -> Value {
    let mut channels = Map::new();
    let mut operations = Map::new();
    let mut messages = Map::new();
    let mut schemas = Map::new();
    let event_types: Vec<String> = contracts.event_types().map(str::to_owned).collect();
    for event_type in &event_types {
        let key = component_key(event_type);
        let mut channel_messages = Map::new();
        let mut operation_messages = Vec::new();
        for (version, schema) in contracts.versions(event_type) {
            let message_key = format!("{key}.v{version}");
            let aggregate = schema.get(AGGREGATE).and_then(Value::as_str).unwrap_or("aggregate");
            hoist(schema, &message_key, &mut schemas);
            messages.insert(
                message_key.clone(),
                json!({
                    "name": event_type,
                    "title": format!("{event_type} v{version}"),
                    "summary": format!("Event `{event_type}`, schema version {version}, about a `{aggregate}`."),
                    "contentType": "application/json",
                    "headers": { "$ref": "#/components/schemas/outbox.headers" },
                    "payload": { "$ref": format!("#/components/schemas/{message_key}") },
                    "correlationId": { "$ref": "#/components/correlationIds/aggregateId" },
                    "bindings": {
                        "kafka": {
                            "key": { "type": "string", "description": format!("The `{aggregate}` id: events of one aggregate share a partition, in order.") },
                            "bindingVersion": "0.5.0"
                        }
                    },
                    "x-outbox-event-type": event_type,
                    "x-outbox-version": version,
                    "x-outbox-aggregate": aggregate,
                }),
            );
            let name = message_key.clone();
            channel_messages.insert(name.clone(), json!({ "$ref": format!("#/components/messages/{message_key}") }));
            operation_messages
                .push(json!({ "$ref": format!("#/channels/{}/messages/{name}", pointer_token(event_type)) }));
        }
        channels.insert(
            event_type.clone(),
            json!({
                "address": event_type,
                "title": event_type,
                "messages": channel_messages,
            }),
        );
        operations.insert(
            format!("send.{key}"),
            json!({
                "action": "send",
                "title": format!("Publish {event_type}"),
                "summary": "Published by the outbox relay after the transaction that enqueued it commits (at least once).",
                "channel": { "$ref": format!("#/channels/{}", pointer_token(event_type)) },
                "messages": operation_messages,
            }),
        );
    }
    schemas.insert("outbox.headers".to_owned(), headers_schema());
    json!({
        "asyncapi": "3.0.0",
        "info": {
            "title": title,
            "version": "1.0.0",
            "description": "Events published through the transactional outbox. Generated from the event types by outbox-core; do not edit by hand.",
        },
        "defaultContentType": "application/json",
        "channels": channels,
        "operations": operations,
        "components": {
            "messages": messages,
            "schemas": schemas,
            "correlationIds": {
                "aggregateId": {
                    "description": "The id of the aggregate the event is about.",
                    "location": format!("$message.header#/{AGGREGATE_ID_HEADER}"),
                }
            }
        }
    })
}

fn headers_schema() -> Value {
    let header = |description: &str| json!({ "type": "string", "description": description });
    json!({
        "type": "object",
        "description": "CloudEvents 1.0 attributes (Kafka binding names) and the W3C trace context captured at enqueue.",
        "properties": {
            "ce_id": header("The event id (UUID v7): deduplicate on it, delivery is at least once."),
            "ce_type": header("The event type."),
            "ce_source": header("The producing service."),
            "ce_specversion": header("Always 1.0."),
            "ce_subject": header("The aggregate id."),
            "ce_time": header("When the event was enqueued (RFC 3339)."),
            "ce_dataschema": header("The schema version of the payload."),
            "traceparent": header("W3C trace context of the enqueuing transaction."),
        },
        "required": ["ce_id", "ce_type", "ce_subject"],
    })
}

/// Adds `schema` as `components.schemas.<key>` and each of its `$defs` as `<key>.<Def>`, with references
/// rewritten to the new places.
fn hoist(schema: &Value, key: &str, schemas: &mut Map<String, Value>) {
    let mut root = schema.clone();
    let mut defs = Map::new();
    if let Value::Object(map) = &mut root {
        for keyword in ["$defs", "definitions"] {
            if let Some(Value::Object(found)) = map.remove(keyword) {
                for (name, def) in found {
                    defs.insert(format!("#/{keyword}/{}", pointer_token(&name)), Value::String(name.clone()));
                    schemas.insert(format!("{key}.{}", component_key(&name)), rewrite(def, key));
                }
            }
        }
        for dropped in ["$schema", "$id", RESERVED] {
            map.remove(dropped);
        }
    }
    schemas.insert(key.to_owned(), rewrite(root, key));
}

fn rewrite(value: Value, key: &str) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(name, child)| match (name.as_str(), child) {
                    ("$ref", Value::String(reference)) => (name, Value::String(rewrite_ref(&reference, key))),
                    (_, child) => (name, rewrite(child, key)),
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(|item| rewrite(item, key)).collect()),
        other => other,
    }
}

fn rewrite_ref(reference: &str, key: &str) -> String {
    for prefix in ["#/$defs/", "#/definitions/"] {
        if let Some(rest) = reference.strip_prefix(prefix) {
            let (name, tail) = rest.split_once('/').map_or((rest, ""), |(n, t)| (n, t));
            let name = name.replace("~1", "/").replace("~0", "~");
            let tail = if tail.is_empty() { String::new() } else { format!("/{tail}") };
            return format!("#/components/schemas/{key}.{}{tail}", component_key(&name));
        }
    }
    if reference == "#" {
        return format!("#/components/schemas/{key}");
    }
    reference.to_owned()
}

/// AsyncAPI component keys match `^[a-zA-Z0-9.\-_]+$`.
fn component_key(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') { c } else { '_' }).collect()
}

fn pointer_token(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}
