//! The slot's gauges: the WAL between the confirmed position and the server's end of WAL, the age of the oldest
//! transaction not confirmed yet, and the aggregates handed over to the table's retry path. Each session starts
//! them from the slot's positions as the server has them (one query), then they follow the stream: the
//! replication client's view of the server's end of WAL, and what the session confirms. A task sets them every
//! second, so the lag and the age keep growing while the session is stuck on an event or paused.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use outbox_core::store::PgStore;
use pgwire_replication::{Lsn, ReplicationMetrics};

use crate::telemetry::names;

/// How often the gauges are set.
const EVERY: Duration = Duration::from_secs(1);

/// The slot's confirmed position and the server's end of WAL, as byte positions; only a slot of this database (slot
/// names are shared by a server's databases).
const SLOT_POSITIONS: &str = "\
SELECT pg_wal_lsn_diff(confirmed_flush_lsn, '0/0')::int8, pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::int8
  FROM pg_replication_slots
 WHERE slot_name = $1 AND database = current_database() AND confirmed_flush_lsn IS NOT NULL";

#[derive(Debug, Default)]
struct Positions {
    wal_end: AtomicU64,
    confirmed: AtomicU64,
    /// Unix microseconds of the oldest unconfirmed commit; 0 when everything streamed is confirmed.
    oldest_unconfirmed: AtomicU64,
    handed_over: AtomicU64,
    /// The running session's replication client: the last end of WAL the server sent it.
    stream: Mutex<Option<Arc<ReplicationMetrics>>>,
}

/// What the session tells the gauges; the task that sets them ends with it.
#[derive(Debug)]
pub(crate) struct SlotGauges {
    positions: Arc<Positions>,
    task: tokio::task::JoinHandle<()>,
}

impl SlotGauges {
    /// Starts setting the gauges.
    pub(crate) fn start() -> Self {
        let positions = Arc::new(Positions::default());
        let shown = Arc::clone(&positions);
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(EVERY);
            loop {
                ticks.tick().await;
                show(&shown);
            }
        });
        Self { positions, task }
    }

    /// A session starts streaming `slot` with the client that reports `stream`: the gauges start from the slot's
    /// confirmed position and the server's end of WAL (the WAL kept while no relay read the slot), then follow the
    /// end of WAL the server sends the client, also while the session is busy publishing. Without the positions
    /// (the query failed) they follow what the session reads of the stream only.
    pub(crate) async fn streaming(&self, store: &PgStore, slot: &str, stream: Arc<ReplicationMetrics>) {
        match sqlx::query_as::<_, (i64, i64)>(SLOT_POSITIONS).bind(slot).fetch_optional(store.pool()).await {
            Ok(Some((confirmed, wal_end))) => {
                let position = |bytes: i64| Lsn::from_u64(bytes.unsigned_abs());
                self.confirmed(position(confirmed), false);
                self.wal_end(position(wal_end));
                *self.positions.stream.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(stream);
            }
            Ok(None) => {}
            Err(error) => tracing::debug!(slot, error = %error, "cannot read the slot's positions for its gauges"),
        }
    }

    /// The server's end of WAL, as a keepalive reported it.
    pub(crate) fn wal_end(&self, lsn: Lsn) {
        self.positions.wal_end.fetch_max(lsn.as_u64(), Ordering::Relaxed);
    }

    /// A transaction that committed at `at` waits to be confirmed.
    pub(crate) fn unconfirmed(&self, at: SystemTime) {
        let micros = at.duration_since(SystemTime::UNIX_EPOCH).map_or(1, |since| since.as_micros() as u64).max(1);
        let _ = self.positions.oldest_unconfirmed.compare_exchange(0, micros, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// The slot is confirmed through `lsn`; `caught_up`: nothing streamed waits any more.
    pub(crate) fn confirmed(&self, lsn: Lsn, caught_up: bool) {
        self.positions.confirmed.fetch_max(lsn.as_u64(), Ordering::Relaxed);
        self.positions.wal_end.fetch_max(lsn.as_u64(), Ordering::Relaxed);
        if caught_up {
            self.positions.oldest_unconfirmed.store(0, Ordering::Relaxed);
        }
    }

    /// How many aggregates the table's retry path holds.
    pub(crate) fn handed_over(&self, aggregates: usize) {
        self.positions.handed_over.store(aggregates as u64, Ordering::Relaxed);
    }
}

impl Drop for SlotGauges {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn show(positions: &Positions) {
    if let Some(stream) = positions.stream.lock().unwrap_or_else(std::sync::PoisonError::into_inner).as_ref() {
        positions.wal_end.fetch_max(stream.last_wal_end().as_u64(), Ordering::Relaxed);
    }
    let wal_end = positions.wal_end.load(Ordering::Relaxed);
    let confirmed = positions.confirmed.load(Ordering::Relaxed);
    metrics::gauge!(names::WAL_LAG_BYTES).set(wal_end.saturating_sub(confirmed) as f64);
    let oldest = positions.oldest_unconfirmed.load(Ordering::Relaxed);
    let age = if oldest == 0 {
        0.0
    } else {
        let since = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_micros() as u64;
        since.saturating_sub(oldest) as f64 / 1e6
    };
    metrics::gauge!(names::WAL_CONFIRMED_AGE_SECONDS).set(age);
    metrics::gauge!(names::WAL_HANDED_OVER_AGGREGATES).set(positions.handed_over.load(Ordering::Relaxed) as f64);
}
