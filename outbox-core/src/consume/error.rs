//! [`DecodeError`]: why a received message could not be read as a typed event.

/// Why a received message could not be read as a typed event.
///
/// No variant carries a payload value (serde's messages quote values, so only the kind of mismatch and where it
/// is are kept): an error can be logged as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The message is of another event type than the one asked for.
    #[error("the message is a `{found}` event, not `{expected}`")]
    UnknownType {
        /// The event type the consumer decodes.
        expected: &'static str,
        /// The event type the message says it is.
        found: String,
    },

    /// The message's schema version is not one the event type knows (newer than the consumer, or older than the
    /// first version it upcasts from).
    #[error("`{event_type}` v{version} is not a version this consumer reads (it knows {})", versions(.known))]
    UnknownVersion {
        /// The event type.
        event_type: &'static str,
        /// The version of the message.
        version: u32,
        /// The versions the consumer reads, newest first.
        known: Vec<u32>,
    },

    /// The payload does not match the schema of its version.
    #[error("the payload does not match `{event_type}` v{version}: {reason}")]
    Payload {
        /// The event type.
        event_type: &'static str,
        /// The version the payload was read as.
        version: u32,
        /// What does not match (a missing or unknown field, a wrong type) and where, without the value.
        reason: String,
    },

    /// The message lacks something every message of the relay carries (the event id, the type, the version), or
    /// has it malformed.
    #[error("the message is not an outbox event: {0}")]
    Envelope(String),
}

fn versions(known: &[u32]) -> String {
    known.iter().map(|v| format!("v{v}")).collect::<Vec<_>>().join(", ")
}

impl DecodeError {
    /// [`DecodeError::Payload`] from serde_json's error, keeping what names fields and positions only: serde's
    /// messages for a wrong type or value quote the value, which may be sensitive.
    pub(crate) fn payload(event_type: &'static str, version: u32, error: &serde_json::Error) -> Self {
        let message = error.to_string();
        let names_a_field =
            ["missing field", "unknown field", "duplicate field"].iter().any(|p| message.starts_with(p));
        let what = match error.classify() {
            // The name of an unknown field comes from the payload, and may be data (the keys of a flattened map):
            // left out. The names serde expected are the type's own.
            _ if message.starts_with("unknown field `") => {
                // What follows the name is the type's own: cut at its start, not at the name's first backtick (a
                // name can hold one).
                let message = message.split(" at line ").next().unwrap_or_default();
                let rest = ["`, expected ", "`, there are no fields"]
                    .iter()
                    .find_map(|tail| message.rfind(tail).map(|at| &message[at + 1..]))
                    .unwrap_or_default();
                format!("an unknown field{rest}")
            }
            _ if names_a_field => message.split(" at line ").next().unwrap_or_default().to_owned(),
            serde_json::error::Category::Data => "a value has the wrong type or is out of range".to_owned(),
            serde_json::error::Category::Syntax => "it is not valid JSON".to_owned(),
            serde_json::error::Category::Eof => "it ends too early".to_owned(),
            serde_json::error::Category::Io => "it could not be read".to_owned(),
        };
        let reason = format!("{what} at line {} column {}", error.line(), error.column());
        Self::Payload { event_type, version, reason }
    }
}

#[cfg(test)]
mod tests {
    use super::DecodeError;

    #[test]
    fn payload_errors_name_fields_but_never_quote_values() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Signup {
            email: u32,
        }
        let wrong = serde_json::from_str::<Signup>(r#"{"email":"ana@example.com"}"#).unwrap_err();
        let error = DecodeError::payload("user.signed_up", 1, &wrong).to_string();
        assert!(!error.contains("ana@example.com"), "{error}");
        assert!(error.contains("wrong type"), "{error}");
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Strict {
            id: u32,
        }
        let unknown = serde_json::from_str::<Strict>(r#"{"id":1,"ana@example.com":true}"#).unwrap_err();
        let error = DecodeError::payload("user.signed_up", 1, &unknown).to_string();
        assert!(!error.contains("ana@example.com"), "{error}");
        assert!(error.contains("an unknown field, expected `id`"), "{error}");
        let unknown = serde_json::from_str::<Strict>(r#"{"id":1,"x`ana@example.com":true}"#).unwrap_err();
        let error = DecodeError::payload("user.signed_up", 1, &unknown).to_string();
        assert!(!error.contains("ana@example.com"), "{error}");
        let missing = serde_json::from_str::<Signup>("{}").unwrap_err();
        assert_eq!(
            DecodeError::payload("user.signed_up", 1, &missing).to_string(),
            "the payload does not match `user.signed_up` v1: missing field `email` at line 1 column 2"
        );
    }
}
