//! RabbitMQ / AMQP 0-9-1 (`amqp://` sinks): a channel in confirm mode per batch in flight; an event counts as
//! published once the broker confirmed it (for a durable queue: written to disk).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Confirmation, ConnectionProperties};

use super::cloudevents::{Binding, CloudEvents};
use super::innermost_cause::innermost;
use super::name_template::{Naming, Template};
use super::reconnect::Reconnect;
use super::secret_source::{take_secret, Secret};
use super::tls_options::{is_tls_refusal, TlsFiles};
use super::url_options::Query;
use super::{Message, Outcome, Publisher};
use crate::error::{Error, Result};
use crate::masked_url::masked_url as masked;

/// Publishes events to a RabbitMQ exchange, with publisher confirms.
///
/// Every event is published to one exchange (default `outbox`; it must exist) with the routing key rendered from a
/// [`Template`] (default `{event_type}`), `mandatory` set, persistent delivery mode, `message_id` = the event id
/// (consumers deduplicate by it: AMQP has no broker-side deduplication), `type` = the event type, `timestamp`,
/// `content_type`, and the CloudEvents attributes as `cloudEvents:`-prefixed headers (see [`CloudEvents`]) plus
/// `traceparent`. Each batch in flight has a confirm-mode channel of its own (the broker's returns and confirms of a
/// channel are matched to that batch alone); an aggregate's next batch is published only after its previous one was
/// confirmed, so a queue receives each aggregate's events in commit order.
///
/// Outcomes: a confirm (`ack`) publishes the event. A missing exchange, a refused permission or a message over the
/// broker's size limit is a permanent failure; a `nack`, a confirm timeout, a lost connection or a message the
/// broker returns as unroutable is transient. RabbitMQ returns a `mandatory` message (`312 NO_ROUTE`) when no
/// queue took it: none is bound for its routing key yet, or the queues bound are not available, as while a broker
/// restarts and recovers them (seen in this crate's tests: a third of the events published in the seconds after
/// a restart came back so). Retried, such an event is published once a queue takes it, or goes to `failed` when
/// its attempts run out. After a connection loss the publisher reconnects with backoff at the next batch.
///
/// **TLS**: `amqps://` (port 5671 by default), with `tls_ca=PATH` (authorities to trust instead of the
/// system's) and `tls_cert=PATH` + `tls_key=PATH` (client certificate); the broker's certificate is verified
/// against the host name. **Authentication**: the user and password of the URL, or the password from
/// `password_file=PATH` / `password_env=VAR` (`amqps://relay@host/%2f?password_file=/run/secrets/amqp`).
///
/// **Destination**: [`connect`](Self::connect) checks that the exchange exists (a passive declare); with
/// [`create_destinations`](AmqpBuilder::create_destinations) it declares a missing one, durable, of type
/// `exchange_type=topic|direct|fanout|headers` (default `topic`). It then checks, without publishing, that the user
/// may write to it: RabbitMQ checks write permission on the destination of an `exchange.unbind` before anything
/// else, and the publisher asks to unbind the exchange from the default exchange, which RabbitMQ refuses after
/// that check and which changes nothing. The default exchange (`exchange=`) is not checked: every user may
/// publish to it.
///
/// # Example
///
/// ```
/// let url = "amqp://relay:secret@127.0.0.1:5672/%2f?exchange=events&routing_key=shop.{event_type}".parse()?;
/// let publisher = outbox_relay::AmqpPublisher::from_url(&url)?;
/// assert_eq!(
///     publisher.to_string(),
///     "amqp://relay:***@127.0.0.1:5672/%2f?exchange=events&routing_key=shop.{event_type}"
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct AmqpPublisher {
    url: url::Url,
    uri: String,
    exchange: String,
    routing_key: Template,
    envelope: CloudEvents,
    confirm_timeout: Duration,
    connect_timeout: Duration,
    max_message_bytes: Option<usize>,
    tls: lapin::tcp::OwnedTLSConfig,
    exchange_kind: lapin::ExchangeKind,
    create_destinations: bool,
    link: Reconnect<Arc<Link>>,
}

/// An open connection and its idle confirm-mode channels.
struct Link {
    connection: lapin::Connection,
    /// Channels no batch is using. A batch takes one (or opens one) and gives it back when it ends with the
    /// channel open: lapin hands a returned message to the next confirm of its channel, so two batches sharing a
    /// channel could take each other's returns.
    idle: std::sync::Mutex<Vec<lapin::Channel>>,
}

impl Link {
    /// An idle open channel, or a new one in confirm mode.
    async fn channel(&self) -> std::result::Result<lapin::Channel, lapin::Error> {
        let idle = {
            let mut idle = self.idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            std::iter::from_fn(|| idle.pop()).find(|channel| channel.status().connected())
        };
        if let Some(channel) = idle {
            return Ok(channel);
        }
        let channel = self.connection.create_channel().await?;
        channel.confirm_select(ConfirmSelectOptions::default()).await?;
        Ok(channel)
    }

    /// Gives `channel` back for the next batch.
    fn give_back(&self, channel: lapin::Channel) {
        if channel.status().connected() {
            self.idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(channel);
        }
    }
}

/// Settings of an [`AmqpPublisher`], validated by [`build`](Self::build).
#[derive(Debug, Clone)]
#[must_use]
pub struct AmqpBuilder {
    url: crate::masked_url::MaskedUrl,
    exchange: String,
    routing_key: String,
    envelope: CloudEvents,
    confirm_timeout: Duration,
    connect_timeout: Duration,
    max_message_bytes: Option<usize>,
    password: Option<Secret>,
    tls: TlsFiles,
    exchange_kind: lapin::ExchangeKind,
    create_destinations: bool,
}

impl AmqpPublisher {
    /// Starts the settings of a publisher to the broker at `url` (`amqp://user:password@host[:port]/vhost`, the
    /// vhost percent-encoded: `%2f` for `/`).
    pub fn builder(url: url::Url) -> AmqpBuilder {
        AmqpBuilder {
            url: crate::masked_url::MaskedUrl(url),
            exchange: "outbox".to_owned(),
            routing_key: "{event_type}".to_owned(),
            envelope: CloudEvents::new(),
            confirm_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            max_message_bytes: None,
            password: None,
            tls: TlsFiles::default(),
            exchange_kind: lapin::ExchangeKind::Topic,
            create_destinations: false,
        }
    }

    /// The same publisher, declaring a missing exchange at [`connect`](Self::connect) when `create` is set (the
    /// `outbox relay --create-destinations` flag; [`AmqpBuilder::create_destinations`] before building).
    #[must_use]
    pub fn with_create_destinations(mut self, create: bool) -> Self {
        self.create_destinations = create;
        self
    }

    /// A publisher from a sink URL: `amqp://user:password@host[:port]/vhost?exchange=outbox&routing_key={event_type}`
    /// `&source=...&schema_base=...&mode=binary&confirm_timeout_ms=10000&max_message_bytes=...`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSink`] for a malformed URL, an unknown option, or an invalid routing key template.
    pub fn from_url(url: &url::Url) -> Result<Self> {
        let mut query = Query::new(url)?;
        let mut builder = Self::builder(url.clone()).cloud_events(CloudEvents::from_query(&mut query)?);
        builder.tls = TlsFiles::from_query(&mut query)?;
        builder.password = take_secret(&mut query, "password")?;
        if let Some(kind) =
            query.take_parsed("exchange_type", "`topic`, `direct`, `fanout` or `headers`", |v| match v {
                "topic" => Some(lapin::ExchangeKind::Topic),
                "direct" => Some(lapin::ExchangeKind::Direct),
                "fanout" => Some(lapin::ExchangeKind::Fanout),
                "headers" => Some(lapin::ExchangeKind::Headers),
                _ => None,
            })?
        {
            builder.exchange_kind = kind;
        }
        if let Some(exchange) = query.take("exchange") {
            builder = builder.exchange(exchange);
        }
        if let Some(routing_key) = query.take("routing_key") {
            builder = builder.routing_key(routing_key);
        }
        if let Some(timeout) = query.take_millis("confirm_timeout_ms")? {
            builder = builder.confirm_timeout(timeout);
        }
        if let Some(timeout) = query.take_millis("connect_timeout_ms")? {
            builder = builder.connect_timeout(timeout);
        }
        if let Some(max) = query.take_parsed("max_message_bytes", "a number of bytes", |v| v.parse().ok())? {
            builder = builder.max_message_bytes(max);
        }
        query.finish(&[
            "exchange",
            "routing_key",
            "source",
            "schema_base",
            "mode",
            "confirm_timeout_ms",
            "connect_timeout_ms",
            "max_message_bytes",
            "exchange_type",
            "tls_ca",
            "tls_cert",
            "tls_key",
            "password_file",
            "password_env",
        ])?;
        builder.build()
    }

    /// Connects now instead of at the first publish, and checks that the exchange exists, so that a relay learns
    /// at start whether it can publish at all (`outbox relay` does this before it reads anything). The connection
    /// is kept for the first batch.
    ///
    /// # Errors
    ///
    /// [`Error::Unreachable`] when the broker cannot be reached (connection refused, timeout: try again later),
    /// [`Error::Refused`] when it refuses the credentials or the vhost, the exchange does not exist, or the user
    /// has no write permission on it.
    pub async fn connect(&self) -> Result<()> {
        let target = || format!("RabbitMQ at {}", masked(&self.url));
        let link = match tokio::time::timeout(self.connect_timeout, self.open()).await {
            Ok(Ok(link)) => link,
            Ok(Err(error)) if refuses(&error) => {
                return Err(Error::Refused { target: target(), reason: describe(&error) })
            }
            Ok(Err(error)) => return Err(Error::Unreachable { target: target(), reason: describe(&error) }),
            Err(_) => return Err(Error::Unreachable { target: target(), reason: "timed out".to_owned() }),
        };
        if !self.exchange.is_empty() {
            // A passive declare fails (and closes its channel) when the exchange does not exist.
            let passive = lapin::options::ExchangeDeclareOptions { passive: true, ..Default::default() };
            let check = async {
                let channel = link.connection.create_channel().await?;
                let mut declared = channel
                    .exchange_declare(
                        self.exchange.as_str().into(),
                        self.exchange_kind.clone(),
                        passive,
                        FieldTable::default(),
                    )
                    .await;
                let missing = matches!(&declared, Err(error) if is_not_found(error));
                if missing && self.create_destinations {
                    let durable = lapin::options::ExchangeDeclareOptions { durable: true, ..Default::default() };
                    let channel = link.connection.create_channel().await?;
                    declared = channel
                        .exchange_declare(
                            self.exchange.as_str().into(),
                            self.exchange_kind.clone(),
                            durable,
                            FieldTable::default(),
                        )
                        .await;
                    if declared.is_ok() {
                        tracing::info!(exchange = %self.exchange, "declared the RabbitMQ exchange");
                        let _ = channel.close(200, "declared".into()).await;
                    }
                } else if declared.is_ok() {
                    let _ = channel.close(200, "checked".into()).await;
                }
                declared
            };
            match tokio::time::timeout(self.connect_timeout, check).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) if refuses(&error) => {
                    return Err(Error::Refused {
                        target: target(),
                        reason: format!(
                            "cannot use the exchange `{}` (declare it, or start with `--create-destinations`): {}",
                            self.exchange,
                            describe(&error)
                        ),
                    });
                }
                Ok(Err(error)) => return Err(Error::Unreachable { target: target(), reason: describe(&error) }),
                Err(_) => return Err(Error::Unreachable { target: target(), reason: "timed out".to_owned() }),
            }
            match tokio::time::timeout(self.connect_timeout, self.check_write_permission(&link)).await {
                Ok(Ok(())) => {}
                Ok(Err(reason)) => return Err(Error::Refused { target: target(), reason }),
                Err(_) => return Err(Error::Unreachable { target: target(), reason: "timed out".to_owned() }),
            }
        }
        self.link.put(link).await;
        Ok(())
    }

    /// Checks that the user may publish to the exchange (write permission on it in the vhost) without publishing.
    /// An `exchange.unbind` is checked in this order: write permission on its destination, then that neither end
    /// is the default exchange, then the rest. Unbinding the exchange from the default exchange is therefore
    /// refused either for want of write permission or, once that passed, as an operation on the default exchange;
    /// it never changes anything.
    async fn check_write_permission(&self, link: &Link) -> std::result::Result<(), String> {
        let unbind = async {
            let channel = link.connection.create_channel().await?;
            let key = format!("outbox-relay.write-check.{}", uuid::Uuid::now_v7().simple());
            channel
                .exchange_unbind(
                    self.exchange.as_str().into(),
                    "".into(),
                    key.into(),
                    lapin::options::ExchangeUnbindOptions::default(),
                    FieldTable::default(),
                )
                .await?;
            let _ = channel.close(200, "checked".into()).await;
            Ok::<(), lapin::Error>(())
        };
        match unbind.await {
            Err(error) if is_write_refused(&error) => Err(format!(
                "the user may not publish to the exchange `{}` (grant it write permission in the vhost): {}",
                self.exchange,
                describe(&error)
            )),
            _ => Ok(()),
        }
    }

    /// Opens a connection and its first confirm-mode channel.
    async fn open(&self) -> std::result::Result<Arc<Link>, lapin::Error> {
        let properties = ConnectionProperties::default()
            .with_connection_name(concat!("outbox-relay/", env!("CARGO_PKG_VERSION")).into());
        let connection = lapin::DefaultConnectionBuilder::new()?
            .with_uri_str(self.uri.clone())
            .with_properties(properties)
            .with_tls_config(self.tls.clone())
            .connect()
            .await?;
        let link = Link { connection, idle: std::sync::Mutex::new(Vec::new()) };
        let channel = link.channel().await?;
        link.give_back(channel);
        Ok(Arc::new(link))
    }

    /// [`open`](Self::open) for a publish: the error is a short description for a transient outcome.
    async fn reconnect(&self) -> std::result::Result<Arc<Link>, String> {
        match tokio::time::timeout(self.connect_timeout, self.open()).await {
            Ok(Ok(link)) => Ok(link),
            Ok(Err(error)) => Err(format!("cannot connect to RabbitMQ: {}", describe(&error))),
            Err(_) => Err("connecting to RabbitMQ timed out".to_owned()),
        }
    }

    /// The message's properties; a permanent failure for what AMQP cannot carry: its `type` and header names are
    /// short strings (at most 255 bytes), which the client's conversion would otherwise panic on.
    fn properties(&self, message: &Message) -> std::result::Result<BasicProperties, Outcome> {
        let too_long = |what: &str| {
            Outcome::permanent(format!("{what} is longer than 255 bytes, the most an AMQP short string holds"))
        };
        if message.event_type.len() > MAX_SHORT_STRING {
            return Err(too_long("the event type"));
        }
        let mut headers = FieldTable::default();
        for (name, value) in self.envelope.headers(message, Binding::Amqp) {
            if name.len() > MAX_SHORT_STRING {
                return Err(too_long("a header name"));
            }
            headers.insert(name.into(), AMQPValue::LongString(value.into()));
        }
        let timestamp = u64::try_from(message.created_at.unix_timestamp()).unwrap_or(0);
        Ok(BasicProperties::default()
            .with_message_id(message.id.to_string().into())
            .with_content_type(self.envelope.content_type().into())
            .with_delivery_mode(2)
            .with_type(message.event_type.as_str().into())
            .with_timestamp(timestamp)
            .with_app_id("outbox-relay".into())
            .with_headers(headers))
    }

    /// Checks what can be checked before sending: the routing key, the properties and the size.
    fn prepare(&self, message: &Message) -> std::result::Result<(String, Vec<u8>, BasicProperties), Outcome> {
        let routing_key = self.routing_key.render(message).map_err(Outcome::permanent)?;
        let properties = self.properties(message)?;
        let body = self.envelope.body(message);
        if self.max_message_bytes.is_some_and(|max| body.len() > max) {
            return Err(Outcome::permanent(format!("message too large: {} bytes", body.len())));
        }
        Ok((routing_key, body, properties))
    }

    /// Publishes `messages` on a channel of `link` of their own, all first, then waits for their confirms. `None`
    /// for a message whose fate is unknown because the channel failed. A confirm that timed out resets the link:
    /// the connection may be half open (a network that drops packets), where every later batch would wait out the
    /// confirm timeout until the heartbeat notices; and a channel still owing confirms is never given to another
    /// batch, which would be handed its returned messages.
    ///
    /// Opening the channel is bounded by the confirm timeout, and sending with the confirms by twice that: a broker
    /// that stops reading (a resource alarm blocks publishers) or a half-open connection fails the batch as
    /// transient and resets the link, rather than holding it until the relay's publish timeout aborts it, batch
    /// after batch.
    async fn publish_on(&self, link: &Link, messages: &[&Message]) -> (Vec<Option<Outcome>>, Option<lapin::Error>) {
        let stalled = |what: &str, after: Duration| {
            let reason = format!(
                "RabbitMQ did not {what} within {after:?} (a resource alarm blocking publishers, or a half-open \
                 connection)"
            );
            vec![Some(Outcome::transient(reason)); messages.len()]
        };
        let channel = match tokio::time::timeout(self.confirm_timeout, link.channel()).await {
            Ok(Ok(channel)) => channel,
            Ok(Err(error)) => return (vec![None; messages.len()], Some(error)),
            Err(_) => {
                self.link.reset().await;
                return (stalled("open a channel", self.confirm_timeout), None);
            }
        };
        let budget = self.confirm_timeout.saturating_mul(2);
        let Ok((outcomes, failure, timed_out)) =
            tokio::time::timeout(budget, self.publish_on_channel(&channel, messages)).await
        else {
            self.link.reset().await;
            return (stalled("take and confirm the messages", budget), None);
        };
        if timed_out {
            self.link.reset().await;
        } else if failure.is_none() {
            link.give_back(channel);
        }
        (outcomes, failure)
    }

    /// [`publish_on`](Self::publish_on) with the channel; `true` when a confirm timed out.
    async fn publish_on_channel(
        &self,
        channel: &lapin::Channel,
        messages: &[&Message],
    ) -> (Vec<Option<Outcome>>, Option<lapin::Error>, bool) {
        let mut confirms = Vec::with_capacity(messages.len());
        let mut failure = None;
        for message in messages {
            if failure.is_some() {
                confirms.push(None);
                continue;
            }
            let (routing_key, body, properties) = match self.prepare(message) {
                Ok(prepared) => prepared,
                Err(outcome) => {
                    confirms.push(Some(Err(outcome)));
                    continue;
                }
            };
            let options = BasicPublishOptions { mandatory: true, immediate: false };
            let sent = channel
                .basic_publish(self.exchange.as_str().into(), routing_key.as_str().into(), options, &body, properties)
                .await;
            match sent {
                Ok(confirm) => confirms.push(Some(Ok((confirm, routing_key)))),
                Err(error) => {
                    failure = Some(error);
                    confirms.push(None);
                }
            }
        }
        // Wait for every confirm first. The client hands a returned (unroutable) message to whichever confirm of the
        // channel it completes next, which with a multiple-ack is not necessarily the message's own: a returned
        // message is matched to its event by `message_id`, the event id.
        let deadline = tokio::time::Instant::now() + self.confirm_timeout;
        let mut confirmed = Vec::with_capacity(confirms.len());
        let mut returned: HashMap<String, String> = HashMap::new();
        let mut timed_out = false;
        for confirm in confirms {
            let confirmation = match confirm {
                None => None,
                Some(Err(outcome)) => Some(Err(outcome)),
                Some(Ok((confirm, routing_key))) => match tokio::time::timeout_at(deadline, confirm).await {
                    Err(_) => {
                        timed_out = true;
                        Some(Err(Outcome::transient("RabbitMQ confirm timed out")))
                    }
                    Ok(Ok(confirmation)) => {
                        if let Confirmation::Ack(Some(message)) | Confirmation::Nack(Some(message)) = &confirmation {
                            if let Some(id) = message.delivery.properties.message_id() {
                                returned
                                    .insert(id.to_string(), format!("{} {}", message.reply_code, message.reply_text));
                            }
                        }
                        Some(Ok((confirmation, routing_key)))
                    }
                    Ok(Err(error)) => {
                        // The broker's own reason for closing the channel (a soft error: message too large,
                        // exchange gone) wins over what the client reported for the messages sent after it (a
                        // channel no longer open), which would be taken for a lost connection.
                        if failure.as_ref().is_none_or(|kept| !kept.is_amqp_soft_error() && error.is_amqp_soft_error())
                        {
                            failure = Some(error);
                        }
                        None
                    }
                },
            };
            confirmed.push(confirmation);
        }
        let outcomes = messages
            .iter()
            .zip(confirmed)
            .map(|(message, confirmation)| {
                let (confirmation, routing_key) = match confirmation? {
                    Err(outcome) => return Some(outcome),
                    Ok(confirmed) => confirmed,
                };
                if let Some(reply) = returned.get(&message.id.to_string()) {
                    return Some(Outcome::transient(format!(
                        "RabbitMQ returned the message as unroutable ({reply}): no queue bound to exchange `{}` for \
                         routing key `{routing_key}` took it (none is bound, or the queue is not available)",
                        self.exchange
                    )));
                }
                Some(match confirmation {
                    Confirmation::Ack(_) => Outcome::Published,
                    Confirmation::Nack(_) => Outcome::transient("RabbitMQ refused the message (nack)"),
                    Confirmation::NotRequested => Outcome::transient("RabbitMQ channel not in confirm mode"),
                })
            })
            .collect();
        (outcomes, failure, timed_out)
    }
}

impl AmqpBuilder {
    /// The exchange to publish to (default `outbox`; `""` is the default exchange, which routes by queue name).
    /// The publisher does not declare it.
    pub fn exchange(mut self, exchange: impl Into<String>) -> Self {
        self.exchange = exchange.into();
        self
    }

    /// The routing key template (default `{event_type}`); see [`Template`].
    pub fn routing_key(mut self, routing_key: impl Into<String>) -> Self {
        self.routing_key = routing_key.into();
        self
    }

    /// The CloudEvents settings (source, dataschema base, content mode).
    pub fn cloud_events(mut self, envelope: CloudEvents) -> Self {
        self.envelope = envelope;
        self
    }

    /// The password of the URL's user (instead of one in the URL).
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(Secret::new(password));
        self
    }

    /// Trusts the certificate authorities of this PEM file instead of the system's (`amqps://` only).
    pub fn tls_ca(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.tls.ca = Some(path.into());
        self
    }

    /// Presents this PEM client certificate and key (`amqps://` only).
    pub fn tls_client_certificate(
        mut self,
        cert: impl Into<std::path::PathBuf>,
        key: impl Into<std::path::PathBuf>,
    ) -> Self {
        self.tls.client = Some((cert.into(), key.into()));
        self
    }

    /// The type of the exchange [`create_destinations`](Self::create_destinations) declares (default `topic`).
    pub fn exchange_kind(mut self, kind: lapin::ExchangeKind) -> Self {
        self.exchange_kind = kind;
        self
    }

    /// Whether [`AmqpPublisher::connect`] declares a missing exchange (durable) instead of reporting it (default:
    /// no).
    pub fn create_destinations(mut self, create: bool) -> Self {
        self.create_destinations = create;
        self
    }

    /// How long to wait for the broker's confirms of a batch (default 10 s); opening a channel may take as long, and
    /// a batch's sending and confirms together twice as long, before the batch fails as transient and the
    /// connection is reopened. Keep twice this below the relay's publish timeout.
    pub fn confirm_timeout(mut self, timeout: Duration) -> Self {
        self.confirm_timeout = timeout;
        self
    }

    /// How long opening a connection may take (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Refuses (permanently) messages whose body is larger, before sending them. The broker enforces its own
    /// `max_message_size` too.
    pub fn max_message_bytes(mut self, max: usize) -> Self {
        self.max_message_bytes = Some(max);
        self
    }

    /// Validates the settings and builds the publisher. It connects at its first publish.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSink`] when the URL is not `amqp://host...`, the exchange name or routing key template is
    /// invalid, or a timeout is zero.
    pub fn build(self) -> Result<AmqpPublisher> {
        crate::crypto_provider::install_default();
        let url = self.url;
        let invalid = |reason: &str| Error::InvalidSink { sink: masked(&url), reason: reason.to_owned() };
        if !matches!(url.scheme(), "amqp" | "amqps") {
            return Err(invalid("a RabbitMQ URL is `amqp://user:password@host[:port]/vhost` or `amqps://...` (TLS)"));
        }
        if self.tls.any() && url.scheme() != "amqps" {
            return Err(invalid("`tls_ca`, `tls_cert` and `tls_key` need TLS: use `amqps://`"));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(invalid("a RabbitMQ URL needs a host, e.g. `amqp://guest:guest@127.0.0.1:5672/%2f`"));
        }
        if self.exchange.len() > 127
            || !self.exchange.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
        {
            return Err(invalid("an exchange name is at most 127 of `a-z A-Z 0-9 - _ . :`"));
        }
        let routing_key =
            Template::parse(&self.routing_key, Naming::AmqpRoutingKey).map_err(|reason| invalid(&reason))?;
        if self.confirm_timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err(invalid("RabbitMQ timeouts must be more than zero"));
        }
        // The connection URI: the sink URL without its query (the options are ours, not lapin's).
        let mut uri = url.0.clone();
        uri.set_query(None);
        if let Some(password) = &self.password {
            if url.password().is_some() {
                return Err(invalid("give the password in the URL or in `password_file`/`password_env`, not both"));
            }
            let encoded: String = url::form_urlencoded::byte_serialize(password.expose().as_bytes()).collect();
            uri.set_password(Some(&encoded)).map_err(|()| invalid("a RabbitMQ URL needs a host for a password"))?;
        }
        let uri = uri.to_string();
        let read = |path: &std::path::Path| {
            std::fs::read(path).map_err(|error| invalid(&format!("cannot read {}: {}", path.display(), error.kind())))
        };
        let mut tls = lapin::tcp::OwnedTLSConfig::default();
        if let Some(ca) = &self.tls.ca {
            tls.cert_chain = Some(String::from_utf8_lossy(&read(ca)?).into_owned());
        }
        if let Some((cert, key)) = &self.tls.client {
            tls.identity = Some(lapin::tcp::OwnedIdentity::PKCS8 { pem: read(cert)?, key: read(key)? });
        }
        uri.parse::<lapin::uri::AMQPUri>().map_err(|reason| invalid(&format!("malformed AMQP URI: {reason}")))?;
        Ok(AmqpPublisher {
            url: url.0,
            uri,
            exchange: self.exchange,
            routing_key,
            envelope: self.envelope,
            confirm_timeout: self.confirm_timeout,
            connect_timeout: self.connect_timeout,
            max_message_bytes: self.max_message_bytes,
            tls,
            exchange_kind: self.exchange_kind,
            create_destinations: self.create_destinations,
            link: Reconnect::new(),
        })
    }
}

/// The longest AMQP short string (a message's `type`, a header's name, a routing key), in bytes.
const MAX_SHORT_STRING: usize = 255;

impl Publisher for AmqpPublisher {
    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        let link = match self.link.get(|| self.reconnect()).await {
            Ok(link) => link,
            Err(error) => return vec![Outcome::unavailable(error); batch.len()],
        };
        let all: Vec<&Message> = batch.iter().collect();
        let (mut outcomes, failure) = self.publish_on(&link, &all).await;
        let Some(failure) = failure else {
            return outcomes
                .into_iter()
                .map(|o| o.unwrap_or_else(|| Outcome::transient("RabbitMQ publish failed")))
                .collect();
        };
        // The channel failed. A channel-level (soft) error closes only the channel and names no message: publish
        // the unsettled ones again one at a time, each on a fresh channel after a failure, to tell the culprit
        // from the innocent. Any other error lost the connection.
        if !failure.is_amqp_soft_error() {
            self.link.reset().await;
            let reason = format!("RabbitMQ connection lost: {}", describe(&failure));
            return outcomes.into_iter().map(|o| o.unwrap_or_else(|| Outcome::transient(&reason))).collect();
        }
        for (index, message) in batch.iter().enumerate() {
            if outcomes[index].is_some() {
                continue;
            }
            let link = match self.link.get(|| self.reconnect()).await {
                Ok(link) => link,
                Err(error) => {
                    outcomes[index] = Some(Outcome::unavailable(error));
                    continue;
                }
            };
            let (mut single, failure) = self.publish_on(&link, &[message]).await;
            outcomes[index] = match (single.pop().flatten(), failure) {
                (Some(outcome), _) => Some(outcome),
                (None, Some(error)) => {
                    if !error.is_amqp_soft_error() {
                        self.link.reset().await;
                    }
                    Some(outcome_of_error(&error))
                }
                (None, None) => Some(Outcome::transient("RabbitMQ publish failed")),
            };
        }
        outcomes.into_iter().map(|o| o.unwrap_or_else(|| Outcome::transient("RabbitMQ publish failed"))).collect()
    }
}

/// The relay's reading of the error that closed the channel while one message was in flight.
fn outcome_of_error(error: &lapin::Error) -> Outcome {
    let code = match error.kind() {
        lapin::ErrorKind::ProtocolError(amqp) => match amqp.kind() {
            AMQPErrorKind::Soft(soft) => Some(soft.clone()),
            AMQPErrorKind::Hard(_) => None,
        },
        _ => None,
    };
    let description = describe(error);
    match code {
        Some(
            AMQPSoftError::PRECONDITIONFAILED
            | AMQPSoftError::CONTENTTOOLARGE
            | AMQPSoftError::ACCESSREFUSED
            | AMQPSoftError::NOTFOUND
            | AMQPSoftError::NOROUTE,
        ) => Outcome::permanent(format!("RabbitMQ refused the message: {description}")),
        _ => Outcome::transient(format!("RabbitMQ publish failed: {description}")),
    }
}

/// Whether an error of opening a connection or checking the exchange means the broker refuses the relay's settings
/// (credentials, vhost, permissions, a missing exchange), which retrying cannot fix.
fn refuses(error: &lapin::Error) -> bool {
    match error.kind() {
        lapin::ErrorKind::ProtocolError(amqp) => matches!(
            amqp.kind(),
            AMQPErrorKind::Soft(AMQPSoftError::ACCESSREFUSED | AMQPSoftError::NOTFOUND)
                | AMQPErrorKind::Hard(lapin::protocol::AMQPHardError::NOTALLOWED)
        ),
        lapin::ErrorKind::AuthProviderError(_) => true,
        lapin::ErrorKind::IOError(io) => is_tls_refusal(io.as_ref()),
        _ => false,
    }
}

/// Whether the write-permission check's `exchange.unbind` was refused before it reached the default exchange:
/// `403 ACCESS_REFUSED - access to exchange '...' ... refused`, not `... operation not permitted on the default
/// exchange`.
fn is_write_refused(error: &lapin::Error) -> bool {
    matches!(
        error.kind(),
        lapin::ErrorKind::ProtocolError(amqp) if matches!(amqp.kind(), AMQPErrorKind::Soft(AMQPSoftError::ACCESSREFUSED))
            && !amqp.get_message().as_str().contains("default exchange")
    )
}

/// Whether a declare failed because the exchange does not exist (`404 NOT_FOUND`).
fn is_not_found(error: &lapin::Error) -> bool {
    matches!(
        error.kind(),
        lapin::ErrorKind::ProtocolError(amqp) if matches!(amqp.kind(), AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND))
    )
}

/// A one-line description of a lapin error (never the payload: lapin errors carry codes and broker texts). An
/// I/O error is described by its innermost cause; a refused TLS handshake says so (an untrusted certificate).
fn describe(error: &lapin::Error) -> String {
    match error.kind() {
        lapin::ErrorKind::ProtocolError(amqp) => format!("{} {}", amqp.get_id(), amqp.get_message()),
        lapin::ErrorKind::IOError(io) if is_tls_refusal(io.as_ref()) => {
            format!("TLS handshake failed: {}", innermost(io.as_ref()))
        }
        lapin::ErrorKind::IOError(io) => format!("I/O error: {}", innermost(io.as_ref())),
        other => format!("{other:?}").lines().next().unwrap_or_default().to_owned(),
    }
}

impl fmt::Display for AmqpPublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&masked(&self.url))
    }
}

impl fmt::Debug for AmqpPublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AmqpPublisher")
            .field("url", &masked(&self.url))
            .field("exchange", &self.exchange)
            .field("routing_key", &self.routing_key.as_str())
            .field("envelope", &self.envelope)
            .finish_non_exhaustive()
    }
}

impl AmqpPublisher {
    /// What this publisher puts on the wire, for the AsyncAPI document of its sink: the channel address is the
    /// routing key, on the exchange its channel binding names.
    pub(crate) fn shape(&self) -> super::wire::Shape<'_> {
        let kind = match &self.exchange_kind {
            lapin::ExchangeKind::Direct => "direct",
            lapin::ExchangeKind::Fanout => "fanout",
            lapin::ExchangeKind::Headers => "headers",
            lapin::ExchangeKind::Custom(_) | lapin::ExchangeKind::Topic => "topic",
        };
        let vhost = self.url.path().trim_start_matches('/');
        super::wire::Shape {
            protocol: if self.url.scheme() == "amqps" { "amqps" } else { "amqp" },
            destination: &self.routing_key,
            binding: Binding::Amqp,
            envelope: &self.envelope,
            own_headers: &[],
            pathname: Some(format!("/{}", if vhost.is_empty() { "%2f" } else { vhost })),
            keyed_by_aggregate: false,
            channel_bindings: Some(serde_json::json!({
                "amqp": {
                    "is": "routingKey",
                    "exchange": { "name": self.exchange, "type": kind, "durable": true, "autoDelete": false },
                    "bindingVersion": "0.3.0"
                }
            })),
            description: "The outbox relay publishes each event persistent, with publisher confirms; the properties `message_id` (the event id), `type` and `content_type` are set.",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::AmqpPublisher;

    #[test]
    fn urls_are_validated_and_passwords_never_shown() {
        for (url, reason) in [
            ("amqp://u:hunter2@127.0.0.1/%2f?exchange=a b", "exchange name"),
            ("amqp://u:hunter2@127.0.0.1/%2f?routing_key={nope}", "unknown placeholder"),
            ("amqp://u:hunter2@127.0.0.1/%2f?confirm_timeout_ms=x", "milliseconds"),
            ("amqp://u:hunter2@127.0.0.1/%2f?queue=x", "unknown option `queue`"),
        ] {
            let error = AmqpPublisher::from_url(&url.parse().unwrap()).unwrap_err().to_string();
            assert!(error.contains(reason), "{url}: {error}");
            assert!(!error.contains("hunter2") && !error.contains('\n'), "{error}");
        }
        let publisher = AmqpPublisher::from_url(&"amqp://u:hunter2@127.0.0.1/%2f".parse().unwrap()).unwrap();
        assert_eq!(publisher.uri, "amqp://u:hunter2@127.0.0.1/%2f");
        assert!(!format!("{publisher:?} {publisher}").contains("hunter2"));
    }
}
