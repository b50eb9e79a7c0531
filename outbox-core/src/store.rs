//! The relay's view of the outbox table: claim, settle, inspect and administer events, on any backend.
//!
//! [`Store`] is the backend-neutral interface the relay engine (crate `outbox-relay`) and the `outbox` command
//! line use. Every method is one short statement (or a few small batches of one) on the database: no method
//! keeps a transaction open across an await point of the caller, so nothing is ever locked while a broker is
//! being called. [`PgStore`] implements it for PostgreSQL; the SQL lives in the backend module, not here.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use outbox_core::store::{ClaimRequest, Ordering, PgStore, Settlement, Store};
//!
//! # async fn run() -> Result<(), outbox_core::Error> {
//! let pool = sqlx::PgPool::connect("postgres://localhost/shop").await?;
//! let store = PgStore::new(pool);
//! let owner = uuid::Uuid::now_v7();
//! let claim = store.claim(&ClaimRequest::new(owner, Duration::from_secs(30), 100, Ordering::Aggregate)).await?;
//! // ... publish claim.events ...
//! let settled: Vec<Settlement> = claim.events.iter().map(|e| Settlement::published(e)).collect();
//! store.settle(owner, &settled, false).await?;
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::time::Duration;

use time::OffsetDateTime;
use uuid::Uuid;

use crate::{Headers, Result};

/// A boxed, sendable future, as [`Store`] methods return them (the trait stays usable as `dyn Store`).
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// The status of an event in the outbox table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventStatus {
    /// Committed, waiting to be published (possibly after a backoff delay).
    Pending,
    /// Claimed by a relay, which holds a lease on it.
    InFlight,
    /// Published; kept until retention deletes it.
    Published,
    /// Failed permanently or ran out of attempts (dead letter): waits for `retry` or `cancel`.
    Failed,
    /// Cancelled by an operator; never published.
    Cancelled,
}

impl EventStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [EventStatus; 5] = [
        EventStatus::Pending,
        EventStatus::InFlight,
        EventStatus::Published,
        EventStatus::Failed,
        EventStatus::Cancelled,
    ];

    /// The name stored in the `status` column (`pending`, `in_flight`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            EventStatus::Pending => "pending",
            EventStatus::InFlight => "in_flight",
            EventStatus::Published => "published",
            EventStatus::Failed => "failed",
            EventStatus::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for EventStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of parsing an [`EventStatus`] from a name that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown status `{0}`: expected one of pending, in_flight, published, failed, cancelled")]
pub struct UnknownStatus(pub String);

impl FromStr for EventStatus {
    type Err = UnknownStatus;

    /// Parses a status name; `in-flight` is accepted for `in_flight`.
    fn from_str(s: &str) -> Result<Self, UnknownStatus> {
        match s {
            "pending" => Ok(EventStatus::Pending),
            "in_flight" | "in-flight" => Ok(EventStatus::InFlight),
            "published" => Ok(EventStatus::Published),
            "failed" => Ok(EventStatus::Failed),
            "cancelled" | "canceled" => Ok(EventStatus::Cancelled),
            other => Err(UnknownStatus(other.to_owned())),
        }
    }
}

/// How claims keep the events of one aggregate in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ordering {
    /// Events of one aggregate (`aggregate_type`, `aggregate_id`) are claimed only once every earlier event of
    /// that aggregate is finished (published or cancelled). A claim takes the oldest unfinished event of each
    /// aggregate it picks (the *head*) and, behind it, the following ready events of the same aggregate; the
    /// relay publishes them in rounds of at most one event per aggregate. A failed head blocks its aggregate.
    #[default]
    Aggregate,
    /// No ordering: any due pending event may be claimed, by any relay, at any time. Maximum throughput.
    None,
}

/// What to claim: a batch of due events, leased to `owner` for `lease`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClaimRequest {
    /// The claiming relay's id; only it can settle the claimed rows while the lease holds.
    pub owner: Uuid,
    /// How long the lease lasts; after it expires the rows can be reclaimed by anyone.
    pub lease: Duration,
    /// The most events to claim.
    pub limit: u32,
    /// Whether events of one aggregate are kept in order.
    pub ordering: Ordering,
}

impl ClaimRequest {
    /// A claim of at most `limit` events for `owner`, leased for `lease`.
    pub fn new(owner: Uuid, lease: Duration, limit: u32, ordering: Ordering) -> Self {
        Self { owner, lease, limit, ordering }
    }
}

/// An event as stored: what a publisher needs to send it.
#[derive(Debug, Clone, PartialEq)]
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
            Checked::Valid(value) => Some(value),
            Checked::Corrupted => None,
        }
    }

    /// The value, unless the column is corrupted.
    pub fn into_valid(self) -> Option<T> {
        match self {
            Checked::Valid(value) => Some(value),
            Checked::Corrupted => None,
        }
    }

    /// Whether the column is corrupted.
    pub fn is_corrupted(&self) -> bool {
        matches!(self, Checked::Corrupted)
    }
}

impl<T: serde::de::DeserializeOwned> Checked<T> {
    /// Reads a column from its JSON text.
    pub fn from_json_text(text: &str) -> Self {
        serde_json::from_str(text).unwrap_or(Checked::Corrupted)
    }
}

/// `Corrupted`: see the type's docs.
impl<T> Default for Checked<T> {
    fn default() -> Self {
        Checked::Corrupted
    }
}

impl<'de, T: serde::de::DeserializeOwned> serde::Deserialize<'de> for Checked<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        Ok(serde_json::from_value(value).map_or(Checked::Corrupted, Checked::Valid))
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
fn check_columns(
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

/// One claimed event and the lease token (fencing epoch) that proves the claim.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ClaimedEvent {
    /// The event.
    pub event: StoredEvent,
    /// The row's lease epoch at claim time. It grows with every claim, so a relay whose lease expired and whose
    /// rows were claimed again can no longer settle them.
    pub epoch: i64,
}

/// The result of a claim.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Claim {
    /// The claimed events, in `seq` order.
    pub events: Vec<ClaimedEvent>,
    /// Whether publishing is paused (then `events` is empty).
    pub paused: bool,
}

/// The outcome of one claimed event, to be written back by [`Store::settle`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Settlement {
    /// The event id.
    pub id: Uuid,
    /// The epoch the event was claimed with ([`ClaimedEvent::epoch`]).
    pub epoch: i64,
    /// What happened.
    pub outcome: SettleOutcome,
}

/// What happened to a claimed event.
#[derive(Debug, Clone, PartialEq)]
pub enum SettleOutcome {
    /// Published: mark it so (or delete it, with immediate retention).
    Published,
    /// A transient failure: count the attempt, record the error, try again after `delay`.
    Retry {
        /// A short description of the failure; never the payload.
        error: String,
        /// How long to wait before the next attempt.
        delay: Duration,
    },
    /// A permanent failure or the last allowed attempt: count the attempt, record the error, mark it `failed`.
    Failed {
        /// A short description of the failure; never the payload.
        error: String,
    },
    /// Not attempted (shutdown, or an earlier event of its aggregate failed): back to `pending` as it was.
    Release,
}

impl Settlement {
    /// The outcome of the event `id` claimed with `epoch`.
    pub fn new(id: Uuid, epoch: i64, outcome: SettleOutcome) -> Self {
        Self { id, epoch, outcome }
    }

    /// `event` was published.
    pub fn published(event: &ClaimedEvent) -> Self {
        Self { id: event.event.id, epoch: event.epoch, outcome: SettleOutcome::Published }
    }

    /// `event` failed transiently; retry after `delay`.
    pub fn retry(event: &ClaimedEvent, error: impl Into<String>, delay: Duration) -> Self {
        Self { id: event.event.id, epoch: event.epoch, outcome: SettleOutcome::Retry { error: error.into(), delay } }
    }

    /// `event` failed for good.
    pub fn failed(event: &ClaimedEvent, error: impl Into<String>) -> Self {
        Self { id: event.event.id, epoch: event.epoch, outcome: SettleOutcome::Failed { error: error.into() } }
    }

    /// `event` was not attempted; release it.
    pub fn release(event: &ClaimedEvent) -> Self {
        Self { id: event.event.id, epoch: event.epoch, outcome: SettleOutcome::Release }
    }
}

/// How many settlements were applied, by outcome. Settlements of rows the owner no longer holds (its lease
/// expired and another relay claimed them, or an operator changed them) are not applied and count as `fenced`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SettleReport {
    /// Rows marked published (or deleted on publish).
    pub published: u64,
    /// Rows rescheduled after a transient failure.
    pub retried: u64,
    /// Rows moved to `failed`.
    pub failed: u64,
    /// Rows released back to `pending`.
    pub released: u64,
    /// Settlements not applied because the lease was lost.
    pub fenced: u64,
}

/// Which events [`Store::list`] returns, and which ones [`RetryTarget::Matching`] and [`CancelTarget::Matching`]
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
    /// Only events in this status (`None`: every status).
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
/// values: the payload here is *not* redacted).
#[derive(Debug, Clone, PartialEq)]
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
    /// The relay holding the lease, while in flight.
    pub lease_owner: Option<Uuid>,
    /// When that lease expires.
    pub lease_expires_at: Option<OffsetDateTime>,
    /// The fencing epoch (number of claims so far).
    pub lease_epoch: i64,
}

impl EventDetail {
    /// The checks of [`StoredEvent::check`]: whether the relay would publish this row or fail it as corrupted.
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
    /// Events currently leased by a relay.
    pub in_flight: u64,
    /// Events in `failed` (dead letter).
    pub failed: u64,
    /// Events published in the last minute.
    pub published_last_minute: u64,
    /// Events published in the last hour.
    pub published_last_hour: u64,
    /// Whether publishing is paused.
    pub paused: bool,
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
/// event type, and whether publishing is paused. Read by [`Store::backlog`] in one statement that touches only
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
    pub fn pending_total(&self) -> u64 {
        self.pending.iter().map(|p| p.pending).sum()
    }

    /// Failed events of every type.
    pub fn failed_total(&self) -> u64 {
        self.failed.iter().map(|f| f.failed).sum()
    }

    /// The age of the oldest pending event of any type (zero without a backlog).
    pub fn oldest_pending_age(&self) -> Duration {
        self.pending.iter().map(|p| p.oldest_age).max().unwrap_or_default()
    }

    /// Most first, then by name: the order `outbox status` prints.
    pub(crate) fn sort(&mut self) {
        self.pending.sort_by(|a, b| b.pending.cmp(&a.pending).then_with(|| a.event_type.cmp(&b.event_type)));
        self.failed.sort_by(|a, b| b.failed.cmp(&a.failed).then_with(|| a.event_type.cmp(&b.event_type)));
    }
}

/// Which failed events [`Store::retry`] makes pending again.
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
    /// most its limit: the events [`Store::list`] returns for it.
    Matching(EventFilter),
}

/// Which pending or failed events [`Store::cancel`] cancels.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum CancelTarget {
    /// These events, if they are `pending` or `failed`.
    Ids(Vec<Uuid>),
    /// The pending or failed events that match the filter (a filter on another status matches nothing), oldest
    /// first, at most its limit: the events [`Store::list`] returns for it.
    Matching(EventFilter),
}

/// A stream of wake-ups: one per commit that notified the relay's channel (several may be merged).
pub trait Wakeups: Send {
    /// Waits for the next notification.
    ///
    /// # Errors
    ///
    /// [`Error::Database`](crate::Error::Database) when the connection is lost and could not be re-established;
    /// the caller backs off and calls [`Store::listen`] again. Notifications sent meanwhile are lost, so the
    /// caller should claim once after reconnecting.
    fn next(&mut self) -> StoreFuture<'_, ()>;
}

/// The relay's operations on the outbox table, one short statement each, for any backend.
///
/// Implemented by [`PgStore`]. No method holds a transaction open after it returns, and none takes more than
/// one round trip (the retention and purge helpers work in batches the caller repeats).
///
/// # Errors
///
/// Every method returns [`Error::Database`](crate::Error::Database) when the database fails (a missing table
/// reports SQLSTATE class 42: the migrations were not applied), and [`listen`](Store::listen) also
/// [`Error::InvalidIdentifier`](crate::Error::InvalidIdentifier) for a channel name that is not a plain
/// identifier.
pub trait Store: Send + Sync + 'static {
    /// Claims up to `request.limit` due events and leases them to `request.owner`, in one short transaction
    /// (`FOR UPDATE SKIP LOCKED`, so concurrent relays never wait for each other or claim the same row). Nothing
    /// is claimed while publishing is [paused](Store::set_paused).
    fn claim<'a>(&'a self, request: &'a ClaimRequest) -> StoreFuture<'a, Claim>;

    /// Writes back the outcomes of claimed events in one statement. Only rows still leased by `owner` with the
    /// same epoch are changed (fencing). With `delete_published`, published rows are deleted instead of marked.
    fn settle<'a>(
        &'a self,
        owner: Uuid,
        settlements: &'a [Settlement],
        delete_published: bool,
    ) -> StoreFuture<'a, SettleReport>;

    /// Returns in-flight rows whose lease expired to `pending` (bumping their epoch) and returns how many.
    fn reclaim_expired(&self) -> StoreFuture<'_, u64>;

    /// Deletes up to `limit` published or cancelled events finished more than `older_than` ago (cancelled ones
    /// count from their creation) and returns how many. Call it repeatedly until it returns less than `limit`.
    fn delete_finished(&self, older_than: Duration, limit: u32) -> StoreFuture<'_, u64>;

    /// Pauses (`true`) or resumes (`false`) publishing for every relay on this database.
    fn set_paused(&self, paused: bool) -> StoreFuture<'_, ()>;

    /// Whether publishing is paused.
    fn is_paused(&self) -> StoreFuture<'_, bool>;

    /// Counts for `outbox status`.
    fn status(&self) -> StoreFuture<'_, StatusReport>;

    /// Pending events and the age of the oldest per event type, failed events per event type, and whether
    /// publishing is paused: one statement on the partial indexes of pending and failed rows (cheap however much
    /// history the table keeps). The relay refreshes its backlog gauges from it; `outbox status` prints it.
    fn backlog(&self) -> StoreFuture<'_, Backlog>;

    /// Events matching `filter`, oldest first.
    fn list<'a>(&'a self, filter: &'a EventFilter) -> StoreFuture<'a, Vec<EventSummary>>;

    /// One event with its (unredacted) payload, or `None`.
    fn show(&self, id: Uuid) -> StoreFuture<'_, Option<EventDetail>>;

    /// Makes failed events pending again, due now, with their attempts reset; returns the ids changed.
    fn retry<'a>(&'a self, target: &'a RetryTarget) -> StoreFuture<'a, Vec<Uuid>>;

    /// Cancels pending or failed events (in-flight ones are left alone); returns the ids changed.
    fn cancel<'a>(&'a self, target: &'a CancelTarget) -> StoreFuture<'a, Vec<Uuid>>;

    /// Counts the published or cancelled events [`delete_finished`](Store::delete_finished) would delete.
    fn count_finished(&self, older_than: Duration) -> StoreFuture<'_, u64>;

    /// Subscribes to commit notifications on `channel` (PostgreSQL `LISTEN`). Backends without notifications
    /// return a stream that never yields.
    fn listen<'a>(&'a self, channel: &'a str) -> StoreFuture<'a, Box<dyn Wakeups>>;
}

pub use crate::backend::SqliteStore;

/// The [`Store`] of a PostgreSQL database.
///
/// Cheap to clone (it holds a pool).
///
/// # Example
///
/// ```no_run
/// # async fn run() -> Result<(), outbox_core::Error> {
/// use outbox_core::store::{PgStore, Store};
/// let store = PgStore::new(sqlx::PgPool::connect("postgres://localhost/shop").await?);
/// store.set_paused(true).await?; // every relay on this database stops claiming
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct PgStore {
    pub(crate) pool: sqlx::PgPool,
}

impl PgStore {
    /// A store on `pool`'s database. The outbox tables must be [migrated](crate::migrate).
    pub fn new(pool: sqlx::PgPool) -> Self {
        Self { pool }
    }

    /// The pool the store runs on.
    pub fn pool(&self) -> &sqlx::PgPool {
        &self.pool
    }
}

#[cfg(test)]
mod tests {
    use super::EventStatus;

    #[test]
    fn status_names_round_trip() {
        for status in EventStatus::ALL {
            assert_eq!(status.as_str().parse::<EventStatus>().unwrap(), status);
        }
        assert!("done".parse::<EventStatus>().is_err());
    }
}
