//! [`Store`] for PostgreSQL: each method runs the statement of its module.

use std::time::Duration;

use uuid::Uuid;

use super::{admin, backlog, batch, control, inspect, listen, membership, read, retention, settle, wal};
use crate::store::{
    Backlog, BlockedAggregate, CancelTarget, EventDetail, EventFilter, EventSummary, Heartbeat, Membership,
    PartitionLease, PartitionStart, PgStore, ReadBatch, ReadRequest, RetryTarget, SettleBatch, SettleReport,
    SharedBacklog, Source, StatusReport, Store, StoreFuture, Wakeups,
};

impl Store for PgStore {
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

    fn advance_starts<'a>(&'a self, relay: Uuid, starts: &'a [PartitionStart]) -> StoreFuture<'a, ()> {
        Box::pin(membership::advance_starts(&self.pool, relay, starts))
    }

    fn delete_finished(&self, older_than: Duration, limit: u32) -> StoreFuture<'_, u64> {
        Box::pin(retention::delete_finished(&self.pool, older_than, limit))
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

    fn shared_backlog(&self, max_age: Duration) -> StoreFuture<'_, Option<SharedBacklog>> {
        Box::pin(backlog::shared_backlog(&self.pool, max_age))
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
        Box::pin(retention::count_finished(&self.pool, older_than))
    }

    fn listen<'a>(&'a self, channel: &'a str) -> StoreFuture<'a, Box<dyn Wakeups>> {
        Box::pin(listen::listen(&self.pool, channel))
    }

    fn source(&self) -> StoreFuture<'_, Source> {
        Box::pin(wal::source_of(&self.pool))
    }
}
