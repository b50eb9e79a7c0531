//! Kafka (`kafka://` sinks): librdkafka's idempotent producer (`enable.idempotence=true`, `acks=all`); the message
//! key is the aggregate id, so one aggregate stays on one partition and in commit order.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::ClientConfig;

use super::cloudevents::{Binding, CloudEvents};
use super::name_template::{Naming, Template};
use super::url_options::{masked, Query};
use super::{Message, Outcome, Publisher};
use crate::{Error, Result};

/// Publishes events to Kafka.
///
/// Every event goes to the topic rendered from a [`Template`] (default `outbox.{aggregate_type}`: one topic per
/// aggregate type keeps all of an aggregate's events, whatever their type, in one ordered partition), keyed by the
/// aggregate id, with the payload as the value and the CloudEvents attributes as `ce_` headers plus
/// `content-type` and `traceparent` (see [`CloudEvents`]).
///
/// The producer is idempotent with `acks=all`: an event is published once every in-sync replica has it, and
/// librdkafka's own retries never duplicate or reorder a partition. (A relay crash between publish and mark
/// still republishes the event: consumers deduplicate by `ce_id`.)
///
/// Outcomes: too large a message, an invalid topic name or a refused authorization is permanent; a delivery
/// timeout (`message_timeout_ms`, default 10 s), an unknown topic (it may be being created), a full queue or an
/// unreachable broker is transient. librdkafka reconnects by itself; after a fatal idempotence error the
/// producer is replaced.
///
/// # Example
///
/// ```
/// let url = "kafka://127.0.0.1:9092?topic=shop.{aggregate_type}&brokers=127.0.0.2:9092".parse()?;
/// let publisher = outbox_relay::KafkaPublisher::from_url(&url)?;
/// assert_eq!(publisher.to_string(), "kafka://127.0.0.1:9092?topic=shop.{aggregate_type}&brokers=127.0.0.2:9092");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct KafkaPublisher {
    display: String,
    config: ClientConfig,
    producer: Mutex<FutureProducer>,
    /// Set when deliveries timed out: the producer is replaced before the next batch (a broker that lost its
    /// state, for example, no longer knows the idempotent producer's id).
    stale: AtomicBool,
    topic: Template,
    envelope: CloudEvents,
}

/// Settings of a [`KafkaPublisher`], validated by [`build`](Self::build).
#[derive(Debug, Clone)]
#[must_use]
pub struct KafkaBuilder {
    display: String,
    brokers: Vec<String>,
    topic: String,
    envelope: CloudEvents,
    message_timeout: Duration,
    max_message_bytes: Option<usize>,
    properties: Vec<(String, String)>,
}

impl KafkaPublisher {
    /// Starts the settings of a publisher to the bootstrap servers `brokers` (`host:port`).
    pub fn builder<I, S>(brokers: I) -> KafkaBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let brokers: Vec<String> = brokers.into_iter().map(Into::into).collect();
        KafkaBuilder {
            display: format!("kafka://{}", brokers.join(",")),
            brokers,
            topic: "outbox.{aggregate_type}".to_owned(),
            envelope: CloudEvents::new(),
            message_timeout: Duration::from_secs(10),
            max_message_bytes: None,
            properties: Vec::new(),
        }
    }

    /// A publisher from a sink URL: `kafka://host:port?topic=outbox.{aggregate_type}&brokers=host2:port,...`
    /// `&message_timeout_ms=10000&max_message_bytes=1000000&source=...&schema_base=...&mode=binary`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSink`] for a URL without a host, an unknown option, or an invalid topic template.
    pub fn from_url(url: &url::Url) -> Result<Self> {
        let mut query = Query::new(url)?;
        if url.scheme() != "kafka" || url.host_str().is_none_or(str::is_empty) {
            return Err(query.invalid("a Kafka URL is `kafka://host:port?topic=...`"));
        }
        if !matches!(url.path(), "" | "/") {
            return Err(query.invalid("a Kafka URL has no path; name the topic with `?topic=...`"));
        }
        if url.password().is_some() || !url.username().is_empty() {
            return Err(query.invalid("SASL credentials are not supported by this build; use a plaintext listener"));
        }
        let mut brokers = vec![format!("{}:{}", url.host_str().unwrap_or_default(), url.port().unwrap_or(9092))];
        if let Some(more) = query.take("brokers") {
            brokers.extend(more.split(',').map(str::trim).filter(|b| !b.is_empty()).map(str::to_owned));
        }
        let mut builder = Self::builder(brokers).cloud_events(CloudEvents::from_query(&mut query)?);
        builder.display = masked(url);
        if let Some(topic) = query.take("topic") {
            builder = builder.topic(topic);
        }
        if let Some(timeout) = query.take_millis("message_timeout_ms")? {
            builder = builder.message_timeout(timeout);
        }
        if let Some(max) = query.take_parsed("max_message_bytes", "a number of bytes", |v| v.parse().ok())? {
            builder = builder.max_message_bytes(max);
        }
        query.finish(&[
            "topic",
            "brokers",
            "message_timeout_ms",
            "max_message_bytes",
            "source",
            "schema_base",
            "mode",
        ])?;
        builder.build()
    }

    fn headers(&self, message: &Message) -> OwnedHeaders {
        let mut headers =
            OwnedHeaders::new().insert(Header { key: "content-type", value: Some(self.envelope.content_type()) });
        for (name, value) in self.envelope.headers(message, Binding::Kafka) {
            headers = headers.insert(Header { key: &name, value: Some(&value) });
        }
        headers
    }

    /// The producer, replaced first if librdkafka reported a fatal error (idempotence state lost) or the last
    /// batch timed out.
    fn producer(&self) -> std::result::Result<FutureProducer, String> {
        let mut producer = self.producer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if producer.client().fatal_error().is_some() || self.stale.load(Ordering::Relaxed) {
            let fresh: FutureProducer =
                self.config.create().map_err(|error| format!("cannot create the Kafka producer: {error}"))?;
            let old = std::mem::replace(&mut *producer, fresh);
            self.stale.store(false, Ordering::Relaxed);
            // Dropping a producer purges and joins its thread: not on the async runtime.
            old.purge(rdkafka::producer::PurgeConfig::default().queue().inflight());
            drop(tokio::task::spawn_blocking(move || drop(old)));
        }
        Ok(producer.clone())
    }
}

impl KafkaBuilder {
    /// The topic template (default `outbox.{aggregate_type}`); see [`Template`].
    pub fn topic(mut self, topic: impl Into<String>) -> Self {
        self.topic = topic.into();
        self
    }

    /// How long librdkafka may try to deliver a message before it is a transient failure (default 10 s). Keep it
    /// below the relay's lease.
    pub fn message_timeout(mut self, timeout: Duration) -> Self {
        self.message_timeout = timeout;
        self
    }

    /// The producer's `message.max.bytes` (librdkafka's default is 1,000,000): larger messages fail for good.
    pub fn max_message_bytes(mut self, max: usize) -> Self {
        self.max_message_bytes = Some(max);
        self
    }

    /// Any other librdkafka producer property (`security.protocol`, `compression.type`, ...). The idempotence
    /// settings cannot be overridden.
    pub fn property(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.push((name.into(), value.into()));
        self
    }

    /// The CloudEvents settings (source, dataschema base, content mode).
    pub fn cloud_events(mut self, envelope: CloudEvents) -> Self {
        self.envelope = envelope;
        self
    }

    /// Validates the settings and creates the producer (it connects in the background).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSink`] when there is no broker, the topic template is invalid, the timeout is zero, or
    /// librdkafka refuses the configuration.
    pub fn build(self) -> Result<KafkaPublisher> {
        let display = self.display.clone();
        let invalid = |reason: &str| Error::InvalidSink { sink: display.clone(), reason: reason.to_owned() };
        if self.brokers.is_empty() || self.brokers.iter().any(|b| b.contains(char::is_whitespace)) {
            return Err(invalid("name at least one broker as `host:port`"));
        }
        let topic = Template::parse(&self.topic, Naming::KafkaTopic).map_err(|reason| invalid(&reason))?;
        if self.message_timeout.is_zero() {
            return Err(invalid("the Kafka message timeout must be more than zero"));
        }
        let mut config = ClientConfig::new();
        for (name, value) in &self.properties {
            config.set(name, value);
        }
        config
            .set("bootstrap.servers", self.brokers.join(","))
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("max.in.flight.requests.per.connection", "5")
            .set("message.timeout.ms", self.message_timeout.as_millis().to_string())
            .set("linger.ms", "5")
            .set("client.id", concat!("outbox-relay/", env!("CARGO_PKG_VERSION")));
        if let Some(max) = self.max_message_bytes {
            config.set("message.max.bytes", max.to_string());
        }
        let producer: FutureProducer =
            config.create().map_err(|error| invalid(&format!("librdkafka refused the configuration: {error}")))?;
        Ok(KafkaPublisher {
            display,
            config,
            producer: Mutex::new(producer),
            stale: AtomicBool::new(false),
            topic,
            envelope: self.envelope,
        })
    }
}

impl Publisher for KafkaPublisher {
    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        let producer = match self.producer() {
            Ok(producer) => producer,
            Err(error) => return vec![Outcome::transient(error); batch.len()],
        };
        // Enqueue every message (librdkafka batches them per partition), then wait for each delivery report.
        let mut deliveries = Vec::with_capacity(batch.len());
        for message in batch {
            let topic = match self.topic.render(message) {
                Ok(topic) => topic,
                Err(reason) => {
                    deliveries.push(Err(Outcome::permanent(reason)));
                    continue;
                }
            };
            let body = self.envelope.body(message);
            let record =
                FutureRecord::to(&topic).key(&message.aggregate_id).payload(&body).headers(self.headers(message));
            match producer.send_result(record) {
                Ok(delivery) => deliveries.push(Ok(delivery)),
                Err((error, _)) => deliveries.push(Err(outcome_of(&error))),
            }
        }
        let mut outcomes = Vec::with_capacity(deliveries.len());
        for delivery in deliveries {
            outcomes.push(match delivery {
                Err(outcome) => outcome,
                Ok(delivery) => match delivery.await {
                    Ok(Ok(_)) => Outcome::Published,
                    Ok(Err((error, _))) => {
                        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::MessageTimedOut) {
                            self.stale.store(true, Ordering::Relaxed);
                        }
                        outcome_of(&error)
                    }
                    Err(_) => Outcome::transient("the Kafka producer dropped the message"),
                },
            });
        }
        outcomes
    }
}

/// The relay's reading of a produce error.
fn outcome_of(error: &KafkaError) -> Outcome {
    let code = error.rdkafka_error_code();
    let description = code.map_or_else(|| "Kafka error".to_owned(), |code| code.to_string());
    match code {
        Some(
            RDKafkaErrorCode::MessageSizeTooLarge
            | RDKafkaErrorCode::InvalidTopic
            | RDKafkaErrorCode::TopicAuthorizationFailed
            | RDKafkaErrorCode::ClusterAuthorizationFailed
            | RDKafkaErrorCode::InvalidRecord
            | RDKafkaErrorCode::InvalidMessageSize
            | RDKafkaErrorCode::InvalidMessage,
        ) => Outcome::permanent(format!("Kafka refused the message: {description}")),
        Some(RDKafkaErrorCode::MessageTimedOut) => Outcome::transient("Kafka delivery timed out"),
        _ => Outcome::transient(format!("Kafka delivery failed: {description}")),
    }
}

impl fmt::Display for KafkaPublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display)
    }
}

impl fmt::Debug for KafkaPublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaPublisher")
            .field("sink", &self.display)
            .field("topic", &self.topic.as_str())
            .field("envelope", &self.envelope)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::KafkaPublisher;

    #[test]
    fn urls_are_validated() {
        for (url, reason) in [
            ("kafka://127.0.0.1:9092?topic=a b", "invalid Kafka topic"),
            ("kafka://127.0.0.1:9092/topic", "no path"),
            ("kafka://u:hunter2@127.0.0.1:9092", "SASL"),
            ("kafka://127.0.0.1:9092?partition=1", "unknown option `partition`"),
        ] {
            let error = KafkaPublisher::from_url(&url.parse().unwrap()).unwrap_err().to_string();
            assert!(error.contains(reason), "{url}: {error}");
            assert!(!error.contains("hunter2"), "{error}");
        }
    }
}
