//! The AsyncAPI 3.0 document of a contract set: one message per version; one channel per event type, or, for a
//! broker described by a [`Wire`], one channel per address the relay publishes to.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::wire::{attribute_description, CLOUDEVENTS_ATTRIBUTES, TRACE_CONTEXT_HEADERS};
use super::{ContractError, Contracts, Wire, RESERVED};
use crate::schema::AGGREGATE;

/// The file name of the AsyncAPI document in a contracts folder.
pub const ASYNCAPI_FILE: &str = "asyncapi.json";

/// The `schemaFormat` of every payload: the contracts are JSON Schema 2020-12 documents, as `schemars` writes
/// them.
pub const SCHEMA_FORMAT: &str = "application/schema+json;version=draft-2020-12";

/// The `info.description` of the document without a broker ([`asyncapi_document`]): what it describes, what it
/// does not, and how to get the document of the wire.
const BROKER_FREE_DESCRIPTION: &str = "Events published through the transactional outbox. Generated from the event \
types by outbox-core; do not edit by hand. This document names no broker: it has no servers, each channel's address \
is the event type rather than the destination the relay publishes to (a topic, subject, routing key, queue or \
stream, given by the relay's sink URL), and the headers carry the names of the CloudEvents Kafka binding (`ce_*`). \
For the channels, server and headers a consumer of the broker sees, run `outbox contracts asyncapi <contracts \
folder> --sink <the relay's sink URL>`.";

/// The message header that carries the aggregate id (CloudEvents' `subject`, as the relay sends it to Kafka): the
/// AsyncAPI `correlationId` of every message of the broker-neutral document.
pub(crate) const AGGREGATE_ID_HEADER: &str = "ce_subject";

/// The AsyncAPI 3.0 document for `contracts`, titled `title`, without a broker: the document `export` writes
/// into a contracts folder. It describes the events, not the wire: no `servers`, channel addresses that are event
/// types rather than the relay's destinations, and headers under the CloudEvents Kafka binding's names; its
/// `info.description` says so. For the document of the broker a relay publishes to, see [`asyncapi_document_for`]
/// (`outbox contracts asyncapi --sink URL`).
///
/// - `channels`: one per event type, addressed by the event type, listing one message per version
///   (`<event_type>.v<N>`).
/// - `operations`: one `send` operation per channel (the program publishes them through the outbox).
/// - `components.messages`: `<event_type>.v<N>`, JSON payload (`schemaFormat` [`SCHEMA_FORMAT`]), the aggregate
///   id as correlation id (header `ce_subject`) and as the Kafka message key, CloudEvents headers, and the
///   `x-outbox-*` metadata.
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
/// assert!(document.get("servers").is_none());
/// let description = document["info"]["description"].as_str().unwrap();
/// assert!(description.contains("names no broker") && description.contains("--sink"));
/// ```
#[must_use]
pub fn asyncapi_document(contracts: &Contracts, title: &str) -> Value {
    // Without a broker every address is the event type, so nothing can be missing.
    build(contracts, title, None).unwrap_or(Value::Null)
}

/// The AsyncAPI 3.0 document for `contracts` as `wire` carries them: what a consumer of that broker needs.
///
/// - `servers`: the broker (protocol, host, path), without credentials.
/// - `channels`: one per address the events are published to (a topic, subject, routing key, queue or stream),
///   listing the messages published there; with the broker's channel bindings.
/// - messages as in [`asyncapi_document`], with the headers this broker really carries, the correlation id where
///   this broker carries the aggregate id, the Kafka key binding only on Kafka, and, for a structured-mode
///   CloudEvents envelope, the envelope as the payload with the contract as its `data`.
///
/// # Errors
///
/// [`ContractError::NoAddress`] when `wire` names no address for one of the contracts.
pub fn asyncapi_document_for(contracts: &Contracts, title: &str, wire: &Wire) -> Result<Value, ContractError> {
    build(contracts, title, Some(wire))
}

/// One channel: its address and its messages' keys.
struct Channel {
    address: String,
    messages: Vec<String>,
}

fn build(contracts: &Contracts, title: &str, wire: Option<&Wire>) -> Result<Value, ContractError> {
    let mut messages = Map::new();
    let mut schemas = Map::new();
    // Channels by key, in a stable order.
    let mut channels: BTreeMap<String, Channel> = BTreeMap::new();
    let mut keys_by_address: BTreeMap<String, String> = BTreeMap::new();
    let event_types: Vec<String> = contracts.event_types().map(str::to_owned).collect();
    for event_type in &event_types {
        let key = component_key(event_type);
        for (version, schema) in contracts.versions(event_type) {
            let message_key = format!("{key}.v{version}");
            let aggregate = schema.get(AGGREGATE).and_then(Value::as_str).unwrap_or("aggregate");
            let address = match wire {
                None => event_type.clone(),
                Some(wire) => wire
                    .address_of(event_type, version)
                    .ok_or_else(|| ContractError::NoAddress { event_type: event_type.clone(), version })?
                    .to_owned(),
            };
            hoist(schema, &message_key, &mut schemas);
            messages.insert(message_key.clone(), message(event_type, version, aggregate, &message_key, wire));
            let taken = keys_by_address.len();
            let channel_key = keys_by_address
                .entry(address.clone())
                .or_insert_with(|| {
                    let candidate = if wire.is_some() { component_key(&address) } else { key.clone() };
                    if channels.contains_key(&candidate) {
                        format!("{candidate}.{taken}")
                    } else {
                        candidate
                    }
                })
                .clone();
            channels
                .entry(channel_key)
                .or_insert_with(|| Channel { address, messages: Vec::new() })
                .messages
                .push(message_key);
        }
    }
    let mut channel_objects = Map::new();
    let mut operations = Map::new();
    for (channel_key, channel) in &channels {
        let refs: Map<String, Value> = channel
            .messages
            .iter()
            .map(|m| (m.clone(), json!({ "$ref": format!("#/components/messages/{m}") })))
            .collect();
        let mut object = json!({ "address": channel.address, "title": channel.address, "messages": refs });
        if let Some(wire) = wire {
            object["servers"] = json!([{ "$ref": format!("#/servers/{}", component_key(&wire.protocol)) }]);
            if let Some(bindings) = &wire.channel_bindings {
                object["bindings"] = bindings.clone();
            }
        }
        channel_objects.insert(channel_key.clone(), object);
        let token = pointer_token(channel_key);
        operations.insert(
            format!("send.{channel_key}"),
            json!({
                "action": "send",
                "title": format!("Publish to {}", channel.address),
                "summary": "Published by the outbox relay after the transaction that enqueued it commits (at least once).",
                "channel": { "$ref": format!("#/channels/{token}") },
                "messages": channel.messages.iter().map(|m| json!({ "$ref": format!("#/channels/{token}/messages/{m}") })).collect::<Vec<_>>(),
            }),
        );
    }
    schemas.insert("outbox.headers".to_owned(), wire.map_or_else(headers_schema, wire_headers_schema));
    let mut components = json!({ "messages": messages, "schemas": schemas });
    if wire.is_none_or(|w| w.correlation.is_some() || w.envelope) {
        let location = match wire {
            None => format!("$message.header#/{AGGREGATE_ID_HEADER}"),
            Some(w) => match &w.correlation {
                Some(header) => format!("$message.header#/{}", pointer_token(header)),
                None => "$message.payload#/subject".to_owned(),
            },
        };
        components["correlationIds"] = json!({
            "aggregateId": { "description": "The id of the aggregate the event is about.", "location": location }
        });
    }
    let description = match wire {
        None => BROKER_FREE_DESCRIPTION,
        Some(_) => {
            "Events published through the transactional outbox, as the relay publishes them to the broker of \
             `servers`. Generated from the event types by outbox-core; do not edit by hand."
        }
    };
    let mut document = json!({
        "asyncapi": "3.0.0",
        "info": { "title": title, "version": "1.0.0", "description": description },
        "defaultContentType": wire.map_or("application/json", |w| w.content_type.as_str()),
        "channels": channel_objects,
        "operations": operations,
        "components": components,
    });
    if let Some(wire) = wire {
        let mut server = json!({ "host": wire.host, "protocol": wire.protocol });
        if let Some(pathname) = &wire.pathname {
            server["pathname"] = json!(pathname);
        }
        if let Some(description) = &wire.description {
            server["description"] = json!(description);
        }
        document["servers"] = json!({ component_key(&wire.protocol): server });
    }
    Ok(document)
}

/// The message object of one version.
fn message(event_type: &str, version: u32, aggregate: &str, message_key: &str, wire: Option<&Wire>) -> Value {
    let contract = json!({ "$ref": format!("#/components/schemas/{message_key}") });
    let payload = match wire {
        Some(wire) if wire.envelope => envelope_schema(&contract),
        _ => contract,
    };
    let mut message = json!({
        "name": event_type,
        "title": format!("{event_type} v{version}"),
        "summary": format!("Event `{event_type}`, schema version {version}, about a `{aggregate}`."),
        "contentType": wire.map_or("application/json", |w| w.content_type.as_str()),
        "headers": { "$ref": "#/components/schemas/outbox.headers" },
        "payload": { "schemaFormat": SCHEMA_FORMAT, "schema": payload },
        "x-outbox-event-type": event_type,
        "x-outbox-version": version,
        "x-outbox-aggregate": aggregate,
    });
    if wire.is_none_or(|w| w.correlation.is_some() || w.envelope) {
        message["correlationId"] = json!({ "$ref": "#/components/correlationIds/aggregateId" });
    }
    if wire.is_none_or(|w| w.keyed_by_aggregate && w.protocol == "kafka") {
        message["bindings"] = json!({
            "kafka": {
                "key": { "type": "string", "description": format!("The `{aggregate}` id: events of one aggregate share a partition, in order.") },
                "bindingVersion": "0.5.0"
            }
        });
    }
    message
}

/// A string property described by `description`.
fn text(description: &str) -> Value {
    json!({ "type": "string", "description": description })
}

/// The CloudEvents structured-mode envelope around `data`.
fn envelope_schema(data: &Value) -> Value {
    let mut properties: Map<String, Value> =
        CLOUDEVENTS_ATTRIBUTES.iter().map(|(name, description)| ((*name).to_owned(), text(description))).collect();
    properties.insert("specversion".to_owned(), json!({ "const": "1.0" }));
    properties.insert("datacontenttype".to_owned(), json!({ "const": "application/json" }));
    for (name, description) in TRACE_CONTEXT_HEADERS {
        properties.insert((*name).to_owned(), text(description));
    }
    properties.insert("data".to_owned(), data.clone());
    json!({
        "type": "object",
        "description": "A CloudEvents 1.0 envelope (structured mode); `data` is the event's payload.",
        "properties": properties,
        "required": ["id", "source", "specversion", "type", "subject", "data"],
    })
}

/// The headers a [`Wire`] names; the event's own headers (set at enqueue) travel beside them as strings.
fn wire_headers_schema(wire: &Wire) -> Value {
    let properties: Map<String, Value> = wire
        .headers
        .iter()
        .map(|h| (h.name.clone(), json!({ "type": "string", "description": h.description })))
        .collect();
    let required: Vec<&str> = wire.headers.iter().filter(|h| h.required).map(|h| h.name.as_str()).collect();
    json!({
        "type": "object",
        "description": "What this broker carries beside the payload; the event's own headers (`traceparent`, `tracestate`, and those set at enqueue) travel under their names.",
        "properties": properties,
        "required": required,
        "additionalProperties": { "type": "string" },
    })
}

fn headers_schema() -> Value {
    let mut properties: Map<String, Value> = ["id", "type", "source", "specversion", "subject", "time", "dataschema"]
        .into_iter()
        .filter_map(|name| attribute_description(name).map(|description| (format!("ce_{name}"), text(description))))
        .collect();
    if let Some((name, description)) = TRACE_CONTEXT_HEADERS.first() {
        properties.insert((*name).to_owned(), text(description));
    }
    json!({
        "type": "object",
        "description": "CloudEvents 1.0 attributes (Kafka binding names) and the W3C trace context captured at enqueue.",
        "properties": properties,
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
