//! An event as the relay reads it from the outbox table, and the checks a row must pass to be published.

use std::fmt;

use time::OffsetDateTime;
use uuid::Uuid;

use crate::new_event::Headers;
use crate::store::AggregateKey;

/// An event as stored: what a publisher needs to send it. Its `Debug` output shows the payload redacted.
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub struct StoredEvent {
    /// The event id (UUID v7); consumers deduplicate by it.
    pub id: Uuid,
    /// Insertion order; events of one aggregate are published in this order.
    pub seq: i64,
    /// The event type, e.g. `payment.paid`.
    pub event_type: String,
    /// The aggregate type, e.g. `payment`.
    pub aggregate_type: String,
    /// The aggregate id.
    pub aggregate_id: String,
    /// The payload's schema version.
    pub version: u32,
    /// The payload, as JSON text: a JSON object unless the row was written by hand ([`check`](Self::check)).
    pub payload: String,
    /// The headers captured at enqueue (e.g. `traceparent`), unless the column was corrupted by hand.
    pub headers: Checked<Headers>,
    /// JSON pointers to the payload's sensitive values, unless the column was corrupted by hand.
    pub sensitive_paths: Checked<Vec<String>>,
    /// When the event was enqueued.
    pub created_at: OffsetDateTime,
    /// How many publish attempts failed so far.
    pub attempts: u32,
}

/// Prints the payload with its sensitive values redacted ([`redact::for_debug`](crate::redact::for_debug)).
impl fmt::Debug for StoredEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let paths = self.sensitive_paths.valid().map(Vec::as_slice);
        f.debug_struct("StoredEvent")
            .field("id", &self.id)
            .field("seq", &self.seq)
            .field("event_type", &self.event_type)
            .field("aggregate_type", &self.aggregate_type)
            .field("aggregate_id", &self.aggregate_id)
            .field("version", &self.version)
            .field("payload", &crate::redact::for_debug(&self.payload, paths))
            .field("headers", &self.headers)
            .field("sensitive_paths", &self.sensitive_paths)
            .field("created_at", &self.created_at)
            .field("attempts", &self.attempts)
            .finish()
    }
}

impl StoredEvent {
    /// Checks that the row holds what the outbox writes: a payload that is a JSON object, headers that are an
    /// object of strings, sensitive paths that are an array of JSON pointers. The database checks only that these
    /// columns hold JSON, so a row written or changed by hand can fail this; the relay then moves the event to
    /// `failed` with the error as `last_error` instead of publishing it. A row whose sensitive paths cannot be
    /// read is never published: nobody could tell which of its values must not be printed.
    ///
    /// # Errors
    ///
    /// The first [`CorruptedRow`] problem found.
    pub fn check(&self) -> Result<(), CorruptedRow> {
        check_columns(is_json_object(&self.payload), &self.headers, &self.sensitive_paths)
    }

    /// Its aggregate as a key (`aggregate_type`, `aggregate_id`): events of one key are published in order.
    #[must_use]
    pub fn aggregate_key(&self) -> AggregateKey {
        (self.aggregate_type.clone(), self.aggregate_id.clone())
    }
}

/// A JSON column of a stored row as it was read: its value when it has the shape the outbox writes, or
/// [`Corrupted`](Checked::Corrupted) when it does not (the row was written or changed by hand: the database checks
/// only that the column holds JSON).
///
/// It deserializes from any JSON: a value of another shape becomes `Corrupted` instead of an error, so reading a
/// row never fails because of one bad column. Its [`Default`] is `Corrupted` too: a column that could not even be
/// parsed is not assumed empty (an empty list of sensitive paths would let sensitive values be printed).
///
/// # Example
///
/// ```
/// use outbox_core::store::Checked;
///
/// assert_eq!(Checked::<Vec<String>>::from_json_text(r#"["/email"]"#), Checked::Valid(vec!["/email".to_owned()]));
/// assert_eq!(Checked::<Vec<String>>::from_json_text(r#""/email""#), Checked::Corrupted);
/// assert_eq!(Checked::<Vec<String>>::from_json_text("not json"), Checked::Corrupted);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checked<T> {
    /// The column holds what the outbox writes.
    Valid(T),
    /// It does not: it is not JSON, or JSON of another shape (e.g. headers that are not an object of strings).
    Corrupted,
}

impl<T> Checked<T> {
    /// The value, unless the column is corrupted.
    pub fn valid(&self) -> Option<&T> {
        match self {
            Self::Valid(value) => Some(value),
            Self::Corrupted => None,
        }
    }

    /// The value, unless the column is corrupted.
    pub fn into_valid(self) -> Option<T> {
        match self {
            Self::Valid(value) => Some(value),
            Self::Corrupted => None,
        }
    }

    /// Whether the column is corrupted.
    pub fn is_corrupted(&self) -> bool {
        matches!(self, Self::Corrupted)
    }
}

impl<T: serde::de::DeserializeOwned> Checked<T> {
    /// Reads a column from its JSON text.
    pub fn from_json_text(text: &str) -> Self {
        // Straight into `T` (not through a `serde_json::Value`, as the `Deserialize` impl must): JSON of another
        // shape fails the same way as text that is not JSON.
        serde_json::from_str(text).map_or(Self::Corrupted, Self::Valid)
    }
}

/// `Corrupted`: see the type's docs.
impl<T> Default for Checked<T> {
    fn default() -> Self {
        Self::Corrupted
    }
}

impl<'de, T: serde::de::DeserializeOwned> serde::Deserialize<'de> for Checked<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        Ok(serde_json::from_value(value).map_or(Self::Corrupted, Checked::Valid))
    }
}

/// Why a stored row cannot be published: a column does not hold what the outbox writes (it was written or changed
/// by hand). Messages are one line and never quote the row's content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CorruptedRow {
    /// The payload is not a JSON object (e.g. `42`, `"text"`, `[1,2]` or `null`).
    #[error("corrupted row: payload is not a JSON object")]
    Payload,
    /// The headers are not a JSON object whose values are strings.
    #[error("corrupted row: headers is not a JSON object of strings")]
    Headers,
    /// The sensitive paths are not a JSON array of JSON pointers (strings that are empty or start with `/`).
    #[error("corrupted row: sensitive_paths is not a JSON array of JSON pointers")]
    SensitivePaths,
}

/// Whether `text` is one JSON object (and nothing else).
fn is_json_object(text: &str) -> bool {
    text.trim_start().starts_with('{') && serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
}

/// The checks of [`StoredEvent::check`] and [`EventDetail::check`]; sensitive paths first, the one that matters
/// most.
pub(super) fn check_columns(
    payload_is_object: bool,
    headers: &Checked<Headers>,
    sensitive_paths: &Checked<Vec<String>>,
) -> Result<(), CorruptedRow> {
    let pointers =
        sensitive_paths.valid().is_some_and(|paths| paths.iter().all(|p| p.is_empty() || p.starts_with('/')));
    if !pointers {
        return Err(CorruptedRow::SensitivePaths);
    }
    if !payload_is_object {
        return Err(CorruptedRow::Payload);
    }
    if headers.is_corrupted() {
        return Err(CorruptedRow::Headers);
    }
    Ok(())
}
