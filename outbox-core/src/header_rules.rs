//! The header names and values every broker publisher of the relay can carry, checked at enqueue so that a header
//! the brokers would refuse or rename is a one-line error before anything is written.
//!
//! The rules are the intersection of what the brokers accept: HTTP field names (RFC 9110 tokens; HTTP/2 wants
//! them lowercase), NATS header names (no `:` or whitespace), SQS message attribute names (`a-z A-Z 0-9 - _ .`,
//! no leading, trailing or double `.`, no `aws.`/`amazon.` prefix), AMQP field table keys (at most 255 bytes),
//! Kafka record headers and Redis stream fields (any string), minus the names the publishers write themselves.
//! A value is not empty: SQS refuses an empty message attribute value.

/// The longest header name, in bytes.
pub const MAX_HEADER_NAME_BYTES: usize = 128;

/// The longest header value, in bytes.
pub const MAX_HEADER_VALUE_BYTES: usize = 4096;

/// Name prefixes the publishers use for their own headers: CloudEvents attributes (`ce_`, `ce-`, and
/// `cloudevents_`, which consumers read as AMQP's `cloudEvents_` in any case), Standard Webhooks (`webhook-`),
/// NATS (`nats-`), and those SQS reserves (`aws.`, `amazon.`).
const RESERVED_PREFIXES: [&str; 7] = ["ce_", "ce-", "cloudevents_", "webhook-", "nats-", "aws.", "amazon."];

/// Names the publishers write themselves (a message's content type, the Redis `data` field, the SQS attribute
/// that carries headers when they do not fit one attribute each), that consumers read an event's id from
/// (`event-id`), or that HTTP owns.
const RESERVED_NAMES: [&str; 12] = [
    "content-type",
    "event-id",
    "content-length",
    "data",
    "outbox_headers",
    "host",
    "connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "keep-alive",
];

/// Checks one header: the name is 1 to 128 lowercase ASCII letters, digits, `-`, `_` or `.` (starting with a
/// letter or a digit, no trailing or double `.`), not reserved by a publisher; the value is 1 to 4,096 bytes
/// without control characters. The error names the header and the broken rule, never the value.
///
/// # Errors
///
/// A one-line reason when the header breaks a rule.
///
/// # Example
///
/// ```
/// use outbox_core::check_header;
///
/// assert!(check_header("correlation-id", "c-42").is_ok());
/// assert!(check_header("tenant", "acme").is_ok());
/// assert!(check_header("Tenant", "acme").unwrap_err().contains("lowercase"));
/// assert!(check_header("ce_id", "x").unwrap_err().contains("reserved"));
/// assert!(check_header("cloudevents_type", "x").unwrap_err().contains("reserved"));
/// assert!(check_header("event-id", "x").unwrap_err().contains("reserved"));
/// ```
pub fn check_header(name: &str, value: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("header `{}`: {why}", name.escape_debug()));
    if name.is_empty() || name.len() > MAX_HEADER_NAME_BYTES {
        return bad("a header name is 1 to 128 bytes");
    }
    if !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.')) {
        return bad("a header name is lowercase ASCII letters, digits, `-`, `_` and `.` (what every broker accepts)");
    }
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) || name.ends_with('.') || name.contains("..") {
        return bad("a header name starts with a letter or a digit and has no trailing or double `.`");
    }
    if RESERVED_NAMES.contains(&name) || RESERVED_PREFIXES.iter().any(|prefix| name.starts_with(prefix)) {
        return bad(
            "the name is reserved for the headers the publishers write (`ce_`, `ce-`, `webhook-`, `nats-`, ...)",
        );
    }
    if value.is_empty() || value.len() > MAX_HEADER_VALUE_BYTES {
        return bad("a header value is 1 to 4096 bytes (SQS refuses an empty one)");
    }
    if value.chars().any(char::is_control) {
        return bad("a header value has no control characters (line breaks, tabs, NUL)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_header;

    #[test]
    fn names_every_broker_accepts_pass() {
        for name in ["tenant", "correlation-id", "traceparent", "tracestate", "x_request.id", "a1", "9lives"] {
            assert_eq!(check_header(name, "value with spaces and ünicode"), Ok(()), "{name}");
        }
    }

    #[test]
    fn names_a_broker_would_refuse_or_rename_are_refused_with_the_rule() {
        for (name, rule) in [
            ("", "1 to 128"),
            ("Tenant", "lowercase"),
            ("tenant id", "lowercase"),
            ("tenant:id", "lowercase"),
            (".tenant", "starts with"),
            ("tenant.", "trailing"),
            ("a..b", "double"),
            ("ce_id", "reserved"),
            ("ce-type", "reserved"),
            ("webhook-id", "reserved"),
            ("nats-msg-id", "reserved"),
            ("aws.traceheader", "reserved"),
            ("content-type", "reserved"),
            ("data", "reserved"),
        ] {
            let error = check_header(name, "v").unwrap_err();
            assert!(error.contains(rule), "{name:?}: {error}");
            assert!(!error.contains('\n'), "{error}");
        }
        assert!(check_header(&"a".repeat(129), "v").is_err());
    }

    #[test]
    fn bad_values_are_refused_without_being_echoed() {
        let error = check_header("tenant", "secret\r\nx-injected: 1").unwrap_err();
        assert!(error.contains("control characters") && !error.contains("secret"), "{error}");
        assert!(check_header("tenant", &"v".repeat(4097)).unwrap_err().contains("4096"));
        assert!(check_header("tenant", "").unwrap_err().contains("empty"));
    }
}
