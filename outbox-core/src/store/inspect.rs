//! What operators read and change: event lists and details, status, backlog, retries.

use std::time::Duration;

use time::OffsetDateTime;
use uuid::Uuid;

use super::status::EventStatus;
use super::stored::{check_columns, Checked, CorruptedRow};
use crate::new_event::Headers;

/// Which events [`Store::list`](super::Store::list) returns, and which ones [`RetryTarget::Matching`] and [`CancelTarget::Matching`]
/// change: every condition set must hold; oldest first (insertion order), at most [`limit`](Self::limit).
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use outbox_core::store::{EventFilter, EventStatus};
///
/// // The first page of payment events that failed more than an hour ago; the next page starts after its last id.
/// let filter = EventFilter::new(EventStatus::Failed)
///     .event_type("payment.paid")
///     .older_than(Duration::from_secs(3600))
///     .limit(50);
/// # let _ = filter;
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EventFilter {
    /// Only events in this status (`None`: every status). [`EventStatus::InFlight`] means the pending events of
    /// the batches that relays are publishing right now.
    pub status: Option<EventStatus>,
    /// Only events of this type.
    pub event_type: Option<String>,
    /// Only events of aggregates with this id.
    pub aggregate_id: Option<String>,
    /// Only events enqueued more than this long ago (by the database's clock).
    pub older_than: Option<Duration>,
    /// Only events after this one in insertion order: the next page after a page that ended with it. An id that
    /// does not exist matches nothing.
    pub after: Option<Uuid>,
    /// The most events to return (or change), oldest first.
    pub limit: u32,
}

impl Default for EventFilter {
    /// Up to 100 events in any status.
    fn default() -> Self {
        Self { status: None, event_type: None, aggregate_id: None, older_than: None, after: None, limit: 100 }
    }
}

impl EventFilter {
    /// Up to 100 events in `status`, oldest first.
    #[must_use]
    pub fn new(status: EventStatus) -> Self {
        Self { status: Some(status), ..Self::default() }
    }

    /// Only events in `status`, or in every status with `None`.
    #[must_use]
    pub fn status(mut self, status: Option<EventStatus>) -> Self {
        self.status = status;
        self
    }

    /// Only events of `event_type`.
    #[must_use]
    pub fn event_type(mut self, event_type: impl Into<String>) -> Self {
        self.event_type = Some(event_type.into());
        self
    }

    /// Only events of aggregates with id `aggregate_id`.
    #[must_use]
    pub fn aggregate_id(mut self, aggregate_id: impl Into<String>) -> Self {
        self.aggregate_id = Some(aggregate_id.into());
        self
    }

    /// Only events enqueued more than `age` ago.
    #[must_use]
    pub fn older_than(mut self, age: Duration) -> Self {
        self.older_than = Some(age);
        self
    }

    /// Only events after the event `id` in insertion order (the next page).
    #[must_use]
    pub fn after(mut self, id: Uuid) -> Self {
        self.after = Some(id);
        self
    }

    /// At most `limit` events.
    #[must_use]
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }
}

/// An event's metadata and delivery state, without its payload.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EventSummary {
    /// The event id.
    pub id: Uuid,
    /// Insertion order.
    pub seq: i64,
    /// The event type.
    pub event_type: String,
    /// The aggregate type.
    pub aggregate_type: String,
    /// The aggregate id.
    pub aggregate_id: String,
    /// The payload's schema version.
    pub version: u32,
    /// The delivery status.
    pub status: EventStatus,
    /// Failed publish attempts so far.
    pub attempts: u32,
    /// When the event was enqueued.
    pub created_at: OffsetDateTime,
    /// When the next attempt may happen.
    pub next_attempt_at: OffsetDateTime,
    /// When it was published.
    pub published_at: Option<OffsetDateTime>,
    /// A short description of the last failure.
    pub last_error: Option<String>,
}

/// An event with everything stored about it, as `outbox events show` prints it (after masking the sensitive
/// values: the payload here is *not* redacted). Its `Debug` output shows the payload redacted.
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub struct EventDetail {
    /// Metadata and delivery state.
    pub summary: EventSummary,
    /// The payload, unredacted: mask [`sensitive_paths`](Self::sensitive_paths) before showing it (and show none of
    /// it when they are corrupted). `null` if the stored text is not JSON.
    pub payload: serde_json::Value,
    /// Headers captured at enqueue, unless the column was corrupted by hand.
    pub headers: Checked<Headers>,
    /// JSON pointers to the payload's sensitive values, unless the column was corrupted by hand.
    pub sensitive_paths: Checked<Vec<String>>,
    /// The partition the event belongs to (a hash of its aggregate).
    pub partition: u16,
    /// The relay publishing it right now (its batch is in flight), if any.
    pub publishing_relay: Option<Uuid>,
}

/// Prints the payload with its sensitive values redacted ([`redact::for_debug`](crate::redact::for_debug)).
impl std::fmt::Debug for EventDetail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let paths = self.sensitive_paths.valid().map(Vec::as_slice);
        f.debug_struct("EventDetail")
            .field("summary", &self.summary)
            .field("payload", &crate::redact::for_debug(&self.payload, paths))
            .field("headers", &self.headers)
            .field("sensitive_paths", &self.sensitive_paths)
            .field("partition", &self.partition)
            .field("publishing_relay", &self.publishing_relay)
            .finish()
    }
}

impl EventDetail {
    /// The checks of [`StoredEvent::check`](super::StoredEvent::check): whether the relay would publish this row or fail it as corrupted.
    ///
    /// # Errors
    ///
    /// The first [`CorruptedRow`] problem found.
    pub fn check(&self) -> Result<(), CorruptedRow> {
        check_columns(self.payload.is_object(), &self.headers, &self.sensitive_paths)
    }
}

/// Backlog of one event type.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PendingByType {
    /// The event type.
    pub event_type: String,
    /// Pending events of that type.
    pub pending: u64,
    /// Age of the oldest of them.
    pub oldest_age: Duration,
}

/// A snapshot of the outbox, as `outbox status` prints it.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct StatusReport {
    /// Pending events by type, most first.
    pub pending: Vec<PendingByType>,
    /// Events in a batch that a relay is publishing right now.
    pub in_flight: u64,
    /// Events in `failed` (dead letter).
    pub failed: u64,
    /// Events published in the last minute.
    pub published_last_minute: u64,
    /// Events published in the last hour.
    pub published_last_hour: u64,
    /// Whether publishing is paused.
    pub paused: bool,
    /// The live relays, with the partitions each owns.
    pub relays: Vec<RelayStatus>,
    /// The number of partitions (fixed when the database was migrated).
    pub partitions: u16,
    /// Partitions no live relay owns right now.
    pub unowned_partitions: Vec<u16>,
}

/// One live relay as `outbox status` shows it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RelayStatus {
    /// The relay's id.
    pub relay_id: Uuid,
    /// Where it runs (host name and process id).
    pub host: String,
    /// When it joined.
    pub started_at: OffsetDateTime,
    /// How long ago its last heartbeat was.
    pub heartbeat_age: Duration,
    /// The partitions it owns.
    pub partitions: Vec<u16>,
    /// Events in the batches it is publishing now.
    pub in_flight: u64,
    /// Pending events in its partitions.
    pub pending: u64,
    /// The age of the oldest pending event in its partitions.
    pub oldest_pending_age: Duration,
}

/// Dead-lettered events of one event type.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct FailedByType {
    /// The event type.
    pub event_type: String,
    /// Events of that type in `failed`.
    pub failed: u64,
}

/// What the relay's gauges show and `outbox status` prints first: the backlog by event type, the dead letters by
/// event type, and whether publishing is paused. Read by [`Store::backlog`](super::Store::backlog) in one statement that touches only
/// the partial indexes of pending and failed rows, so it stays cheap however long the table's history is.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct Backlog {
    /// Pending events by type (with the age of the oldest), most first.
    pub pending: Vec<PendingByType>,
    /// Failed events by type, most first.
    pub failed: Vec<FailedByType>,
    /// Whether publishing is paused.
    pub paused: bool,
}

impl Backlog {
    /// Pending events of every type.
    #[must_use]
    pub fn pending_total(&self) -> u64 {
        self.pending.iter().map(|p| p.pending).sum()
    }

    /// Failed events of every type.
    #[must_use]
    pub fn failed_total(&self) -> u64 {
        self.failed.iter().map(|f| f.failed).sum()
    }

    /// The age of the oldest pending event of any type (zero without a backlog).
    #[must_use]
    pub fn oldest_pending_age(&self) -> Duration {
        self.pending.iter().map(|p| p.oldest_age).max().unwrap_or_default()
    }

    /// Most first, then by name: the order `outbox status` prints.
    pub(crate) fn sort(&mut self) {
        self.pending.sort_by(|a, b| b.pending.cmp(&a.pending).then_with(|| a.event_type.cmp(&b.event_type)));
        self.failed.sort_by(|a, b| b.failed.cmp(&a.failed).then_with(|| a.event_type.cmp(&b.event_type)));
    }
}

/// A [`Backlog`] as the relays of a database share it ([`Store::shared_backlog`](super::Store::shared_backlog)):
/// counted by one relay at a time and read by the others.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct SharedBacklog {
    /// The counts as of [`age`](Self::age) ago, with the age of each type's oldest pending event brought up to now
    /// and the pause flag read now.
    pub backlog: Backlog,
    /// How long ago the counts were taken.
    pub age: Duration,
    /// How long taking them took: a refresh interval proportional to it keeps the counting a small share of the
    /// database's time, however large the backlog.
    pub took: Duration,
}

/// Which failed events [`Store::retry`](super::Store::retry) makes pending again.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RetryTarget {
    /// These events, if they are `failed`.
    Ids(Vec<Uuid>),
    /// Every failed event, or every failed event of one type.
    AllFailed {
        /// Only events of this type.
        event_type: Option<String>,
    },
    /// The failed events that match the filter (a filter on another status matches nothing), oldest first, at
    /// most its limit: the events [`Store::list`](super::Store::list) returns for it.
    Matching(EventFilter),
}

/// Which pending or failed events [`Store::cancel`](super::Store::cancel) cancels.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum CancelTarget {
    /// These events, if they are `pending` or `failed`.
    Ids(Vec<Uuid>),
    /// The pending or failed events that match the filter (a filter on another status matches nothing), oldest
    /// first, at most its limit: the events [`Store::list`](super::Store::list) returns for it.
    Matching(EventFilter),
}
