//! Sink URLs: which built-in publisher the `outbox relay --sink URL` command uses.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::error::{Error, Result};
use crate::publish::{FilePublisher, Message, Outcome, Publisher, StdoutPublisher};

/// The environment variable that holds the signing secret of `http(s)://` sinks.
pub const WEBHOOK_SECRET_ENV: &str = "OUTBOX_WEBHOOK_SECRET";
/// The environment variable naming a PEM file of the certificate authorities a webhook sink trusts instead of the
/// system's (a receiver with a private CA).
pub const WEBHOOK_TLS_CA_ENV: &str = "OUTBOX_WEBHOOK_TLS_CA";
/// The environment variable naming the PEM client certificate a webhook sink presents (with
/// [`WEBHOOK_TLS_KEY_ENV`]) to a receiver that asks for one.
pub const WEBHOOK_TLS_CERT_ENV: &str = "OUTBOX_WEBHOOK_TLS_CERT";
/// The environment variable naming the PEM private key of [`WEBHOOK_TLS_CERT_ENV`].
pub const WEBHOOK_TLS_KEY_ENV: &str = "OUTBOX_WEBHOOK_TLS_KEY";

/// A parsed sink URL.
///
/// | URL | publisher |
/// | --- | --- |
/// | `stdout` (or `stdout:`) | [`StdoutPublisher`] |
/// | `file:PATH` (or `file://PATH`) | [`FilePublisher`] appending to `PATH` |
/// | `http://...`, `https://...` | HTTP webhooks |
/// | `kafka://host:port?topic=...` | [`KafkaPublisher`](crate::KafkaPublisher) (feature `kafka`) |
/// | `nats://host:port?subject=...`, `tls://...` | [`NatsPublisher`](crate::NatsPublisher) (feature `nats`) |
/// | `amqp://user:pass@host/vhost?exchange=...`, `amqps://...` | [`AmqpPublisher`](crate::AmqpPublisher) (feature `rabbitmq`) |
/// | `sqs://?queue_url=...` | [`SqsPublisher`](crate::SqsPublisher) (feature `sqs`) |
/// | `redis://host:port?stream=...`, `rediss://...` | [`RedisPublisher`](crate::RedisPublisher) (feature `redis`) |
///
/// # Example
///
/// ```
/// use outbox_relay::Sink;
///
/// assert_eq!("stdout".parse::<Sink>()?, Sink::Stdout);
/// assert_eq!("file:/tmp/events.jsonl".parse::<Sink>()?, Sink::File("/tmp/events.jsonl".into()));
/// assert!(matches!("kafka://broker:9092?topic=orders".parse::<Sink>()?, Sink::Broker(_)));
/// assert!("gopher://broker".parse::<Sink>().is_err()); // unknown scheme
/// # Ok::<(), outbox_relay::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Sink {
    /// JSON lines on standard output.
    Stdout,
    /// JSON lines appended to a file.
    File(PathBuf),
    /// HTTP(S) webhooks to this URL.
    Webhook(url::Url),
    /// A message broker, by the URL's scheme: `kafka`, `nats` or `tls`, `amqp` or `amqps`, `sqs`, `redis` or
    /// `rediss`.
    Broker(url::Url),
}

/// Shows URLs as the relay prints them, passwords and secret options masked ([`masked_url`](crate::masked_url)).
impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (variant, url) = match self {
            Self::Stdout => return f.write_str("Stdout"),
            Self::File(path) => return f.debug_tuple("File").field(path).finish(),
            Self::Webhook(url) => ("Webhook", url),
            Self::Broker(url) => ("Broker", url),
        };
        f.debug_tuple(variant).field(&format_args!("{}", crate::masked_url::masked_url(url))).finish()
    }
}

impl FromStr for Sink {
    type Err = Error;

    fn from_str(sink: &str) -> Result<Self> {
        let invalid =
            |reason: &str| Error::InvalidSink { sink: crate::masked_url::masked_text(sink), reason: reason.to_owned() };
        if sink == "stdout" || sink == "stdout:" || sink == "-" {
            return Ok(Self::Stdout);
        }
        let Some((scheme, rest)) = sink.split_once(':') else {
            return Err(invalid(EXPECTED));
        };
        match scheme.to_ascii_lowercase().as_str() {
            "file" => {
                let path = rest.strip_prefix("//").unwrap_or(rest);
                if path.is_empty() {
                    return Err(invalid("`file:` needs a path, e.g. `file:/var/log/outbox.jsonl`"));
                }
                Ok(Self::File(PathBuf::from(path)))
            }
            "http" | "https" => {
                let url = url::Url::parse(sink).map_err(|e| invalid(&format!("malformed URL: {e}")))?;
                if url.host_str().is_none_or(str::is_empty) {
                    return Err(invalid("malformed URL: no host"));
                }
                Ok(Self::Webhook(url))
            }
            "kafka" | "nats" | "tls" | "amqp" | "amqps" | "sqs" | "redis" | "rediss" => {
                // The URL may hold a password: a malformed one is not echoed.
                let url = url::Url::parse(sink).map_err(|e| Error::InvalidSink {
                    sink: format!("{scheme}://..."),
                    reason: format!("malformed URL: {e}"),
                })?;
                Ok(Self::Broker(url))
            }
            other => Err(invalid(&format!("unknown sink scheme `{other}`: {EXPECTED}"))),
        }
    }
}

/// The sinks there are, for error messages.
const EXPECTED: &str = "expected `stdout`, `file:PATH`, `http://...` or `https://...`, or a broker URL \
(`kafka://`, `nats://`, `tls://`, `amqp://`, `amqps://`, `sqs://`, `redis://`, `rediss://`)";

impl fmt::Display for Sink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stdout => f.write_str("stdout"),
            Self::File(path) => write!(f, "file:{}", path.display()),
            Self::Webhook(url) | Self::Broker(url) => f.write_str(&crate::masked_url::masked_url(url)),
        }
    }
}

impl Sink {
    /// Opens the sink's publisher.
    ///
    /// # Errors
    ///
    /// [`Error::OpenSink`] when the file of a `file:` sink cannot be opened, and [`Error::InvalidSink`] for a
    /// sink this build does not include.
    pub fn open(&self) -> Result<SinkPublisher> {
        self.open_with(false)
    }

    /// Opens the sink's publisher; with `create_destinations`, its [`connect`](SinkPublisher::connect) creates
    /// a missing destination (JetStream stream, RabbitMQ exchange, SQS queue, Kafka topic) instead of reporting
    /// it (`outbox relay --create-destinations`).
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open).
    pub fn open_with(&self, create_destinations: bool) -> Result<SinkPublisher> {
        match self {
            Self::Stdout => Ok(SinkPublisher::Stdout(StdoutPublisher::new())),
            Self::File(path) => FilePublisher::open(path)
                .map(SinkPublisher::File)
                .map_err(|source| Error::OpenSink { sink: self.to_string(), source }),
            #[cfg(feature = "webhook")]
            Self::Webhook(url) => {
                let secret = std::env::var(WEBHOOK_SECRET_ENV).map_err(|_| Error::InvalidSink {
                    sink: self.to_string(),
                    reason: format!(
                        "set {WEBHOOK_SECRET_ENV} to the signing secret shared with the receiver (`whsec_...`)"
                    ),
                })?;
                let mut builder = crate::publish::WebhookPublisher::builder(url.clone()).secret(secret);
                let file = |name: &str| std::env::var_os(name).filter(|path| !path.is_empty());
                if let Some(ca) = file(WEBHOOK_TLS_CA_ENV) {
                    builder = builder.tls_ca(ca);
                }
                match (file(WEBHOOK_TLS_CERT_ENV), file(WEBHOOK_TLS_KEY_ENV)) {
                    (Some(certificate), Some(key)) => builder = builder.tls_client_certificate(certificate, key),
                    (None, None) => {}
                    _ => {
                        return Err(Error::InvalidSink {
                            sink: self.to_string(),
                            reason: format!(
                                "{WEBHOOK_TLS_CERT_ENV} and {WEBHOOK_TLS_KEY_ENV} go together (a client \
                                 certificate and its key)"
                            ),
                        })
                    }
                }
                builder.build().map(SinkPublisher::Webhook)
            }
            #[cfg(not(feature = "webhook"))]
            Sink::Webhook(_) => Err(Error::InvalidSink {
                sink: self.to_string(),
                reason: "this build has no webhook sink (cargo feature `webhook`)".to_owned(),
            }),
            Self::Broker(url) => open_broker(self, url, create_destinations),
        }
    }
}

/// The publisher of a broker URL, if this build has its feature.
#[cfg_attr(
    not(any(feature = "nats", feature = "rabbitmq", feature = "sqs", feature = "kafka")),
    allow(unused_variables)
)]
fn open_broker(sink: &Sink, url: &url::Url, create_destinations: bool) -> Result<SinkPublisher> {
    #[allow(unused_imports)]
    use std::sync::Arc;
    match url.scheme() {
        #[cfg(feature = "kafka")]
        "kafka" => crate::publish::KafkaPublisher::from_url(url)
            .map(|p| SinkPublisher::Kafka(Arc::new(p.with_create_destinations(create_destinations)))),
        #[cfg(feature = "nats")]
        "nats" | "tls" => crate::publish::NatsPublisher::from_url(url)
            .map(|p| SinkPublisher::Nats(Arc::new(p.with_create_destinations(create_destinations)))),
        #[cfg(feature = "rabbitmq")]
        "amqp" | "amqps" => crate::publish::AmqpPublisher::from_url(url)
            .map(|p| SinkPublisher::Amqp(Arc::new(p.with_create_destinations(create_destinations)))),
        #[cfg(feature = "sqs")]
        "sqs" => crate::publish::SqsPublisher::from_url(url)
            .map(|p| SinkPublisher::Sqs(Arc::new(p.with_create_destinations(create_destinations)))),
        #[cfg(feature = "redis")]
        "redis" | "rediss" => crate::publish::RedisPublisher::from_url(url).map(|p| SinkPublisher::Redis(Arc::new(p))),
        scheme => {
            let feature = match scheme {
                "amqp" | "amqps" => "rabbitmq",
                "tls" => "nats",
                "rediss" => "redis",
                other => other,
            };
            Err(Error::InvalidSink {
                sink: sink.to_string(),
                reason: format!("this build has no `{scheme}://` sink (cargo feature `{feature}`)"),
            })
        }
    }
}

/// The publisher of a [`Sink`], chosen at run time.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum SinkPublisher {
    /// `stdout`.
    Stdout(StdoutPublisher),
    /// `file:PATH`.
    File(FilePublisher),
    /// `http://...` or `https://...`.
    #[cfg(feature = "webhook")]
    Webhook(crate::publish::WebhookPublisher),
    /// `kafka://...`.
    #[cfg(feature = "kafka")]
    Kafka(std::sync::Arc<crate::publish::KafkaPublisher>),
    /// `nats://...`.
    #[cfg(feature = "nats")]
    Nats(std::sync::Arc<crate::publish::NatsPublisher>),
    /// `amqp://...`.
    #[cfg(feature = "rabbitmq")]
    Amqp(std::sync::Arc<crate::publish::AmqpPublisher>),
    /// `sqs://...`.
    #[cfg(feature = "sqs")]
    Sqs(std::sync::Arc<crate::publish::SqsPublisher>),
    /// `redis://...`.
    #[cfg(feature = "redis")]
    Redis(std::sync::Arc<crate::publish::RedisPublisher>),
}

impl SinkPublisher {
    /// Connects to the broker now instead of at the first publish, where the sink has a connection and credentials
    /// to check, and checks the destination: RabbitMQ (and its exchange), NATS (and the JetStream stream of the
    /// subjects), Redis, Kafka (and a fixed topic) and SQS (and a fixed queue). `outbox relay` calls it, and waits while the broker
    /// is unreachable, before reading anything, so no attempt is spent on a broker that is not there yet. The
    /// other sinks are not probed (`stdout`, files, webhooks): their first failures are retried per event, with
    /// backoff.
    ///
    /// # Errors
    ///
    /// [`Error::Unreachable`] (try again later) or [`Error::Refused`] (the broker refuses the settings).
    pub async fn connect(&self) -> Result<()> {
        match self {
            #[cfg(feature = "nats")]
            Self::Nats(publisher) => publisher.connect().await,
            #[cfg(feature = "rabbitmq")]
            Self::Amqp(publisher) => publisher.connect().await,
            #[cfg(feature = "redis")]
            Self::Redis(publisher) => publisher.connect().await,
            #[cfg(feature = "kafka")]
            Self::Kafka(publisher) => publisher.connect().await,
            #[cfg(feature = "sqs")]
            Self::Sqs(publisher) => publisher.connect().await,
            _ => Ok(()),
        }
    }
}

impl Publisher for SinkPublisher {
    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        match self {
            Self::Stdout(publisher) => publisher.publish(batch).await,
            Self::File(publisher) => publisher.publish(batch).await,
            #[cfg(feature = "webhook")]
            Self::Webhook(publisher) => publisher.publish(batch).await,
            #[cfg(feature = "kafka")]
            Self::Kafka(publisher) => publisher.publish(batch).await,
            #[cfg(feature = "nats")]
            Self::Nats(publisher) => publisher.publish(batch).await,
            #[cfg(feature = "rabbitmq")]
            Self::Amqp(publisher) => publisher.publish(batch).await,
            #[cfg(feature = "sqs")]
            Self::Sqs(publisher) => publisher.publish(batch).await,
            #[cfg(feature = "redis")]
            Self::Redis(publisher) => publisher.publish(batch).await,
        }
    }

    /// The sink's own answer: a batch of several events of one aggregate goes in one call only to a sink that
    /// delivers a call in order (the file and standard output).
    fn keeps_order(&self) -> bool {
        match self {
            Self::Stdout(publisher) => publisher.keeps_order(),
            Self::File(publisher) => publisher.keeps_order(),
            #[cfg(feature = "webhook")]
            Self::Webhook(publisher) => publisher.keeps_order(),
            #[cfg(feature = "kafka")]
            Self::Kafka(publisher) => publisher.keeps_order(),
            #[cfg(feature = "nats")]
            Self::Nats(publisher) => publisher.keeps_order(),
            #[cfg(feature = "rabbitmq")]
            Self::Amqp(publisher) => publisher.keeps_order(),
            #[cfg(feature = "sqs")]
            Self::Sqs(publisher) => publisher.keeps_order(),
            #[cfg(feature = "redis")]
            Self::Redis(publisher) => publisher.keeps_order(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Sink, SinkPublisher};
    use crate::error::Error;
    use crate::publish::Publisher;

    #[test]
    #[cfg(all(feature = "nats", feature = "rabbitmq", feature = "redis", feature = "kafka", feature = "webhook"))]
    fn the_debug_output_of_sinks_and_publisher_builders_masks_their_secrets() {
        let secret = "hunter2-marker";
        for url in [
            format!("nats://relay:{secret}@h:4222?subject=outbox"),
            format!("nats://{secret}@h:4222?subject=outbox"),
            format!("amqp://relay:{secret}@h/%2f?exchange=outbox"),
            format!("redis://relay:{secret}@h:6379?stream=outbox"),
            format!("https://relay:{secret}@hooks.example.com/outbox"),
        ] {
            let sink: Sink = url.parse().unwrap();
            let parsed: url::Url = url.parse().unwrap();
            let shown = [
                format!("{sink:?}"),
                format!("{:?}", crate::NatsPublisher::builder(parsed.clone())),
                format!("{:?}", crate::AmqpPublisher::builder(parsed.clone())),
                format!("{:?}", crate::RedisPublisher::builder(parsed.clone())),
                format!("{:?}", crate::WebhookPublisher::builder(parsed).secret(format!("whsec_{secret}"))),
                format!("{:?}", crate::KafkaPublisher::builder(["h:9092"]).property("sasl.password", secret)),
            ];
            for text in shown {
                assert!(!text.contains(secret), "{text}");
            }
        }
    }

    #[test]
    fn a_sink_keeps_order_as_its_publisher_says() {
        let dir = tempfile::Builder::new().prefix("outbox-sink-order-").tempdir().unwrap();
        let file: SinkPublisher = Sink::File(dir.path().join("events.jsonl")).open().unwrap();
        assert!(file.keeps_order(), "a file is written in the order of the batch");
        assert!(Sink::Stdout.open().unwrap().keeps_order());
    }

    #[test]
    fn known_sinks_parse() {
        assert_eq!("file:///tmp/x".parse::<Sink>().unwrap(), Sink::File("/tmp/x".into()));
        assert!(matches!("https://example.com/hook".parse::<Sink>().unwrap(), Sink::Webhook(_)));
        for broker in ["kafka://b:9092?topic=t", "nats://n:4222", "amqp://u:p@r/%2f", "sqs://?queue_url=x", "redis://r"]
        {
            assert!(matches!(broker.parse::<Sink>().unwrap(), Sink::Broker(_)), "{broker}");
        }
        assert_eq!("amqp://u:hunter2@r/%2f".parse::<Sink>().unwrap().to_string(), "amqp://u:***@r/%2f");
    }

    #[test]
    fn bad_sinks_are_rejected_with_the_reason() {
        for (sink, reason) in [
            ("gopher://b:70", "unknown sink scheme `gopher`"),
            ("kafka://b:notaport", "malformed URL"),
            ("nonsense", "expected `stdout`"),
            ("file:", "needs a path"),
            ("http://", "malformed URL"),
            ("https://exa mple.com", "malformed URL"),
        ] {
            match sink.parse::<Sink>() {
                Err(Error::InvalidSink { reason: got, .. }) => assert!(got.contains(reason), "{sink}: {got}"),
                other => panic!("{sink}: {other:?}"),
            }
        }
    }
}
