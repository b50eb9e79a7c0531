//! Redis Streams (`redis://` sinks): one `XADD` per event, pipelined per batch.

use std::fmt;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::cloudevents::{Binding, CloudEvents};
use super::name_template::{Naming, Template};
use super::reconnect::Reconnect;
use super::secret_source::{take_secret, Secret};
use super::tls_options::{is_tls_refusal, readable, TlsFiles};
use super::url_options::Query;
use super::{Message, Outcome, Publisher};
use crate::error::{Error, Result};
use crate::masked_url::masked_url as masked;

/// Publishes events to Redis streams.
///
/// Every event is appended (`XADD key * field value ...`) to the stream rendered from a [`Template`] (default
/// `outbox.{aggregate_type}`, so one aggregate's events share a stream and keep their commit order), with the
/// fields `content-type`, `data` (the payload, or the structured-mode envelope), the CloudEvents attributes as
/// `ce_`-prefixed fields in binary mode (`ce_id` is the event id: Redis has no deduplication, consumers deduplicate
/// by it; in structured mode the envelope in `data` carries the `id`) and `traceparent`. A batch is one pipeline; an optional `MAXLEN ~ n` trims each stream.
///
/// An event is published when Redis answered its `XADD` (how durable that is depends on the server's `appendonly`
/// and `appendfsync` settings). A connection failure or timeout is transient (the connection is re-established
/// at the next batch, as after a `READONLY` or `MASTERDOWN` answer: a server a failover demoted); a key holding
/// another type (`WRONGTYPE`), a refused permission, or a message over
/// [`max_message_bytes`](RedisBuilder::max_message_bytes) is permanent.
///
/// **TLS**: `rediss://`, with `tls_ca=PATH` (authorities to trust instead of the system's) and
/// `tls_cert=PATH` + `tls_key=PATH` (client certificate); the server's certificate is verified against the host
/// name (a `#insecure` fragment, which would turn that off, is refused). **Authentication**: an ACL user and
/// password in the URL (`rediss://relay:PASSWORD@host`), or the password from `password_file=PATH` /
/// `password_env=VAR` (`rediss://relay@host?password_file=/run/secrets/redis`).
///
/// **Destination**: [`connect`](RedisPublisher::connect) checks connectivity and credentials with a `PING` (a
/// stream is created by its first `XADD`). For a fixed stream name it also checks, without adding anything, that
/// the key holds a stream or nothing (`TYPE`, when the user may run it) and that the server takes this user's
/// `XADD` to it: `XADD key NOMKSTREAM 0-0 ...` goes through Redis's ACL check (`NOPERM`) and its read-only replica
/// check (`READONLY`) and then fails on its ID, which is never valid, before it touches the key. The streams of a
/// template are known only per event and checked by their first publish.
///
/// # Example
///
/// ```
/// let url = "redis://:secret@127.0.0.1:6379/0?stream=events.{aggregate_type}&maxlen=100000".parse()?;
/// let publisher = outbox_relay::RedisPublisher::from_url(&url)?;
/// assert_eq!(publisher.to_string(), "redis://:***@127.0.0.1:6379/0?stream=events.{aggregate_type}&maxlen=100000");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct RedisPublisher {
    url: url::Url,
    client: redis::Client,
    stream: Template,
    envelope: CloudEvents,
    maxlen: Option<u64>,
    max_message_bytes: Option<usize>,
    timeout: Duration,
    connection: Reconnect<ConnectionManager>,
}

/// Settings of a [`RedisPublisher`], validated by [`build`](Self::build).
#[derive(Debug, Clone)]
#[must_use]
pub struct RedisBuilder {
    url: crate::masked_url::MaskedUrl,
    stream: String,
    envelope: CloudEvents,
    maxlen: Option<u64>,
    max_message_bytes: Option<usize>,
    timeout: Duration,
    password: Option<Secret>,
    tls: TlsFiles,
}

impl RedisPublisher {
    /// Starts the settings of a publisher to the server at `url` (`redis://[[user]:password@]host[:port][/db]`).
    pub fn builder(url: url::Url) -> RedisBuilder {
        RedisBuilder {
            url: crate::masked_url::MaskedUrl(url),
            stream: "outbox.{aggregate_type}".to_owned(),
            envelope: CloudEvents::new(),
            maxlen: None,
            max_message_bytes: None,
            timeout: Duration::from_secs(5),
            password: None,
            tls: TlsFiles::default(),
        }
    }

    /// A publisher from a sink URL: `redis://[[user]:password@]host[:port][/db]?stream=outbox.{aggregate_type}`
    /// `&maxlen=...&max_message_bytes=...&timeout_ms=5000&source=...&schema_base=...&mode=binary`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSink`] for a malformed URL, an unknown option, or an invalid stream template.
    pub fn from_url(url: &url::Url) -> Result<Self> {
        let mut query = Query::new(url)?;
        let mut builder = Self::builder(url.clone()).cloud_events(CloudEvents::from_query(&mut query)?);
        builder.tls = TlsFiles::from_query(&mut query)?;
        builder.password = take_secret(&mut query, "password")?;
        if let Some(stream) = query.take("stream") {
            builder = builder.stream(stream);
        }
        if let Some(maxlen) =
            query.take_parsed("maxlen", "a number above zero", |v| v.parse().ok().filter(|n| *n > 0))?
        {
            builder = builder.maxlen(maxlen);
        }
        if let Some(max) = query.take_parsed("max_message_bytes", "a number of bytes", |v| v.parse().ok())? {
            builder = builder.max_message_bytes(max);
        }
        if let Some(timeout) = query.take_millis("timeout_ms")? {
            builder = builder.timeout(timeout);
        }
        query.finish(&[
            "stream",
            "maxlen",
            "max_message_bytes",
            "timeout_ms",
            "source",
            "schema_base",
            "mode",
            "tls_ca",
            "tls_cert",
            "tls_key",
            "password_file",
            "password_env",
        ])?;
        builder.build()
    }

    /// Connects now instead of at the first publish and sends a `PING`, so that a relay learns at start whether the
    /// server takes it (`outbox relay` does this before it reads anything). The connection is kept for the first
    /// batch.
    ///
    /// # Errors
    ///
    /// [`Error::Unreachable`] when the server cannot be reached (connection refused, timeout: try again later),
    /// [`Error::Refused`] when it refuses the credentials (`WRONGPASS`, `NOAUTH`) or the permissions, when the
    /// fixed stream's key holds another type, when the user may not `XADD` to it, or when the server is a
    /// read-only replica.
    pub async fn connect(&self) -> Result<()> {
        let target = || format!("Redis at {}", masked(&self.url));
        let failed = |error: &redis::RedisError| {
            let tls = is_tls_refusal(error);
            let refused = matches!(error.kind(), redis::ErrorKind::AuthenticationFailed)
                || error.code().is_some_and(|code| matches!(code, "WRONGPASS" | "NOAUTH" | "NOPERM"))
                || tls;
            let reason = if tls { format!("TLS handshake failed: {}", describe(error)) } else { describe(error) };
            if refused {
                Error::Refused { target: target(), reason }
            } else {
                Error::Unreachable { target: target(), reason }
            }
        };
        let timed_out = || Error::Unreachable { target: target(), reason: "timed out".to_owned() };
        let mut connection = match self.open().await {
            Ok(Ok(connection)) => connection,
            Ok(Err(error)) => return Err(failed(&error)),
            Err(_) => return Err(timed_out()),
        };
        match tokio::time::timeout(self.timeout, redis::cmd("PING").query_async::<String>(&mut connection)).await {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => return Err(failed(&error)),
            Err(_) => return Err(timed_out()),
        }
        if self.stream.is_fixed() {
            self.check_stream(&mut connection).await.map_err(|reason| match reason {
                Some(reason) => Error::Refused { target: target(), reason },
                None => timed_out(),
            })?;
        }
        self.connection.put(connection).await;
        Ok(())
    }

    /// Checks, without adding anything, that the fixed stream takes this user's `XADD`: the key holds a stream or
    /// nothing yet (`TYPE`; skipped when the user may not run it), and `XADD key NOMKSTREAM 0-0 ...` passes
    /// Redis's ACL (`NOPERM`) and replica (`READONLY`) checks, which come before any command runs; the command
    /// itself then fails on its ID (`0-0` is never valid) before it looks at the key. `Err(None)`: timed out.
    async fn check_stream(&self, connection: &mut ConnectionManager) -> std::result::Result<(), Option<String>> {
        let key = self.stream.as_str();
        let wrong_type = |kind: &str| {
            format!("the key `{key}` holds a {kind}, not a stream (delete or rename it, or name another `stream=`)")
        };
        let mut kind = redis::cmd("TYPE");
        kind.arg(key);
        match tokio::time::timeout(self.timeout, kind.query_async::<String>(connection)).await {
            Ok(Ok(kind)) if kind != "stream" && kind != "none" => return Err(Some(wrong_type(&kind))),
            Ok(_) => {}
            Err(_) => return Err(None),
        }
        let mut probe = redis::cmd("XADD");
        probe.arg(key).arg("NOMKSTREAM").arg("0-0").arg("outbox-relay").arg("write-check");
        let Ok(answer) = tokio::time::timeout(self.timeout, probe.query_async::<redis::Value>(connection)).await else {
            return Err(None);
        };
        match answer.as_ref().map_err(redis::RedisError::code) {
            Err(Some("NOPERM")) => {
                Err(Some(format!("the user may not append to the stream `{key}`: {}", describe(&answer.unwrap_err()))))
            }
            Err(Some("READONLY")) => Err(Some(format!(
                "the server is a read-only replica, it cannot take the stream `{key}` (connect to the primary)"
            ))),
            Err(Some("WRONGTYPE")) => Err(Some(wrong_type("value of another type"))),
            // The ID refused: every check before it passed.
            _ => Ok(()),
        }
    }

    async fn open(&self) -> std::result::Result<redis::RedisResult<ConnectionManager>, tokio::time::error::Elapsed> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_secs(2));
        tokio::time::timeout(self.timeout * 2, self.client.get_connection_manager_with_config(config)).await
    }

    /// [`open`](Self::open) for a publish: the error is a short description for a transient outcome.
    async fn reconnect(&self) -> std::result::Result<ConnectionManager, String> {
        match self.open().await {
            Ok(Ok(connection)) => Ok(connection),
            Ok(Err(error)) => Err(format!("cannot connect to Redis: {}", describe(&error))),
            Err(_) => Err("connecting to Redis timed out".to_owned()),
        }
    }

    fn command(&self, message: &Message) -> std::result::Result<redis::Cmd, Outcome> {
        let stream = self.stream.render(message).map_err(Outcome::permanent)?;
        let body = self.envelope.body(message);
        if self.max_message_bytes.is_some_and(|max| body.len() > max) {
            return Err(Outcome::permanent(format!("message too large: {} bytes", body.len())));
        }
        let mut command = redis::cmd("XADD");
        command.arg(stream);
        if let Some(maxlen) = self.maxlen {
            command.arg("MAXLEN").arg("~").arg(maxlen);
        }
        command.arg("*").arg("content-type").arg(self.envelope.content_type());
        for (name, value) in self.envelope.headers(message, Binding::Underscore) {
            command.arg(name).arg(value);
        }
        command.arg("data").arg(body);
        Ok(command)
    }
}

impl RedisBuilder {
    /// The stream key template (default `outbox.{aggregate_type}`); see [`Template`].
    pub fn stream(mut self, stream: impl Into<String>) -> Self {
        self.stream = stream.into();
        self
    }

    /// Trims each stream to about `maxlen` entries (`XADD ... MAXLEN ~ maxlen`). Default: no trimming.
    pub fn maxlen(mut self, maxlen: u64) -> Self {
        self.maxlen = Some(maxlen);
        self
    }

    /// Refuses (permanently) messages whose `data` is larger. Default: no limit but the server's.
    pub fn max_message_bytes(mut self, max: usize) -> Self {
        self.max_message_bytes = Some(max);
        self
    }

    /// How long connecting and each batch may take (default 5 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
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

    /// Trusts the certificate authorities of this PEM file instead of the system's (`rediss://` only).
    pub fn tls_ca(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.tls.ca = Some(path.into());
        self
    }

    /// Presents this PEM client certificate and key (`rediss://` only).
    pub fn tls_client_certificate(
        mut self,
        cert: impl Into<std::path::PathBuf>,
        key: impl Into<std::path::PathBuf>,
    ) -> Self {
        self.tls.client = Some((cert.into(), key.into()));
        self
    }

    /// Validates the settings and builds the publisher. It connects at its first publish.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSink`] when the URL is not `redis://host...` or `rediss://host...`, the stream template
    /// is invalid, the timeout is zero, TLS files are given without `rediss://` or cannot be read, or the URL
    /// has a fragment (`#insecure` would turn certificate verification off).
    pub fn build(self) -> Result<RedisPublisher> {
        crate::crypto_provider::install_default();
        let url = self.url;
        let invalid = |reason: &str| Error::InvalidSink { sink: masked(&url), reason: reason.to_owned() };
        if !matches!(url.scheme(), "redis" | "rediss") {
            return Err(invalid("a Redis URL is `redis://[user[:password]@]host[:port][/db]` or `rediss://...` (TLS)"));
        }
        if url.fragment().is_some() {
            return Err(invalid(
                "a Redis sink URL has no `#fragment` (`#insecure` would skip certificate verification)",
            ));
        }
        if self.tls.any() && url.scheme() != "rediss" {
            return Err(invalid("`tls_ca`, `tls_cert` and `tls_key` need TLS: use `rediss://`"));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(invalid("a Redis URL needs a host, e.g. `redis://127.0.0.1:6379`"));
        }
        let stream = Template::parse(&self.stream, Naming::RedisStream).map_err(|reason| invalid(&reason))?;
        if self.timeout.is_zero() {
            return Err(invalid("the Redis timeout must be more than zero"));
        }
        let mut connection_url = url.0.clone();
        connection_url.set_query(None);
        if let Some(password) = &self.password {
            if url.password().is_some() {
                return Err(invalid("give the password in the URL or in `password_file`/`password_env`, not both"));
            }
            connection_url
                .set_password(Some(
                    &url::form_urlencoded::byte_serialize(password.expose().as_bytes()).collect::<String>(),
                ))
                .map_err(|()| invalid("a Redis URL needs a host for a password"))?;
        }
        let malformed = |error: redis::RedisError| invalid(&format!("malformed Redis URL: {}", describe(&error)));
        let client = if self.tls.any() {
            let read = |path: &std::path::Path| {
                readable(path).map_err(|reason| invalid(&reason))?;
                std::fs::read(path)
                    .map_err(|error| invalid(&format!("cannot read {}: {}", path.display(), error.kind())))
            };
            let root_cert = self.tls.ca.as_deref().map(read).transpose()?;
            let client_tls = match &self.tls.client {
                Some((cert, key)) => Some(redis::ClientTlsConfig { client_cert: read(cert)?, client_key: read(key)? }),
                None => None,
            };
            redis::Client::build_with_tls(connection_url.as_str(), redis::TlsCertificates { client_tls, root_cert })
                .map_err(malformed)?
        } else {
            redis::Client::open(connection_url.as_str()).map_err(malformed)?
        };
        Ok(RedisPublisher {
            url: url.0,
            client,
            stream,
            envelope: self.envelope,
            maxlen: self.maxlen,
            max_message_bytes: self.max_message_bytes,
            timeout: self.timeout,
            connection: Reconnect::new(),
        })
    }
}

impl Publisher for RedisPublisher {
    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        let mut outcomes: Vec<Option<Outcome>> = vec![None; batch.len()];
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        let mut sent = Vec::new();
        for (index, message) in batch.iter().enumerate() {
            match self.command(message) {
                Ok(command) => {
                    pipe.add_command(command);
                    sent.push(index);
                }
                Err(outcome) => outcomes[index] = Some(outcome),
            }
        }
        if !sent.is_empty() {
            let results = match self.connection.get(|| self.reconnect()).await {
                // No connection: nothing was sent.
                Err(error) => Err(Outcome::unavailable(error)),
                Ok(mut connection) => {
                    let query = pipe.query_async::<Vec<redis::RedisResult<redis::Value>>>(&mut connection);
                    match tokio::time::timeout(self.timeout, query).await {
                        Ok(Ok(results)) => Ok(results),
                        Ok(Err(error)) => {
                            self.connection.reset().await;
                            Err(Outcome::transient(format!("Redis pipeline failed: {}", describe(&error))))
                        }
                        Err(_) => {
                            self.connection.reset().await;
                            Err(Outcome::transient("Redis timed out"))
                        }
                    }
                }
            };
            match results {
                Ok(results) => {
                    // A server that is no longer the primary (a failover demoted it, `REPLICAOF`) answers every
                    // write `READONLY`, and the client keeps its connection: reconnect, so that a name that now
                    // points at the new primary (a managed service's endpoint, Sentinel's DNS) is resolved again.
                    if results.iter().any(|result| {
                        result
                            .as_ref()
                            .err()
                            .is_some_and(|error| matches!(error.code(), Some("READONLY" | "MASTERDOWN")))
                    }) {
                        self.connection.reset().await;
                    }
                    for (index, result) in sent.iter().zip(results.into_iter().map(Some).chain(std::iter::repeat(None)))
                    {
                        outcomes[*index] = Some(match result {
                            Some(Ok(_)) => Outcome::Published,
                            Some(Err(error)) => outcome_of(&error),
                            None => Outcome::transient("Redis sent fewer replies than commands"),
                        });
                    }
                }
                Err(outcome) => {
                    for index in sent {
                        outcomes[index] = Some(outcome.clone());
                    }
                }
            }
        }
        outcomes.into_iter().map(|o| o.unwrap_or_else(|| Outcome::transient("Redis publish failed"))).collect()
    }
}

/// The relay's reading of a Redis error for one command.
fn outcome_of(error: &redis::RedisError) -> Outcome {
    let description = describe(error);
    let permanent = matches!(error.code(), Some("WRONGTYPE" | "NOPERM" | "NOAUTH" | "WRONGPASS"))
        || matches!(error.kind(), redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm));
    if permanent {
        Outcome::permanent(format!("Redis refused the message: {description}"))
    } else {
        Outcome::transient(format!("Redis refused the message: {description}"))
    }
}

/// A one-line description of a Redis error: its code and detail (the server never echoes our values in them).
fn describe(error: &redis::RedisError) -> String {
    let text = error.to_string();
    text.lines().next().unwrap_or_default().to_owned()
}

impl fmt::Display for RedisPublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&masked(&self.url))
    }
}

impl fmt::Debug for RedisPublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisPublisher")
            .field("url", &masked(&self.url))
            .field("stream", &self.stream.as_str())
            .field("maxlen", &self.maxlen)
            .field("envelope", &self.envelope)
            .finish_non_exhaustive()
    }
}

impl RedisPublisher {
    /// What this publisher puts on the wire, for the AsyncAPI document of its sink: the headers are stream fields
    /// beside the field `data`, which holds the payload.
    pub(crate) fn shape(&self) -> super::wire::Shape<'_> {
        super::wire::Shape {
            protocol: "redis",
            destination: &self.stream,
            binding: Binding::Underscore,
            envelope: &self.envelope,
            own_headers: &[("content-type", "The media type of the field `data`.", true)],
            pathname: None,
            keyed_by_aggregate: false,
            channel_bindings: None,
            description: "The outbox relay appends each event to a stream (XADD); the field `data` holds the body, the other fields are the headers.",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RedisPublisher;

    #[test]
    fn urls_are_validated_and_passwords_never_shown() {
        for (url, reason) in [
            ("redis://:hunter2@127.0.0.1?stream=a b", "no whitespace"),
            ("redis://:hunter2@127.0.0.1?maxlen=0", "`maxlen` must be"),
            ("redis://:hunter2@127.0.0.1?topic=x", "unknown option `topic`"),
            ("redis://:hunter2@127.0.0.1?stream={id}", "unknown placeholder"),
        ] {
            let error = RedisPublisher::from_url(&url.parse().unwrap()).unwrap_err().to_string();
            assert!(error.contains(reason), "{url}: {error}");
            assert!(!error.contains("hunter2") && !error.contains('\n'), "{error}");
        }
        let publisher = RedisPublisher::from_url(&"redis://:hunter2@127.0.0.1".parse().unwrap()).unwrap();
        assert!(!format!("{publisher:?} {publisher}").contains("hunter2"));
    }
}
