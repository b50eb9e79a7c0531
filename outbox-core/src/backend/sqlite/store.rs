//! [`Store`] for SQLite: each method runs the statement of its module.

use std::time::Duration;

use uuid::Uuid;

use super::{admin, backlog, claim, control, inspect, maintenance, settle};
use crate::store::{
    Backlog, CancelTarget, Claim, ClaimRequest, EventDetail, EventFilter, EventSummary, RetryTarget, SettleReport,
    Settlement, StatusReport, Store, StoreFuture, Wakeups,
};

/// The [`Store`] of a SQLite database: the embedded backend, for a first run and small single-node services.
///
/// Run one relay per database file. SQLite has one writer at a time and no `LISTEN/NOTIFY`: the relay polls
/// (adaptive polling finds new events within a few milliseconds while they flow), and claims are single
/// statements that need no `SKIP LOCKED`. Leases, fencing, retries and ordering work as on PostgreSQL.
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
    fn claim<'a>(&'a self, request: &'a ClaimRequest) -> StoreFuture<'a, Claim> {
        Box::pin(claim::claim(&self.pool, request))
    }

    fn settle<'a>(
        &'a self,
        owner: Uuid,
        settlements: &'a [Settlement],
        delete_published: bool,
    ) -> StoreFuture<'a, SettleReport> {
        Box::pin(settle::settle(&self.pool, owner, settlements, delete_published))
    }

    fn reclaim_expired(&self) -> StoreFuture<'_, u64> {
        Box::pin(maintenance::reclaim_expired(&self.pool))
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
