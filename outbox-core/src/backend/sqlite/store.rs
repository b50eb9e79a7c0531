//! [`Store`] for SQLite: each method runs the statement of its module.

use std::time::Duration;

use uuid::Uuid;

use super::{admin, backlog, batch, control, inspect, maintenance, membership, read, settle};
use crate::store::{
    Backlog, BlockedAggregate, CancelTarget, EventDetail, EventFilter, EventSummary, Heartbeat, Membership,
    PartitionLease, PartitionStart, ReadBatch, ReadRequest, RetryTarget, SettleBatch, SettleReport, StatusReport,
    Store, StoreFuture, Wakeups,
};

/// The [`Store`] of a SQLite database: the embedded backend, for a first run and small single-node services.
///
/// Run one relay per database file. SQLite has one writer at a time and no `LISTEN/NOTIFY`: the relay polls
/// (adaptive polling finds new events within a few milliseconds while they flow). The database has one partition:
/// membership, fencing, crash accounting, retries and ordering work as on PostgreSQL.
///
/// Cheap to clone (it holds a pool).
///
/// # Example
///
/// ```no_run
/// # async fn run() -> Result<(), outbox_core::Error> {
/// use outbox_core::store::{SqliteStore, Store};
/// let pool = sqlx::SqlitePool::connect("sqlite://outbox.db?mode=rwc").await?;
/// outbox_core::migrate(&pool).await?;
/// let store = SqliteStore::new(pool);
/// assert!(!store.is_paused().await?);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: sqlx::SqlitePool,
}

impl SqliteStore {
    /// A store on `pool`'s database. The outbox tables must be [migrated](crate::migrate).
    #[must_use]
    pub fn new(pool: sqlx::SqlitePool) -> Self {
        Self { pool }
    }

    /// The pool the store runs on.
    #[must_use]
    pub fn pool(&self) -> &sqlx::SqlitePool {
        &self.pool
    }
}

/// SQLite has no notifications: a stream that never yields, so the relay relies on polling.
struct NoWakeups;

impl Wakeups for NoWakeups {
    fn next(&mut self) -> StoreFuture<'_, ()> {
        Box::pin(std::future::pending())
    }
}

impl Store for SqliteStore {
    fn heartbeat<'a>(&'a self, beat: &'a Heartbeat<'a>) -> StoreFuture<'a, Membership> {
        Box::pin(membership::heartbeat(&self.pool, beat))
    }

    fn leave(&self, relay: Uuid) -> StoreFuture<'_, ()> {
        Box::pin(membership::leave(&self.pool, relay))
    }

    fn read<'a>(&'a self, request: &'a ReadRequest) -> StoreFuture<'a, ReadBatch> {
        Box::pin(read::read(&self.pool, request))
    }

    fn blocked_aggregates<'a>(&'a self, partitions: &'a [u16]) -> StoreFuture<'a, Vec<BlockedAggregate>> {
        Box::pin(read::blocked_aggregates(&self.pool, partitions))
    }

    fn start_batch<'a>(
        &'a self,
        relay: Uuid,
        batch: Uuid,
        leases: &'a [PartitionLease],
        events: &'a [Uuid],
    ) -> StoreFuture<'a, bool> {
        Box::pin(batch::start_batch(&self.pool, relay, batch, leases, events))
    }

    fn settle<'a>(&'a self, batch: &'a SettleBatch) -> StoreFuture<'a, SettleReport> {
        Box::pin(settle::settle(&self.pool, batch))
    }

    /// SQLite keeps no start: its one relay reads the partition from its first pending row, through the pending
    /// index (a publish there rewrites the row anyway).
    fn advance_starts<'a>(&'a self, _relay: Uuid, _starts: &'a [PartitionStart]) -> StoreFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }

    fn delete_finished(&self, older_than: Duration, limit: u32) -> StoreFuture<'_, u64> {
        Box::pin(maintenance::delete_finished(&self.pool, older_than, limit))
    }

    fn set_paused(&self, paused: bool) -> StoreFuture<'_, ()> {
        Box::pin(control::set_paused(&self.pool, paused))
    }

    fn is_paused(&self) -> StoreFuture<'_, bool> {
        Box::pin(control::is_paused(&self.pool))
    }

    fn status(&self) -> StoreFuture<'_, StatusReport> {
        Box::pin(inspect::status(&self.pool))
    }

    fn backlog(&self) -> StoreFuture<'_, Backlog> {
        Box::pin(backlog::backlog(&self.pool))
    }

    fn list<'a>(&'a self, filter: &'a EventFilter) -> StoreFuture<'a, Vec<EventSummary>> {
        Box::pin(inspect::list(&self.pool, filter))
    }

    fn show(&self, id: Uuid) -> StoreFuture<'_, Option<EventDetail>> {
        Box::pin(inspect::show(&self.pool, id))
    }

    fn retry<'a>(&'a self, target: &'a RetryTarget) -> StoreFuture<'a, Vec<Uuid>> {
        Box::pin(admin::retry(&self.pool, target))
    }

    fn cancel<'a>(&'a self, target: &'a CancelTarget) -> StoreFuture<'a, Vec<Uuid>> {
        Box::pin(admin::cancel(&self.pool, target))
    }

    fn count_finished(&self, older_than: Duration) -> StoreFuture<'_, u64> {
        Box::pin(maintenance::count_finished(&self.pool, older_than))
    }

    fn listen<'a>(&'a self, _channel: &'a str) -> StoreFuture<'a, Box<dyn Wakeups>> {
        Box::pin(async { Ok(Box::new(NoWakeups) as Box<dyn Wakeups>) })
    }
}
