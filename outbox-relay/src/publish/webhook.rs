//! HTTP webhooks, signed as [Standard Webhooks](https://www.standardwebhooks.com/) (`webhook-id`,
//! `webhook-timestamp`, `webhook-signature`: HMAC-SHA256 of `id.timestamp.body` with a shared secret).

use std::fmt;
use std::time::Duration;

use futures_util::stream::{self, StreamExt};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use reqwest::StatusCode;
use serde::Serialize;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;

use super::batch_ids::{BatchIds, Request, REMEMBERED_EVENTS};
use super::innermost_cause::innermost;
use super::{Message, Outcome, Publisher};
use crate::error::{Error, Result};
use crate::masked_url::masked_url as masked;

/// The headers of the Standard Webhooks signature scheme.
const WEBHOOK_ID: &str = "webhook-id";
const WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
const WEBHOOK_SIGNATURE: &str = "webhook-signature";

/// Publishes events as signed HTTP `POST` requests.
///
/// Each request carries a JSON body `{"id", "type", "version", "aggregate": {"type", "id"}, "timestamp",
/// "data"}` (`data` is the payload as enqueued), `webhook-id` (the event id, so receivers deduplicate retries),
/// `webhook-timestamp`, `webhook-signature` (`v1,<base64 HMAC-SHA256>`), and every header of the event
/// (`traceparent`, `tracestate`, `tenant`, ...) as an HTTP header of the same name.
///
/// A batch request ([`batch`](WebhookBuilder::batch)) sends a JSON array of those bodies, each with the event's
/// headers as a `headers` object (they differ per event, so they are not HTTP headers). Its `webhook-id` is
/// `batch_` and a UUID v5 of its event ids, sorted, and it stays the same across retries: the publisher remembers
/// which request each event awaiting a retry was sent in (the last 100,000 such events), and when the relay
/// retries them, even regrouped with other events, every earlier request whose events all came back is sent
/// again as it was (same id, same body), and the other events of the batch go in one new request. Events of an
/// earlier request that come back only in part go in the new request, never under the old id (a receiver that
/// deduplicates by `webhook-id` would drop them unseen). The memory is the process's own: after a restart, on
/// another relay, or for an event forgotten past the 100,000, a retry gets the id of its new grouping (the same
/// id when it holds the same events). Each element's `id` (the event id) never changes: a receiver of batches
/// may deduplicate by it as well.
///
/// A `2xx` answer publishes the event. `408`, `429`, `5xx`, timeouts and connection failures are transient (the
/// relay retries with backoff; a `Retry-After` of a `429` or `503`, in seconds or as an HTTP date, is passed on
/// as [`PublishError::retry_after`](crate::PublishError::retry_after), and the relay waits at least that long,
/// within its backoff's maximum; a receiver that cannot be connected to at all counts no attempt while nothing
/// else gets through: see [`PublishError::unavailable`](crate::PublishError::unavailable)); any other status is
/// permanent (the event goes to `failed`), except a `413` for a batch request of several events, which is sent
/// again at once in halves, each under a new id, until the receiver takes them (only an event refused alone
/// fails). Redirects are not followed: configure the final URL. Response bodies are never read into errors or
/// logs.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use outbox_relay::WebhookPublisher;
///
/// let publisher = WebhookPublisher::builder("https://hooks.example.com/outbox".parse()?)
///     .secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
///     .timeout(Duration::from_secs(5))
///     .build()?;
/// assert_eq!(publisher.to_string(), "https://hooks.example.com/outbox");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct WebhookPublisher {
    client: reqwest::Client,
    url: url::Url,
    signer: std::sync::Arc<standardwebhooks::Webhook>,
    batch: bool,
    concurrency: usize,
    batch_ids: std::sync::Arc<BatchIds>,
}

/// Settings of a [`WebhookPublisher`], validated by [`build`](Self::build).
#[derive(Debug, Clone)]
#[must_use]
pub struct WebhookBuilder {
    url: crate::masked_url::MaskedUrl,
    secret: Option<super::secret_source::Secret>,
    tls_ca: Option<std::path::PathBuf>,
    tls_client: Option<(std::path::PathBuf, std::path::PathBuf)>,
    batch: bool,
    timeout: Duration,
    concurrency: usize,
}

impl WebhookPublisher {
    /// Starts the settings of a publisher that posts to `url`.
    pub fn builder(url: url::Url) -> WebhookBuilder {
        WebhookBuilder {
            url: crate::masked_url::MaskedUrl(url),
            secret: None,
            tls_ca: None,
            tls_client: None,
            batch: false,
            timeout: Duration::from_secs(10),
            concurrency: 16,
        }
    }

    async fn post_one(&self, message: &Message) -> Outcome {
        let Ok(body) = serde_json::to_vec(&Body::of(message, false)) else {
            return Outcome::permanent("the payload is not valid JSON");
        };
        let headers: Vec<(&str, &str)> = message.forwarded_headers().collect();
        self.post(&message.id.to_string(), body, &headers).await
    }

    async fn post(&self, id: &str, body: Vec<u8>, event_headers: &[(&str, &str)]) -> Outcome {
        let timestamp = time::OffsetDateTime::now_utc().unix_timestamp();
        let signature = match self.signer.sign(id, timestamp, &body) {
            Ok(signature) => signature,
            Err(error) => return Outcome::permanent(format!("cannot sign the webhook: {error}")),
        };
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        for (name, value) in
            [(WEBHOOK_ID, id), (WEBHOOK_TIMESTAMP, &timestamp.to_string()), (WEBHOOK_SIGNATURE, &signature)]
        {
            match HeaderValue::from_str(value) {
                Ok(value) => headers.insert(HeaderName::from_static(name), value),
                Err(_) => return Outcome::permanent(format!("`{name}` is not a valid header value")),
            };
        }
        for (name, value) in event_headers {
            // Names and values passed `check_header` at enqueue; one HTTP still refuses is left out.
            if let (Ok(name), Ok(value)) =
                (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_bytes(value.as_bytes()))
            {
                headers.insert(name, value);
            }
        }
        match self.client.post(self.url.clone()).headers(headers).body(body).send().await {
            Ok(response) => {
                let outcome = outcome_of_status(response.status());
                match (outcome, retry_after(&response)) {
                    (Outcome::Transient(error), Some(delay)) => Outcome::Transient(error.with_retry_after(delay)),
                    (outcome, _) => outcome,
                }
            }
            // No connection to the receiver (refused, or not answered within the connect timeout, as a host that
            // is down or a firewall that drops packets leaves it): the request never went out.
            Err(error) if error.is_connect() => {
                Outcome::unavailable(format!("webhook request failed: {}", describe(error)))
            }
            Err(error) if error.is_timeout() => Outcome::transient("webhook timed out"),
            Err(error) => Outcome::transient(format!("webhook request failed: {}", describe(error))),
        }
    }
}

impl WebhookBuilder {
    /// The signing secret shared with the receiver: `whsec_` followed by base64, as Standard Webhooks libraries
    /// generate it (a bare base64 string is accepted too). Required.
    pub fn secret(mut self, secret: impl Into<String>) -> Self {
        self.secret = Some(super::secret_source::Secret::new(secret));
        self
    }

    /// Trusts the certificate authorities of this PEM file instead of the system's (`https://` receivers with a
    /// private CA; `OUTBOX_WEBHOOK_TLS_CA` for the CLI). The receiver's certificate is always verified, host name
    /// included.
    pub fn tls_ca(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.tls_ca = Some(path.into());
        self
    }

    /// Presents this PEM client certificate and its PEM private key to receivers that ask for one (mutual TLS;
    /// `OUTBOX_WEBHOOK_TLS_CERT` and `OUTBOX_WEBHOOK_TLS_KEY` for the CLI).
    pub fn tls_client_certificate(
        mut self,
        certificate: impl Into<std::path::PathBuf>,
        key: impl Into<std::path::PathBuf>,
    ) -> Self {
        self.tls_client = Some((certificate.into(), key.into()));
        self
    }

    /// Sends each batch as one request whose body is a JSON array (default: one request per event); the events of
    /// a request succeed or fail together. A retry sends earlier requests again, under their `webhook-id`, beside
    /// the request of the batch's other events (see [`WebhookPublisher`]).
    pub fn batch(mut self, batch: bool) -> Self {
        self.batch = batch;
        self
    }

    /// How long one request may take, connecting included (default 10 s). Keep it well below the relay's lease.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How many requests of one batch are in flight at once (default 16). With ordering on, a batch holds at
    /// most one event per aggregate, so concurrent requests never reorder an aggregate's events.
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// Validates the settings and builds the publisher.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSink`] when the URL is not `http`/`https` with a host, the secret is missing or not base64,
    /// the timeout is zero, the concurrency is zero, or a TLS file cannot be read or holds no certificate (or key).
    pub fn build(self) -> Result<WebhookPublisher> {
        crate::crypto_provider::install_default();
        let url = self.url;
        let invalid = |reason: &str| Error::InvalidSink { sink: masked(&url), reason: reason.to_owned() };
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
            return Err(invalid("a webhook URL is `http://host/...` or `https://host/...`"));
        }
        let secret = self.secret.ok_or_else(|| invalid("a webhook needs a signing secret (`whsec_...`)"))?;
        let signer = standardwebhooks::Webhook::new(secret.expose())
            .map_err(|_| invalid("the webhook secret is not `whsec_` followed by base64"))?;
        if self.timeout.is_zero() {
            return Err(invalid("the webhook timeout must be more than zero"));
        }
        if self.concurrency == 0 {
            return Err(invalid("the webhook concurrency must be at least 1"));
        }
        let mut client = reqwest::Client::builder()
            .timeout(self.timeout)
            // Shorter than the whole request's, so that a connection never answered is told from a slow answer.
            .connect_timeout(connect_timeout(self.timeout))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("outbox-relay/", env!("CARGO_PKG_VERSION")));
        let read = |what: &str, path: &std::path::Path| {
            std::fs::read(path)
                .map_err(|error| invalid(&format!("the {what}: cannot read {}: {}", path.display(), error.kind())))
        };
        if let Some(ca) = &self.tls_ca {
            let authorities = reqwest::Certificate::from_pem_bundle(&read("TLS CA file", ca)?)
                .ok()
                .filter(|authorities| !authorities.is_empty())
                .ok_or_else(|| invalid(&format!("the TLS CA file {} holds no PEM certificate", ca.display())))?;
            client = client.tls_built_in_root_certs(false);
            for authority in authorities {
                client = client.add_root_certificate(authority);
            }
        }
        if let Some((certificate, key)) = &self.tls_client {
            let mut pem = read("TLS client certificate", certificate)?;
            pem.push(b'\n');
            pem.extend(read("TLS client key", key)?);
            let identity = reqwest::Identity::from_pem(&pem).map_err(|_| {
                invalid(&format!(
                    "the TLS client certificate {} and key {} are not a PEM certificate and its private key",
                    certificate.display(),
                    key.display()
                ))
            })?;
            client = client.identity(identity);
        }
        let client = client
            .build()
            .map_err(|error| invalid(&format!("cannot build the HTTP client: {}", error.without_url())))?;
        Ok(WebhookPublisher {
            client,
            url: url.0,
            signer: std::sync::Arc::new(signer),
            batch: self.batch,
            concurrency: self.concurrency,
            batch_ids: std::sync::Arc::new(BatchIds::new(REMEMBERED_EVENTS)),
        })
    }
}

impl Publisher for WebhookPublisher {
    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        if self.batch {
            return self.publish_batch(batch).await;
        }
        let requests: Vec<_> = batch.iter().map(|message| self.post_one(message)).collect();
        stream::iter(requests).buffered(self.concurrency).collect().await
    }
}

impl WebhookPublisher {
    /// A batch in batch mode: the requests [`BatchIds::plan`] makes of it (a retry's earlier requests again,
    /// under their ids), each event's outcome that of its request. Events published or refused for good are
    /// forgotten; the others keep their request for their next retry.
    ///
    /// A request of several events refused as too large (HTTP 413, before the receiver took any of them) is sent
    /// again at once in two halves, each under a new id, until the parts are taken; only an event refused alone
    /// fails for good.
    async fn publish_batch(&self, batch: &[Message]) -> Vec<Outcome> {
        let mut outcomes = vec![Outcome::transient("not sent"); batch.len()];
        let mut requests = self.batch_ids.plan(batch);
        while !requests.is_empty() {
            let sends: Vec<_> = requests.iter().map(|request| self.post_batch(batch, request)).collect();
            let answers: Vec<Outcome> = stream::iter(sends).buffered(self.concurrency).collect().await;
            let mut too_large = Vec::new();
            for (request, outcome) in requests.iter().zip(answers) {
                if request.indexes.len() > 1 && is_too_large(&outcome) {
                    too_large.push(request.clone());
                    continue;
                }
                if !matches!(outcome, Outcome::Transient(_)) {
                    self.batch_ids.forget(batch, request);
                }
                for &index in &request.indexes {
                    outcomes[index] = outcome.clone();
                }
            }
            requests = too_large.iter().flat_map(|request| self.batch_ids.split(batch, request)).collect();
        }
        outcomes
    }

    /// One request of a batch: a JSON array of its events' bodies, each with its headers.
    async fn post_batch(&self, batch: &[Message], request: &Request) -> Outcome {
        let bodies: Vec<Body<'_>> = request.indexes.iter().map(|&index| Body::of(&batch[index], true)).collect();
        match serde_json::to_vec(&bodies) {
            Ok(body) => self.post(&request.id, body, &[]).await,
            Err(_) => Outcome::permanent("a payload in the batch is not valid JSON"),
        }
    }
}

impl fmt::Display for WebhookPublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&masked(&self.url))
    }
}

impl fmt::Debug for WebhookPublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookPublisher")
            .field("url", &masked(&self.url))
            .field("secret", &"[REDACTED]")
            .field("batch", &self.batch)
            .field("concurrency", &self.concurrency)
            .finish()
    }
}

/// The request body for one event.
#[derive(Serialize)]
struct Body<'a> {
    id: Uuid,
    #[serde(rename = "type")]
    event_type: &'a str,
    version: u32,
    aggregate: Aggregate<'a>,
    timestamp: String,
    /// The event's headers, in a batch request only (a single request sends them as HTTP headers).
    #[serde(skip_serializing_if = "Option::is_none")]
    headers: Option<std::collections::BTreeMap<&'a str, &'a str>>,
    data: &'a serde_json::value::RawValue,
}

#[derive(Serialize)]
struct Aggregate<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    id: &'a str,
}

impl<'a> Body<'a> {
    fn of(message: &'a Message, with_headers: bool) -> Self {
        let data =
            serde_json::from_str::<&serde_json::value::RawValue>(&message.payload).unwrap_or_else(|_| null_json());
        Body {
            id: message.id,
            event_type: &message.event_type,
            version: message.version,
            aggregate: Aggregate { kind: &message.aggregate_type, id: &message.aggregate_id },
            timestamp: message.created_at.format(&Rfc3339).unwrap_or_default(),
            headers: with_headers.then(|| message.forwarded_headers().collect()),
            data,
        }
    }
}

fn null_json() -> &'static serde_json::value::RawValue {
    // `null` is valid JSON, so this parse cannot fail.
    serde_json::from_str("null").unwrap_or_else(|_| unreachable!("`null` is JSON"))
}

/// The `Retry-After` of a `429` or `503` answer, in seconds or as an HTTP date (a date in the past is no wait),
/// capped at a day. `None` for other statuses and for a missing or malformed header.
fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    let status = response.status();
    if status != StatusCode::TOO_MANY_REQUESTS && status != StatusCode::SERVICE_UNAVAILABLE {
        return None;
    }
    let value = response.headers().get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    super::retry_after::parse_retry_after(value, std::time::SystemTime::now())
}

/// The relay's reading of an HTTP status.
fn outcome_of_status(status: StatusCode) -> Outcome {
    if status.is_success() {
        Outcome::Published
    } else if status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error()
    {
        Outcome::transient(answered(status))
    } else {
        Outcome::permanent(answered(status))
    }
}

/// The description of a failure for `status`.
fn answered(status: StatusCode) -> String {
    format!("webhook answered HTTP {}", status.as_u16())
}

/// The connect timeout of a request that may take `timeout` in all: half of it, at most 10 s.
fn connect_timeout(timeout: Duration) -> Duration {
    (timeout / 2).min(Duration::from_secs(10))
}

/// Whether `outcome` is the receiver refusing a request as too large (HTTP 413).
fn is_too_large(outcome: &Outcome) -> bool {
    matches!(outcome, Outcome::Permanent(error) if error.message() == answered(StatusCode::PAYLOAD_TOO_LARGE))
}

/// A failed request in one line: reqwest's own text ("error sending request") and the innermost cause (a refused
/// connection, an untrusted certificate), never the URL (it may carry a token).
fn describe(error: reqwest::Error) -> String {
    let error = error.without_url();
    let (top, inner) = (error.to_string(), innermost(&error));
    if inner == top {
        top
    } else {
        format!("{top}: {inner}")
    }
}

#[cfg(test)]
mod tests {
    use reqwest::StatusCode;

    use super::{outcome_of_status, Outcome};

    #[test]
    fn statuses_map_to_the_documented_outcomes() {
        for code in [200, 201, 202, 204] {
            assert_eq!(outcome_of_status(StatusCode::from_u16(code).unwrap()), Outcome::Published, "{code}");
        }
        for code in [408, 429, 500, 502, 503, 504] {
            assert!(matches!(outcome_of_status(StatusCode::from_u16(code).unwrap()), Outcome::Transient(_)), "{code}");
        }
        for code in [301, 302, 400, 401, 403, 404, 410, 413, 422] {
            assert!(matches!(outcome_of_status(StatusCode::from_u16(code).unwrap()), Outcome::Permanent(_)), "{code}");
        }
    }
}
