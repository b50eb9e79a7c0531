//! Readiness of the `LISTEN` connections: the relay's listener task gets a [`Store`] whose `listen` reports
//! whether the connection is up, so `/readyz` can say "not ready" while it is down.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use outbox_core::store::{
    Backlog, BlockedAggregate, CancelTarget, EventDetail, EventFilter, EventSummary, Heartbeat, Membership,
    PartitionLease, PartitionStart, ReadBatch, ReadRequest, RetryTarget, SettleBatch, SettleReport, SharedBacklog,
    StatusReport, Store, StoreFuture, Wakeups,
};
use uuid::Uuid;

use super::names;

/// `LISTEN` connections of this process that are down (each watched listener starts down until it connects).
static LISTENERS_DOWN: AtomicUsize = AtomicUsize::new(0);

/// Whether every relay of this process that wakes up on `NOTIFY` has its `LISTEN` connection up (true when no
/// relay listens).
pub fn listeners_connected() -> bool {
    LISTENERS_DOWN.load(Ordering::SeqCst) == 0
}

/// One listener's state, counted in [`LISTENERS_DOWN`] while down; uncounted when dropped.
#[derive(Debug)]
struct ListenerState {
    down: std::sync::Mutex<bool>,
}

impl ListenerState {
    fn new() -> Arc<Self> {
        LISTENERS_DOWN.fetch_add(1, Ordering::SeqCst);
        publish_listener_gauge();
        Arc::new(Self { down: std::sync::Mutex::new(true) })
    }

    fn set_up(&self, up: bool) {
        let mut down = self.down.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if *down == up {
            *down = !up;
            if up {
                LISTENERS_DOWN.fetch_sub(1, Ordering::SeqCst);
            } else {
                LISTENERS_DOWN.fetch_add(1, Ordering::SeqCst);
            }
            publish_listener_gauge();
        }
    }
}

impl Drop for ListenerState {
    fn drop(&mut self) {
        if *self.down.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner) {
            LISTENERS_DOWN.fetch_sub(1, Ordering::SeqCst);
            publish_listener_gauge();
        }
    }
}

/// Sets [`names::LISTENER_CONNECTED`] from [`listeners_connected`].
pub(super) fn publish_listener_gauge() {
    metrics::gauge!(names::LISTENER_CONNECTED).set(if listeners_connected() { 1.0 } else { 0.0 });
}

/// The store handed to the listener task: every call goes to `inner`; `listen` also tracks the connection.
pub(crate) struct WatchedListener {
    inner: Arc<dyn Store>,
    state: Arc<ListenerState>,
}

impl WatchedListener {
    pub(crate) fn wrap(inner: Arc<dyn Store>) -> Arc<dyn Store> {
        Arc::new(Self { inner, state: ListenerState::new() })
    }
}

/// The wake-ups of a watched connection: an error means the connection is gone.
struct WatchedWakeups {
    inner: Box<dyn Wakeups>,
    state: Arc<ListenerState>,
}

impl Wakeups for WatchedWakeups {
    fn next(&mut self) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            let next = self.inner.next().await;
            if next.is_err() {
                self.state.set_up(false);
            }
            next
        })
    }
}

impl Store for WatchedListener {
    fn heartbeat<'a>(&'a self, beat: &'a Heartbeat<'a>) -> StoreFuture<'a, Membership> {
        self.inner.heartbeat(beat)
    }

    fn leave(&self, relay: Uuid) -> StoreFuture<'_, ()> {
        self.inner.leave(relay)
    }

    fn read<'a>(&'a self, request: &'a ReadRequest) -> StoreFuture<'a, ReadBatch> {
        self.inner.read(request)
    }

    fn blocked_aggregates<'a>(&'a self, partitions: &'a [u16]) -> StoreFuture<'a, Vec<BlockedAggregate>> {
        self.inner.blocked_aggregates(partitions)
    }

    fn start_batch<'a>(
        &'a self,
        relay: Uuid,
        batch: Uuid,
        leases: &'a [PartitionLease],
        events: &'a [Uuid],
    ) -> StoreFuture<'a, bool> {
        self.inner.start_batch(relay, batch, leases, events)
    }

    fn settle<'a>(&'a self, batch: &'a SettleBatch) -> StoreFuture<'a, SettleReport> {
        self.inner.settle(batch)
    }

    fn advance_starts<'a>(&'a self, relay: Uuid, starts: &'a [PartitionStart]) -> StoreFuture<'a, ()> {
        self.inner.advance_starts(relay, starts)
    }

    fn delete_finished(&self, older_than: Duration, limit: u32) -> StoreFuture<'_, u64> {
        self.inner.delete_finished(older_than, limit)
    }

    fn set_paused(&self, paused: bool) -> StoreFuture<'_, ()> {
        self.inner.set_paused(paused)
    }

    fn is_paused(&self) -> StoreFuture<'_, bool> {
        self.inner.is_paused()
    }

    fn status(&self) -> StoreFuture<'_, StatusReport> {
        self.inner.status()
    }

    fn backlog(&self) -> StoreFuture<'_, Backlog> {
        self.inner.backlog()
    }

    fn shared_backlog(&self, max_age: Duration) -> StoreFuture<'_, Option<SharedBacklog>> {
        self.inner.shared_backlog(max_age)
    }

    fn list<'a>(&'a self, filter: &'a EventFilter) -> StoreFuture<'a, Vec<EventSummary>> {
        self.inner.list(filter)
    }

    fn show(&self, id: Uuid) -> StoreFuture<'_, Option<EventDetail>> {
        self.inner.show(id)
    }

    fn retry<'a>(&'a self, target: &'a RetryTarget) -> StoreFuture<'a, Vec<Uuid>> {
        self.inner.retry(target)
    }

    fn cancel<'a>(&'a self, target: &'a CancelTarget) -> StoreFuture<'a, Vec<Uuid>> {
        self.inner.cancel(target)
    }

    fn count_finished(&self, older_than: Duration) -> StoreFuture<'_, u64> {
        self.inner.count_finished(older_than)
    }

    fn listen<'a>(&'a self, channel: &'a str) -> StoreFuture<'a, Box<dyn Wakeups>> {
        Box::pin(async move {
            match self.inner.listen(channel).await {
                Ok(inner) => {
                    self.state.set_up(true);
                    Ok(Box::new(WatchedWakeups { inner, state: Arc::clone(&self.state) }) as Box<dyn Wakeups>)
                }
                Err(error) => {
                    self.state.set_up(false);
                    Err(error)
                }
            }
        })
    }
}
