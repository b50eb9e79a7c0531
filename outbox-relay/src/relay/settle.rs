//! Writing a batch's outcomes: one statement, retried with backoff on a database error. If it still fails, the
//! rows stay pending and their partitions are read afresh: published again, at least once, never lost.

use outbox_core::store::{SettleBatch, SettleReport};

use super::shared::Shared;
use crate::backoff::Backoff;
use crate::error::Error;

/// Attempts of one settle before its partitions are read afresh.
const ATTEMPTS: u32 = 4;

/// Settles `batch`; `None` when it could not be written.
pub(crate) async fn settle(shared: &Shared, batch: &SettleBatch) -> Option<SettleReport> {
    let span = tracing::info_span!("outbox.mark", events = batch.settlements.len());
    tracing::Instrument::instrument(settle_in_span(shared, batch), span).await
}

async fn settle_in_span(shared: &Shared, batch: &SettleBatch) -> Option<SettleReport> {
    let backoff =
        Backoff::new(std::time::Duration::from_millis(50), std::time::Duration::from_secs(2)).unwrap_or_default();
    for attempt in 0..ATTEMPTS {
        match shared.store.settle(batch).await {
            Ok(report) => {
                if report.fenced > 0 {
                    tracing::warn!(
                        events = report.fenced,
                        "partition taken over before marking (or the rows changed): these events were not marked"
                    );
                }
                return Some(report);
            }
            Err(error) => {
                let error = Error::from_store(error);
                if attempt + 1 == ATTEMPTS || !error.is_retryable() {
                    tracing::error!(
                        events = batch.settlements.len(), error = %error,
                        "cannot mark the batch; its partitions are read again and its events published again"
                    );
                    return None;
                }
                let wait = backoff.ceiling(attempt);
                tracing::warn!(events = batch.settlements.len(), retry_in = ?wait, error = %error, "cannot mark the batch; retrying");
                tokio::time::sleep(wait).await;
            }
        }
    }
    None
}
