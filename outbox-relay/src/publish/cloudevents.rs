//! The CloudEvents 1.0 envelope the broker publishers put around an event.
//!
//! **Binary mode** (the default): the payload, as enqueued, is the message body, and the event's attributes travel
//! as message headers named per the broker's CloudEvents protocol binding: `ce_id` for Kafka (and, for want of a
//! binding, SQS and Redis), `ce-id` for NATS, `cloudEvents:id` for AMQP. **Structured mode**: the whole event is
//! the body, as `application/cloudevents+json`.
//!
//! Attributes: `id` (the event id), `source` (configurable, default `outbox`), `specversion` `1.0`, `type` (the
//! event type), `subject` (the aggregate id), `time` (when the event was enqueued, RFC 3339), `datacontenttype`
//! `application/json`, `dataschema` (`<base><event_type>/v<version>.schema.json`, matching the
//! `contracts/<event_type>/v<version>.schema.json` layout, when a base URI is configured), and two extension
//! attributes: `schemaversion` (the payload's schema version) and `aggregatetype`. Every header of the event
//! (`NewEvent::with_header`, the `headers` column; the W3C `traceparent` and `tracestate` among them, as the
//! distributed tracing extension says) is forwarded under its own name, in both modes; structured mode also puts
//! `traceparent` and `tracestate` into the envelope.

use std::fmt;

use outbox_core::contracts::TRACE_CONTEXT_HEADERS;
use serde_json::value::RawValue;
use time::format_description::well_known::Rfc3339;

use super::Message;

/// The content type of a structured-mode body.
#[cfg_attr(not(any(feature = "kafka", feature = "nats", feature = "rabbitmq", feature = "redis")), allow(dead_code))]
pub(crate) const STRUCTURED_CONTENT_TYPE: &str = "application/cloudevents+json";

/// The content type of the payload.
pub(crate) const DATA_CONTENT_TYPE: &str = "application/json";

/// How the event travels: attributes as headers (binary) or the whole envelope as the body (structured).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ContentMode {
    /// The payload is the body; CloudEvents attributes are headers.
    #[default]
    Binary,
    /// The body is the CloudEvents JSON envelope (`application/cloudevents+json`) with the payload as `data`.
    Structured,
}

impl ContentMode {
    /// Parses `binary` or `structured`.
    pub(crate) fn parse(value: &str) -> Option<Self> {
        match value {
            "binary" => Some(Self::Binary),
            "structured" => Some(Self::Structured),
            _ => None,
        }
    }
}

impl fmt::Display for ContentMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Binary => "binary",
            Self::Structured => "structured",
        })
    }
}

/// How a protocol binding spells attribute header names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(dead_code)] // each variant is used by the publisher of one broker feature
pub(crate) enum Binding {
    /// Kafka: `ce_` prefix, `content-type` header.
    Kafka,
    /// NATS (and HTTP): `ce-` prefix, `content-type` header.
    Nats,
    /// AMQP: `cloudEvents:` prefix; the content type is a message property.
    Amqp,
    /// SQS message attributes and Redis stream fields (no official binding): `ce_` prefix as Kafka.
    Underscore,
}

impl Binding {
    /// The prefix of attribute header names.
    pub(crate) fn prefix(self) -> &'static str {
        match self {
            Self::Kafka | Self::Underscore => "ce_",
            Self::Nats => "ce-",
            Self::Amqp => "cloudEvents:",
        }
    }
}

/// The CloudEvents settings of a publisher: `source`, where the contracts are published, and the content mode.
///
/// # Example
///
/// ```
/// use outbox_relay::{CloudEvents, ContentMode};
///
/// let envelope = CloudEvents::new()
///     .source("https://shop.example.com/orders")
///     .schema_base("https://contracts.example.com/")?
///     .mode(ContentMode::Structured);
/// assert_eq!(envelope.source_uri(), "https://shop.example.com/orders");
/// # Ok::<(), outbox_relay::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct CloudEvents {
    source: String,
    schema_base: Option<String>,
    mode: ContentMode,
}

impl Default for CloudEvents {
    fn default() -> Self {
        Self::new()
    }
}

impl CloudEvents {
    /// Source `outbox`, no `dataschema`, binary mode.
    pub fn new() -> Self {
        Self { source: "outbox".to_owned(), schema_base: None, mode: ContentMode::Binary }
    }

    /// The `source` attribute: a URI-reference naming the producing service (default `outbox`).
    pub fn source(mut self, source: impl Into<String>) -> Self {
        self.source = source.into();
        self
    }

    /// Where the contracts are published: `dataschema` becomes `<base><event_type>/v<version>.schema.json`. A
    /// missing trailing `/` is added.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSink`](crate::Error::InvalidSink) when `base` is not an absolute URI.
    pub fn schema_base(mut self, base: &str) -> crate::error::Result<Self> {
        if url::Url::parse(base).is_err() {
            return Err(crate::error::Error::InvalidSink {
                sink: base.to_owned(),
                reason: "the dataschema base must be an absolute URI, e.g. `https://example.com/contracts/`".to_owned(),
            });
        }
        let mut base = base.to_owned();
        if !base.ends_with('/') {
            base.push('/');
        }
        self.schema_base = Some(base);
        Ok(self)
    }

    /// Binary (default) or structured content mode.
    pub fn mode(mut self, mode: ContentMode) -> Self {
        self.mode = mode;
        self
    }

    /// The `source` attribute.
    #[must_use]
    pub fn source_uri(&self) -> &str {
        &self.source
    }

    /// The content mode.
    #[must_use]
    pub fn content_mode(&self) -> ContentMode {
        self.mode
    }

    /// The `dataschema` of `message`, when a schema base is configured.
    #[must_use]
    pub fn dataschema(&self, message: &Message) -> Option<String> {
        self.schema_base.as_ref().map(|base| format!("{base}{}/v{}.schema.json", message.event_type, message.version))
    }

    /// Reads the options every broker URL shares: `source`, `schema_base` and `mode` (`binary`/`structured`).
    pub(crate) fn from_query(query: &mut super::url_options::Query<'_>) -> crate::error::Result<Self> {
        let mut envelope = Self::new();
        if let Some(source) = query.take("source") {
            if source.is_empty() {
                return Err(query.invalid("`source` must not be empty"));
            }
            envelope = envelope.source(source);
        }
        if let Some(base) = query.take("schema_base") {
            envelope =
                envelope.schema_base(&base).map_err(|_| query.invalid("`schema_base` must be an absolute URI"))?;
        }
        if let Some(mode) = query.take("mode") {
            let mode = ContentMode::parse(&mode).ok_or_else(|| query.invalid("`mode` is `binary` or `structured`"))?;
            envelope = envelope.mode(mode);
        }
        Ok(envelope)
    }

    /// The context attributes of `message`, unprefixed, in a stable order. The data content type is not among
    /// them: each binding carries it its own way.
    pub(crate) fn attributes(&self, message: &Message) -> Vec<(&'static str, String)> {
        let mut attributes = vec![
            ("id", message.id.to_string()),
            ("source", self.source.clone()),
            ("specversion", "1.0".to_owned()),
            ("type", message.event_type.clone()),
            ("subject", message.aggregate_id.clone()),
            ("time", message.created_at.format(&Rfc3339).unwrap_or_default()),
        ];
        if let Some(schema) = self.dataschema(message) {
            attributes.push(("dataschema", schema));
        }
        attributes.push(("schemaversion", message.version.to_string()));
        attributes.push(("aggregatetype", message.aggregate_type.clone()));
        attributes
    }

    /// The headers of `message` for `binding`, without the content type: the prefixed attributes in binary mode
    /// (none in structured mode), then every header of the event ([`Message::forwarded_headers`]).
    #[cfg_attr(
        not(any(feature = "kafka", feature = "nats", feature = "rabbitmq", feature = "redis")),
        allow(dead_code)
    )]
    pub(crate) fn headers(&self, message: &Message, binding: Binding) -> Vec<(String, String)> {
        let mut headers = self.attribute_headers(message, binding);
        headers.extend(message.forwarded_headers().map(|(name, value)| (name.to_owned(), value.to_owned())));
        headers
    }

    /// The prefixed CloudEvents attributes of `message` for `binding` in binary mode; none in structured mode.
    pub(crate) fn attribute_headers(&self, message: &Message, binding: Binding) -> Vec<(String, String)> {
        if self.mode != ContentMode::Binary {
            return Vec::new();
        }
        let prefix = binding.prefix();
        self.attributes(message).into_iter().map(|(name, value)| (format!("{prefix}{name}"), value)).collect()
    }

    /// The content type of the body: `application/json` in binary mode, `application/cloudevents+json` in
    /// structured mode.
    #[cfg_attr(
        not(any(feature = "kafka", feature = "nats", feature = "rabbitmq", feature = "redis")),
        allow(dead_code)
    )]
    pub(crate) fn content_type(&self) -> &'static str {
        match self.mode {
            ContentMode::Binary => DATA_CONTENT_TYPE,
            ContentMode::Structured => STRUCTURED_CONTENT_TYPE,
        }
    }

    /// The body: the payload (binary mode) or the JSON envelope (structured mode).
    pub(crate) fn body(&self, message: &Message) -> Vec<u8> {
        match self.mode {
            ContentMode::Binary => message.payload.as_bytes().to_vec(),
            ContentMode::Structured => self.structured(message).into_bytes(),
        }
    }

    /// The structured-mode envelope of `message`.
    pub(crate) fn structured(&self, message: &Message) -> String {
        let mut envelope = serde_json::Map::new();
        for (name, value) in self.attributes(message) {
            envelope.insert(name.to_owned(), serde_json::Value::String(value));
        }
        envelope.insert("datacontenttype".to_owned(), DATA_CONTENT_TYPE.into());
        for (name, value) in trace_headers(message) {
            envelope.insert(name.to_owned(), value.into());
        }
        // The payload is JSON from the outbox table; it is spliced in verbatim rather than re-encoded.
        let head = serde_json::to_string(&envelope).unwrap_or_else(|_| "{}".to_owned());
        let data = serde_json::from_str::<&RawValue>(&message.payload).map(RawValue::get).unwrap_or("null");
        match head.strip_suffix('}') {
            Some(open) if open.len() > 1 => format!("{open},\"data\":{data}}}"),
            _ => format!("{{\"data\":{data}}}"),
        }
    }
}

/// The trace context headers of `message` (`traceparent`, `tracestate`) that it has.
pub(crate) fn trace_headers(message: &Message) -> impl Iterator<Item = (&'static str, &str)> {
    TRACE_CONTEXT_HEADERS.iter().filter_map(|(name, _)| message.headers.get(*name).map(|value| (*name, value.as_str())))
}

#[cfg(test)]
mod tests {
    use outbox_core::consume::Received;

    use super::{Binding, CloudEvents, ContentMode};
    use crate::publish::Message;

    fn message() -> Message {
        let mut message = Message::new(uuid::Uuid::nil(), "order.placed", "order", "42", r#"{"total": 12.5}"#);
        message.version = 3;
        message.headers.insert("traceparent".into(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into());
        message.created_at =
            time::OffsetDateTime::from_unix_timestamp(1_767_323_045).unwrap() + time::Duration::milliseconds(500);
        message
    }

    #[test]
    fn binary_mode_headers_follow_each_binding() {
        let envelope = CloudEvents::new().schema_base("https://example.com/contracts").unwrap();
        let headers = envelope.headers(&message(), Binding::Kafka);
        let get = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
        assert_eq!(get("ce_id"), Some("00000000-0000-0000-0000-000000000000"));
        assert_eq!(get("ce_source"), Some("outbox"));
        assert_eq!(get("ce_specversion"), Some("1.0"));
        assert_eq!(get("ce_type"), Some("order.placed"));
        assert_eq!(get("ce_subject"), Some("42"));
        assert_eq!(get("ce_time"), Some("2026-01-02T03:04:05.5Z"));
        assert_eq!(get("ce_dataschema"), Some("https://example.com/contracts/order.placed/v3.schema.json"));
        assert_eq!(get("ce_schemaversion"), Some("3"));
        assert_eq!(get("ce_aggregatetype"), Some("order"));
        assert_eq!(get("traceparent"), Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
        assert!(envelope.headers(&message(), Binding::Nats).iter().any(|(n, _)| n == "ce-id"));
        let mut custom = message();
        custom.headers.insert("tenant".into(), "acme".into());
        custom.headers.insert("Bad Name".into(), "written by hand".into());
        let headers = envelope.headers(&custom, Binding::Amqp);
        assert!(headers.contains(&("tenant".to_owned(), "acme".to_owned())), "{headers:?}");
        assert!(!headers.iter().any(|(n, _)| n == "Bad Name"), "a header no broker takes is left out: {headers:?}");
        assert!(envelope.headers(&message(), Binding::Amqp).iter().any(|(n, _)| n == "cloudEvents:id"));
        assert_eq!(envelope.body(&message()), br#"{"total": 12.5}"#);
        assert_eq!(envelope.content_type(), "application/json");
    }

    #[test]
    fn structured_mode_puts_the_envelope_in_the_body() {
        let envelope = CloudEvents::new().source("/shop").mode(ContentMode::Structured);
        let body: serde_json::Value = serde_json::from_slice(&envelope.body(&message())).unwrap();
        assert_eq!(body["specversion"], "1.0");
        assert_eq!(body["source"], "/shop");
        assert_eq!(body["type"], "order.placed");
        assert_eq!(body["datacontenttype"], "application/json");
        assert_eq!(body["data"], serde_json::json!({"total": 12.5}));
        assert_eq!(body["traceparent"], "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        assert!(body.get("dataschema").is_none());
        let headers = envelope.headers(&message(), Binding::Kafka);
        assert_eq!(headers.len(), 1, "only the trace context is a header: {headers:?}");
        assert_eq!(envelope.content_type(), "application/cloudevents+json");
    }

    /// Version 1 of an event a consumer still receives from relays that have not been upgraded.
    #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema, outbox_core::OutboxEvent)]
    #[outbox(event_type = "ticket.issued", aggregate = "ticket", version = 1)]
    struct TicketIssuedV1 {
        #[outbox(aggregate_id)]
        ticket: u64,
    }

    /// The current version, read from either.
    #[derive(
        Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema, outbox_core::OutboxEvent,
    )]
    #[outbox(event_type = "ticket.issued", aggregate = "ticket", version = 2, upcast_from = TicketIssuedV1)]
    struct TicketIssued {
        #[outbox(aggregate_id)]
        ticket: u64,
        seat: Option<String>,
    }

    impl From<TicketIssuedV1> for TicketIssued {
        fn from(v1: TicketIssuedV1) -> Self {
            Self { ticket: v1.ticket, seat: None }
        }
    }

    /// The relay's message of `event`, with a trace context as traced events carry it.
    fn message_of<E: outbox_core::OutboxEvent>(event: &E) -> Message {
        let payload = serde_json::to_string(event).unwrap();
        let mut message =
            Message::new(uuid::Uuid::now_v7(), E::EVENT_TYPE, E::AGGREGATE_TYPE, event.aggregate_id(), payload);
        message.version = E::VERSION;
        message.headers.insert("traceparent".into(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into());
        message
    }

    /// What this module writes, read back on the consumer's side (`outbox_core::consume::Received`): a
    /// structured-mode body, with or without its content type, and a binary-mode body with each binding's headers
    /// decode to the event id and the typed event, version 1 upcast on the way.
    #[test]
    fn a_consumer_decodes_what_the_relay_writes_in_either_mode_and_every_binding() {
        let v1 = message_of(&TicketIssuedV1 { ticket: 7 });
        let v2 = message_of(&TicketIssued { ticket: 8, seat: Some("12A".to_owned()) });
        let expected = [
            (&v1, TicketIssued { ticket: 7, seat: None }),
            (&v2, TicketIssued { ticket: 8, seat: Some("12A".to_owned()) }),
        ];

        let structured = CloudEvents::new().source("/box-office").mode(ContentMode::Structured);
        for (message, event) in &expected {
            let body = structured.body(message);
            assert!(structured.attribute_headers(message, Binding::Kafka).is_empty(), "the envelope is the body");
            for headers in [&[("content-type", structured.content_type())][..], &[]] {
                let decoded = Received::new(&body).headers(headers.iter().copied()).decode::<TicketIssued>();
                assert_eq!(decoded, Ok((message.id, event.clone())), "structured v{} {headers:?}", message.version);
            }
        }

        let binary = CloudEvents::new();
        for binding in [Binding::Kafka, Binding::Nats, Binding::Amqp, Binding::Underscore] {
            for (message, event) in &expected {
                let body = binary.body(message);
                let headers = binary.headers(message, binding);
                let decoded = Received::new(&body)
                    .headers(headers.iter().map(|(name, value)| (name.as_str(), value.as_str())))
                    .header("content-type", binary.content_type())
                    .decode::<TicketIssued>();
                assert_eq!(decoded, Ok((message.id, event.clone())), "{binding:?} v{}", message.version);
            }
        }
    }

    #[test]
    fn schema_bases_must_be_absolute() {
        assert!(CloudEvents::new().schema_base("contracts/").is_err());
    }
}
