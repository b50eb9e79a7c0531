//! NATS JetStream (`nats://` sinks): each event is published to a subject and counts as published once the stream
//! acknowledged it (the `PubAck`); `Nats-Msg-Id` is the event id, so the stream drops a republished event within
//! its duplicate window.

use std::fmt;
use std::time::Duration;

use async_nats::jetstream::context::PublishErrorKind;
use async_nats::HeaderMap;

use super::cloudevents::{Binding, CloudEvents};
use super::destination::{masked, Naming, Query, Reconnect, Template};
use super::{Message, Outcome, Publisher};
use crate::{Error, Result};

/// The JetStream error code of "message size exceeds maximum allowed".
const STREAM_MESSAGE_TOO_LARGE: u64 = 10054;

/// Publishes events to NATS JetStream.
///
/// Every event goes to the subject rendered from a [`Template`] (default `outbox.{event_type}`), with the payload
/// as the body, CloudEvents attributes as `ce-` headers (see [`CloudEvents`]), `traceparent`, and `Nats-Msg-Id`
/// set to the event id. A stream must capture the subjects (for example `outbox.>`); its ordering is the order
/// in which the relay publishes, which keeps each aggregate's events in commit order.
///
/// An event is published when JetStream acknowledged it (a duplicate acknowledgement counts: the stream already
/// has it). Too large a message is a permanent failure; a timeout, a lost connection or a missing stream is
/// transient. The client reconnects by itself; while it is disconnected a publish fails at once.
///
/// # Example
///
/// ```
/// let url = "nats://relay:secret@127.0.0.1:4222?subject=shop.{event_type}".parse()?;
/// let publisher = outbox_relay::NatsPublisher::from_url(&url)?;
/// assert_eq!(publisher.to_string(), "nats://relay:***@127.0.0.1:4222?subject=shop.{event_type}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct NatsPublisher {
    url: url::Url,
    server: String,
    credentials: Option<(String, String)>,
    token: Option<String>,
    subject: Template,
    envelope: CloudEvents,
    ack_timeout: Duration,
    connect_timeout: Duration,
    context: Reconnect<(async_nats::Client, async_nats::jetstream::Context)>,
}

/// Settings of a [`NatsPublisher`], validated by [`build`](Self::build).
#[derive(Debug, Clone)]
#[must_use]
pub struct NatsBuilder {
    url: url::Url,
    subject: String,
    envelope: CloudEvents,
    ack_timeout: Duration,
    connect_timeout: Duration,
}

impl NatsPublisher {
    /// Starts the settings of a publisher to the server at `url` (`nats://[user:password@]host[:port]`, or a
    /// token as the user name).
    pub fn builder(url: url::Url) -> NatsBuilder {
        NatsBuilder {
            url,
            subject: "outbox.{event_type}".to_owned(),
            envelope: CloudEvents::new(),
            ack_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
        }
    }

    /// A publisher from a sink URL:
    /// `nats://[user:password@]host[:port]?subject=outbox.{event_type}&source=...&schema_base=...&mode=binary&ack_timeout_ms=5000`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSink`] for a malformed URL, an unknown option or an invalid subject template.
    pub fn from_url(url: &url::Url) -> Result<Self> {
        let mut query = Query::new(url)?;
        let mut builder = Self::builder(url.clone()).cloud_events(CloudEvents::from_query(&mut query)?);
        if let Some(subject) = query.take("subject") {
            builder = builder.subject(subject);
        }
        if let Some(timeout) = query.take_millis("ack_timeout_ms")? {
            builder = builder.ack_timeout(timeout);
        }
        if let Some(timeout) = query.take_millis("connect_timeout_ms")? {
            builder = builder.connect_timeout(timeout);
        }
        query.finish(&["subject", "source", "schema_base", "mode", "ack_timeout_ms", "connect_timeout_ms"])?;
        builder.build()
    }

    /// Connects now instead of at the first publish, so that a relay learns at start whether the server takes it
    /// (`outbox relay` does this before it claims anything). The connection is kept for the first batch.
    ///
    /// # Errors
    ///
    /// [`Error::Unreachable`] when the server cannot be reached (connection refused, timeout: try again later),
    /// [`Error::Refused`] when it refuses the credentials or the TLS setup.
    pub async fn connect(&self) -> Result<()> {
        let target = || format!("NATS at {}", masked(&self.url));
        match self.open().await {
            Ok(connected) => {
                self.context.put(connected).await;
                Ok(())
            }
            Err(Some(error)) => {
                use async_nats::ConnectErrorKind as Kind;
                let reason = error.kind().to_string();
                match error.kind() {
                    Kind::Authentication | Kind::AuthorizationViolation | Kind::Tls => {
                        Err(Error::Refused { target: target(), reason })
                    }
                    _ => Err(Error::Unreachable { target: target(), reason }),
                }
            }
            Err(None) => Err(Error::Unreachable { target: target(), reason: "timed out".to_owned() }),
        }
    }

    /// Opens a connection and its JetStream context; `Err(None)` when it timed out.
    async fn open(
        &self,
    ) -> std::result::Result<(async_nats::Client, async_nats::jetstream::Context), Option<async_nats::ConnectError>>
    {
        let mut options = async_nats::ConnectOptions::new()
            .connection_timeout(self.connect_timeout)
            .name(concat!("outbox-relay/", env!("CARGO_PKG_VERSION")));
        if let Some((user, password)) = &self.credentials {
            options = options.user_and_password(user.clone(), password.clone());
        } else if let Some(token) = &self.token {
            options = options.token(token.clone());
        }
        let connecting = options.connect(self.server.as_str());
        let client = match tokio::time::timeout(self.connect_timeout + Duration::from_secs(1), connecting).await {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => return Err(Some(error)),
            Err(_) => return Err(None),
        };
        let mut context = async_nats::jetstream::new(client.clone());
        context.set_timeout(self.ack_timeout);
        Ok((client, context))
    }

    /// [`open`](Self::open) for a publish: the error is a short description for a transient outcome.
    async fn reconnect(&self) -> std::result::Result<(async_nats::Client, async_nats::jetstream::Context), String> {
        match self.open().await {
            Ok(connected) => Ok(connected),
            Err(Some(error)) => Err(format!("cannot connect to NATS: {}", error.kind())),
            Err(None) => Err("connecting to NATS timed out".to_owned()),
        }
    }

    fn headers(&self, message: &Message) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", message.id.to_string().as_str());
        headers.insert("content-type", self.envelope.content_type());
        for (name, value) in self.envelope.headers(message, Binding::Nats) {
            headers.insert(name.as_str(), value.as_str());
        }
        headers
    }
}

impl NatsBuilder {
    /// The subject template (default `outbox.{event_type}`); see [`Template`].
    pub fn subject(mut self, subject: impl Into<String>) -> Self {
        self.subject = subject.into();
        self
    }

    /// The CloudEvents settings (source, dataschema base, content mode).
    pub fn cloud_events(mut self, envelope: CloudEvents) -> Self {
        self.envelope = envelope;
        self
    }

    /// How long to wait for JetStream's acknowledgement of a message (default 5 s). Keep it below the relay's
    /// lease.
    pub fn ack_timeout(mut self, timeout: Duration) -> Self {
        self.ack_timeout = timeout;
        self
    }

    /// How long one connection attempt may take (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Validates the settings and builds the publisher. It connects at its first publish.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSink`] when the URL is not `nats://host[:port]`, the subject template is invalid, or a
    /// timeout is zero.
    pub fn build(self) -> Result<NatsPublisher> {
        let url = self.url;
        let invalid = |reason: &str| Error::InvalidSink { sink: masked(&url), reason: reason.to_owned() };
        if url.scheme() != "nats" {
            return Err(invalid("a NATS URL is `nats://host[:port]`"));
        }
        let Some(host) = url.host_str().filter(|host| !host.is_empty()) else {
            return Err(invalid("a NATS URL needs a host, e.g. `nats://127.0.0.1:4222`"));
        };
        if !matches!(url.path(), "" | "/") {
            return Err(invalid("a NATS URL has no path; name the subject with `?subject=...`"));
        }
        let subject = Template::parse(&self.subject, Naming::NatsSubject).map_err(|reason| invalid(&reason))?;
        if self.ack_timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err(invalid("NATS timeouts must be more than zero"));
        }
        let server = format!("nats://{host}:{}", url.port().unwrap_or(4222));
        let user = percent_decoded(url.username());
        let (credentials, token) = match (user.is_empty(), url.password()) {
            (false, Some(password)) => (Some((user, percent_decoded(password))), None),
            (false, None) => (None, Some(user)),
            (true, _) => (None, None),
        };
        Ok(NatsPublisher {
            url,
            server,
            credentials,
            token,
            subject,
            envelope: self.envelope,
            ack_timeout: self.ack_timeout,
            connect_timeout: self.connect_timeout,
            context: Reconnect::new(),
        })
    }
}

fn percent_decoded(value: &str) -> String {
    url::form_urlencoded::parse(format!("x={value}").as_bytes())
        .next()
        .map(|(_, value)| value.into_owned())
        .unwrap_or_default()
}

impl Publisher for NatsPublisher {
    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        let (client, context) = match self.context.get(|| self.reconnect()).await {
            Ok(connected) => connected,
            Err(error) => return vec![Outcome::transient(error); batch.len()],
        };
        if client.connection_state() != async_nats::connection::State::Connected {
            return vec![Outcome::transient("NATS connection lost (reconnecting)"); batch.len()];
        }
        // Send every message first (in order, over one connection), then wait for the acknowledgements.
        let mut pending = Vec::with_capacity(batch.len());
        for message in batch {
            let subject = match self.subject.render(message) {
                Ok(subject) => subject,
                Err(reason) => {
                    pending.push(Err(Outcome::permanent(reason)));
                    continue;
                }
            };
            let body = self.envelope.body(message);
            match context.publish_with_headers(subject.clone(), self.headers(message), body.into()).await {
                Ok(ack) => pending.push(Ok((ack, subject))),
                Err(error) => pending.push(Err(outcome_of(&error, &subject))),
            }
        }
        let waits = pending.into_iter().map(|sent| async move {
            match sent {
                Ok((ack, subject)) => match ack.await {
                    Ok(_) => Outcome::Published,
                    Err(error) => outcome_of(&error, &subject),
                },
                Err(outcome) => outcome,
            }
        });
        futures_util::future::join_all(waits).await
    }
}

/// The relay's reading of a JetStream publish error to `subject` (rendered from the event's type and aggregate
/// type: never from the payload).
fn outcome_of(error: &async_nats::jetstream::context::PublishError, subject: &str) -> Outcome {
    match error.kind() {
        PublishErrorKind::MaxPayloadExceeded => Outcome::permanent("message too large for the NATS server"),
        PublishErrorKind::TimedOut => Outcome::transient("NATS JetStream acknowledgement timed out"),
        PublishErrorKind::StreamNotFound => {
            Outcome::transient(format!("no JetStream stream captures the subject `{subject}` (create one)"))
        }
        PublishErrorKind::BrokenPipe => Outcome::transient("NATS connection lost"),
        PublishErrorKind::MaxAckPending => Outcome::transient("too many NATS acknowledgements pending"),
        _ => {
            let api = std::error::Error::source(error)
                .and_then(|source| source.downcast_ref::<async_nats::jetstream::Error>())
                .map(|api| (api.error_code().0, api.to_string()));
            match api {
                Some((code, description)) if code == STREAM_MESSAGE_TOO_LARGE => {
                    Outcome::permanent(format!("JetStream refused the message: {description}"))
                }
                Some((_, description)) => Outcome::transient(format!("JetStream refused the message: {description}")),
                None => Outcome::transient("NATS publish failed"),
            }
        }
    }
}

impl fmt::Display for NatsPublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&masked(&self.url))
    }
}

impl fmt::Debug for NatsPublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsPublisher")
            .field("url", &masked(&self.url))
            .field("subject", &self.subject.as_str())
            .field("envelope", &self.envelope)
            .field("ack_timeout", &self.ack_timeout)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::NatsPublisher;

    #[test]
    fn urls_are_validated_and_passwords_never_shown() {
        for (url, reason) in [
            ("nats://127.0.0.1:4222?subject=a.*", "wildcards"),
            ("nats://127.0.0.1:4222?subjet=a", "unknown option `subjet`"),
            ("nats://u:hunter2@127.0.0.1:4222/path", "no path"),
            ("nats://127.0.0.1:4222?mode=text", "`mode` is `binary` or `structured`"),
            ("nats://127.0.0.1:4222?ack_timeout_ms=0", "milliseconds above zero"),
        ] {
            let error = NatsPublisher::from_url(&url.parse().unwrap()).unwrap_err().to_string();
            assert!(error.contains(reason), "{url}: {error}");
            assert!(!error.contains("hunter2") && !error.contains('\n'), "{error}");
        }
        let publisher = NatsPublisher::from_url(&"nats://u:hunter2@127.0.0.1".parse().unwrap()).unwrap();
        assert_eq!(publisher.server, "nats://127.0.0.1:4222");
        assert!(!format!("{publisher:?} {publisher}").contains("hunter2"));
    }
}
