//! What a broker carries: the facts an AsyncAPI document needs to describe the messages where consumers find them.

use std::collections::BTreeMap;

use serde_json::Value;

/// The CloudEvents attributes the relay sends with every event, by their unprefixed names, with what each holds:
/// every AsyncAPI document describes them with these words. `dataschema` is sent when a schema base is
/// configured.
pub const CLOUDEVENTS_ATTRIBUTES: &[(&str, &str)] = &[
    ("id", "The event id (UUID v7): deduplicate on it, delivery is at least once."),
    ("source", "The producing service."),
    ("specversion", "Always 1.0."),
    ("type", "The event type."),
    ("subject", "The aggregate id."),
    ("time", "When the event was enqueued (RFC 3339)."),
    ("dataschema", "Where the payload's contract is published."),
    ("schemaversion", "The schema version of the payload."),
    ("aggregatetype", "The aggregate type."),
];

/// The W3C trace context headers an event carries when its transaction was traced, under their own names on every
/// broker, with what each holds.
pub const TRACE_CONTEXT_HEADERS: &[(&str, &str)] =
    &[("traceparent", "W3C trace context of the enqueuing transaction."), ("tracestate", "W3C trace state.")];

/// What the CloudEvents attribute `name` (unprefixed) holds, from [`CLOUDEVENTS_ATTRIBUTES`].
#[must_use]
pub fn attribute_description(name: &str) -> Option<&'static str> {
    CLOUDEVENTS_ATTRIBUTES.iter().find(|(attribute, _)| *attribute == name).map(|(_, description)| *description)
}

/// One message header (or attribute, or stream field) a broker carries beside the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WireHeader {
    /// Its name as the consumer reads it, e.g. `ce_id` (Kafka) or `ce-id` (NATS).
    pub name: String,
    /// What it holds.
    pub description: String,
    /// Whether every message carries it.
    pub required: bool,
}

/// How events travel on one broker, as the relay publishes them: the server, the channel address of each event
/// type and version, the headers, and where the aggregate id is. [`asyncapi_document_for`](super::asyncapi_document_for) turns it into the
/// AsyncAPI document of that broker; `outbox-relay` builds it from a sink URL (secrets stripped).
///
/// # Example
///
/// ```
/// use outbox_core::contracts::{asyncapi_document_for, Contracts, Wire};
/// use serde_json::json;
///
/// let mut contracts = Contracts::new();
/// contracts.insert("order.placed", 1, json!({ "type": "object", "x-outbox-aggregate": "order" }));
/// let wire = Wire::new("kafka", "broker:9092")
///     .address("order.placed", 1, "outbox.order")
///     .header("ce_id", "The event id.", true)
///     .correlation_header("ce_subject")
///     .keyed_by_aggregate();
/// let document = asyncapi_document_for(&contracts, "Shop events", &wire)?;
/// assert_eq!(document["servers"]["kafka"]["host"], "broker:9092");
/// assert_eq!(document["channels"]["outbox.order"]["address"], "outbox.order");
/// # Ok::<(), outbox_core::contracts::ContractError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub struct Wire {
    pub(crate) protocol: String,
    pub(crate) host: String,
    pub(crate) pathname: Option<String>,
    pub(crate) description: Option<String>,
    pub(crate) addresses: BTreeMap<(String, u32), String>,
    pub(crate) headers: Vec<WireHeader>,
    pub(crate) content_type: String,
    pub(crate) envelope: bool,
    pub(crate) correlation: Option<String>,
    pub(crate) keyed_by_aggregate: bool,
    pub(crate) channel_bindings: Option<Value>,
}

impl Wire {
    /// A broker speaking `protocol` (the AsyncAPI protocol name: `kafka`, `nats`, `amqp`, `amqps`, `redis`,
    /// `sqs`, ...) at `host` (`host:port`, no credentials), carrying JSON payloads.
    pub fn new(protocol: impl Into<String>, host: impl Into<String>) -> Self {
        Self {
            protocol: protocol.into(),
            host: host.into(),
            pathname: None,
            description: None,
            addresses: BTreeMap::new(),
            headers: Vec::new(),
            content_type: "application/json".to_owned(),
            envelope: false,
            correlation: None,
            keyed_by_aggregate: false,
            channel_bindings: None,
        }
    }

    /// The server's path, e.g. an AMQP virtual host.
    pub fn pathname(mut self, pathname: impl Into<String>) -> Self {
        self.pathname = Some(pathname.into());
        self
    }

    /// A description of the server (what the relay publishes there, and how).
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Version `version` of `event_type` is published to `address` (a topic, subject, routing key, queue or
    /// stream). Event types without an address get none: [`asyncapi_document_for`](super::asyncapi_document_for) refuses them.
    pub fn address(mut self, event_type: impl Into<String>, version: u32, address: impl Into<String>) -> Self {
        self.addresses.insert((event_type.into(), version), address.into());
        self
    }

    /// A header every message (`required`) or some messages carry.
    pub fn header(mut self, name: impl Into<String>, description: impl Into<String>, required: bool) -> Self {
        self.headers.push(WireHeader { name: name.into(), description: description.into(), required });
        self
    }

    /// The header that carries the aggregate id: the messages' correlation id.
    pub fn correlation_header(mut self, name: impl Into<String>) -> Self {
        self.correlation = Some(name.into());
        self
    }

    /// The body is a CloudEvents JSON envelope (`application/cloudevents+json`, structured mode) whose `data`
    /// is the payload, and whose `subject` is the correlation id.
    pub fn structured_envelope(mut self) -> Self {
        self.envelope = true;
        self.content_type = "application/cloudevents+json".to_owned();
        self
    }

    /// The message key is the aggregate id (Kafka's message binding names it).
    pub fn keyed_by_aggregate(mut self) -> Self {
        self.keyed_by_aggregate = true;
        self
    }

    /// The channels' protocol bindings (an AsyncAPI `bindings` object, e.g. the AMQP exchange).
    pub fn channel_bindings(mut self, bindings: Value) -> Self {
        self.channel_bindings = Some(bindings);
        self
    }

    /// The headers, in the order they were added.
    #[must_use]
    pub fn headers(&self) -> &[WireHeader] {
        &self.headers
    }

    /// The address of version `version` of `event_type`.
    #[must_use]
    pub fn address_of(&self, event_type: &str, version: u32) -> Option<&str> {
        self.addresses.get(&(event_type.to_owned(), version)).map(String::as_str)
    }
}
