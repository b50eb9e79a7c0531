//! Publishing the events of committed transactions: read by id (only rows still pending), published in order
//! ([`crate::relay::batch::publish`]: the same rounds, timeout and outcomes as the table source), settled in one
//! statement by id. A transient failure is retried in place with the backoff policy, holding back the later events
//! of its aggregate, for at most the in-place retry time; then the event and its aggregate go to the table's retry
//! path ([`super::handover`]) and the stream goes on.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};

use outbox_core::store::{PgStore, SettleOutcome};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::handover::Handover;
use crate::error::{Error, Result};
use crate::relay::batch::{self, Item, Published};
use crate::relay::{RunSummary, Shared};

/// An event to publish, with the commit time its transaction had on the stream (`None` for the rows that were
/// pending when the slot was created: their age comes from `created_at`).
pub(crate) type Streamed = (Uuid, Option<SystemTime>);

/// What a flush came to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Flushed {
    /// Every event is settled or handed to the table's retry path.
    Done,
    /// Shutdown came first: what is not settled stays pending and is streamed again.
    Stopped,
}

/// Publishes and settles `events`, in their order. Events of aggregates handed to the table's retry path are
/// left to it; an event still failing after the in-place retry time is handed over with its aggregate.
pub(crate) async fn flush(
    shared: &Shared,
    store: &PgStore,
    summary: &mut RunSummary,
    handover: &mut Handover,
    events: &[Streamed],
    shutdown: &CancellationToken,
) -> Result<Flushed> {
    let committed: HashMap<Uuid, SystemTime> = events.iter().filter_map(|(id, at)| at.map(|at| (*id, at))).collect();
    let mut todo: Vec<Uuid> = events.iter().map(|(id, _)| *id).collect();
    let deadline = Instant::now() + handover.retry_in_place();
    while !todo.is_empty() {
        if !wait_unless_paused(store, shutdown).await? {
            return Ok(Flushed::Stopped);
        }
        let Some(rows) = database(shutdown, || store.pending_by_id(&todo)).await? else {
            return Ok(Flushed::Stopped);
        };
        let now = SystemTime::now();
        let items: Vec<Item> = rows
            .into_iter()
            .filter(|row| !handover.holds(&(row.event.aggregate_type.clone(), row.event.aggregate_id.clone())))
            .map(|row| {
                let since = committed.get(&row.event.id).and_then(|at| now.duration_since(*at).ok());
                Item::new(row.partition, 0, row.event, since.unwrap_or(row.since_commit))
            })
            .collect();
        if items.is_empty() {
            break;
        }
        let Some(published) = publish_and_settle(shared, store, summary, &items, shutdown).await? else {
            return Ok(Flushed::Stopped);
        };
        let settled: HashSet<Uuid> = published
            .settlements
            .iter()
            .filter(|settlement| !matches!(settlement.outcome, SettleOutcome::Retry { .. }))
            .map(|settlement| settlement.id)
            .collect();
        let mut retry_in = None;
        for (partition, aggregate, _, outcome) in published.held_back {
            match outcome {
                // A failed event holds its aggregate until an operator retries or cancels it.
                SettleOutcome::Failed { .. } => handover.hold(partition, aggregate, Duration::ZERO),
                SettleOutcome::Retry { delay, .. } => {
                    retry_in = Some(retry_in.map_or(delay, |wait: Duration| wait.min(delay)));
                }
                SettleOutcome::Published => {}
            }
        }
        todo = items
            .iter()
            .filter(|item| !settled.contains(&item.id) && !handover.holds(&item.aggregate))
            .map(|item| item.id)
            .collect();
        let Some(wait) = retry_in.filter(|_| !todo.is_empty()) else { continue };
        if Instant::now() + wait > deadline {
            // Retried in place long enough: the rest leaves the stream for the table's retry path.
            let mut aggregates = 0;
            for item in items.iter().filter(|item| todo.contains(&item.id)) {
                if !handover.holds(&item.aggregate) {
                    aggregates += 1;
                    handover.hold(item.partition, item.aggregate.clone(), wait);
                }
            }
            tracing::warn!(
                events = todo.len(),
                aggregates,
                "events still failing after the in-place retry go to the table's retry path; the stream goes on"
            );
            break;
        }
        tokio::select! {
            () = shutdown.cancelled() => return Ok(Flushed::Stopped),
            () = tokio::time::sleep(wait) => {}
        }
    }
    Ok(Flushed::Done)
}

/// Publishes `items` in order ([`batch::publish`]) and settles them by id in one statement; `None` when shutdown
/// came first (nothing settled: what was published is published again).
pub(crate) async fn publish_and_settle(
    shared: &Shared,
    store: &PgStore,
    summary: &mut RunSummary,
    items: &[Item],
    shutdown: &CancellationToken,
) -> Result<Option<Published>> {
    let span = crate::telemetry::read_span(0);
    let batch_span = crate::telemetry::record_batch(&span, items.iter().map(Item::event_type), items.len());
    let published = tracing::Instrument::instrument(batch::publish(shared, items), batch_span).await;
    let delete = shared.config.retention == crate::config::Retention::Immediately;
    let Some(report) = database(shutdown, || store.settle_by_id(&published.settlements, delete)).await? else {
        return Ok(None);
    };
    summary.batches += 1;
    summary.add(report);
    Ok(Some(published))
}

/// While publishing is paused (`outbox pause`), waits; `false` when shutdown came first.
async fn wait_unless_paused(store: &PgStore, shutdown: &CancellationToken) -> Result<bool> {
    use outbox_core::store::Store;
    let mut announced = false;
    loop {
        let Some(paused) = database(shutdown, || store.is_paused()).await? else { return Ok(false) };
        if !paused {
            return Ok(true);
        }
        if !announced {
            tracing::info!("publishing is paused (`outbox resume` resumes it)");
            announced = true;
        }
        tokio::select! {
            () = shutdown.cancelled() => return Ok(false),
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// Runs a statement until it succeeds: a retryable database error is logged and retried with backoff (nothing
/// is acknowledged meanwhile, so nothing is lost); a fatal one is returned. `None` when shutdown came first.
pub(crate) async fn database<T, F, Fut>(shutdown: &CancellationToken, mut statement: F) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = outbox_core::Result<T>>,
{
    let backoff = crate::backoff::Backoff::new(Duration::from_millis(50), Duration::from_secs(5)).unwrap_or_default();
    let mut failures = 0;
    loop {
        let error = match statement().await {
            Ok(value) => return Ok(Some(value)),
            Err(error) => Error::from_store(error),
        };
        if !error.is_retryable() {
            return Err(error);
        }
        let wait = backoff.ceiling(failures);
        failures += 1;
        tracing::warn!(retry_in = ?wait, error = %error, "database error; retrying");
        tokio::select! {
            () = shutdown.cancelled() => return Ok(None),
            () = tokio::time::sleep(wait) => {}
        }
    }
}
