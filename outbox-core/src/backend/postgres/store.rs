//! [`Store`] for PostgreSQL: each method runs the statement of its module.

use std::time::Duration;

use uuid::Uuid;

use super::{admin, backlog, claim, control, inspect, lease, listen, retention, settle};
use crate::store::{
    Backlog, CancelTarget, Claim, ClaimRequest, EventDetail, EventFilter, EventSummary, PgStore, RetryTarget,
    SettleReport, Settlement, StatusReport, Store, StoreFuture, Wakeups,
};

impl Store for PgStore {
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
        Box::pin(lease::reclaim_expired(&self.pool))
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
}
