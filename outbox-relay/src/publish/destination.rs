//! Where a broker publisher sends each event: a name template (`outbox.{event_type}`) rendered per event and
//! checked against the broker's naming rules; and the query options of broker sink URLs.

use std::collections::BTreeMap;
use std::fmt;

use super::Message;
use crate::{Error, Result};

/// The naming rules of one kind of broker destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Naming {
    /// A Kafka topic: 1 to 249 of `a-z A-Z 0-9 . _ -`, not `.` or `..`.
    KafkaTopic,
    /// A NATS subject to publish to: dot-separated non-empty tokens, no whitespace, no wildcards (`*`, `>`).
    NatsSubject,
    /// A RabbitMQ routing key: at most 255 bytes, no control characters.
    AmqpRoutingKey,
    /// An SQS queue name: 1 to 80 of `a-z A-Z 0-9 _ -`, optionally followed by `.fifo`.
    SqsQueue,
    /// An SQS queue URL: `http(s)://host/account/name`, the name as [`Naming::SqsQueue`].
    SqsQueueUrl,
    /// A Redis stream key: 1 to 1024 bytes, no whitespace or control characters.
    RedisStream,
}

impl Naming {
    fn what(self) -> &'static str {
        match self {
            Self::KafkaTopic => "Kafka topic",
            Self::NatsSubject => "NATS subject",
            Self::AmqpRoutingKey => "RabbitMQ routing key",
            Self::SqsQueue => "SQS queue name",
            Self::SqsQueueUrl => "SQS queue URL",
            Self::RedisStream => "Redis stream key",
        }
    }

    /// Checks `name`; the error says why it is refused.
    ///
    /// # Errors
    ///
    /// A one-line reason when `name` breaks the rules.
    pub fn check(self, name: &str) -> std::result::Result<(), String> {
        let what = self.what();
        let bad = |why: &str| Err(format!("invalid {what} `{}`: {why}", name.escape_debug()));
        match self {
            Self::KafkaTopic => {
                if name.is_empty() || name.len() > 249 {
                    return bad("must be 1 to 249 characters");
                }
                if name == "." || name == ".." {
                    return bad("`.` and `..` are reserved");
                }
                if !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')) {
                    return bad("only letters, digits, `.`, `_` and `-` are allowed");
                }
            }
            Self::NatsSubject => {
                if name.is_empty() || name.len() > 4096 {
                    return bad("must be 1 to 4096 bytes");
                }
                if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
                    return bad("no whitespace allowed");
                }
                if name.split('.').any(|token| token.is_empty()) {
                    return bad("empty token (leading, trailing or double `.`)");
                }
                if name.split('.').any(|token| token == "*" || token == ">" || token.contains(['*', '>'])) {
                    return bad("wildcards `*` and `>` cannot be published to");
                }
            }
            Self::AmqpRoutingKey => {
                if name.len() > 255 {
                    return bad("must be at most 255 bytes");
                }
                if name.chars().any(char::is_control) {
                    return bad("no control characters allowed");
                }
            }
            Self::SqsQueue => {
                let base = name.strip_suffix(".fifo").unwrap_or(name);
                if base.is_empty() || name.len() > 80 {
                    return bad("must be 1 to 80 characters");
                }
                if !base.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-')) {
                    return bad("only letters, digits, `_` and `-` are allowed (and a `.fifo` suffix)");
                }
            }
            Self::SqsQueueUrl => {
                let parsed = url::Url::parse(name).map_err(|_| format!("invalid {what} `{name}`: not a URL"))?;
                if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none_or(str::is_empty) {
                    return bad("must be `https://sqs.REGION.amazonaws.com/ACCOUNT/QUEUE`");
                }
                let queue = parsed.path_segments().and_then(|mut segments| segments.next_back()).unwrap_or_default();
                return Self::SqsQueue.check(queue);
            }
            Self::RedisStream => {
                if name.is_empty() || name.len() > 1024 {
                    return bad("must be 1 to 1024 bytes");
                }
                if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
                    return bad("no whitespace allowed");
                }
            }
        }
        Ok(())
    }
}

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    EventType,
    AggregateType,
    Version,
}

/// A destination name with placeholders, rendered per event: `{event_type}`, `{aggregate_type}`, `{version}`.
/// `{{` and `}}` stand for literal braces.
///
/// # Example
///
/// ```
/// use outbox_relay::{Message, Naming, Template};
///
/// let template = Template::parse("outbox.{event_type}.v{version}", Naming::NatsSubject)?;
/// let message = Message::new(uuid::Uuid::now_v7(), "order.placed", "order", "42", "{}");
/// assert_eq!(template.render(&message)?, "outbox.order.placed.v1");
/// assert!(Template::parse("outbox.{nope}", Naming::NatsSubject).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    source: String,
    parts: Vec<Part>,
    naming: Naming,
}

impl Template {
    /// Parses `template` and checks that it renders to a valid name for a typical event (`order.placed` of
    /// aggregate `order`, version 1), which catches invalid literal parts up front.
    ///
    /// # Errors
    ///
    /// A one-line reason for an unknown placeholder, an unbalanced brace, or a name the broker would refuse.
    pub fn parse(template: &str, naming: Naming) -> std::result::Result<Self, String> {
        let mut parts = Vec::new();
        let mut text = String::new();
        let mut chars = template.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    text.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    text.push('}');
                }
                '{' => {
                    let mut name = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some(c) => name.push(c),
                            None => return Err(format!("unclosed `{{` in `{template}`")),
                        }
                    }
                    let part = match name.as_str() {
                        "event_type" => Part::EventType,
                        "aggregate_type" => Part::AggregateType,
                        "version" => Part::Version,
                        other => {
                            return Err(format!(
                                "unknown placeholder `{{{other}}}` in `{template}`: use {{event_type}}, \
                                 {{aggregate_type}} or {{version}}"
                            ))
                        }
                    };
                    if !text.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut text)));
                    }
                    parts.push(part);
                }
                '}' => return Err(format!("unmatched `}}` in `{template}` (write `}}}}` for a literal brace)")),
                c => text.push(c),
            }
        }
        if !text.is_empty() {
            parts.push(Part::Text(text));
        }
        let template = Self { source: template.to_owned(), parts, naming };
        let sample = Message::new(uuid::Uuid::nil(), "order.placed", "order", "1", "{}");
        template.render(&sample)?;
        Ok(template)
    }

    /// The name for `message`.
    ///
    /// # Errors
    ///
    /// A one-line reason when the rendered name breaks the broker's naming rules (for example an event type
    /// with a `.` in an SQS queue name); the relay treats it as a permanent failure of that event.
    pub fn render(&self, message: &Message) -> std::result::Result<String, String> {
        let mut name = String::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => name.push_str(text),
                Part::EventType => name.push_str(&message.event_type),
                Part::AggregateType => name.push_str(&message.aggregate_type),
                Part::Version => name.push_str(&message.version.to_string()),
            }
        }
        self.naming.check(&name)?;
        Ok(name)
    }

    /// Whether the template has no placeholder (one destination for every event).
    #[must_use]
    pub fn is_fixed(&self) -> bool {
        self.parts.iter().all(|part| matches!(part, Part::Text(_)))
    }

    /// The template as written.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.source
    }
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

pub(crate) use crate::masked_url::masked_url as masked;

/// The query options of a broker sink URL, taken one by one; [`finish`](Self::finish) refuses any left over, so
/// a misspelt option is an error rather than silently ignored.
pub(crate) struct Query<'u> {
    url: &'u url::Url,
    options: BTreeMap<String, String>,
}

impl<'u> Query<'u> {
    /// The options of `url`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSink`] when an option is given twice.
    pub(crate) fn new(url: &'u url::Url) -> Result<Self> {
        let mut options = BTreeMap::new();
        for (name, value) in url.query_pairs() {
            if options.insert(name.to_string(), value.to_string()).is_some() {
                return Err(Error::InvalidSink { sink: masked(url), reason: format!("option `{name}` given twice") });
            }
        }
        Ok(Self { url, options })
    }

    /// Takes option `name`.
    pub(crate) fn take(&mut self, name: &str) -> Option<String> {
        self.options.remove(name)
    }

    /// Takes option `name` and parses it with `parse`; `what` describes a valid value.
    pub(crate) fn take_parsed<T>(
        &mut self,
        name: &str,
        what: &str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<Option<T>> {
        match self.take(name) {
            None => Ok(None),
            Some(value) => parse(&value).map(Some).ok_or_else(|| self.invalid(&format!("`{name}` must be {what}"))),
        }
    }

    /// Takes a duration option in milliseconds (`timeout_ms=5000`), more than zero.
    pub(crate) fn take_millis(&mut self, name: &str) -> Result<Option<std::time::Duration>> {
        self.take_parsed(name, "a number of milliseconds above zero", |value| {
            value.parse::<u64>().ok().filter(|ms| *ms > 0).map(std::time::Duration::from_millis)
        })
    }

    /// An [`Error::InvalidSink`] for this URL, password masked.
    pub(crate) fn invalid(&self, reason: &str) -> Error {
        Error::InvalidSink { sink: masked(self.url), reason: reason.to_owned() }
    }

    /// Fails when options are left that nobody took; `known` lists the valid ones for the message.
    pub(crate) fn finish(self, known: &[&str]) -> Result<()> {
        match self.options.keys().next() {
            None => Ok(()),
            Some(name) => Err(self.invalid(&format!("unknown option `{name}` (known: {})", known.join(", ")))),
        }
    }
}

/// A broker connection opened lazily and reopened after a failure, with capped exponential backoff between
/// attempts: while the broker is down, a publish fails fast (transient) instead of waiting for a connect timeout
/// on every batch.
#[cfg_attr(not(any(feature = "nats", feature = "rabbitmq", feature = "redis")), allow(dead_code))]
pub(crate) struct Reconnect<C> {
    state: tokio::sync::Mutex<ReconnectState<C>>,
}

struct ReconnectState<C> {
    connection: Option<C>,
    failures: u32,
    next_try: Option<tokio::time::Instant>,
    last_error: String,
}

#[cfg_attr(not(any(feature = "nats", feature = "rabbitmq", feature = "redis")), allow(dead_code))]
impl<C: Clone> Reconnect<C> {
    /// The longest wait between two connection attempts.
    const MAX_DELAY: std::time::Duration = std::time::Duration::from_secs(5);

    pub(crate) fn new() -> Self {
        Self {
            state: tokio::sync::Mutex::new(ReconnectState {
                connection: None,
                failures: 0,
                next_try: None,
                last_error: String::new(),
            }),
        }
    }

    /// The open connection, or a new one from `connect` unless the last attempt failed too recently. The error
    /// is a short description for [`Outcome::Transient`](super::Outcome::Transient).
    pub(crate) async fn get<F, Fut>(&self, connect: F) -> std::result::Result<C, String>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = std::result::Result<C, String>>,
    {
        let mut state = self.state.lock().await;
        if let Some(connection) = &state.connection {
            return Ok(connection.clone());
        }
        let now = tokio::time::Instant::now();
        if state.next_try.is_some_and(|next| next > now) {
            return Err(format!("{} (reconnecting)", state.last_error));
        }
        match connect().await {
            Ok(connection) => {
                state.connection = Some(connection.clone());
                state.failures = 0;
                state.next_try = None;
                Ok(connection)
            }
            Err(error) => {
                state.failures = state.failures.saturating_add(1);
                let delay = std::time::Duration::from_millis(100)
                    .saturating_mul(1 << state.failures.min(10))
                    .min(Self::MAX_DELAY);
                state.next_try = Some(now + delay);
                state.last_error.clone_from(&error);
                Err(error)
            }
        }
    }

    /// Keeps `connection`, opened ahead of the first publish (the publisher's `connect`), for the next batches.
    pub(crate) async fn put(&self, connection: C) {
        let mut state = self.state.lock().await;
        state.connection = Some(connection);
        state.failures = 0;
        state.next_try = None;
    }

    /// Forgets the connection after a connection-level failure: the next publish reconnects.
    #[cfg_attr(not(any(feature = "rabbitmq", feature = "redis")), allow(dead_code))]
    pub(crate) async fn reset(&self) {
        self.state.lock().await.connection = None;
    }
}

#[cfg(test)]
mod tests {
    use super::{masked, Naming, Template};
    use crate::Message;

    fn message(event_type: &str) -> Message {
        Message::new(uuid::Uuid::nil(), event_type, "order", "42", "{}")
    }

    #[test]
    fn templates_render_every_placeholder_and_literal_braces() {
        let template = Template::parse("{aggregate_type}-{event_type}-v{version}", Naming::KafkaTopic).unwrap();
        assert_eq!(template.render(&message("order.placed")).unwrap(), "order-order.placed-v1");
        let braces = Template::parse("x{{y}}", Naming::RedisStream).unwrap();
        assert_eq!(braces.render(&message("a")).unwrap(), "x{y}");
        assert!(braces.is_fixed());
        assert!(!template.is_fixed());
    }

    #[test]
    fn bad_templates_are_refused_up_front() {
        for (template, naming, reason) in [
            ("outbox.{event}", Naming::NatsSubject, "unknown placeholder `{event}`"),
            ("outbox.{event_type", Naming::NatsSubject, "unclosed"),
            ("outbox}", Naming::NatsSubject, "unmatched"),
            ("outbox.*", Naming::NatsSubject, "wildcards"),
            ("outbox..{event_type}", Naming::NatsSubject, "empty token"),
            ("out box", Naming::KafkaTopic, "only letters"),
            ("outbox-{event_type}", Naming::SqsQueue, "only letters"),
            ("", Naming::KafkaTopic, "1 to 249"),
        ] {
            let error = Template::parse(template, naming).unwrap_err();
            assert!(error.contains(reason), "{template}: {error}");
        }
    }

    #[test]
    fn rendered_names_are_checked_per_event() {
        let template = Template::parse("q-{aggregate_type}.fifo", Naming::SqsQueue).unwrap();
        assert_eq!(template.render(&message("x")).unwrap(), "q-order.fifo");
        let template = Template::parse("t.{event_type}", Naming::KafkaTopic).unwrap();
        assert!(template.render(&message("bad type")).unwrap_err().contains("invalid Kafka topic"));
    }

    #[test]
    fn passwords_are_masked() {
        let url = "amqp://user:hunter2@host/vhost".parse().unwrap();
        assert_eq!(masked(&url), "amqp://user:***@host/vhost");
    }
}
