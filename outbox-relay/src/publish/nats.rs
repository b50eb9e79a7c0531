//! NATS JetStream (`nats://` sinks): each event is published to a subject and counts as published once the stream
//! acknowledged it (the `PubAck`); `Nats-Msg-Id` is the event id, so the stream drops a republished event within
//! its duplicate window.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use async_nats::jetstream::context::PublishErrorKind;
use async_nats::HeaderMap;

use super::cloudevents::{Binding, CloudEvents};
use super::name_template::{Naming, Template};
use super::reconnect::Reconnect;
use super::secret_source::{take_secret, Secret};
use super::tls_options::{is_tls_refusal, readable, TlsFiles};
use super::url_options::Query;
use super::{Message, Outcome, Publisher};
use crate::error::{Error, Result};
use crate::masked_url::masked_url as masked;

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
/// has it). Too large a message is a permanent failure; a timeout, a lost connection or a stream that went
/// missing after start is transient (at start a missing stream is refused: see **Destination**). The client
/// reconnects by itself; while it is disconnected a publish fails at once.
///
/// **TLS**: `tls://host:port`, or `nats://...?tls=true`, or any of `tls_ca=PATH` (authorities to trust),
/// `tls_cert=PATH` + `tls_key=PATH` (client certificate) requires TLS; the server's certificate is verified
/// against the host name of the URL. **Authentication**, one of: `nats://user:password@host` (or the password
/// from `password_file=PATH` / `password_env=VAR`), a token (`token_file=` / `token_env=`, or the URL's user name
/// alone), an nkey seed (`nkey_seed_file=` / `nkey_seed_env=`), or a `.creds` file (`creds_file=PATH`).
///
/// **Destination**: [`connect`](Self::connect) checks that a JetStream stream captures the subjects (the fixed
/// subject, or the template's literal prefix followed by `>`) and takes new messages (it is not sealed and
/// acknowledges what it stores: no `no_ack`); with [`create_destinations`](NatsBuilder::create_destinations) it
/// creates a missing one, named by `stream=` (default `OUTBOX`), with `stream_storage=file|memory` (default
/// `file`) and `stream_replicas=N` (default 1). Whether the account's permissions allow publishing to the
/// subjects is not checked at start (NATS offers no way to ask without publishing): a denied subject shows as
/// publishes that time out.
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
    auth: Auth,
    tls: TlsFiles,
    require_tls: bool,
    stream: StreamSettings,
    create_destinations: bool,
    subject: Template,
    envelope: CloudEvents,
    ack_timeout: Duration,
    connect_timeout: Duration,
    context: Reconnect<(async_nats::Client, async_nats::jetstream::Context)>,
}

/// How the publisher authenticates to the NATS server.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Auth {
    None,
    UserPassword(String, Secret),
    Token(Secret),
    NkeySeed(Secret),
    /// The content of a `.creds` file (a user JWT and its nkey seed).
    Credentials(Secret),
}

/// The stream [`NatsBuilder::create_destinations`] creates.
#[derive(Debug, Clone, PartialEq, Eq)]
struct StreamSettings {
    name: String,
    storage: async_nats::jetstream::stream::StorageType,
    replicas: usize,
}

/// Settings of a [`NatsPublisher`], validated by [`build`](Self::build).
#[derive(Debug, Clone)]
#[must_use]
pub struct NatsBuilder {
    url: crate::masked_url::MaskedUrl,
    subject: String,
    envelope: CloudEvents,
    ack_timeout: Duration,
    connect_timeout: Duration,
    auth: Option<Auth>,
    credentials_file: Option<PathBuf>,
    tls: TlsFiles,
    require_tls: bool,
    stream: StreamSettings,
    create_destinations: bool,
}

/// The options of a NATS sink URL, for the list of known options.
const OPTIONS: [&str; 20] = [
    "subject",
    "source",
    "schema_base",
    "mode",
    "ack_timeout_ms",
    "connect_timeout_ms",
    "tls",
    "tls_ca",
    "tls_cert",
    "tls_key",
    "password_file",
    "password_env",
    "token_file",
    "token_env",
    "nkey_seed_file",
    "nkey_seed_env",
    "creds_file",
    "stream",
    "stream_storage",
    "stream_replicas",
];

impl NatsPublisher {
    /// Starts the settings of a publisher to the server at `url` (`nats://[user:password@]host[:port]`, or a
    /// token as the user name).
    pub fn builder(url: url::Url) -> NatsBuilder {
        NatsBuilder {
            url: crate::masked_url::MaskedUrl(url),
            subject: "outbox.{event_type}".to_owned(),
            envelope: CloudEvents::new(),
            ack_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            auth: None,
            credentials_file: None,
            tls: TlsFiles::default(),
            require_tls: false,
            stream: StreamSettings {
                name: "OUTBOX".to_owned(),
                storage: async_nats::jetstream::stream::StorageType::File,
                replicas: 1,
            },
            create_destinations: false,
        }
    }

    /// A publisher from a sink URL:
    /// `nats://[user[:password]@]host[:port]?subject=outbox.{event_type}&source=...&schema_base=...&mode=binary`
    /// `&ack_timeout_ms=5000&connect_timeout_ms=5000`, with the TLS options (`tls=true`, `tls_ca`, `tls_cert`,
    /// `tls_key`; or the scheme `tls://`), the secret options (`password_file`/`password_env` for the URL's
    /// user, `token_file`/`token_env`, `nkey_seed_file`/`nkey_seed_env`, `creds_file`) and the stream options
    /// (`stream`, `stream_storage`, `stream_replicas`) described on [`NatsPublisher`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSink`] for a malformed URL, an unknown option, an invalid subject template, two ways of
    /// authenticating, or a secret or certificate file that cannot be read.
    pub fn from_url(url: &url::Url) -> Result<Self> {
        let mut query = Query::new(url)?;
        let mut builder = Self::builder(url.clone()).cloud_events(CloudEvents::from_query(&mut query)?);
        builder.tls = TlsFiles::from_query(&mut query)?;
        if let Some(tls) = query.take_parsed("tls", "`true` or `false`", |v| v.parse::<bool>().ok())? {
            builder.require_tls = tls;
        }
        let user = percent_decoded(url.username());
        let password = take_secret(&mut query, "password")?;
        let token = take_secret(&mut query, "token")?;
        let seed = take_secret(&mut query, "nkey_seed")?;
        let creds = query.take("creds_file").map(PathBuf::from);
        let url_password = url.password().map(|p| Secret::new(percent_decoded(p)));
        let mut ways = Vec::new();
        match (user.is_empty(), url_password.or(password)) {
            (false, Some(password)) => ways.push(Auth::UserPassword(user, password)),
            (true, Some(_)) => {
                return Err(query.invalid("a NATS password needs a user: `nats://USER@host?password_file=...`"))
            }
            (false, None) => ways.push(Auth::Token(Secret::new(user))),
            (true, None) => {}
        }
        ways.extend(token.map(Auth::Token));
        ways.extend(seed.map(Auth::NkeySeed));
        if ways.len() + usize::from(creds.is_some()) > 1 {
            return Err(query
                .invalid("give one way of authenticating: user and password, a token, an nkey seed or a creds file"));
        }
        builder.auth = ways.pop();
        builder.credentials_file = creds;
        if let Some(stream) = query.take("stream") {
            builder = builder.stream(stream);
        }
        if let Some(storage) = query.take_parsed("stream_storage", "`file` or `memory`", |v| match v {
            "file" => Some(async_nats::jetstream::stream::StorageType::File),
            "memory" => Some(async_nats::jetstream::stream::StorageType::Memory),
            _ => None,
        })? {
            builder.stream.storage = storage;
        }
        if let Some(replicas) = query
            .take_parsed("stream_replicas", "1 to 5", |v| v.parse::<usize>().ok().filter(|n| (1..=5).contains(n)))?
        {
            builder.stream.replicas = replicas;
        }
        if let Some(subject) = query.take("subject") {
            builder = builder.subject(subject);
        }
        if let Some(timeout) = query.take_millis("ack_timeout_ms")? {
            builder = builder.ack_timeout(timeout);
        }
        if let Some(timeout) = query.take_millis("connect_timeout_ms")? {
            builder = builder.connect_timeout(timeout);
        }
        query.finish(&OPTIONS)?;
        builder.build()
    }

    /// The same publisher, creating a missing stream at [`connect`](Self::connect) when `create` is set (the
    /// `outbox relay --create-destinations` flag; [`NatsBuilder::create_destinations`] before building).
    #[must_use]
    pub fn with_create_destinations(mut self, create: bool) -> Self {
        self.create_destinations = create;
        self
    }

    /// Connects now instead of at the first publish, so that a relay learns at start whether the server takes it
    /// (`outbox relay` does this before it reads anything). The connection is kept for the first batch.
    ///
    /// # Errors
    ///
    /// [`Error::Unreachable`] when the server cannot be reached (connection refused, timeout: try again later),
    /// [`Error::Refused`] when it refuses the credentials or the TLS setup, when the account of the credentials
    /// has no JetStream, or when no stream captures the subjects (and none is to be created).
    pub async fn connect(&self) -> Result<()> {
        let target = || format!("NATS at {self}");
        match self.open().await {
            Ok(connected) => {
                self.check_stream(&connected.1, self.create_destinations).await?;
                self.context.put(connected).await;
                Ok(())
            }
            Err(Some(error)) => {
                use async_nats::ConnectErrorKind as Kind;
                let certificate = tls_refusal(&error);
                let reason = match (&certificate, error.kind()) {
                    (Some(refusal), _) => refusal.clone(),
                    // The TLS error says which check failed: no secret in it.
                    (None, Kind::Tls) => error.to_string(),
                    (None, kind) => kind.to_string(),
                };
                match error.kind() {
                    Kind::Authentication | Kind::AuthorizationViolation | Kind::Tls => {
                        Err(Error::Refused { target: target(), reason })
                    }
                    _ if certificate.is_some() => Err(Error::Refused { target: target(), reason }),
                    _ => Err(Error::Unreachable { target: target(), reason }),
                }
            }
            Err(None) => Err(Error::Unreachable { target: target(), reason: "timed out".to_owned() }),
        }
    }

    /// The subjects the stream must capture: the fixed subject, or the template's literal prefix followed by `>`.
    fn subject_filter(&self) -> String {
        if self.subject.is_fixed() {
            return self.subject.as_str().to_owned();
        }
        let template = self.subject.as_str();
        let prefix = &template[..template.find('{').unwrap_or(template.len())];
        match prefix.rfind('.') {
            Some(dot) => format!("{}>", &prefix[..=dot]),
            None => ">".to_owned(),
        }
    }

    /// Checks that a JetStream stream captures the subjects; creates it when `create` is set and it is missing.
    async fn check_stream(&self, context: &async_nats::jetstream::Context, create: bool) -> Result<()> {
        use async_nats::jetstream::context::GetStreamByNameErrorKind as Kind;
        let filter = self.subject_filter();
        let target = || format!("NATS at {self}");
        match context.stream_by_subject(filter.clone()).await {
            Ok(name) => self.check_stream_takes_messages(context, &name, &filter).await,
            // The server has JetStream, the account of these credentials may not use it: no retry fixes that.
            Err(error) if not_enabled_for_account(&error) => Err(Error::Refused {
                target: target(),
                reason: "JetStream is not enabled for the account of these credentials (enable JetStream for the \
                         account, or check that the credentials are those of the account that holds the stream)"
                    .to_owned(),
            }),
            Err(error) if error.kind() == Kind::NotFound && create => {
                let config = async_nats::jetstream::stream::Config {
                    name: self.stream.name.clone(),
                    subjects: vec![filter.clone()],
                    storage: self.stream.storage,
                    num_replicas: self.stream.replicas,
                    ..Default::default()
                };
                match context.create_stream(config).await {
                    Ok(_) => {
                        tracing::info!(stream = %self.stream.name, subjects = %filter, "created the JetStream stream");
                        Ok(())
                    }
                    Err(error) => Err(Error::Refused {
                        target: target(),
                        reason: format!("cannot create the JetStream stream `{}` for `{filter}`: {error}", self.stream.name),
                    }),
                }
            }
            Err(error) if error.kind() == Kind::NotFound => Err(Error::Refused {
                target: target(),
                reason: format!(
                    "no JetStream stream captures the subjects `{filter}` (create one, or start with `--create-destinations`)"
                ),
            }),
            Err(error) if matches!(error.kind(), Kind::JetStream(_)) => {
                Err(Error::Refused { target: target(), reason: format!("cannot look up the stream for `{filter}`: {error}") })
            }
            Err(error) => Err(Error::Unreachable { target: target(), reason: format!("JetStream did not answer: {error}") }),
        }
    }

    /// Checks that the stream `name` found for the subjects `filter` takes and acknowledges new messages: a sealed
    /// stream refuses them, and a stream with `no_ack` stores them without the acknowledgement the relay waits
    /// for (every attempt would time out and store the event again).
    async fn check_stream_takes_messages(
        &self,
        context: &async_nats::jetstream::Context,
        name: &str,
        filter: &str,
    ) -> Result<()> {
        use async_nats::jetstream::context::GetStreamErrorKind as Kind;
        let target = || format!("NATS at {self}");
        let stream = match context.get_stream(name).await {
            Ok(stream) => stream,
            Err(error) if matches!(error.kind(), Kind::JetStream(_)) => {
                return Err(Error::Refused {
                    target: target(),
                    reason: format!("cannot read the JetStream stream `{name}` for `{filter}`: {error}"),
                })
            }
            Err(error) => {
                return Err(Error::Unreachable {
                    target: target(),
                    reason: format!("JetStream did not answer: {error}"),
                })
            }
        };
        let config = &stream.cached_info().config;
        let problem = if config.sealed {
            "is sealed: it takes no new messages"
        } else if config.no_ack {
            "does not acknowledge messages (`no_ack`): the relay could never count an event published"
        } else {
            return Ok(());
        };
        Err(Error::Refused {
            target: target(),
            reason: format!("the JetStream stream `{name}` for `{filter}` {problem}"),
        })
    }

    /// Opens a connection and its JetStream context; `Err(None)` when it timed out.
    async fn open(
        &self,
    ) -> std::result::Result<(async_nats::Client, async_nats::jetstream::Context), Option<async_nats::ConnectError>>
    {
        let mut options = async_nats::ConnectOptions::new()
            .connection_timeout(self.connect_timeout)
            .name(concat!("outbox-relay/", env!("CARGO_PKG_VERSION")));
        options = match &self.auth {
            Auth::None => options,
            Auth::UserPassword(user, password) => options.user_and_password(user.clone(), password.expose().to_owned()),
            Auth::Token(token) => options.token(token.expose().to_owned()),
            Auth::NkeySeed(seed) => options.nkey(seed.expose().to_owned()),
            // Checked when the publisher was built.
            Auth::Credentials(creds) => {
                options.credentials(creds.expose()).unwrap_or_else(|_| async_nats::ConnectOptions::new())
            }
        };
        if self.require_tls {
            options = options.require_tls(true);
        }
        if let Some(ca) = &self.tls.ca {
            options = options.add_root_certificates(ca.clone());
        }
        if let Some((cert, key)) = &self.tls.client {
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
        let connecting = options.connect(self.server.as_str());
        let client = match tokio::time::timeout(self.connect_timeout + Duration::from_secs(1), connecting).await {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => return Err(Some(error)),
            Err(_) => return Err(None),
        };
        let context = async_nats::jetstream::context::ContextBuilder::new()
            .timeout(self.ack_timeout)
            .max_ack_inflight(MAX_ACKS_IN_FLIGHT)
            .build(client.clone());
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

    /// The message's headers, or a permanent failure naming the header NATS cannot carry: a line break in a value
    /// (an aggregate id in `ce-subject`, a header of a row written by plain SQL) or a name with a control character,
    /// a non-ASCII character or `:` (the client would panic on them, failing every message of the call). The
    /// value is never shown.
    fn headers(&self, message: &Message) -> std::result::Result<HeaderMap, Outcome> {
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", message.id.to_string().as_str());
        headers.insert("content-type", self.envelope.content_type());
        for (name, value) in self.envelope.headers(message, Binding::Nats) {
            let Ok(parsed_name) = name.parse::<async_nats::header::HeaderName>() else {
                return Err(Outcome::permanent(
                    "a header name NATS cannot carry (a control character, non-ASCII or `:`)",
                ));
            };
            let Ok(parsed_value) = value.parse::<async_nats::HeaderValue>() else {
                return Err(Outcome::permanent(format!(
                    "the header `{name}` has a line break, which NATS cannot carry"
                )));
            };
            headers.insert(parsed_name, parsed_value);
        }
        Ok(headers)
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

    /// Requires TLS (implied by the `tls://` scheme and by any certificate file).
    pub fn require_tls(mut self, required: bool) -> Self {
        self.require_tls = required;
        self
    }

    /// Trusts the certificate authorities of this PEM file (instead of the system's). Implies TLS.
    pub fn tls_ca(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls.ca = Some(path.into());
        self
    }

    /// Presents this PEM client certificate and key to the server. Implies TLS.
    pub fn tls_client_certificate(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.tls.client = Some((cert.into(), key.into()));
        self
    }

    /// Authenticates with a user name and password.
    pub fn user_and_password(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.auth = Some(Auth::UserPassword(user.into(), Secret::new(password)));
        self
    }

    /// Authenticates with a token.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.auth = Some(Auth::Token(Secret::new(token)));
        self
    }

    /// Authenticates with an nkey seed (`SU...`).
    pub fn nkey_seed(mut self, seed: impl Into<String>) -> Self {
        self.auth = Some(Auth::NkeySeed(Secret::new(seed)));
        self
    }

    /// Authenticates with a `.creds` file (a user JWT and its nkey seed), read when the publisher is built.
    pub fn credentials_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.credentials_file = Some(path.into());
        self
    }

    /// The name of the stream [`create_destinations`](Self::create_destinations) creates (default `OUTBOX`).
    pub fn stream(mut self, name: impl Into<String>) -> Self {
        self.stream.name = name.into();
        self
    }

    /// Whether [`NatsPublisher::connect`] creates a missing stream for the subjects (default: no, it reports it).
    pub fn create_destinations(mut self, create: bool) -> Self {
        self.create_destinations = create;
        self
    }

    /// Validates the settings and builds the publisher. It connects at its first publish.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSink`] when the URL is not `nats://host[:port]` or `tls://host[:port]`, the subject
    /// template or the stream name is invalid, a timeout is zero, or a certificate or creds file cannot be read.
    pub fn build(self) -> Result<NatsPublisher> {
        crate::crypto_provider::install_default();
        let url = self.url;
        let invalid = |reason: &str| Error::InvalidSink { sink: masked(&url), reason: reason.to_owned() };
        if !matches!(url.scheme(), "nats" | "tls") {
            return Err(invalid("a NATS URL is `nats://host[:port]` or `tls://host[:port]`"));
        }
        let Some(host) = url.host_str().filter(|host| !host.is_empty()) else {
            return Err(invalid("a NATS URL needs a host, e.g. `nats://127.0.0.1:4222`"));
        };
        if !matches!(url.path(), "" | "/") {
            return Err(invalid("a NATS URL has no path; name the subject with `?subject=...`"));
        }
        if self.envelope.source_uri().contains(['\r', '\n']) {
            return Err(invalid(
                "the CloudEvents `source` cannot contain a line break (NATS headers cannot carry one)",
            ));
        }
        let subject = Template::parse(&self.subject, Naming::NatsSubject).map_err(|reason| invalid(&reason))?;
        if self.ack_timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err(invalid("NATS timeouts must be more than zero"));
        }
        let host = if host.contains(':') { format!("[{host}]") } else { host.to_owned() };
        let server = format!("nats://{host}:{}", url.port().unwrap_or(4222));
        if self.stream.name.is_empty() || self.stream.name.contains(|c: char| c.is_whitespace() || ".*>/\\".contains(c))
        {
            return Err(invalid("a JetStream stream name has no whitespace, `.`, `*`, `>`, `/` or `\\`"));
        }
        for path in self.tls.ca.iter().chain(self.tls.client.iter().flat_map(|(cert, key)| [cert, key])) {
            readable(path).map_err(|reason| invalid(&reason))?;
        }
        let mut auth = self.auth.unwrap_or(Auth::None);
        if let Some(path) = &self.credentials_file {
            if auth != Auth::None {
                return Err(invalid(
                    "give one way of authenticating: user and password, a token, an nkey seed or a creds file",
                ));
            }
            let creds = std::fs::read_to_string(path)
                .map_err(|error| invalid(&format!("`creds_file`: cannot read {}: {}", path.display(), error.kind())))?;
            if async_nats::ConnectOptions::new().credentials(&creds).is_err() {
                return Err(invalid(&format!("`creds_file`: {} is not a NATS .creds file", path.display())));
            }
            auth = Auth::Credentials(Secret::new(creds));
        }
        let require_tls = self.require_tls || url.scheme() == "tls" || self.tls.any();
        Ok(NatsPublisher {
            url: url.0,
            server,
            auth,
            tls: self.tls,
            require_tls,
            stream: self.stream,
            create_destinations: self.create_destinations,
            subject,
            envelope: self.envelope,
            ack_timeout: self.ack_timeout,
            connect_timeout: self.connect_timeout,
            context: Reconnect::new(),
        })
    }
}

/// Whether the JetStream API answered the stream lookup with "JetStream not enabled for account" (code 503,
/// error code 10039): the server runs JetStream, the client's account has none. async-nats reports it as the
/// lookup's `JetStream` kind or, from the paged stream names request, as a source of a `Request` error.
fn not_enabled_for_account(error: &async_nats::jetstream::context::GetStreamByNameError) -> bool {
    use async_nats::jetstream::context::GetStreamByNameErrorKind as Kind;
    use async_nats::jetstream::{Error as ApiError, ErrorCode};
    let not_enabled = |api: &ApiError| api.error_code() == ErrorCode::JETSTREAM_NOT_ENABLED_FOR_ACCOUNT;
    if let Kind::JetStream(api) = error.kind() {
        return not_enabled(&api);
    }
    let mut current = std::error::Error::source(error);
    while let Some(error) = current {
        if error.downcast_ref::<ApiError>().is_some_and(not_enabled) {
            return true;
        }
        current = error.source();
    }
    false
}

/// The TLS handshake failure inside a connection error (the client refused the server's certificate, or the
/// server refused the client's), which async-nats reports as an I/O error.
fn tls_refusal(error: &async_nats::ConnectError) -> Option<String> {
    let source = std::error::Error::source(error)?;
    is_tls_refusal(source).then(|| format!("TLS handshake failed: {source}"))
}

fn percent_decoded(value: &str) -> String {
    url::form_urlencoded::parse(format!("x={value}").as_bytes())
        .next()
        .map(|(_, value)| value.into_owned())
        .unwrap_or_default()
}

/// The acknowledgements one connection may wait for at once: every event of every lane's call (a call sends its
/// events, then waits for their acknowledgements). async-nats' default, 5,000, made a publish wait for a free slot
/// once the lanes' calls held more (three lanes of 2,000 events), until the publish timeout failed the call.
const MAX_ACKS_IN_FLIGHT: usize = crate::RelayConfig::MAX_BATCH_SIZE as usize * crate::RelayConfig::MAX_CONCURRENCY;

impl Publisher for NatsPublisher {
    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        let (client, context) = match self.context.get(|| self.reconnect()).await {
            Ok(connected) => connected,
            Err(error) => return vec![Outcome::unavailable(error); batch.len()],
        };
        if client.connection_state() != async_nats::connection::State::Connected {
            return vec![Outcome::unavailable("NATS connection lost (reconnecting)"); batch.len()];
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
            let headers = match self.headers(message) {
                Ok(headers) => headers,
                Err(outcome) => {
                    pending.push(Err(outcome));
                    continue;
                }
            };
            let body = self.envelope.body(message);
            match context.publish_with_headers(subject.clone(), headers, body.into()).await {
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
            .field("require_tls", &self.require_tls)
            .field("create_destinations", &self.create_destinations)
            .field("envelope", &self.envelope)
            .field("ack_timeout", &self.ack_timeout)
            .finish_non_exhaustive()
    }
}

impl NatsPublisher {
    /// What this publisher puts on the wire, for the AsyncAPI document of its sink.
    pub(crate) fn shape(&self) -> super::wire::Shape<'_> {
        super::wire::Shape {
            protocol: "nats",
            destination: &self.subject,
            binding: Binding::Nats,
            envelope: &self.envelope,
            own_headers: &[
                (
                    "Nats-Msg-Id",
                    "The event id: JetStream drops a republished event within the stream's duplicate window.",
                    true,
                ),
                ("content-type", "The body's media type.", true),
            ],
            pathname: None,
            keyed_by_aggregate: false,
            channel_bindings: None,
            description:
                "The outbox relay publishes each event to JetStream and waits for the stream's acknowledgement.",
        }
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
