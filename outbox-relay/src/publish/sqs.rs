//! Amazon SQS (`sqs://` sinks): `SendMessageBatch` of up to 10 messages, every request of a batch in flight at
//! once; FIFO queues get the aggregate id as
//! `MessageGroupId` (order per aggregate) and the event id as `MessageDeduplicationId` (a republished event
//! within five minutes is dropped).

use std::fmt;
use std::time::Duration;

use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::error::SdkError;
use aws_sdk_sqs::operation::create_queue::CreateQueueError;
use aws_sdk_sqs::operation::send_message_batch::SendMessageBatchError;
use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
use aws_smithy_http_client::tls;

use super::cloudevents::{Binding, CloudEvents};
use super::innermost_cause::innermost;
use super::name_template::{Naming, Template};
use super::url_options::Query;
use super::{Message, Outcome, Publisher};
use crate::error::{Error, Result};
use crate::masked_url::masked_url as masked;

/// SQS takes at most 10 messages per batch and 10 message attributes per message.
const MAX_BATCH: usize = 10;
const MAX_ATTRIBUTES: usize = 10;
/// The message attribute that carries all of an event's headers, as a JSON object, when they do not fit one
/// attribute each.
pub(crate) const HEADERS_ATTRIBUTE: &str = "outbox_headers";
/// SQS's default (and classic) size limit for one message and for one batch request.
const DEFAULT_MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// Publishes events to Amazon SQS (or an SQS-compatible endpoint).
///
/// Every event is sent to the queue URL rendered from a [`Template`] (the queue name, its last path segment, is
/// checked: `a-z A-Z 0-9 _ -`, optionally `.fifo`). The body is the payload (or the structured-mode envelope);
/// the CloudEvents attributes travel as `ce_`-prefixed string message attributes (eight, nine with a
/// `dataschema`). The event's headers (`traceparent`, `tenant`, ...) follow as one string attribute each when
/// they all fit within SQS's ten attributes per message; otherwise all of them travel as one JSON object in the
/// attribute `outbox_headers` (`{"tenant":"acme","traceparent":"00-..."}`). For a FIFO queue (`.fifo`), `MessageGroupId` is the aggregate id
/// and `MessageDeduplicationId` the event id; a standard queue neither orders nor deduplicates.
///
/// Credentials come from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`, read once when the
/// publisher is built (no instance, task or web-identity roles; temporary credentials are not renewed); the region
/// from the `region` option, `AWS_REGION` or `AWS_DEFAULT_REGION`.
///
/// Outcomes: an entry SQS accepted is published. An entry it refused as the sender's fault, a message over
/// [`max_message_bytes`](SqsBuilder::max_message_bytes) (default 256 KiB), or a denied access is permanent;
/// throttling, timeouts, connection failures and a missing queue (it may be being created) are transient. A
/// throttled request (`RequestThrottled`, `KmsThrottled`, any other `...Throttl...` code) or another transient
/// service error whose response carries a `Retry-After` (seconds or an HTTP date) passes it on as
/// [`PublishError::retry_after`](crate::PublishError::retry_after), which the relay honours within its backoff's
/// maximum (the SDK itself retries a throttled request once, with its own backoff, before that).
///
/// **Destination**: [`connect`](SqsPublisher::connect) checks that a fixed queue exists (`GetQueueUrl`); with
/// [`create_destinations`](SqsBuilder::create_destinations) it creates a missing one (`CreateQueue`: FIFO when
/// its name ends in `.fifo`, with `queue_retention_s=SECONDS` as its message retention, SQS's default of four
/// days otherwise). The queues of a queue URL template with placeholders are known only per event: a publish to
/// one that does not exist creates it with `create_destinations` and sends again, and otherwise fails (and is
/// retried) with a reason that names the queue and the fix.
///
/// # Example
///
/// ```
/// let publisher = outbox_relay::SqsPublisher::builder()
///     .queue_url("https://sqs.eu-west-1.amazonaws.com/123456789012/events.fifo")
///     .region("eu-west-1")
///     .credentials("AKIDEXAMPLE", "secret")
///     .build()?;
/// assert_eq!(publisher.to_string(), "sqs://?queue_url=https://sqs.eu-west-1.amazonaws.com/123456789012/events.fifo");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct SqsPublisher {
    display: String,
    client: aws_sdk_sqs::Client,
    queue_url: Template,
    envelope: CloudEvents,
    max_message_bytes: usize,
    create_destinations: bool,
    retention: Option<u32>,
}

/// Settings of an [`SqsPublisher`], validated by [`build`](Self::build).
#[derive(Clone)]
#[must_use]
pub struct SqsBuilder {
    display: Option<String>,
    queue_url: Option<String>,
    endpoint: Option<String>,
    region: Option<String>,
    credentials: Option<(String, String, Option<String>)>,
    envelope: CloudEvents,
    timeout: Duration,
    max_message_bytes: usize,
    create_destinations: bool,
    retention: Option<u32>,
    tls_ca: Option<std::path::PathBuf>,
}

impl fmt::Debug for SqsBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqsBuilder")
            .field("queue_url", &self.queue_url)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("credentials", &self.credentials.as_ref().map(|_| "[REDACTED]"))
            .finish_non_exhaustive()
    }
}

impl SqsPublisher {
    /// Starts the settings of a publisher; [`queue_url`](SqsBuilder::queue_url) is required.
    pub fn builder() -> SqsBuilder {
        SqsBuilder {
            display: None,
            queue_url: None,
            endpoint: None,
            region: None,
            credentials: None,
            envelope: CloudEvents::new(),
            timeout: Duration::from_secs(10),
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            create_destinations: false,
            retention: None,
            tls_ca: None,
        }
    }

    /// The same publisher, creating a missing queue at [`connect`](Self::connect) when `create` is set (the
    /// `outbox relay --create-destinations` flag; [`SqsBuilder::create_destinations`] before building).
    #[must_use]
    pub fn with_create_destinations(mut self, create: bool) -> Self {
        self.create_destinations = create;
        self
    }

    /// Checks that a fixed queue exists and that SQS takes the credentials (`GetQueueUrl`), creating the queue
    /// with [`create_destinations`](SqsBuilder::create_destinations); `outbox relay` does this before it reads
    /// anything. A queue URL template with placeholders is checked per queue when it is first published to
    /// (see the type's docs).
    ///
    /// # Errors
    ///
    /// [`Error::Unreachable`] when SQS does not answer (connection refused, timeout), [`Error::Refused`] when it
    /// refuses the credentials or the queue does not exist (or cannot be created).
    pub async fn connect(&self) -> Result<()> {
        if !self.queue_url.is_fixed() {
            return Ok(());
        }
        let target = || format!("SQS at {}", self.display);
        let queue_url = self.queue_url.as_str();
        let mut segments = queue_url.rsplit('/');
        let name = segments.next().unwrap_or_default().to_owned();
        let account = segments.next().filter(|a| a.len() == 12 && a.bytes().all(|b| b.is_ascii_digit()));
        let lookup =
            self.client.get_queue_url().queue_name(&name).set_queue_owner_aws_account_id(account.map(str::to_owned));
        let missing = match lookup.send().await {
            Ok(_) => return Ok(()),
            Err(SdkError::ServiceError(service)) if service.err().is_queue_does_not_exist() => true,
            Err(error) => return Err(start_failure(&error, target())),
        };
        if missing && !self.create_destinations {
            return Err(Error::Refused {
                target: target(),
                reason: format!("the queue `{name}` does not exist (create it, or start with `--create-destinations`)"),
            });
        }
        self.create_queue(&name).await.map_err(|error| start_failure(&error, target()))
    }

    /// Creates the queue `name` (FIFO when it ends in `.fifo`, with the configured retention).
    async fn create_queue(&self, name: &str) -> std::result::Result<(), SdkError<CreateQueueError>> {
        let mut create = self.client.create_queue().queue_name(name);
        if name.ends_with(".fifo") {
            create = create.attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true");
        }
        if let Some(retention) = self.retention {
            create = create
                .attributes(aws_sdk_sqs::types::QueueAttributeName::MessageRetentionPeriod, retention.to_string());
        }
        create.send().await?;
        tracing::info!(queue = %name, "created the SQS queue");
        Ok(())
    }

    /// A publisher from a sink URL: `sqs://?queue_url=https://sqs.REGION.amazonaws.com/ACCOUNT/QUEUE[.fifo]`
    /// `&endpoint=http://127.0.0.1:4566&region=...&timeout_ms=10000&max_message_bytes=262144&source=...`
    /// `&schema_base=...&mode=binary`, credentials from the AWS environment variables.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSink`] for a missing or invalid queue URL, an unknown option, no region or no credentials.
    pub fn from_url(url: &url::Url) -> Result<Self> {
        let mut query = Query::new(url)?;
        if url.scheme() != "sqs" || url.has_host() && url.host_str() != Some("") || !matches!(url.path(), "" | "/") {
            return Err(query.invalid("an SQS sink is `sqs://?queue_url=...`"));
        }
        let mut builder = Self::builder().cloud_events(CloudEvents::from_query(&mut query)?);
        builder.display = Some(masked(url));
        let queue_url = query.take("queue_url").ok_or_else(|| query.invalid("`queue_url` is required"))?;
        builder = builder.queue_url(queue_url);
        if let Some(endpoint) = query.take("endpoint") {
            builder = builder.endpoint(endpoint);
        }
        if let Some(region) = query.take("region") {
            builder = builder.region(region);
        }
        if let Some(timeout) = query.take_millis("timeout_ms")? {
            builder = builder.timeout(timeout);
        }
        if let Some(max) = query.take_parsed("max_message_bytes", "a number of bytes", |v| v.parse().ok())? {
            builder = builder.max_message_bytes(max);
        }
        if let Some(ca) = query.take("tls_ca") {
            builder = builder.tls_ca(ca);
        }
        if let Some(retention) = query.take_parsed("queue_retention_s", "60 to 1209600 seconds", |v| {
            v.parse::<u32>().ok().filter(|s| (60..=1_209_600).contains(s))
        })? {
            builder = builder.queue_retention(Duration::from_secs(retention.into()));
        }
        query.finish(&[
            "queue_retention_s",
            "queue_url",
            "tls_ca",
            "endpoint",
            "region",
            "timeout_ms",
            "max_message_bytes",
            "source",
            "schema_base",
            "mode",
        ])?;
        builder.build()
    }

    /// The batch entry of `message` and its size as SQS counts it ([`message_size`]).
    fn entry(
        &self,
        index: usize,
        message: &Message,
        fifo: bool,
    ) -> std::result::Result<(SendMessageBatchRequestEntry, usize), Outcome> {
        let body = String::from_utf8(self.envelope.body(message)).unwrap_or_default();
        let attributes = self.attributes(message);
        let size = message_size(&body, &attributes);
        if size > self.max_message_bytes {
            return Err(Outcome::permanent(format!("message too large for SQS: {size} bytes with its attributes")));
        }
        let mut entry = SendMessageBatchRequestEntry::builder().id(index.to_string()).message_body(body);
        for (name, value) in attributes {
            let value = MessageAttributeValue::builder()
                .data_type("String")
                .string_value(value)
                .build()
                .map_err(|_| Outcome::permanent("invalid SQS message attribute"))?;
            entry = entry.message_attributes(name, value);
        }
        if fifo {
            entry = entry.message_group_id(&message.aggregate_id).message_deduplication_id(message.id.to_string());
        }
        let entry = entry.build().map_err(|_| Outcome::permanent("invalid SQS batch entry"))?;
        Ok((entry, size))
    }

    /// The message attributes of `message`: the `ce_` attributes, then the event's headers, one attribute each
    /// when they all fit within SQS's ten, or else all of them as one JSON object in the attribute
    /// [`HEADERS_ATTRIBUTE`].
    fn attributes(&self, message: &Message) -> Vec<(String, String)> {
        let mut attributes = self.envelope.attribute_headers(message, Binding::Underscore);
        // SQS refuses an empty attribute value (for the whole entry, for good); enqueue refuses one, a row written
        // by hand may still hold one: it is left out.
        let headers: std::collections::BTreeMap<&str, &str> =
            message.forwarded_headers().filter(|(_, value)| !value.is_empty()).collect();
        if attributes.len() + headers.len() <= MAX_ATTRIBUTES {
            attributes.extend(headers.into_iter().map(|(name, value)| (name.to_owned(), value.to_owned())));
        } else {
            // Strings always serialize.
            attributes.push((HEADERS_ATTRIBUTE.to_owned(), serde_json::to_string(&headers).unwrap_or_default()));
        }
        attributes
    }

    /// Sends one request of at most ten entries to `queue_url` and returns the outcome of each entry, by its
    /// place in the batch. A queue that does not exist is created and the request sent again with
    /// [`create_destinations`](SqsBuilder::create_destinations) (the queues of a template are known only here);
    /// without it, the outcome names the queue and the fix.
    async fn send(
        &self,
        queue_url: &str,
        entries: Vec<(usize, SendMessageBatchRequestEntry)>,
    ) -> Vec<(usize, Outcome)> {
        let indexes: Vec<usize> = entries.iter().map(|(index, _)| *index).collect();
        let retry = self.create_destinations.then(|| entries.clone());
        if let Some(outcomes) = self.send_once(queue_url, entries).await {
            return outcomes;
        }
        let name = queue_url.rsplit('/').next().unwrap_or_default();
        let reason = match retry {
            Some(entries) => match self.create_queue(name).await {
                Ok(()) => match self.send_once(queue_url, entries).await {
                    Some(outcomes) => return outcomes,
                    None => format!("the SQS queue `{name}` does not exist yet after it was created"),
                },
                Err(error) => format!("cannot create the SQS queue `{name}`: {}", innermost(&error)),
            },
            None => format!("the SQS queue `{name}` does not exist (create it, or start with `--create-destinations`)"),
        };
        indexes.into_iter().map(|index| (index, Outcome::transient(&reason))).collect()
    }

    /// [`send`](Self::send), one request; `None` when the queue does not exist.
    async fn send_once(
        &self,
        queue_url: &str,
        entries: Vec<(usize, SendMessageBatchRequestEntry)>,
    ) -> Option<Vec<(usize, Outcome)>> {
        let indexes: Vec<usize> = entries.iter().map(|(index, _)| *index).collect();
        let mut outcomes: Vec<(usize, Outcome)> =
            indexes.iter().map(|index| (*index, Outcome::transient("SQS did not answer for this entry"))).collect();
        let mut set = |index: usize, outcome: Outcome| {
            if let Some(slot) = outcomes.iter_mut().find(|(i, _)| *i == index) {
                slot.1 = outcome;
            }
        };
        let request = self
            .client
            .send_message_batch()
            .queue_url(queue_url)
            .set_entries(Some(entries.into_iter().map(|(_, entry)| entry).collect()));
        match request.send().await {
            Ok(output) => {
                for ok in output.successful() {
                    if let Ok(index) = ok.id().parse::<usize>() {
                        set(index, Outcome::Published);
                    }
                }
                for failed in output.failed() {
                    let Ok(index) = failed.id().parse::<usize>() else { continue };
                    let reason = format!("SQS refused the message: {}", failed.code());
                    set(
                        index,
                        if failed.sender_fault() { Outcome::permanent(reason) } else { Outcome::transient(reason) },
                    );
                }
            }
            Err(SdkError::ServiceError(service)) if service.err().is_queue_does_not_exist() => return None,
            Err(error) => {
                let outcome = outcome_of(&error);
                for slot in &mut outcomes {
                    slot.1 = outcome.clone();
                }
            }
        }
        Some(outcomes)
    }
}

/// The start-up reading of a failed `GetQueueUrl` or `CreateQueue` call: refused credentials or permissions are
/// fatal, the rest is waited for.
fn start_failure<E, R>(error: &SdkError<E, R>, target: String) -> Error
where
    E: aws_sdk_sqs::error::ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug + 'static,
{
    match error {
        SdkError::ServiceError(service) => {
            let code = service.err().code().unwrap_or("unknown").to_owned();
            let message = service.err().message().map(|m| format!(": {m}")).unwrap_or_default();
            let reason = format!("{code}{message}");
            if code.contains("Throttl") || code.contains("ServiceUnavailable") || code.contains("InternalFailure") {
                Error::Unreachable { target, reason }
            } else {
                Error::Refused { target, reason }
            }
        }
        SdkError::TimeoutError(_) => Error::Unreachable { target, reason: "timed out".to_owned() },
        SdkError::DispatchFailure(_) => {
            let cause = innermost(error);
            // An untrusted certificate stays untrusted: retrying cannot fix it.
            if cause.contains("certificate") {
                Error::Refused { target, reason: format!("TLS: {cause}") }
            } else {
                Error::Unreachable { target, reason: format!("cannot connect: {cause}") }
            }
        }
        _ => Error::Unreachable { target, reason: "unreadable response".to_owned() },
    }
}

/// The relay's reading of a failed `SendMessageBatch` call. A transient service error (throttling above all)
/// that came with a `Retry-After` passes its wait on.
fn outcome_of(error: &SdkError<SendMessageBatchError>) -> Outcome {
    match error {
        SdkError::TimeoutError(_) => Outcome::transient("SQS timed out"),
        // The request could not be sent (no connection, a DNS or TLS failure).
        SdkError::DispatchFailure(_) => Outcome::unavailable(format!("cannot reach SQS: {}", innermost(error))),
        SdkError::ResponseError(_) => Outcome::transient("SQS sent an unreadable response"),
        SdkError::ServiceError(service) => {
            let error = service.err();
            let code = aws_sdk_sqs::error::ProvideErrorMetadata::code(error).unwrap_or("unknown").to_owned();
            let outcome = match error {
                SendMessageBatchError::QueueDoesNotExist(_) => Outcome::transient("the SQS queue does not exist"),
                SendMessageBatchError::KmsThrottled(_) | SendMessageBatchError::RequestThrottled(_) => {
                    Outcome::transient(format!("SQS throttled the request: {code}"))
                }
                // Throttling the model does not name (`ThrottlingException` of the JSON protocol, an endpoint's own).
                _ if code.contains("Throttl") => Outcome::transient(format!("SQS throttled the request: {code}")),
                SendMessageBatchError::BatchRequestTooLong(_) => Outcome::transient("SQS batch too long"),
                SendMessageBatchError::InvalidSecurity(_)
                | SendMessageBatchError::InvalidAddress(_)
                | SendMessageBatchError::KmsAccessDenied(_)
                | SendMessageBatchError::KmsDisabled(_)
                | SendMessageBatchError::KmsNotFound(_)
                | SendMessageBatchError::KmsOptInRequired(_)
                | SendMessageBatchError::UnsupportedOperation(_) => {
                    Outcome::permanent(format!("SQS refused the request: {code}"))
                }
                _ if code.contains("AccessDenied") => Outcome::permanent(format!("SQS refused the request: {code}")),
                _ => Outcome::transient(format!("SQS refused the request: {code}")),
            };
            with_retry_after(outcome, service.raw())
        }
        _ => Outcome::transient("SQS request failed"),
    }
}

/// `outcome` with the wait of the response's `Retry-After` (seconds or an HTTP date) when it is transient; the
/// relay waits at least that long, within its backoff's maximum.
fn with_retry_after(outcome: Outcome, response: &aws_sdk_sqs::config::http::HttpResponse) -> Outcome {
    let Outcome::Transient(error) = outcome else { return outcome };
    let wait = response
        .headers()
        .get("retry-after")
        .and_then(|value| super::retry_after::parse_retry_after(value, std::time::SystemTime::now()));
    Outcome::Transient(match wait {
        Some(wait) => error.with_retry_after(wait),
        None => error,
    })
}

impl SqsBuilder {
    /// The queue URL template, e.g. `https://sqs.eu-west-1.amazonaws.com/123456789012/outbox.fifo`; see
    /// [`Template`]. Required.
    pub fn queue_url(mut self, queue_url: impl Into<String>) -> Self {
        self.queue_url = Some(queue_url.into());
        self
    }

    /// Another endpoint than AWS's (LocalStack, moto, ElasticMQ).
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// The AWS region (default: `AWS_REGION`, then `AWS_DEFAULT_REGION`).
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// Static credentials (default: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`).
    pub fn credentials(mut self, access_key_id: impl Into<String>, secret_access_key: impl Into<String>) -> Self {
        self.credentials = Some((access_key_id.into(), secret_access_key.into(), None));
        self
    }

    /// How long one request may take, connecting included (default 10 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Refuses (permanently) larger messages before sending (default 256 KiB, SQS's classic limit).
    pub fn max_message_bytes(mut self, max: usize) -> Self {
        self.max_message_bytes = max;
        self
    }

    /// The CloudEvents settings (source, dataschema base, content mode).
    pub fn cloud_events(mut self, envelope: CloudEvents) -> Self {
        self.envelope = envelope;
        self
    }

    /// Trusts the certificate authorities of this PEM file instead of the system's, for an `https://` endpoint
    /// with a private CA (a VPC endpoint behind an inspecting proxy, LocalStack with its own certificate;
    /// `tls_ca=PATH` in the URL). The endpoint's certificate is always verified, host name included.
    pub fn tls_ca(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.tls_ca = Some(path.into());
        self
    }

    /// Whether the publisher creates a missing queue (default: no, it reports it): a fixed one at
    /// [`SqsPublisher::connect`], one of a template when an event is first published to it.
    pub fn create_destinations(mut self, create: bool) -> Self {
        self.create_destinations = create;
        self
    }

    /// The message retention of a queue [`create_destinations`](Self::create_destinations) creates (60 s to 14
    /// days, whole seconds; default SQS's four days).
    pub fn queue_retention(mut self, retention: Duration) -> Self {
        self.retention = Some(u32::try_from(retention.as_secs()).unwrap_or(u32::MAX));
        self
    }

    /// Validates the settings and builds the publisher.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSink`] when the queue URL is missing or invalid, the endpoint is not a URL, there is no
    /// region or no credentials, the timeout is zero, or the `tls_ca` file cannot be read or holds no certificate.
    pub fn build(self) -> Result<SqsPublisher> {
        let queue_url = self.queue_url.clone().unwrap_or_default();
        let display = self.display.clone().unwrap_or_else(|| format!("sqs://?queue_url={queue_url}"));
        let invalid = |reason: &str| Error::InvalidSink { sink: display.clone(), reason: reason.to_owned() };
        if self.queue_url.is_none() {
            return Err(invalid("`queue_url` is required"));
        }
        let template = Template::parse(&queue_url, Naming::SqsQueueUrl).map_err(|reason| invalid(&reason))?;
        if let Some(endpoint) = &self.endpoint {
            url::Url::parse(endpoint).map_err(|_| invalid("`endpoint` must be a URL, e.g. `http://127.0.0.1:4566`"))?;
        }
        let env = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        let region = self
            .region
            .clone()
            .or_else(|| env("AWS_REGION"))
            .or_else(|| env("AWS_DEFAULT_REGION"))
            .ok_or_else(|| invalid("no AWS region: set `region=...` or AWS_REGION"))?;
        let (key, secret, token) = match self.credentials.clone() {
            Some(credentials) => credentials,
            None => match (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
                (Some(key), Some(secret)) => (key, secret, env("AWS_SESSION_TOKEN")),
                _ => return Err(invalid("no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")),
            },
        };
        if self.timeout.is_zero() {
            return Err(invalid("the SQS timeout must be more than zero"));
        }
        if self.retention.is_some_and(|seconds| !(60..=1_209_600).contains(&seconds)) {
            return Err(invalid("an SQS queue's retention is 60 seconds to 14 days"));
        }
        let mut http = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(tls::rustls_provider::CryptoMode::Ring));
        if let Some(ca) = &self.tls_ca {
            let pem = std::fs::read(ca)
                .map_err(|error| invalid(&format!("`tls_ca`: cannot read {}: {}", ca.display(), error.kind())))?;
            if !pem.windows(27).any(|window| window == b"-----BEGIN CERTIFICATE-----") {
                return Err(invalid(&format!("`tls_ca`: {} holds no PEM certificate", ca.display())));
            }
            let trust = tls::TrustStore::empty().with_native_roots(false).with_pem_certificate(pem);
            let context = tls::TlsContext::builder()
                .with_trust_store(trust)
                .build()
                .map_err(|error| invalid(&format!("`tls_ca`: {error}")))?;
            http = http.tls_context(context);
        }
        let http = http.build_https();
        // Connecting gets a quarter of the call (its two attempts, and the wait between them, fit in it), so that an
        // endpoint that never answers the connection is told from a slow answer: a dispatch failure, unreachable.
        let quarter = (self.timeout / 4).min(Duration::from_secs(10));
        let timeouts = aws_sdk_sqs::config::timeout::TimeoutConfig::builder()
            .operation_timeout(self.timeout)
            .connect_timeout(quarter)
            .build();
        let mut config = aws_sdk_sqs::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(region))
            .credentials_provider(Credentials::new(key, secret, token, None, "outbox-relay"))
            .http_client(http)
            .timeout_config(timeouts)
            .retry_config(
                aws_sdk_sqs::config::retry::RetryConfig::standard().with_max_attempts(2).with_max_backoff(quarter),
            );
        if let Some(endpoint) = &self.endpoint {
            config = config.endpoint_url(endpoint);
        }
        Ok(SqsPublisher {
            display,
            client: aws_sdk_sqs::Client::from_conf(config.build()),
            queue_url: template,
            envelope: self.envelope,
            max_message_bytes: self.max_message_bytes,
            create_destinations: self.create_destinations,
            retention: self.retention,
        })
    }
}

/// One entry of a batch request: its place in the relay's batch, the entry, and its body's size.
type Entry = (usize, SendMessageBatchRequestEntry, usize);

impl Publisher for SqsPublisher {
    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        let mut outcomes = vec![Outcome::transient("not sent"); batch.len()];
        // Group by queue, keeping the batch order inside each queue.
        let mut queues: Vec<(String, Vec<Entry>)> = Vec::new();
        for (index, message) in batch.iter().enumerate() {
            let queue = match self.queue_url.render(message) {
                Ok(queue) => queue,
                Err(reason) => {
                    outcomes[index] = Outcome::permanent(reason);
                    continue;
                }
            };
            let fifo = queue.ends_with(".fifo");
            match self.entry(index, message, fifo) {
                Ok((entry, size)) => match queues.iter_mut().find(|(url, _)| *url == queue) {
                    Some((_, entries)) => entries.push((index, entry, size)),
                    None => queues.push((queue, vec![(index, entry, size)])),
                },
                Err(outcome) => outcomes[index] = outcome,
            }
        }
        // Requests of at most ten entries and at most `max_message_bytes` of messages (bodies and attributes, as
        // SQS counts a request), all sent at once, then awaited.
        // With ordering on, a batch holds at most one event per aggregate (one per FIFO message group), so
        // concurrent requests never reorder a group.
        let mut requests = Vec::new();
        for (queue, entries) in queues {
            let mut request = Vec::new();
            let mut bytes = 0;
            for (index, entry, size) in entries {
                if !request.is_empty() && (request.len() == MAX_BATCH || bytes + size > self.max_message_bytes) {
                    requests.push((queue.clone(), std::mem::take(&mut request)));
                    bytes = 0;
                }
                bytes += size;
                request.push((index, entry));
            }
            if !request.is_empty() {
                requests.push((queue, request));
            }
        }
        let sent = requests.iter_mut().map(|(queue, request)| self.send(queue, std::mem::take(request)));
        for (index, outcome) in futures_util::future::join_all(sent).await.into_iter().flatten() {
            outcomes[index] = outcome;
        }
        outcomes
    }
}

/// The size SQS counts for a message, against its limit on one message and on one batch request: the body, and
/// each attribute's name, data type (`String`, the only one written) and value.
fn message_size(body: &str, attributes: &[(String, String)]) -> usize {
    body.len() + attributes.iter().map(|(name, value)| name.len() + "String".len() + value.len()).sum::<usize>()
}

impl fmt::Display for SqsPublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display)
    }
}

impl fmt::Debug for SqsPublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqsPublisher")
            .field("sink", &self.display)
            .field("queue_url", &self.queue_url.as_str())
            .field("envelope", &self.envelope)
            .finish_non_exhaustive()
    }
}

impl SqsPublisher {
    /// What this publisher puts on the wire, for the AsyncAPI document of its sink: the headers are message
    /// attributes.
    pub(crate) fn shape(&self) -> super::wire::Shape<'_> {
        super::wire::Shape {
            protocol: "sqs",
            destination: &self.queue_url,
            binding: Binding::Underscore,
            envelope: &self.envelope,
            own_headers: &[(
                HEADERS_ATTRIBUTE,
                "The event's own headers as one JSON object of strings (`{\"tenant\":\"acme\"}`), on messages whose headers do not fit SQS's ten attributes one each.",
                false,
            )],
            pathname: None,
            keyed_by_aggregate: false,
            channel_bindings: None,
            description: "The outbox relay sends each event as a message whose attributes are the headers; when an event's own headers do not fit SQS's ten attributes they travel as one JSON object in `outbox_headers`. FIFO queues group by aggregate id and deduplicate by event id.",
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use aws_sdk_sqs::config::http::HttpResponse;
    use aws_sdk_sqs::error::{ErrorMetadata, SdkError};
    use aws_sdk_sqs::operation::send_message_batch::SendMessageBatchError;
    use aws_sdk_sqs::types::error::{KmsThrottled, RequestThrottled};

    use super::{outcome_of, SqsPublisher};
    use crate::publish::Outcome;

    /// A service error with this HTTP status and `Retry-After`, as the SDK hands it over.
    fn answered(
        error: SendMessageBatchError,
        status: u16,
        retry_after: Option<&str>,
    ) -> SdkError<SendMessageBatchError> {
        let mut response = HttpResponse::new(status.try_into().unwrap(), aws_smithy_types::body::SdkBody::empty());
        if let Some(value) = retry_after {
            response.headers_mut().insert("retry-after", value.to_owned());
        }
        SdkError::service_error(error, response)
    }

    fn generic(code: &str) -> SendMessageBatchError {
        SendMessageBatchError::generic(ErrorMetadata::builder().code(code).build())
    }

    #[test]
    fn throttling_passes_a_retry_after_on_in_seconds_or_as_a_date() {
        let throttled = || SendMessageBatchError::RequestThrottled(RequestThrottled::builder().build());
        let outcome = outcome_of(&answered(throttled(), 400, Some("7")));
        assert!(matches!(&outcome, Outcome::Transient(e) if e.message().contains("throttled")), "{outcome:?}");
        assert_eq!(outcome.retry_after(), Some(Duration::from_secs(7)));

        let date = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(120));
        let kms = SendMessageBatchError::KmsThrottled(KmsThrottled::builder().build());
        let wait = outcome_of(&answered(kms, 400, Some(&date))).retry_after().expect("a wait from the date");
        assert!(wait > Duration::from_secs(100) && wait <= Duration::from_secs(120), "{wait:?}");

        // Throttling under a code the model does not name, and an unavailable endpoint, pass the hint on too.
        for (error, status) in [(generic("ThrottlingException"), 400), (generic("ServiceUnavailable"), 503)] {
            let outcome = outcome_of(&answered(error, status, Some("3")));
            assert!(matches!(outcome, Outcome::Transient(_)), "{outcome:?}");
            assert_eq!(outcome.retry_after(), Some(Duration::from_secs(3)));
        }
        assert!(outcome_of(&answered(generic("ThrottlingException"), 400, None)).retry_after().is_none());
        assert!(outcome_of(&answered(throttled(), 400, Some("soon"))).retry_after().is_none(), "malformed: no wait");
    }

    #[test]
    fn a_permanent_refusal_never_carries_a_wait() {
        let outcome = outcome_of(&answered(generic("AccessDenied"), 403, Some("5")));
        assert!(matches!(outcome, Outcome::Permanent(_)), "{outcome:?}");
        assert_eq!(outcome.retry_after(), None);
    }

    #[test]
    fn urls_are_validated() {
        for (url, reason) in [
            ("sqs://", "`queue_url` is required"),
            ("sqs://?queue_url=http://h/1/a.b.c&region=x", "SQS queue name"),
            ("sqs://?queue_url=http://h/1/q&region=x&endpoint=nope", "`endpoint` must be a URL"),
            ("sqs://?queue_url=http://h/1/q&region=x&queue=y", "unknown option `queue`"),
        ] {
            let error = SqsPublisher::from_url(&url.parse().unwrap()).unwrap_err().to_string();
            assert!(error.contains(reason), "{url}: {error}");
        }
    }

    /// SQS counts a message's attributes in its size (ten CloudEvents attributes here, about 300 bytes): a body
    /// that fits alone but not with them is refused at once, and requests are cut by the same count. (moto, the
    /// test server, counts bodies only, against 1 MiB.)
    #[tokio::test]
    async fn a_message_is_sized_with_its_attributes_as_sqs_counts_it() {
        assert_eq!(super::message_size("abc", &[("ce_id".into(), "1234".into())]), 3 + 5 + 6 + 4);
        let publisher = SqsPublisher::builder()
            .queue_url("http://127.0.0.1:1/123456789012/q")
            .region("us-east-1")
            .credentials("test", "test")
            .max_message_bytes(1000)
            .build()
            .unwrap();
        // One time for every message: the timestamp attribute's text is as long for each.
        let created_at = time::OffsetDateTime::now_utc().replace_nanosecond(123_456_789).unwrap();
        let message = |body: usize| {
            let payload = format!(r#"{{"n":"{}"}}"#, "x".repeat(body));
            let mut message =
                crate::publish::Message::new(uuid::Uuid::now_v7(), "order.placed", "order", "order-1", payload);
            message.created_at = created_at;
            message
        };
        let body = publisher.envelope.body(&message(100)).len();
        let (_, size) = publisher.entry(0, &message(100), false).unwrap();
        let attributes = size - body;
        assert!(attributes > 200, "the attributes count: {attributes} bytes");
        // A body of 1000 - attributes + 1 bytes: one byte over the limit with the attributes.
        let fits_alone = 1000 - attributes + 1 - (body - 100);
        assert!(publisher.envelope.body(&message(fits_alone)).len() <= 1000);
        match publisher.entry(0, &message(fits_alone), false) {
            Err(Outcome::Permanent(error)) => {
                assert!(error.to_string().contains("too large for SQS") && error.to_string().contains("attributes"));
            }
            other => panic!("a message over the limit with its attributes was accepted: {:?}", other.map(|e| e.1)),
        }
    }
}
