//! Publishing a batch of the WAL source ([`batch::publish`]: the same rounds, timeout and outcomes as the table
//! source) and settling its rows by id in one statement; the outcomes of message-mode events, which have no row,
//! are counted here and written by the caller.

use std::collections::HashMap;

use outbox_core::store::{PgStore, SettleOutcome, Settlement, StoredEvent};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::statement::database;
use crate::error::Result;
use crate::relay::batch::{self, Item, Published};
use crate::relay::shared::Shared;
use crate::relay::summary::RunSummary;

/// Publishes `items` in order ([`batch::publish`]) and settles them by id in one statement; `None` when shutdown
/// came first (nothing settled: what was published is published again).
pub(crate) async fn publish_and_settle(
    shared: &Shared,
    store: &PgStore,
    summary: &mut RunSummary,
    items: &mut [Item],
    messages: &HashMap<Uuid, StoredEvent>,
    shutdown: &CancellationToken,
) -> Result<Option<Published>> {
    let published = publish(shared, summary, items, messages).await;
    let of_rows = row_settlements(&published, messages);
    Ok(settle(shared, store, summary, &of_rows, shutdown).await?.map(|()| published))
}

/// Publishes `items` in order ([`batch::publish`]) and counts the outcomes of the message-mode events, which have
/// no row to settle: published, they are done; the caller writes the others.
pub(crate) async fn publish(
    shared: &Shared,
    summary: &mut RunSummary,
    items: &mut [Item],
    messages: &HashMap<Uuid, StoredEvent>,
) -> Published {
    let span = crate::telemetry::read_span(0);
    let batch_span = crate::telemetry::record_batch(&span, items.iter().map(Item::event_type), items.len());
    let published = tracing::Instrument::instrument(batch::publish(shared, items), batch_span).await;
    summary.batches += 1;
    for settlement in published.settlements.iter().filter(|settlement| messages.contains_key(&settlement.id)) {
        match settlement.outcome {
            SettleOutcome::Published => summary.published += 1,
            SettleOutcome::Retry { .. } => summary.retried += 1,
            SettleOutcome::Failed { .. } => summary.failed += 1,
        }
    }
    published
}

/// The outcomes of `published` that settle a table row (every event that is not a message-mode one).
pub(crate) fn row_settlements(published: &Published, messages: &HashMap<Uuid, StoredEvent>) -> Vec<Settlement> {
    published.settlements.iter().filter(|settlement| !messages.contains_key(&settlement.id)).cloned().collect()
}

/// Settles `rows` by id in one statement (published rows marked, or deleted with `--retention 0s`); `None` when
/// shutdown came first. A settle that has not ended by the shutdown timeout after the signal is abandoned with the
/// session ([`until_stopped`](super::statement::until_stopped)): the caller acknowledges nothing past these rows.
pub(crate) async fn settle(
    shared: &Shared,
    store: &PgStore,
    summary: &mut RunSummary,
    rows: &[Settlement],
    shutdown: &CancellationToken,
) -> Result<Option<()>> {
    if rows.is_empty() {
        return Ok(Some(()));
    }
    let delete = shared.config.deletes_published();
    let Some(report) = database(shutdown, || store.settle_by_id(rows, delete)).await? else { return Ok(None) };
    summary.add(report);
    Ok(Some(()))
}
