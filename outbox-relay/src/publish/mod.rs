//! Publishers: where the relay sends events. A [`Publisher`] takes a batch and says, per event, whether it was
//! published, failed for now, or failed for good.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_core::store::{CorruptedRow, StoredEvent};
use outbox_core::Headers;
use serde::Serialize;
use time::OffsetDateTime;
use uuid::Uuid;

#[cfg(feature = "rabbitmq")]
mod amqp;
#[cfg(feature = "webhook")]
mod batch_ids;
#[cfg(any(feature = "kafka", feature = "nats", feature = "rabbitmq", feature = "sqs", feature = "redis"))]
mod cloudevents;
mod file;
#[cfg(any(feature = "webhook", feature = "sqs", feature = "rabbitmq"))]
mod innermost_cause;
#[cfg(feature = "kafka")]
mod kafka;
#[cfg(any(feature = "kafka", feature = "nats", feature = "rabbitmq", feature = "sqs", feature = "redis"))]
mod name_template;
#[cfg(feature = "nats")]
mod nats;
#[cfg(any(feature = "nats", feature = "rabbitmq", feature = "redis"))]
mod reconnect;
#[cfg(feature = "redis")]
mod redis;
#[cfg(any(feature = "webhook", feature = "sqs"))]
mod retry_after;
#[cfg(any(feature = "kafka", feature = "nats", feature = "rabbitmq", feature = "redis"))]
mod secret_source;
#[cfg(feature = "sqs")]
mod sqs;
mod stdout;
#[cfg(any(feature = "kafka", feature = "nats", feature = "rabbitmq", feature = "redis"))]
mod tls_options;
#[cfg(any(feature = "kafka", feature = "nats", feature = "rabbitmq", feature = "sqs", feature = "redis"))]
mod url_options;
#[cfg(feature = "webhook")]
mod webhook;
#[cfg(any(feature = "kafka", feature = "nats", feature = "rabbitmq", feature = "sqs", feature = "redis"))]
mod wire;

pub use file::FilePublisher;
pub use stdout::StdoutPublisher;
#[cfg(feature = "webhook")]
pub use webhook::{WebhookBuilder, WebhookPublisher};
#[cfg(any(feature = "kafka", feature = "nats", feature = "rabbitmq", feature = "sqs", feature = "redis"))]
pub use wire::asyncapi_document;

#[cfg(feature = "rabbitmq")]
pub use amqp::{AmqpBuilder, AmqpPublisher};
#[cfg(any(feature = "kafka", feature = "nats", feature = "rabbitmq", feature = "sqs", feature = "redis"))]
pub use cloudevents::{CloudEvents, ContentMode};
#[cfg(feature = "kafka")]
pub use kafka::{KafkaBuilder, KafkaPublisher, SaslMechanism, SecurityProtocol};
#[cfg(any(feature = "kafka", feature = "nats", feature = "rabbitmq", feature = "sqs", feature = "redis"))]
pub use name_template::{Naming, Template};
#[cfg(feature = "nats")]
pub use nats::{NatsBuilder, NatsPublisher};
#[cfg(feature = "redis")]
pub use redis::{RedisBuilder, RedisPublisher};
#[cfg(feature = "sqs")]
pub use sqs::{SqsBuilder, SqsPublisher};

/// One event as a publisher sees it. Its `Debug` output shows the payload redacted, so `tracing::debug!(?message)`
/// is safe.
#[derive(Clone, PartialEq)]
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
    /// When the event's transaction committed, on this process's monotonic clock: the relay takes the database's
    /// own measure of the time since the commit ([`ReadRow::since_commit`](outbox_core::store::ReadRow)) at the
    /// read and counts on from there, so the commit-to-publish figure never mixes two machines' clocks.
    pub committed_at: Instant,
    /// Failed publish attempts before this one.
    pub attempts: u32,
    /// JSON pointers to the payload's sensitive values: a publisher must never log them.
    pub sensitive_paths: Vec<String>,
}

/// Prints the payload with its sensitive values redacted ([`outbox_core::redact::for_debug`]).
impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Message")
            .field("id", &self.id)
            .field("event_type", &self.event_type)
            .field("aggregate_type", &self.aggregate_type)
            .field("aggregate_id", &self.aggregate_id)
            .field("version", &self.version)
            .field("payload", &outbox_core::redact::for_debug(&self.payload, Some(&self.sensitive_paths)))
            .field("headers", &self.headers)
            .field("created_at", &self.created_at)
            .field("committed_at", &self.committed_at)
            .field("attempts", &self.attempts)
            .field("sensitive_paths", &self.sensitive_paths)
            .finish()
    }
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
            committed_at: Instant::now(),
            attempts: 0,
            sensitive_paths: Vec::new(),
        }
    }

    /// The headers a publisher sends on: every header of the event that
    /// [`check_header`](outbox_core::check_header) accepts, by name, and those with an empty value and a name it
    /// accepts (enqueue took empty values before it refused them; the SQS publisher leaves them out, as SQS refuses
    /// them). Enqueue refuses any other, so a header left out here was written into the `headers` column by hand;
    /// it is skipped rather than failing the event.
    pub fn forwarded_headers(&self) -> impl Iterator<Item = (&str, &str)> {
        self.headers
            .iter()
            .filter(|(name, value)| {
                let checked = if value.is_empty() { " " } else { value.as_str() };
                outbox_core::check_header(name, checked).is_ok()
            })
            .map(|(name, value)| (name.as_str(), value.as_str()))
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
        let mut line = Vec::new();
        self.write_json_line(&mut line);
        // serde_json writes UTF-8.
        String::from_utf8(line).unwrap_or_default()
    }

    /// Appends [`to_json_line`](Self::to_json_line) to `out`.
    fn write_json_line(&self, out: &mut Vec<u8>) {
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
        // A payload that is not JSON (a message made by hand) is written as `null`.
        let null = serde_json::value::RawValue::NULL;
        let payload = serde_json::from_str::<&serde_json::value::RawValue>(&self.payload).unwrap_or(null);
        let line = Line {
            id: self.id,
            event_type: &self.event_type,
            version: self.version,
            aggregate: Aggregate { kind: &self.aggregate_type, id: &self.aggregate_id },
            headers: &self.headers,
            payload,
        };
        // Strings, numbers, maps of strings and raw JSON always serialize, and a `Vec` takes every write.
        let start = out.len();
        if serde_json::to_writer(&mut *out, &line).is_err() {
            out.truncate(start);
        }
    }
}

/// A batch as JSON lines ([`Message::to_json_line`], each ending in `\n`), for the sinks that write lines.
pub(crate) fn json_lines(batch: &[Message]) -> Vec<u8> {
    let mut lines = Vec::with_capacity(batch.iter().map(|message| message.payload.len() + 256).sum());
    for message in batch {
        message.write_json_line(&mut lines);
        lines.push(b'\n');
    }
    lines
}

/// A stored event as a message, unless its row was corrupted by hand ([`StoredEvent::check`]): the relay moves
/// such an event to `failed` with the error as `last_error` instead of publishing it. Its
/// [`committed_at`](Message::committed_at) is taken from `created_at` against this machine's clock.
impl TryFrom<StoredEvent> for Message {
    type Error = CorruptedRow;

    fn try_from(event: StoredEvent) -> Result<Self, CorruptedRow> {
        event.check()?;
        let age = Duration::try_from(OffsetDateTime::now_utc() - event.created_at).unwrap_or_default();
        Ok(Self::from_checked(event, age))
    }
}

impl Message {
    /// The message of an event that passed [`StoredEvent::check`], whose transaction committed `since_commit` ago.
    pub(crate) fn from_checked(event: StoredEvent, since_commit: Duration) -> Self {
        let now = Instant::now();
        Self {
            id: event.id,
            event_type: event.event_type,
            aggregate_type: event.aggregate_type,
            aggregate_id: event.aggregate_id,
            version: event.version,
            payload: event.payload,
            headers: event.headers.into_valid().unwrap_or_default(),
            created_at: event.created_at,
            committed_at: now.checked_sub(since_commit).unwrap_or(now),
            attempts: event.attempts,
            sensitive_paths: event.sensitive_paths.into_valid().unwrap_or_default(),
        }
    }
}

/// Why a publish failed: a short description for logs and the `last_error` column (never put payload values in
/// it), and, when the broker asked for one, how long to wait before the next attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishError {
    message: String,
    retry_after: Option<Duration>,
    unavailable: bool,
}

impl PublishError {
    /// An error with this description.
    pub fn new(message: impl fmt::Display) -> Self {
        Self { message: message.to_string(), retry_after: None, unavailable: false }
    }

    /// The destination could not be reached at all (no connection, the connection lost before the message went
    /// out, a reconnect backing off): nothing about the message itself failed. Given as a transient failure, it
    /// does not count as an attempt while nothing else gets through either, so an outage longer than the
    /// attempts last sends no event to `failed`; the relay backs off and tries again. A failure that could be
    /// the message's own (a refusal, a timeout waiting for the broker's answer) is not one.
    ///
    /// # Example
    ///
    /// ```
    /// use outbox_relay::{Outcome, PublishError};
    ///
    /// let down = Outcome::Transient(PublishError::unavailable("connection refused"));
    /// assert!(matches!(&down, Outcome::Transient(error) if error.is_unavailable()));
    /// ```
    pub fn unavailable(message: impl fmt::Display) -> Self {
        Self { unavailable: true, ..Self::new(message) }
    }

    /// The same error with the wait the broker asked for (an HTTP `Retry-After`, a throttling hint). The relay
    /// waits at least this long before the event's next attempt, but never longer than its backoff's maximum.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use outbox_relay::{Outcome, PublishError};
    ///
    /// let throttled = Outcome::Transient(PublishError::new("HTTP 429").with_retry_after(Duration::from_secs(30)));
    /// assert_eq!(throttled.retry_after(), Some(Duration::from_secs(30)));
    /// ```
    #[must_use]
    pub fn with_retry_after(mut self, delay: Duration) -> Self {
        self.retry_after = Some(delay);
        self
    }

    /// The description.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The wait the broker asked for before the next attempt, if it asked.
    #[must_use]
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// Whether the destination could not be reached at all ([`PublishError::unavailable`]).
    #[must_use]
    pub fn is_unavailable(&self) -> bool {
        self.unavailable
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
    /// attempts run out (a destination that could not be reached at all, [`PublishError::unavailable`], uses up
    /// no attempt while nothing else gets through).
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

    /// A transient failure because the destination could not be reached at all ([`PublishError::unavailable`]).
    pub fn unavailable(message: impl fmt::Display) -> Self {
        Self::Transient(PublishError::unavailable(message))
    }

    /// The wait a transient failure asks for before the next attempt ([`PublishError::retry_after`]); `None`
    /// for the other outcomes and when the broker gave no hint.
    #[must_use]
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Transient(error) => error.retry_after(),
            Self::Published | Self::Permanent(_) => None,
        }
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

    /// Whether the broker receives the messages of one call in the order of the batch, and a failed message
    /// means none after it of the same aggregate was delivered either (a sequential writer; a Kafka idempotent
    /// producer per partition). Then the relay may put several events of one aggregate in one call; otherwise
    /// (the default) it publishes a batch in rounds of at most one event per aggregate.
    fn keeps_order(&self) -> bool {
        false
    }
}

impl<P: Publisher> Publisher for Arc<P> {
    fn publish(&self, batch: &[Message]) -> impl Future<Output = Vec<Outcome>> + Send {
        (**self).publish(batch)
    }

    fn keeps_order(&self) -> bool {
        (**self).keeps_order()
    }
}

/// A boxed publish future.
pub(crate) type PublishFuture<'a> = Pin<Box<dyn Future<Output = Vec<Outcome>> + Send + 'a>>;

/// [`Publisher`] behind a pointer: the engine holds any publisher as `Arc<dyn ErasedPublisher>`.
pub(crate) trait ErasedPublisher: Send + Sync + 'static {
    fn publish_boxed<'a>(&'a self, batch: &'a [Message]) -> PublishFuture<'a>;

    fn keeps_order_erased(&self) -> bool;
}

impl<P: Publisher> ErasedPublisher for P {
    fn publish_boxed<'a>(&'a self, batch: &'a [Message]) -> PublishFuture<'a> {
        Box::pin(self.publish(batch))
    }

    fn keeps_order_erased(&self) -> bool {
        self.keeps_order()
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

    #[test]
    fn a_batch_becomes_one_line_per_message_in_order_and_a_payload_that_is_not_json_becomes_null() {
        let first = Message::new(uuid::Uuid::nil(), "order.placed", "order", "1", r#"{"n":1}"#);
        let second = Message::new(uuid::Uuid::max(), "order.paid", "order", "1", "not json");
        let lines = String::from_utf8(super::json_lines(&[first.clone(), second])).unwrap();
        let lines: Vec<&str> = lines.split_terminator('\n').collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0], first.to_json_line());
        let second: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(second["type"], "order.paid");
        assert_eq!(second["payload"], serde_json::Value::Null);
    }
}
