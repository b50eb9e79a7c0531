//! Publishing the events of committed transactions: read by id (only rows still pending), published in order
//! ([`crate::relay::batch::publish`]: the same rounds, timeout and outcomes as the table source), settled in one
//! statement by id. A transient failure is retried in place with the backoff policy until the event is published
//! or fails for good (`max_attempts`), holding back the later events of its aggregate meanwhile.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};

use outbox_core::store::{AggregateKey, PgStore, SettleOutcome};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::relay::batch::{self, Item};
use crate::relay::{RunSummary, Shared};

/// An event to publish, with the commit time its transaction had on the stream (`None` for the rows that were
/// pending when the slot was created: their age comes from `created_at`).
pub(crate) type Streamed = (Uuid, Option<SystemTime>);

/// What a flush came to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Flushed {
    /// Every event is settled (or held back behind a failed event of its aggregate, pending in the table).
    Done,
    /// Shutdown came first: what is not settled stays pending and is streamed again.
    Stopped,
}

/// Publishes and settles `events`, in their order.
pub(crate) async fn flush(
    shared: &Shared,
    store: &PgStore,
    summary: &mut RunSummary,
    events: &[Streamed],
    shutdown: &CancellationToken,
) -> Result<Flushed> {
    let committed: HashMap<Uuid, SystemTime> = events.iter().filter_map(|(id, at)| at.map(|at| (*id, at))).collect();
    let mut todo: Vec<Uuid> = events.iter().map(|(id, _)| *id).collect();
    let delete = shared.config.retention == crate::config::Retention::Immediately;
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
            .map(|row| {
                let since = committed.get(&row.event.id).and_then(|at| now.duration_since(*at).ok());
                Item::new(row.partition, 0, row.event, since.unwrap_or(row.since_commit))
            })
            .collect();
        if items.is_empty() {
            break;
        }
        let span = crate::telemetry::read_span(0);
        let batch_span = crate::telemetry::record_batch(&span, items.iter().map(Item::event_type), items.len());
        let published = tracing::Instrument::instrument(batch::publish(shared, &items), batch_span).await;
        let Some(report) = database(shutdown, || store.settle_by_id(&published.settlements, delete)).await? else {
            return Ok(Flushed::Stopped);
        };
        summary.batches += 1;
        summary.add(report);
        let settled: HashSet<Uuid> = published
            .settlements
            .iter()
            .filter(|settlement| !matches!(settlement.outcome, SettleOutcome::Retry { .. }))
            .map(|settlement| settlement.id)
            .collect();
        let failed_heads: HashSet<&AggregateKey> = published
            .held_back
            .iter()
            .filter(|(.., outcome)| matches!(outcome, SettleOutcome::Failed { .. }))
            .map(|(_, aggregate, ..)| aggregate)
            .collect();
        let retry_in = published
            .held_back
            .iter()
            .filter_map(|(.., outcome)| match outcome {
                SettleOutcome::Retry { delay, .. } => Some(*delay),
                _ => None,
            })
            .min();
        let mut held = 0;
        todo = items
            .iter()
            .filter(|item| !settled.contains(&item.id))
            .filter(|item| {
                let behind_failed = failed_heads.contains(&item.aggregate);
                held += usize::from(behind_failed);
                !behind_failed
            })
            .map(|item| item.id)
            .collect();
        if held > 0 {
            tracing::warn!(
                events = held,
                "events held back behind a failed event of their aggregate stay pending in the table"
            );
        }
        if let Some(wait) = retry_in.filter(|_| !todo.is_empty()) {
            tokio::select! {
                () = shutdown.cancelled() => return Ok(Flushed::Stopped),
                () = tokio::time::sleep(wait) => {}
            }
        }
    }
    Ok(Flushed::Done)
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
