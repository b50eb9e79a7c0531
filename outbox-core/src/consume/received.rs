//! [`Received`]: a message as a consumer got it from a broker, and reading it as `(event id, typed event)`.

use std::fmt;

use serde::Deserialize;
use serde_json::value::RawValue;
use uuid::Uuid;

use super::{Decode, DecodeError};
use crate::inbox::{event_id_from_headers, EVENT_ID_HEADERS};

/// The content type of a CloudEvents structured-mode body.
const STRUCTURED: &str = "application/cloudevents+json";

/// The prefixes the protocol bindings put before a CloudEvents attribute's name, as the relay writes them:
/// `ce_` (Kafka, SQS message attributes, Redis stream fields), `ce-` (NATS, HTTP), `cloudEvents:` (AMQP) and
/// `cloudEvents_` (AMQP through JMS).
const PREFIXES: [&str; 4] = ["ce_", "ce-", "cloudEvents:", "cloudEvents_"];

/// A message as a consumer received it: its headers and its body, borrowed from the broker client's message.
///
/// What goes where, per broker, as the relay publishes:
///
/// | broker | headers | body |
/// |---|---|---|
/// | Kafka | the record's headers (`ce_id`, `ce_type`, `ce_schemaversion`, `content-type`, ...) | the record's value |
/// | NATS JetStream | the message headers (`ce-id`, ..., `Nats-Msg-Id`, `content-type`) | the payload |
/// | RabbitMQ | the `headers` table (`cloudEvents:id`, ...) and `content-type` from the `content_type` property | the body |
/// | SQS | the message attributes (`ce_id`, ...) | the message body |
/// | Redis Streams | the entry's fields except `data` (`ce_id`, ..., `content-type`) | the `data` field |
/// | webhooks | the request headers (`webhook-id`, ...) | the request body |
///
/// In CloudEvents structured mode (`content-type: application/cloudevents+json`) the body is the envelope and
/// the headers are not needed; the webhook body is read the same way (`id`, `type`, `version`, `data`).
///
/// # Example
///
/// ```
/// use outbox_core::consume::Received;
/// use outbox_core::OutboxEvent;
///
/// #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema, OutboxEvent)]
/// #[outbox(event_type = "order.placed", aggregate = "order", version = 1)]
/// struct OrderPlaced {
///     #[outbox(aggregate_id)]
///     order_id: u64,
/// }
///
/// let id = uuid::Uuid::now_v7().to_string();
/// let message = Received::new(br#"{"order_id":42}"#)
///     .header("ce_id", &id)
///     .header("ce_type", "order.placed")
///     .header("ce_schemaversion", "1");
/// let (event_id, order) = message.decode::<OrderPlaced>()?;
/// assert_eq!((event_id.to_string(), order.order_id), (id, 42));
/// # Ok::<(), outbox_core::DecodeError>(())
/// ```
#[derive(Clone, Default)]
pub struct Received<'a> {
    headers: Vec<(&'a str, &'a str)>,
    body: &'a [u8],
}

/// What every message of the relay says about itself: read by [`Received::metadata`] to dispatch on the type
/// before decoding.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Metadata {
    /// The event id: the key to deduplicate by.
    pub id: Uuid,
    /// The event type, e.g. `payment.paid`.
    pub event_type: String,
    /// The payload's schema version.
    pub version: u32,
}

/// Prints the headers and the body's size, never the body: it may hold sensitive values.
impl fmt::Debug for Received<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Received")
            .field("headers", &self.headers)
            .field("body", &format_args!("<{} bytes>", self.body.len()))
            .finish()
    }
}

/// The structured-mode envelope (CloudEvents) or the webhook body.
#[derive(Deserialize)]
struct Envelope<'a> {
    id: Option<String>,
    #[serde(rename = "type")]
    event_type: Option<String>,
    schemaversion: Option<Version>,
    version: Option<Version>,
    #[serde(borrow)]
    data: Option<&'a RawValue>,
}

/// A version written as a number or as a string (CloudEvents attributes are strings).
#[derive(Deserialize)]
#[serde(untagged)]
enum Version {
    Number(u64),
    Text(String),
}

impl<'a> Received<'a> {
    /// A message with `body` and no headers yet.
    #[must_use]
    pub fn new(body: &'a [u8]) -> Self {
        Self { headers: Vec::new(), body }
    }

    /// Adds a header (a Kafka or NATS header, an AMQP header, an SQS message attribute, a Redis field).
    #[must_use]
    pub fn header(mut self, name: &'a str, value: &'a str) -> Self {
        self.headers.push((name, value));
        self
    }

    /// Adds every header of `headers`.
    #[must_use]
    pub fn headers(mut self, headers: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        self.headers.extend(headers);
        self
    }

    /// The first header named `name`, compared without case.
    fn get(&self, name: &str) -> Option<&'a str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, value)| *value)
    }

    /// The CloudEvents attribute `name` under any binding's prefix.
    fn attribute(&self, name: &str) -> Option<&'a str> {
        self.headers.iter().find_map(|(header, value)| {
            PREFIXES
                .iter()
                .any(|prefix| {
                    header.len() == prefix.len() + name.len()
                        && header.get(..prefix.len()).is_some_and(|p| p.eq_ignore_ascii_case(prefix))
                        && header.get(prefix.len()..).is_some_and(|n| n.eq_ignore_ascii_case(name))
                })
                .then_some(*value)
        })
    }

    /// Whether the body is an envelope: a structured-mode content type, or no binary-mode attributes at all.
    fn is_enveloped(&self) -> bool {
        if let Some(content_type) = self.get("content-type").or_else(|| self.attribute("datacontenttype")) {
            if content_type.trim().to_ascii_lowercase().starts_with(STRUCTURED) {
                return true;
            }
        }
        self.attribute("type").is_none()
    }

    /// The id, type, version and payload text of the message.
    fn parts(&self) -> Result<(Metadata, &'a str), DecodeError> {
        let missing = |what: &str| DecodeError::Envelope(what.to_owned());
        if self.is_enveloped() {
            let envelope: Envelope<'a> = serde_json::from_slice(self.body).map_err(|_| {
                missing("no CloudEvents headers (ce_type, ce-type, cloudEvents:type) and the body is not an envelope")
            })?;
            let id = envelope.id.as_deref().and_then(|id| Uuid::parse_str(id.trim()).ok());
            let id = id.ok_or_else(|| missing("the envelope has no event id (`id`, a UUID)"))?;
            let event_type = envelope.event_type.ok_or_else(|| missing("the envelope has no `type`"))?;
            let version = envelope.schemaversion.or(envelope.version);
            let version = version
                .and_then(Version::get)
                .ok_or_else(|| missing("the envelope has no schema version (`schemaversion`, a positive integer)"))?;
            let data = envelope.data.ok_or_else(|| missing("the envelope has no `data`"))?;
            return Ok((Metadata { id, event_type, version }, data.get()));
        }
        let id = event_id_from_headers(self.headers.iter().copied()).ok_or_else(|| {
            DecodeError::Envelope(format!("no event id header (one of {}, a UUID)", EVENT_ID_HEADERS.join(", ")))
        })?;
        let event_type = self.attribute("type").unwrap_or_default().to_owned();
        let version = self.attribute("schemaversion").and_then(|v| Version::Text(v.to_owned()).get());
        let version = version.ok_or_else(|| {
            missing("no schema version header (ce_schemaversion, ce-schemaversion, cloudEvents:schemaversion)")
        })?;
        let body = std::str::from_utf8(self.body).map_err(|_| missing("the body is not UTF-8 JSON"))?;
        Ok((Metadata { id, event_type, version }, body))
    }

    /// The event id, type and version, without decoding the payload: to pick the type to decode as.
    ///
    /// # Errors
    ///
    /// [`DecodeError::Envelope`] when the message lacks one of them or has it malformed.
    pub fn metadata(&self) -> Result<Metadata, DecodeError> {
        self.parts().map(|(metadata, _)| metadata)
    }

    /// Reads the message as `(event id, E)`, upcasting an older version of `E`'s event type.
    ///
    /// # Errors
    ///
    /// [`DecodeError::Envelope`] when the message is not an outbox event, [`DecodeError::UnknownType`] when it is
    /// of another event type, [`DecodeError::UnknownVersion`] and [`DecodeError::Payload`] as [`Decode::decode`].
    pub fn decode<E: Decode>(&self) -> Result<(Uuid, E), DecodeError> {
        let (metadata, payload) = self.parts()?;
        if metadata.event_type != E::EVENT_TYPE {
            return Err(DecodeError::UnknownType { expected: E::EVENT_TYPE, found: metadata.event_type });
        }
        E::decode(metadata.version, payload).map(|event| (metadata.id, event))
    }
}

impl Version {
    /// The version, if it is an integer from 1 to `u32::MAX`.
    fn get(self) -> Option<u32> {
        let version = match self {
            Self::Number(n) => u32::try_from(n).ok(),
            Self::Text(text) => text.trim().parse::<u32>().ok(),
        };
        version.filter(|v| *v >= 1)
    }
}
