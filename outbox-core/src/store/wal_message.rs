//! The events written to the write-ahead log without a table row ([`WalOutbox`](crate::WalOutbox)): a
//! transactional logical decoding message (`pg_logical_emit_message(true, 'outbox', content)`) whose content is
//! one JSON object per event. The enqueue writes it, the WAL relay reads it.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::new_event::Headers;
use crate::new_event::NewEvent;
use crate::store::{Checked, StoredEvent};

/// The prefix of the outbox's logical decoding messages; the WAL relay ignores messages with other prefixes.
pub const WAL_MESSAGE_PREFIX: &str = "outbox";

/// The transaction advisory lock between message-mode producers (shared, tried: a producer never waits) and the
/// removal of the slot (exclusive): a slot is dropped only once every transaction that wrote messages for it has
/// ended, and its unpublished messages are moved to the table first.
pub(crate) const WAL_EMIT_LOCK: i64 = 0x006f_7574_626f_786d; // "outboxm"

/// The session advisory lock a drop of the slot holds from before it marks the slot as closing until it is done
/// (`outbox_control.wal_closing_at`, migration 8): while it is held, a producer's check of the slot fails (migration
/// 17 tries it at every check); a mark whose holder died closes nothing. Migrations 8 and 17 derive it from
/// [`WAL_EMIT_LOCK`] the same way.
pub(crate) const WAL_CLOSE_LOCK: i64 = WAL_EMIT_LOCK + 1;

/// One event as a message's content.
#[derive(Serialize)]
struct Encoded<'a> {
    id: Uuid,
    #[serde(rename = "type")]
    event_type: &'a str,
    aggregate_type: &'a str,
    aggregate_id: &'a str,
    version: i32,
    payload: &'a RawValue,
    headers: &'a Headers,
    sensitive_paths: &'a [String],
}

#[derive(Deserialize)]
struct Decoded<'a> {
    id: Uuid,
    #[serde(rename = "type")]
    event_type: String,
    aggregate_type: String,
    aggregate_id: String,
    version: u32,
    #[serde(borrow)]
    payload: &'a RawValue,
    #[serde(borrow)]
    headers: &'a RawValue,
    #[serde(borrow)]
    sensitive_paths: &'a RawValue,
}

/// The message content of `event`.
pub(crate) fn encode(event: &NewEvent) -> String {
    // `NewEvent::new` serialized the payload, so it is JSON; were it not, the relay would see `null` and move
    // the event to `failed` as corrupted.
    let payload: &RawValue = serde_json::from_str(&event.payload).unwrap_or(RawValue::NULL);
    let encoded = Encoded {
        id: event.id,
        event_type: event.event_type,
        aggregate_type: event.aggregate_type,
        aggregate_id: &event.aggregate_id,
        version: event.version,
        payload,
        headers: &event.headers,
        sensitive_paths: &event.sensitive_paths,
    };
    crate::backend::json_text(&encoded)
}

/// Reads a message's content as the event it carries, committed at `committed_at`, at position `seq` (the
/// message's place in the WAL, which orders events as their commits do).
///
/// # Errors
///
/// A one-line description when the content is not an outbox event (a message written by hand with the outbox's
/// prefix); it carries no payload value.
pub fn decode_wal_message(content: &[u8], committed_at: OffsetDateTime, seq: i64) -> Result<StoredEvent, String> {
    let decoded: Decoded<'_> = serde_json::from_slice(content).map_err(|error| {
        format!("a WAL message with the prefix `{WAL_MESSAGE_PREFIX}` is not an outbox event: {error}")
    })?;
    crate::new_event::checked_identity(
        &decoded.event_type,
        &decoded.aggregate_type,
        &decoded.aggregate_id,
        decoded.version,
    )
    .map_err(|reason| {
        format!("a WAL message with the prefix `{WAL_MESSAGE_PREFIX}` is not an outbox event: {reason}")
    })?;
    Ok(StoredEvent {
        id: decoded.id,
        seq,
        event_type: decoded.event_type,
        aggregate_type: decoded.aggregate_type,
        aggregate_id: decoded.aggregate_id,
        version: decoded.version,
        payload: decoded.payload.get().to_owned(),
        headers: Checked::from_json_text(decoded.headers.get()),
        sensitive_paths: Checked::from_json_text(decoded.sensitive_paths.get()),
        created_at: committed_at,
        attempts: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize)]
    struct Paid {
        payment_id: u64,
        card: String,
    }

    impl crate::event::OutboxEvent for Paid {
        const EVENT_TYPE: &'static str = "payment.paid";
        const AGGREGATE_TYPE: &'static str = "payment";
        const VERSION: u32 = 2;
        fn aggregate_id(&self) -> String {
            self.payment_id.to_string()
        }
        fn sensitive_paths() -> Vec<String> {
            vec!["/card".to_owned()]
        }
    }

    #[test]
    fn an_encoded_event_decodes_to_the_same_event() {
        let event =
            NewEvent::new(&Paid { payment_id: 7, card: "4111".to_owned() }).unwrap().with_header("tenant", "acme");
        let at = OffsetDateTime::now_utc();
        let decoded = decode_wal_message(encode(&event).as_bytes(), at, 42).unwrap();
        assert_eq!(decoded.id, event.id());
        assert_eq!((decoded.event_type.as_str(), decoded.aggregate_type.as_str()), ("payment.paid", "payment"));
        assert_eq!((decoded.aggregate_id.as_str(), decoded.version, decoded.seq), ("7", 2, 42));
        assert_eq!(decoded.payload, r#"{"payment_id":7,"card":"4111"}"#);
        assert_eq!(decoded.headers.valid().unwrap()["tenant"], "acme");
        assert_eq!(decoded.sensitive_paths.valid().unwrap(), &["/card".to_owned()]);
        assert_eq!(decoded.created_at, at);
        assert!(decoded.check().is_ok());
    }

    #[test]
    fn content_that_is_not_an_outbox_event_is_a_one_line_error() {
        for content in [&b"not json"[..], br#"{"id":"secret-value"}"#, br#"{"id":1,"type":"secret-value"}"#, b""] {
            let error = decode_wal_message(content, OffsetDateTime::now_utc(), 1).unwrap_err();
            assert!(error.contains("is not an outbox event") && !error.contains('\n'), "{error}");
            assert!(!error.contains("secret"), "the error shows no content: {error}");
        }
    }

    #[test]
    fn an_event_the_table_could_not_hold_is_not_an_outbox_event() {
        let message = |aggregate_id: &str, version: u64| {
            serde_json::json!({
                "id": "0192f5c2-7a3b-7cc0-9a41-3b2f6d1e8c11", "type": "payment.paid", "aggregate_type": "payment",
                "aggregate_id": aggregate_id, "version": version, "payload": {"secret": "value"}, "headers": {},
                "sensitive_paths": []
            })
            .to_string()
        };
        assert!(decode_wal_message(message("7", 1).as_bytes(), OffsetDateTime::now_utc(), 1).is_ok());
        for (content, reason) in [
            (message("7", 0), "the version must be between 1"),
            (message("7", 1 << 31), "the version must be between 1"),
            (message("", 1), "the aggregate id must not be empty"),
            (message("7\0", 1), "must not contain a NUL character"),
        ] {
            let error = decode_wal_message(content.as_bytes(), OffsetDateTime::now_utc(), 1).unwrap_err();
            assert!(error.contains("is not an outbox event") && error.contains(reason), "{error}");
            assert!(!error.contains("secret") && !error.contains('\n'), "{error}");
        }
    }
}
