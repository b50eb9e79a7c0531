//! Where a broker publisher sends each event: a name template (`outbox.{event_type}`) rendered per event and
//! checked against the broker's naming rules.

use std::fmt;

use super::Message;

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

#[cfg(test)]
mod tests {
    use super::{Naming, Template};
    use crate::publish::Message;

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
}
