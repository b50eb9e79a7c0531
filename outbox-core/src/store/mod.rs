//! The relay's view of the outbox table: membership and partition leases, reading, settling, inspecting and
//! administering events, on any backend.
//!
//! [`Store`] is the backend-neutral interface the relay engine (crate `outbox-relay`) and the `outbox` command
//! line use. Every method is one short statement (or one short transaction of a few) on the database: no method
//! keeps a transaction open across an await point of the caller, so nothing is ever locked while a broker is
//! being called. [`PgStore`] implements it for PostgreSQL and [`SqliteStore`] for SQLite; the SQL lives in the
//! backend modules, not here.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use outbox_core::store::{Heartbeat, PgStore, ReadRange, ReadRequest, SettleBatch, SettleOutcome, Settlement, Store};
//!
//! # async fn run() -> Result<(), outbox_core::Error> {
//! let store = PgStore::new(sqlx::PgPool::connect("postgres://localhost/shop").await?);
//! let relay = uuid::Uuid::now_v7();
//! let on_crash = |_: &outbox_core::store::CrashedEvent| SettleOutcome::Failed { error: "relay died".into() };
//! let membership = store.heartbeat(&Heartbeat::new(relay, "example", Duration::from_secs(10), &on_crash)).await?;
//! for lease in &membership.owned {
//!     let read = store.read(&ReadRequest::new(vec![ReadRange::new(lease.partition, 0, 100)])).await?;
//!     let ids: Vec<_> = read.rows.iter().map(|row| row.event.id).collect();
//!     let batch = uuid::Uuid::now_v7();
//!     if !store.start_batch(relay, batch, &[*lease], &ids).await? {
//!         break; // taken over (its new owner publishes these), or changed by an operator (read it again)
//!     }
//!     // ... publish the rows, in order ...
//!     let settled = ids.iter().map(|id| Settlement::published(*id)).collect();
//!     store.settle(&SettleBatch::new(relay, batch, vec![(lease.partition, lease.epoch)], settled)).await?;
//! }
//! store.leave(relay).await?;
//! # Ok(())
//! # }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use uuid::Uuid;

use crate::error::Result;

mod inspect;
mod membership;
mod read;
mod settle;
mod source;
mod status;
mod stored;
pub(crate) mod wal_message;

pub use crate::backend::SqliteStore;
pub use inspect::{
    Backlog, CancelTarget, EventDetail, EventFilter, EventSummary, FailedByType, PendingByType, RelayStatus,
    RetryTarget, SharedBacklog, StatusReport,
};
pub use membership::{fair_share, CrashedEvent, Heartbeat, Membership, PartitionLease, PartitionStart};
pub use read::{AggregateKey, BlockedAggregate, Ordering, ReadBatch, ReadRange, ReadRow, RowVersion, Snapshot};
pub(crate) use settle::{retry_name, short_error};
pub use settle::{SettleBatch, SettleOutcome, SettleReport, Settlement};
pub use source::{
    HandedOverRead, HandedOverRow, PendingById, SlotStatus, Source, SourceSwitch, WalState, SOURCE_SWITCH_LOCK,
    WAL_LEADER_LOCK_CLASS,
};
pub use status::{EventStatus, UnknownStatus};
pub use stored::{Checked, CorruptedRow, StoredEvent};
pub use wal_message::{decode_wal_message, WAL_MESSAGE_PREFIX};

/// A boxed, sendable future, as [`Store`] methods return them (the trait stays usable as `dyn Store`).
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// What one [`Store::read`] reads: ranges of partitions, each in `seq` order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReadRequest {
    /// The ranges, answered in this order.
    pub ranges: Vec<ReadRange>,
}

impl ReadRequest {
    /// A read of `ranges`.
    #[must_use]
    pub fn new(ranges: Vec<ReadRange>) -> Self {
        Self { ranges }
    }
}

/// A stream of wake-ups: one per commit that notified the relay's channel (several may be merged).
pub trait Wakeups: Send {
    /// Waits for the next notification.
    ///
    /// # Errors
    ///
    /// [`Error::Database`](crate::Error::Database) when the connection is lost and could not be re-established;
    /// the caller backs off and calls [`Store::listen`] again. Notifications sent meanwhile are lost, so the
    /// caller should read once after reconnecting.
    fn next(&mut self) -> StoreFuture<'_, ()>;
}

/// The relay's operations on the outbox table, one short statement (or transaction) each, for any backend.
///
/// The relay engine calls [`heartbeat`](Store::heartbeat) every second or so, [`read`](Store::read)s the pending
/// rows of the partitions it owns with a plain `SELECT`, records a batch with [`start_batch`](Store::start_batch)
/// before publishing it and [`settle`](Store::settle)s it after: one row version written per event.
///
/// # Errors
///
/// Every method returns [`Error::Database`](crate::Error::Database) when the database fails (a missing table
/// reports SQLSTATE class 42: the migrations were not applied), and [`listen`](Store::listen) also
/// [`Error::InvalidIdentifier`](crate::Error::InvalidIdentifier) for a channel name that is not a plain
/// identifier.
pub trait Store: Send + Sync + 'static {
    /// Renews the relay's membership, removes dead relays (counting an attempt, with
    /// [`Heartbeat::on_crash`], for every event of their batches in flight), hands over the partitions in
    /// [`Heartbeat::release`], and takes free partitions (bumping their epoch) up to the relay's fair share. One
    /// short transaction.
    fn heartbeat<'a>(&'a self, beat: &'a Heartbeat<'a>) -> StoreFuture<'a, Membership>;

    /// A graceful exit: hands every partition of `relay` over at once (bumping their epochs), and removes its
    /// membership and batch records.
    fn leave(&self, relay: Uuid) -> StoreFuture<'_, ()>;

    /// Reads pending rows: for each range, up to its limit, in `seq` order; due or not (a row that is not due is
    /// a head in backoff, which the relay needs to see to hold back its aggregate). A plain `SELECT`: nothing is
    /// written. Nothing is returned while publishing is [paused](Store::set_paused).
    fn read<'a>(&'a self, request: &'a ReadRequest) -> StoreFuture<'a, ReadBatch>;

    /// The aggregates of `partitions` whose oldest unfinished event is `failed`: a relay that takes a partition
    /// over holds them back until an operator retries or cancels the failed event.
    fn blocked_aggregates<'a>(&'a self, partitions: &'a [u16]) -> StoreFuture<'a, Vec<BlockedAggregate>>;

    /// Records that `relay` is about to publish `events` as `batch`, so that if it dies meanwhile the relay that
    /// removes it counts an attempt for them. One small write per batch; [`settle`](Store::settle) deletes it.
    ///
    /// `leases` are the batch's partitions with the epochs and generations its events were read at. The record is
    /// written only while the relay still holds every one of them (a takeover waits for it) and no operator
    /// changed their rows since (an `outbox events cancel` of an event read but not yet recorded): `false` means
    /// nothing was recorded and the batch must not be published; read its partitions again. A relay that stalls
    /// after reading thus publishes nothing of what its successor owns, beyond the batches it had recorded, and
    /// nothing cancelled before its record.
    fn start_batch<'a>(
        &'a self,
        relay: Uuid,
        batch: Uuid,
        leases: &'a [PartitionLease],
        events: &'a [Uuid],
    ) -> StoreFuture<'a, bool>;

    /// Writes back the outcomes of a batch in one statement, and deletes its record. Only rows of partitions the
    /// relay still holds at the epochs given, and still `pending`, are changed (fencing); a takeover waits for a
    /// settle in progress.
    fn settle<'a>(&'a self, batch: &'a SettleBatch) -> StoreFuture<'a, SettleReport>;

    /// Moves each partition's [`start_seq`](PartitionLease::start_seq) up to where its owner knows every row
    /// finished, for the partitions `relay` still holds at the epochs given (others are left as they are), so that
    /// a relay that takes one over reads it from there. Never moves one back. A no-op on backends that read every
    /// partition from its first row (SQLite).
    fn advance_starts<'a>(&'a self, relay: Uuid, starts: &'a [PartitionStart]) -> StoreFuture<'a, ()>;

    /// Deletes up to `limit` published or cancelled events finished more than `older_than` ago (cancelled ones
    /// count from their creation) and returns how many. Call it repeatedly until it returns less than `limit`.
    fn delete_finished(&self, older_than: Duration, limit: u32) -> StoreFuture<'_, u64>;

    /// Pauses (`true`) or resumes (`false`) publishing for every relay on this database.
    fn set_paused(&self, paused: bool) -> StoreFuture<'_, ()>;

    /// Whether publishing is paused.
    fn is_paused(&self) -> StoreFuture<'_, bool>;

    /// Counts, relays and partitions for `outbox status`.
    fn status(&self) -> StoreFuture<'_, StatusReport>;

    /// Pending events and the age of the oldest per event type, failed events per event type, and whether
    /// publishing is paused: one statement on the partial indexes of pending and failed rows (cheap however much
    /// history the table keeps). The relay's backlog gauges take it through [`shared_backlog`](Self::shared_backlog);
    /// `outbox status` prints it.
    fn backlog(&self) -> StoreFuture<'_, Backlog>;

    /// [`backlog`](Self::backlog) as the relays of a database share it: counted by one relay at a time, at most
    /// once per `max_age`, and read from that count by every relay meanwhile, so that N relays cost the database
    /// one count, not N. `None` while another relay takes the first count. The relay refreshes its backlog gauges
    /// from it. By default (a database that one relay publishes from, as a SQLite file), a count at every call.
    fn shared_backlog(&self, max_age: Duration) -> StoreFuture<'_, Option<SharedBacklog>> {
        let _ = max_age;
        Box::pin(async move {
            let started = std::time::Instant::now();
            let backlog = self.backlog().await?;
            Ok(Some(SharedBacklog { backlog, age: Duration::ZERO, took: started.elapsed() }))
        })
    }

    /// Events matching `filter`, oldest first. [`EventStatus::InFlight`] lists the pending events of the batches
    /// that relays are publishing right now.
    fn list<'a>(&'a self, filter: &'a EventFilter) -> StoreFuture<'a, Vec<EventSummary>>;

    /// One event with its (unredacted) payload, or `None`.
    fn show(&self, id: Uuid) -> StoreFuture<'_, Option<EventDetail>>;

    /// Makes failed events pending again, due now, with their attempts reset; returns the ids changed. The owners
    /// of their partitions read those partitions afresh.
    fn retry<'a>(&'a self, target: &'a RetryTarget) -> StoreFuture<'a, Vec<Uuid>>;

    /// Cancels pending or failed events (those in a batch being published are left alone); returns the ids
    /// changed. The owners of their partitions read those partitions afresh.
    fn cancel<'a>(&'a self, target: &'a CancelTarget) -> StoreFuture<'a, Vec<Uuid>>;

    /// Counts the published or cancelled events [`delete_finished`](Store::delete_finished) would delete.
    fn count_finished(&self, older_than: Duration) -> StoreFuture<'_, u64>;

    /// Subscribes to commit notifications on `channel` (PostgreSQL `LISTEN`). Backends without notifications
    /// return a stream that never yields.
    fn listen<'a>(&'a self, channel: &'a str) -> StoreFuture<'a, Box<dyn Wakeups>>;

    /// The source that publishes the table. A relay of the table source refuses to start when it is
    /// [`Source::Wal`]. Backends without a WAL source always answer [`Source::Table`].
    fn source(&self) -> StoreFuture<'_, Source> {
        Box::pin(async { Ok(Source::Table) })
    }
}

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
/// store.set_paused(true).await?; // every relay on this database stops publishing
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct PgStore {
    pub(crate) pool: sqlx::PgPool,
}

impl PgStore {
    /// A store on `pool`'s database. The outbox tables must be [migrated](crate::migrate).
    #[must_use]
    pub fn new(pool: sqlx::PgPool) -> Self {
        Self { pool }
    }

    /// The pool the store runs on.
    #[must_use]
    pub fn pool(&self) -> &sqlx::PgPool {
        &self.pool
    }
}
