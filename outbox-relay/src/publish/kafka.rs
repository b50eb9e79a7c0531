//! Kafka (`kafka://` sinks): librdkafka's idempotent producer (`enable.idempotence=true`, `acks=all`); the message
//! key is the aggregate id, so one aggregate stays on one partition and in commit order.

use std::collections::{HashMap, HashSet};
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
use super::secret_source::{take_secret, Secret};
use super::tls_options::TlsFiles;
use super::url_options::Query;
use super::{Message, Outcome, Publisher};
use crate::error::{Error, Result};
use crate::masked_url::masked_url as masked;

/// Publishes events to Kafka.
///
/// Every event goes to the topic rendered from a [`Template`] (default `outbox.{aggregate_type}`: one topic per
/// aggregate type keeps all of an aggregate's events, whatever their type, in one ordered partition), keyed by the
/// aggregate id, with the payload as the value and the CloudEvents attributes as `ce_` headers plus
/// `content-type` and `traceparent` (see [`CloudEvents`]).
///
/// The producer is idempotent with `acks=all`: an event is published once every in-sync replica has it (how many
/// that is depends on the topic: one for a topic of `replication_factor=1`, the default of the topics
/// `--create-destinations` makes; set the topic's `min.insync.replicas` on a cluster), and librdkafka's own
/// retries never duplicate or reorder a partition. (A relay crash between publish and mark
/// still republishes the event: consumers deduplicate by `ce_id`.) It does not declare
/// [`keeps_order`](Publisher::keeps_order): after a message fails (a delivery timeout, or a permanent error
/// without librdkafka's experimental `enable.gapless.guarantee`), librdkafka goes on with the messages behind it,
/// so a later event of the same aggregate could be delivered before the failed one. The relay therefore sends an
/// aggregate's next event only once the previous one is acknowledged (rounds).
///
/// Outcomes: too large a message, an invalid topic name or a refused authorization is permanent; a delivery
/// timeout (`message_timeout_ms`, default 10 s), an unknown topic (it may be being created), a full queue or an
/// unreachable broker is transient. librdkafka reconnects by itself; after a fatal idempotence error the
/// producer is replaced.
///
/// **TLS and SASL**: `security_protocol=plaintext|ssl|sasl_plaintext|sasl_ssl` (default `plaintext`), with
/// `tls_ca=PATH` (authorities to trust instead of the system's), `tls_cert=PATH` + `tls_key=PATH` (client
/// certificate); the broker's certificate and host name are always verified (a librdkafka property that would
/// turn that off is refused). SASL takes `sasl_mechanism=plain|scram-sha-256|scram-sha-512`, the user name of
/// the URL and its password from the URL, `password_file=PATH` or `password_env=VAR`
/// (`kafka://relay@broker:9096?security_protocol=sasl_ssl&sasl_mechanism=scram-sha-512&password_env=KAFKA_PASSWORD`).
///
/// **Destination**: [`connect`](Self::connect) checks that a fixed topic exists (its metadata); with
/// [`create_destinations`](KafkaBuilder::create_destinations) it creates a missing one with `partitions=N`
/// (default 3) and `replication_factor=N` (default 1; 3 on a production cluster). The topics of a template with
/// placeholders are known only per event, so each is checked at its first publish: with `create_destinations` a
/// missing one is created the same way; without it, brokers that create topics on first use
/// (`auto.create.topics.enable`, Kafka's default) create it then, and on a cluster that does not (MSK's default,
/// Confluent Cloud) its events fail as transient errors whose reason names the topic and the flag, until it exists.
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
    /// Set when deliveries timed out and no broker answered a metadata request: the next call asks again before it
    /// sends anything, and fails fast, without counting an attempt, while none answers.
    unreachable: AtomicBool,
    topic: Template,
    envelope: CloudEvents,
    create_destinations: bool,
    partitions: i32,
    replication_factor: i32,
    /// The topics of a template known to exist (checked, or created, at their first publish).
    known_topics: Mutex<HashSet<String>>,
}

/// Settings of a [`KafkaPublisher`], validated by [`build`](Self::build). Its `Debug` output names the librdkafka
/// properties set, never their values (one may be `sasl.password`).
#[derive(Clone)]
#[must_use]
pub struct KafkaBuilder {
    display: String,
    brokers: Vec<String>,
    topic: String,
    envelope: CloudEvents,
    message_timeout: Duration,
    max_message_bytes: Option<usize>,
    properties: Vec<(String, String)>,
    security_protocol: SecurityProtocol,
    sasl: Option<(SaslMechanism, String, Secret)>,
    tls: TlsFiles,
    create_destinations: bool,
    partitions: i32,
    replication_factor: i32,
}

/// How the producer talks to the brokers (`security.protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SecurityProtocol {
    /// No TLS, no SASL.
    Plaintext,
    /// TLS.
    Ssl,
    /// SASL without TLS (the password crosses the network in clear with `PLAIN`).
    SaslPlaintext,
    /// SASL over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    fn parse(value: &str) -> Option<Self> {
        match value {
            "plaintext" => Some(Self::Plaintext),
            "ssl" => Some(Self::Ssl),
            "sasl_plaintext" => Some(Self::SaslPlaintext),
            "sasl_ssl" => Some(Self::SaslSsl),
            _ => None,
        }
    }

    fn property(self) -> &'static str {
        match self {
            Self::Plaintext => "plaintext",
            Self::Ssl => "ssl",
            Self::SaslPlaintext => "sasl_plaintext",
            Self::SaslSsl => "sasl_ssl",
        }
    }

    fn tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }

    fn sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }
}

/// The SASL mechanism (`sasl.mechanism`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SaslMechanism {
    /// `PLAIN` (use it over TLS only).
    Plain,
    /// `SCRAM-SHA-256`.
    ScramSha256,
    /// `SCRAM-SHA-512`.
    ScramSha512,
}

impl SaslMechanism {
    fn parse(value: &str) -> Option<Self> {
        match value.to_ascii_lowercase().as_str() {
            "plain" => Some(Self::Plain),
            "scram-sha-256" => Some(Self::ScramSha256),
            "scram-sha-512" => Some(Self::ScramSha512),
            _ => None,
        }
    }

    fn property(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// librdkafka properties that would turn certificate or host name verification off: refused.
const VERIFICATION_PROPERTIES: [&str; 2] =
    ["enable.ssl.certificate.verification", "ssl.endpoint.identification.algorithm"];

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
            security_protocol: SecurityProtocol::Plaintext,
            sasl: None,
            tls: TlsFiles::default(),
            create_destinations: false,
            partitions: 3,
            replication_factor: 1,
        }
    }

    /// The same publisher, creating a missing topic at [`connect`](Self::connect) when `create` is set (the
    /// `outbox relay --create-destinations` flag; [`KafkaBuilder::create_destinations`] before building).
    #[must_use]
    pub fn with_create_destinations(mut self, create: bool) -> Self {
        self.create_destinations = create;
        self
    }

    /// Checks that the brokers take the producer's settings (TLS, SASL) and, for a fixed topic, that the topic
    /// exists, creating it with [`create_destinations`](KafkaBuilder::create_destinations); `outbox relay` does
    /// this before it reads anything. The topics of a template with placeholders are checked at their first
    /// publish instead (see the type's docs).
    ///
    /// # Errors
    ///
    /// [`Error::Unreachable`] when no broker answers in time, [`Error::Refused`] when a broker refuses the TLS
    /// setup or the credentials, or the topic does not exist (or cannot be created).
    pub async fn connect(&self) -> Result<()> {
        let target = format!("Kafka at {}", self.display);
        let topic = self.topic.is_fixed().then(|| self.topic.as_str().to_owned());
        let config = self.config.clone();
        let when_missing = if self.create_destinations { self.creating() } else { WhenMissing::Report };
        let checked = tokio::task::spawn_blocking(move || check_topic(&config, topic.as_deref(), when_missing))
            .await
            .unwrap_or_else(|_| Err(Check::Unreachable("the metadata request panicked".to_owned())));
        match checked {
            Ok(()) => Ok(()),
            Err(Check::Unreachable(reason)) => Err(Error::Unreachable { target, reason }),
            Err(Check::Refused(reason) | Check::Missing(reason)) => Err(Error::Refused { target, reason }),
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
        let protocol = query.take_parsed(
            "security_protocol",
            "`plaintext`, `ssl`, `sasl_plaintext` or `sasl_ssl`",
            SecurityProtocol::parse,
        )?;
        let mechanism =
            query.take_parsed("sasl_mechanism", "`plain`, `scram-sha-256` or `scram-sha-512`", SaslMechanism::parse)?;
        let tls = TlsFiles::from_query(&mut query)?;
        let password = take_secret(&mut query, "password")?;
        let user = url::form_urlencoded::parse(format!("x={}", url.username()).as_bytes())
            .next()
            .map(|(_, user)| user.into_owned())
            .unwrap_or_default();
        let url_password = url.password().map(|password| {
            Secret::new(
                url::form_urlencoded::parse(format!("x={password}").as_bytes())
                    .next()
                    .map(|(_, password)| password.into_owned())
                    .unwrap_or_default(),
            )
        });
        if url_password.is_some() && password.is_some() {
            return Err(query.invalid("give the password in the URL or in `password_file`/`password_env`, not both"));
        }
        let password = url_password.or(password);
        let sasl = match (user.is_empty(), password, mechanism) {
            (true, None, None) => None,
            (false, Some(password), Some(mechanism)) => Some((mechanism, user, password)),
            (false, Some(_), None) => {
                return Err(query.invalid("name the SASL mechanism: `sasl_mechanism=plain|scram-sha-256|scram-sha-512`"))
            }
            _ => {
                return Err(query.invalid(
                    "SASL needs the user in the URL, its password, and `sasl_mechanism` (`kafka://USER@host:port?...&password_file=PATH`)",
                ))
            }
        };
        let partitions =
            query.take_parsed("partitions", "a number from 1", |v| v.parse::<i32>().ok().filter(|n| *n >= 1))?;
        let replication_factor = query
            .take_parsed("replication_factor", "a number from 1", |v| v.parse::<i32>().ok().filter(|n| *n >= 1))?;
        let mut brokers = vec![format!("{}:{}", url.host_str().unwrap_or_default(), url.port().unwrap_or(9092))];
        if let Some(more) = query.take("brokers") {
            brokers.extend(more.split(',').map(str::trim).filter(|b| !b.is_empty()).map(str::to_owned));
        }
        let mut builder = Self::builder(brokers).cloud_events(CloudEvents::from_query(&mut query)?);
        builder.display = masked(url);
        builder.security_protocol = protocol.unwrap_or(if sasl.is_some() {
            SecurityProtocol::SaslSsl
        } else if tls.any() {
            SecurityProtocol::Ssl
        } else {
            SecurityProtocol::Plaintext
        });
        builder.sasl = sasl;
        builder.tls = tls;
        builder.partitions = partitions.unwrap_or(builder.partitions);
        builder.replication_factor = replication_factor.unwrap_or(builder.replication_factor);
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
            "security_protocol",
            "sasl_mechanism",
            "tls_ca",
            "tls_cert",
            "tls_key",
            "password_file",
            "password_env",
            "partitions",
            "replication_factor",
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

impl fmt::Debug for KafkaBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let properties: Vec<&str> = self.properties.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("KafkaBuilder")
            .field("brokers", &self.display)
            .field("topic", &self.topic)
            .field("message_timeout", &self.message_timeout)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("properties", &properties)
            .field("security_protocol", &self.security_protocol)
            .field("sasl", &self.sasl)
            .field("tls", &self.tls)
            .field("create_destinations", &self.create_destinations)
            .finish_non_exhaustive()
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

    /// `security.protocol` (default [`SecurityProtocol::Plaintext`]).
    pub fn security_protocol(mut self, protocol: SecurityProtocol) -> Self {
        self.security_protocol = protocol;
        self
    }

    /// SASL authentication with `mechanism`, `user` and `password` (the protocol must be a SASL one).
    pub fn sasl(mut self, mechanism: SaslMechanism, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.sasl = Some((mechanism, user.into(), Secret::new(password)));
        self
    }

    /// Trusts the certificate authorities of this PEM file instead of the system's (TLS protocols only).
    pub fn tls_ca(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.tls.ca = Some(path.into());
        self
    }

    /// Presents this PEM client certificate and key (TLS protocols only).
    pub fn tls_client_certificate(
        mut self,
        cert: impl Into<std::path::PathBuf>,
        key: impl Into<std::path::PathBuf>,
    ) -> Self {
        self.tls.client = Some((cert.into(), key.into()));
        self
    }

    /// Whether the publisher creates a missing topic (default: no, it reports it): a fixed one at
    /// [`KafkaPublisher::connect`], one of a template when an event is first published to it.
    pub fn create_destinations(mut self, create: bool) -> Self {
        self.create_destinations = create;
        self
    }

    /// The partitions and replication factor of a topic [`create_destinations`](Self::create_destinations)
    /// creates (default 3 and 1).
    pub fn new_topics(mut self, partitions: i32, replication_factor: i32) -> Self {
        self.partitions = partitions;
        self.replication_factor = replication_factor;
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
        if self.partitions < 1 || self.replication_factor < 1 {
            return Err(invalid("new topics need at least one partition and one replica"));
        }
        let protocol = self.security_protocol;
        if self.sasl.is_some() != protocol.sasl() {
            return Err(invalid(if protocol.sasl() {
                "a SASL protocol needs a user, a password and `sasl_mechanism`"
            } else {
                "SASL credentials need `security_protocol=sasl_ssl` (or `sasl_plaintext`)"
            }));
        }
        if self.tls.any() && !protocol.tls() {
            return Err(invalid("`tls_ca`, `tls_cert` and `tls_key` need `security_protocol=ssl` or `sasl_ssl`"));
        }
        let mut config = ClientConfig::new();
        for (name, value) in &self.properties {
            if VERIFICATION_PROPERTIES.contains(&name.as_str()) {
                return Err(invalid(&format!(
                    "`{name}` cannot be set: certificates and host names are always verified"
                )));
            }
            if name.starts_with("sasl.") || name.starts_with("ssl.") || name == "security.protocol" {
                return Err(invalid(&format!(
                    "set `{name}` with the publisher's TLS and SASL settings, not as a property"
                )));
            }
            config.set(name, value);
        }
        config.set("security.protocol", protocol.property());
        if protocol.tls() {
            config
                .set("enable.ssl.certificate.verification", "true")
                .set("ssl.endpoint.identification.algorithm", "https");
            if let Some(ca) = &self.tls.ca {
                config.set("ssl.ca.location", ca.display().to_string());
            }
            if let Some((cert, key)) = &self.tls.client {
                config.set("ssl.certificate.location", cert.display().to_string());
                config.set("ssl.key.location", key.display().to_string());
            }
        }
        if let Some((mechanism, user, password)) = &self.sasl {
            config
                .set("sasl.mechanism", mechanism.property())
                .set("sasl.username", user)
                .set("sasl.password", password.expose());
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
            unreachable: AtomicBool::new(false),
            topic,
            envelope: self.envelope,
            create_destinations: self.create_destinations,
            known_topics: Mutex::new(HashSet::new()),
            partitions: self.partitions,
            replication_factor: self.replication_factor,
        })
    }
}

/// Why [`check_topic`] failed.
enum Check {
    Unreachable(String),
    Refused(String),
    /// The topic does not exist (and was not to be created).
    Missing(String),
}

/// What [`check_topic`] does about a topic that does not exist.
#[derive(Debug, Clone, Copy)]
enum WhenMissing {
    /// Reports it, asking the brokers not to create it on first use.
    Report,
    /// Asks with the producer's own settings, so that brokers that create topics on first use
    /// (`auto.create.topics.enable`) create it, and reports it only when they do not.
    ReportUnlessAutoCreated,
    /// Creates it.
    Create { partitions: i32, replication: i32 },
}

/// How long the start-up check waits for the brokers.
const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// Fetches the metadata of `topic` (of the cluster when `None`) with a short-lived producer of `config`, and does
/// what `when_missing` says when the topic does not exist. Blocking: run it off the async runtime.
fn check_topic(
    config: &ClientConfig,
    topic: Option<&str>,
    when_missing: WhenMissing,
) -> std::result::Result<(), Check> {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;

    let auto_created = matches!(when_missing, WhenMissing::ReportUnlessAutoCreated);
    let mut checking = config.clone();
    if !auto_created {
        // A producer's metadata request would otherwise ask the broker to create the topic.
        checking.set("allow.auto.create.topics", "false");
    }
    let producer: rdkafka::producer::BaseProducer<CheckContext> = checking
        .create_with_context(CheckContext::default())
        .map_err(|error| Check::Refused(format!("librdkafka refused the configuration: {error}")))?;
    // Short metadata requests, so that a refused TLS handshake or SASL exchange (which reaches the log callback;
    // the request itself only fails with a transport error) stops the check at once.
    let deadline = std::time::Instant::now() + CHECK_TIMEOUT;
    let metadata = loop {
        match producer.client().fetch_metadata(topic, Duration::from_secs(1)) {
            Ok(metadata) => break metadata,
            Err(error) => {
                producer.poll(Duration::ZERO);
                if let Some(mut reason) = producer.context().refusal() {
                    if reason.contains("alert certificate required") && config.get("ssl.certificate.location").is_none()
                    {
                        reason.push_str(" (the broker asks for a client certificate: give `tls_cert` and `tls_key`)");
                    }
                    return Err(Check::Refused(reason));
                }
                if std::time::Instant::now() >= deadline {
                    return Err(classify(&error));
                }
            }
        }
    };
    let Some(topic) = topic else { return Ok(()) };
    let missing = metadata.topics().iter().find(|t| t.name() == topic).is_none_or(|t| {
        t.error().is_some_and(|code| RDKafkaErrorCode::from(code) == RDKafkaErrorCode::UnknownTopicOrPartition)
            // A topic the brokers are creating on first use has no partitions yet (`LEADER_NOT_AVAILABLE`).
            || (t.partitions().is_empty() && !auto_created)
    });
    if !missing {
        return Ok(());
    }
    let WhenMissing::Create { partitions, replication } = when_missing else {
        return Err(Check::Missing(format!(
            "the topic `{topic}` does not exist (create it, or start with `--create-destinations`)"
        )));
    };
    let admin: AdminClient<DefaultClientContext> =
        config.create().map_err(|error| Check::Refused(format!("cannot create the Kafka admin client: {error}")))?;
    let new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(replication));
    let options = AdminOptions::new().operation_timeout(Some(CHECK_TIMEOUT));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| Check::Unreachable(format!("cannot start a runtime for the admin request: {error}")))?;
    let results = runtime.block_on(admin.create_topics([&new_topic], &options)).map_err(|error| classify(&error))?;
    match results.into_iter().next() {
        Some(Ok(_)) | None => {
            tracing::info!(topic, partitions, replication, "created the Kafka topic");
            Ok(())
        }
        Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) => Ok(()),
        Some(Err((_, code))) => Err(Check::Refused(format!("cannot create the topic `{topic}`: {code}"))),
    }
}

/// What librdkafka says when a broker refuses the TLS setup or the credentials. With TLS 1.3 a broker that
/// refuses the client's certificate (none, or one it does not trust) does so after the client's side of the
/// handshake is done: librdkafka then reports the TLS alert the broker sent (`Receive failed: ... tlsv13 alert
/// certificate required`), not a failed handshake.
const REFUSALS: [&str; 9] = [
    "SSL handshake failed",
    "certificate verify failed",
    "SASL authentication",
    "alert certificate required",
    "alert bad certificate",
    "alert certificate unknown",
    "alert unknown ca",
    "alert certificate expired",
    "alert access denied",
];

/// The client context of the start-up check: it keeps the last error librdkafka reported that retrying cannot
/// fix (a TLS handshake the client or the broker refused, failed SASL authentication).
#[derive(Default)]
struct CheckContext {
    refusal: Mutex<Option<String>>,
}

impl CheckContext {
    fn refusal(&self) -> Option<String> {
        self.refusal.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

impl rdkafka::ClientContext for CheckContext {
    /// librdkafka reports a failed TLS handshake or SASL exchange as a connection failure (`FAIL`) in its log.
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        if fac == "FAIL" && REFUSALS.iter().any(|text| log_message.contains(text)) {
            // Without the thread prefix (`[thrd:ssl://host:port/bootstrap]: `).
            let reason = log_message.split_once("]: ").map_or(log_message, |(_, reason)| reason);
            *self.refusal.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                Some(reason.lines().next().unwrap_or_default().to_owned());
        } else {
            rdkafka::client::DefaultClientContext.log(level, fac, log_message);
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let refused = matches!(
            error.rdkafka_error_code(),
            Some(RDKafkaErrorCode::SSL | RDKafkaErrorCode::Authentication | RDKafkaErrorCode::SaslAuthenticationFailed)
        ) || REFUSALS.iter().any(|text| reason.contains(text));
        if refused {
            // librdkafka's reason names the broker and the failed check (certificate verify failed, ...).
            let reason = reason.lines().next().unwrap_or_default().to_owned();
            *self.refusal.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(reason);
        }
    }
}

/// The check sends no message: deliveries never happen.
impl rdkafka::producer::ProducerContext for CheckContext {
    type DeliveryOpaque = ();

    fn delivery(&self, _: &rdkafka::producer::DeliveryResult<'_>, (): ()) {}
}

/// Sorts a start-up error: refused settings (TLS, SASL, authorization) or brokers that did not answer.
fn classify(error: &KafkaError) -> Check {
    let code = error.rdkafka_error_code();
    let reason = code.map_or_else(|| error.to_string(), |code| code.to_string());
    match code {
        Some(
            RDKafkaErrorCode::Authentication
            | RDKafkaErrorCode::SaslAuthenticationFailed
            | RDKafkaErrorCode::SSL
            | RDKafkaErrorCode::TopicAuthorizationFailed
            | RDKafkaErrorCode::ClusterAuthorizationFailed
            | RDKafkaErrorCode::UnsupportedSASLMechanism
            | RDKafkaErrorCode::IllegalSASLState,
        ) => Check::Refused(reason),
        _ => Check::Unreachable(reason),
    }
}

impl Publisher for KafkaPublisher {
    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        let producer = match self.producer() {
            Ok(producer) => producer,
            Err(error) => return vec![Outcome::transient(error); batch.len()],
        };
        if self.unreachable.load(Ordering::Relaxed) {
            if let Err(reason) = reachable(&producer).await {
                return vec![Outcome::unavailable(reason); batch.len()];
            }
            self.unreachable.store(false, Ordering::Relaxed);
        }
        let topics: Vec<std::result::Result<String, Outcome>> =
            batch.iter().map(|message| self.topic.render(message).map_err(Outcome::permanent)).collect();
        let missing = self.check_new_topics(&topics).await;
        // Enqueue every message (librdkafka batches them per partition), then wait for each delivery report.
        let mut deliveries = Vec::with_capacity(batch.len());
        for (message, topic) in batch.iter().zip(topics) {
            let topic = match topic {
                Ok(topic) => topic,
                Err(outcome) => {
                    deliveries.push(Err(outcome));
                    continue;
                }
            };
            if let Some(reason) = missing.get(&topic) {
                deliveries.push(Err(Outcome::transient(reason)));
                continue;
            }
            let body = self.envelope.body(message);
            let record =
                FutureRecord::to(&topic).key(&message.aggregate_id).payload(&body).headers(self.headers(message));
            match producer.send_result(record) {
                Ok(delivery) => deliveries.push(Ok(delivery)),
                Err((error, _)) => deliveries.push(Err(outcome_of(&error))),
            }
        }
        let mut outcomes = Vec::with_capacity(deliveries.len());
        let mut timed_out = Vec::new();
        for delivery in deliveries {
            outcomes.push(match delivery {
                Err(outcome) => outcome,
                Ok(delivery) => match delivery.await {
                    Ok(Ok(_)) => Outcome::Published,
                    Ok(Err((error, _))) => {
                        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::MessageTimedOut) {
                            self.stale.store(true, Ordering::Relaxed);
                            timed_out.push(outcomes.len());
                        }
                        outcome_of(&error)
                    }
                    Err(_) => Outcome::transient("the Kafka producer dropped the message"),
                },
            });
        }
        // A delivery that timed out while no broker answers is an outage, which uses up no attempt (as with the
        // other brokers), not a failure of the message.
        if !timed_out.is_empty() {
            if let Err(reason) = reachable(&producer).await {
                self.unreachable.store(true, Ordering::Relaxed);
                for index in timed_out {
                    outcomes[index] = Outcome::unavailable(format!("Kafka delivery timed out: {reason}"));
                }
            }
        }
        outcomes
    }
}

/// How long [`reachable`] waits for a broker's answer.
const REACHABLE_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether a broker of `producer`'s cluster answers a metadata request within [`REACHABLE_TIMEOUT`]; the reason
/// when none does.
async fn reachable(producer: &FutureProducer) -> std::result::Result<(), String> {
    let producer = producer.clone();
    let asked = tokio::task::spawn_blocking(move || producer.client().fetch_metadata(None, REACHABLE_TIMEOUT)).await;
    match asked {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(error)) => Err(format!(
            "no Kafka broker answers ({})",
            error.rdkafka_error_code().map_or_else(|| "no answer".to_owned(), |code| code.to_string())
        )),
        Err(_) => Err("no Kafka broker answers (the check did not finish)".to_owned()),
    }
}

impl KafkaPublisher {
    /// With a topic template, checks each topic of `topics` at its first publish ([`connect`](Self::connect)
    /// checks a fixed topic): with [`create_destinations`](KafkaBuilder::create_destinations) a missing one is
    /// created; without it, one that the brokers do not create on first use is reported. Returns the topics that
    /// are missing, or could not be checked or created, with the reason.
    async fn check_new_topics(&self, topics: &[std::result::Result<String, Outcome>]) -> HashMap<String, String> {
        if self.topic.is_fixed() {
            return HashMap::new();
        }
        let unknown: HashSet<String> = {
            let known = self.known_topics.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            topics.iter().flatten().filter(|topic| !known.contains(*topic)).cloned().collect()
        };
        let mut failed = HashMap::new();
        let when_missing =
            if self.create_destinations { self.creating() } else { WhenMissing::ReportUnlessAutoCreated };
        for topic in unknown {
            let config = self.config.clone();
            let name = topic.clone();
            let checked = tokio::task::spawn_blocking(move || check_topic(&config, Some(&name), when_missing))
                .await
                .unwrap_or_else(|_| Err(Check::Unreachable("the topic check panicked".to_owned())));
            match checked {
                Ok(()) => {
                    self.known_topics.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(topic);
                }
                Err(Check::Missing(_)) => {
                    let reason = format!(
                        "the Kafka topic `{topic}` does not exist (create it, or start with `--create-destinations`)"
                    );
                    failed.insert(topic, reason);
                }
                Err(Check::Unreachable(reason) | Check::Refused(reason)) if self.create_destinations => {
                    let reason = format!("cannot check or create the Kafka topic `{topic}`: {reason}");
                    failed.insert(topic, reason);
                }
                // Without the flag the check only names a missing topic; brokers that cannot be reached, or refuse
                // the relay, are met (and reported) by the producer as it sends.
                Err(Check::Unreachable(_) | Check::Refused(_)) => {}
            }
        }
        failed
    }

    /// What [`check_topic`] does about a missing topic with [`create_destinations`](KafkaBuilder::create_destinations).
    fn creating(&self) -> WhenMissing {
        WhenMissing::Create { partitions: self.partitions, replication: self.replication_factor }
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

impl KafkaPublisher {
    /// What this publisher puts on the wire, for the AsyncAPI document of its sink.
    pub(crate) fn shape(&self) -> super::wire::Shape<'_> {
        super::wire::Shape {
            protocol: "kafka",
            destination: &self.topic,
            binding: Binding::Kafka,
            envelope: &self.envelope,
            own_headers: &[("content-type", "The body's media type.", true)],
            pathname: None,
            keyed_by_aggregate: true,
            channel_bindings: None,
            description:
                "The outbox relay produces each event with the idempotent producer, keyed by its aggregate id.",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::KafkaPublisher;

    #[test]
    fn tls_and_sasl_options_become_librdkafka_properties_with_verification_on() {
        std::env::set_var("OUTBOX_TEST_KAFKA_PASSWORD", "hunter2");
        let dir = tempfile::Builder::new().prefix("outbox-kafka-ca-").tempdir().unwrap();
        let ca = outbox_tests::certificates::Certificates::generate(dir.path(), "kafka").ca;
        let url = format!(
            "kafka://relay@b1:9096?security_protocol=sasl_ssl&sasl_mechanism=scram-sha-512\
             &password_env=OUTBOX_TEST_KAFKA_PASSWORD&tls_ca={}",
            ca.display()
        );
        let publisher = KafkaPublisher::from_url(&url.parse().unwrap()).unwrap();
        let get = |name: &str| publisher.config.get(name).map(str::to_owned);
        assert_eq!(get("security.protocol").as_deref(), Some("sasl_ssl"));
        assert_eq!(get("sasl.mechanism").as_deref(), Some("SCRAM-SHA-512"));
        assert_eq!(get("sasl.username").as_deref(), Some("relay"));
        assert_eq!(get("sasl.password").as_deref(), Some("hunter2"));
        assert_eq!(get("ssl.ca.location"), Some(ca.display().to_string()));
        assert_eq!(get("enable.ssl.certificate.verification").as_deref(), Some("true"));
        assert_eq!(get("ssl.endpoint.identification.algorithm").as_deref(), Some("https"));
        assert!(!format!("{publisher} {publisher:?}").contains("hunter2"));
        let plain =
            KafkaPublisher::from_url(&"kafka://relay:hunter2@b1:9092?sasl_mechanism=plain".parse().unwrap()).unwrap();
        assert_eq!(plain.config.get("security.protocol"), Some("sasl_ssl"), "SASL defaults to TLS");
        assert!(!plain.to_string().contains("hunter2"), "{plain}");
        let off = KafkaPublisher::builder(["b1:9092"]).property("enable.ssl.certificate.verification", "false").build();
        assert!(off.unwrap_err().to_string().contains("always verified"));
    }

    #[test]
    fn urls_are_validated() {
        for (url, reason) in [
            ("kafka://127.0.0.1:9092?topic=a b", "invalid Kafka topic"),
            ("kafka://127.0.0.1:9092/topic", "no path"),
            ("kafka://u:hunter2@127.0.0.1:9092", "sasl_mechanism"),
            ("kafka://u@127.0.0.1:9092?sasl_mechanism=plain", "password"),
            ("kafka://127.0.0.1:9092?security_protocol=tls", "`security_protocol` must be"),
            ("kafka://127.0.0.1:9092?security_protocol=sasl_ssl", "SASL protocol needs"),
            (
                "kafka://127.0.0.1:9092?tls_ca=/nonexistent/ca.pem&security_protocol=ssl",
                "cannot read /nonexistent/ca.pem",
            ),
            ("kafka://127.0.0.1:9092?password=hunter2", "never goes into the URL"),
            ("kafka://127.0.0.1:9092?partition=1", "unknown option `partition`"),
        ] {
            let error = KafkaPublisher::from_url(&url.parse().unwrap()).unwrap_err().to_string();
            assert!(error.contains(reason), "{url}: {error}");
            assert!(!error.contains("hunter2"), "{error}");
        }
    }
}
