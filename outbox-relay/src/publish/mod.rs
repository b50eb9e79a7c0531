//! Publishers: where the relay sends events. A [`Publisher`] takes a batch and says, per event, whether it was
//! published, failed for now, or failed for good.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use outbox_core::store::{CorruptedRow, StoredEvent};
use outbox_core::Headers;
use serde::Serialize;
use time::OffsetDateTime;
use uuid::Uuid;

#[cfg(feature = "rabbitmq")]
mod amqp;
#[cfg(any(feature = "kafka", feature = "nats", feature = "rabbitmq", feature = "sqs", feature = "redis"))]
mod cloudevents;
#[cfg(any(feature = "kafka", feature = "nats", feature = "rabbitmq", feature = "sqs", feature = "redis"))]
mod destination;
mod file;
#[cfg(feature = "kafka")]
mod kafka;
#[cfg(feature = "nats")]
mod nats;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "sqs")]
mod sqs;
mod stdout;
#[cfg(feature = "webhook")]
mod webhook;

pub use file::FilePublisher;
pub use stdout::StdoutPublisher;
#[cfg(feature = "webhook")]
pub use webhook::{WebhookBuilder, WebhookPublisher};

#[cfg(feature = "rabbitmq")]
pub use amqp::{AmqpBuilder, AmqpPublisher};
#[cfg(any(feature = "kafka", feature = "nats", feature = "rabbitmq", feature = "sqs", feature = "redis"))]
pub use cloudevents::{CloudEvents, ContentMode};
#[cfg(any(feature = "kafka", feature = "nats", feature = "rabbitmq", feature = "sqs", feature = "redis"))]
pub use destination::{Naming, Template};
#[cfg(feature = "kafka")]
pub use kafka::{KafkaBuilder, KafkaPublisher};
#[cfg(feature = "nats")]
pub use nats::{NatsBuilder, NatsPublisher};
#[cfg(feature = "redis")]
pub use redis::{RedisBuilder, RedisPublisher};
#[cfg(feature = "sqs")]
pub use sqs::{SqsBuilder, SqsPublisher};

/// One event as a publisher sees it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Message {
    /// The event id (UUID v7). Send it along (a header, a deduplication id): consumers deduplicate by it.
    pub id: Uuid,
    /// The event type, e.g. `payment.paid`.
    pub event_type: String,
    /// The aggregate type, e.g. `payment`.
    pub aggregate_type: String,
    /// The aggregate id; a broker's message key, so one aggregate stays on one partition.
    pub aggregate_id: String,
    /// The payload's schema version.
    pub version: u32,
    /// The payload, as JSON text.
    pub payload: String,
    /// Headers captured at enqueue (e.g. `traceparent`).
    pub headers: Headers,
    /// When the event was enqueued.
    pub created_at: OffsetDateTime,
    /// Failed publish attempts before this one.
    pub attempts: u32,
    /// JSON pointers to the payload's sensitive values: a publisher must never log them.
    pub sensitive_paths: Vec<String>,
}

impl Message {
    /// A message with no headers, version 1, created now: for tests of publishers.
    ///
    /// # Example
    ///
    /// ```
    /// let message = outbox_relay::Message::new(uuid::Uuid::now_v7(), "order.placed", "order", "42", r#"{"id":42}"#);
    /// assert!(message.to_json_line().ends_with(r#""payload":{"id":42}}"#));
    /// ```
    pub fn new(
        id: Uuid,
        event_type: impl Into<String>,
        aggregate_type: impl Into<String>,
        aggregate_id: impl Into<String>,
        payload: impl Into<String>,
    ) -> Self {
        Self {
            id,
            event_type: event_type.into(),
            aggregate_type: aggregate_type.into(),
            aggregate_id: aggregate_id.into(),
            version: 1,
            payload: payload.into(),
            headers: Headers::new(),
            created_at: OffsetDateTime::now_utc(),
            attempts: 0,
            sensitive_paths: Vec::new(),
        }
    }

    /// The payload parsed as JSON.
    ///
    /// # Errors
    ///
    /// When the payload is not valid JSON (it always is when read from the outbox table).
    pub fn payload_json(&self) -> serde_json::Result<serde_json::Value> {
        serde_json::from_str(&self.payload)
    }

    /// The message as one line of JSON (no trailing newline): `id`, `type`, `version`, `aggregate` (`type`,
    /// `id`), `headers` and `payload`, as the `stdout` and `file:` sinks write it.
    #[must_use]
    pub fn to_json_line(&self) -> String {
        #[derive(Serialize)]
        struct Aggregate<'a> {
            #[serde(rename = "type")]
            kind: &'a str,
            id: &'a str,
        }
        #[derive(Serialize)]
        struct Line<'a> {
            id: Uuid,
            #[serde(rename = "type")]
            event_type: &'a str,
            version: u32,
            aggregate: Aggregate<'a>,
            headers: &'a Headers,
            payload: &'a serde_json::value::RawValue,
        }
        let null = serde_json::value::RawValue::from_string("null".to_owned()).ok();
        let parsed = serde_json::from_str::<&serde_json::value::RawValue>(&self.payload).ok();
        let Some(payload) = parsed.or(null.as_deref()) else {
            return String::new();
        };
        let line = Line {
            id: self.id,
            event_type: &self.event_type,
            version: self.version,
            aggregate: Aggregate { kind: &self.aggregate_type, id: &self.aggregate_id },
            headers: &self.headers,
            payload,
        };
        // Strings, numbers, maps of strings and raw JSON always serialize.
        serde_json::to_string(&line).unwrap_or_default()
    }
}

/// A stored event as a message, unless its row was corrupted by hand ([`StoredEvent::check`]): the relay moves
/// such an event to `failed` with the error as `last_error` instead of publishing it.
impl TryFrom<StoredEvent> for Message {
    type Error = CorruptedRow;

    fn try_from(event: StoredEvent) -> Result<Self, CorruptedRow> {
        event.check()?;
        Ok(Self::from_checked(event))
    }
}

impl Message {
    /// The message of an event that passed [`StoredEvent::check`].
    pub(crate) fn from_checked(event: StoredEvent) -> Self {
        Self {
            id: event.id,
            event_type: event.event_type,
            aggregate_type: event.aggregate_type,
            aggregate_id: event.aggregate_id,
            version: event.version,
            payload: event.payload,
            headers: event.headers.into_valid().unwrap_or_default(),
            created_at: event.created_at,
            attempts: event.attempts,
            sensitive_paths: event.sensitive_paths.into_valid().unwrap_or_default(),
        }
    }
}

/// Why a publish failed: a short description for logs and the `last_error` column. Never put payload values
/// in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishError {
    message: String,
}

impl PublishError {
    /// An error with this description.
    pub fn new(message: impl fmt::Display) -> Self {
        Self { message: message.to_string() }
    }

    /// The description.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for PublishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for PublishError {}

/// What happened to one message of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The broker has it. The relay marks the event published.
    Published,
    /// A failure that may pass (broker down, timeout, throttled): the relay retries after a backoff, until the
    /// attempts run out.
    Transient(PublishError),
    /// A failure that retrying cannot fix (payload rejected, message too large, contract broken): the event goes
    /// to `failed` at once and is logged as an error.
    Permanent(PublishError),
}

impl Outcome {
    /// A transient failure described by `message`.
    pub fn transient(message: impl fmt::Display) -> Self {
        Self::Transient(PublishError::new(message))
    }

    /// A permanent failure described by `message`.
    pub fn permanent(message: impl fmt::Display) -> Self {
        Self::Permanent(PublishError::new(message))
    }
}

/// Sends batches of messages somewhere.
///
/// `publish` gets a non-empty batch and returns one [`Outcome`] per message, in the same order (a missing
/// outcome counts as a transient failure). With ordering on, a batch holds at most one message per aggregate,
/// and the relay waits for a batch before sending the next event of any aggregate in it. A publisher should
/// bound its own time (a timeout shorter than the relay's lease).
///
/// # Example
///
/// ```
/// use outbox_relay::{Message, Outcome, Publisher};
///
/// /// Rejects payloads over 1 MiB, prints the rest.
/// struct Printer;
///
/// impl Publisher for Printer {
///     async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
///         batch
///             .iter()
///             .map(|message| {
///                 if message.payload.len() > 1 << 20 {
///                     Outcome::permanent("message too large")
///                 } else {
///                     println!("{} {}", message.event_type, message.id);
///                     Outcome::Published
///                 }
///             })
///             .collect()
///     }
/// }
/// ```
pub trait Publisher: Send + Sync + 'static {
    /// Publishes `batch` and returns one outcome per message, in order.
    fn publish(&self, batch: &[Message]) -> impl Future<Output = Vec<Outcome>> + Send;
}

impl<P: Publisher> Publisher for Arc<P> {
    fn publish(&self, batch: &[Message]) -> impl Future<Output = Vec<Outcome>> + Send {
        (**self).publish(batch)
    }
}

/// A boxed publish future.
pub(crate) type PublishFuture<'a> = Pin<Box<dyn Future<Output = Vec<Outcome>> + Send + 'a>>;

/// [`Publisher`] behind a pointer: the engine holds any publisher as `Arc<dyn ErasedPublisher>`.
pub(crate) trait ErasedPublisher: Send + Sync + 'static {
    fn publish_boxed<'a>(&'a self, batch: &'a [Message]) -> PublishFuture<'a>;
}

impl<P: Publisher> ErasedPublisher for P {
    fn publish_boxed<'a>(&'a self, batch: &'a [Message]) -> PublishFuture<'a> {
        Box::pin(self.publish(batch))
    }
}

#[cfg(test)]
mod tests {
    use super::Message;

    #[test]
    fn json_lines_carry_the_documented_fields_and_the_payload_verbatim() {
        let mut message = Message::new(uuid::Uuid::nil(), "order.placed", "order", "42", r#"{"total": 12.5}"#);
        message.headers.insert("traceparent".into(), "00-abc-01".into());
        let line: serde_json::Value = serde_json::from_str(&message.to_json_line()).unwrap();
        assert_eq!(
            line,
            serde_json::json!({
                "id": "00000000-0000-0000-0000-000000000000",
                "type": "order.placed",
                "version": 1,
                "aggregate": {"type": "order", "id": "42"},
                "headers": {"traceparent": "00-abc-01"},
                "payload": {"total": 12.5},
            })
        );
        assert!(!message.to_json_line().contains('\n'));
    }
}
