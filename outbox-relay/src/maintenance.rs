//! Background upkeep of one relay: deleting old rows (retention).

use std::sync::Arc;
use std::time::Duration;

use outbox_core::store::Store;
use tokio_util::sync::CancellationToken;

use crate::config::{RelayConfig, Retention};

/// Rows deleted per retention statement: small, so no statement holds many row locks or runs long.
const RETENTION_BATCH: u32 = 500;
/// Retention statements per pass, with a short pause between them, so a huge backlog of old rows is worked off
/// over several passes instead of in one long burst.
const RETENTION_BATCHES_PER_PASS: u32 = 20;

/// Runs until `shutdown`: with [`Retention::After`], deletes old finished rows every `age / 10` (between 100ms
/// and 60s).
pub(crate) async fn run(store: Arc<dyn Store>, config: RelayConfig, shutdown: CancellationToken) {
    let Retention::After(age) = config.retention else { return };
    let every = (age / 10).clamp(Duration::from_millis(100), Duration::from_secs(60));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        delete_old(&*store, age, &shutdown).await;
    }
}

async fn delete_old(store: &dyn Store, age: Duration, shutdown: &CancellationToken) {
    let mut deleted = 0;
    for _ in 0..RETENTION_BATCHES_PER_PASS {
        match store.delete_finished(age, RETENTION_BATCH).await {
            Ok(n) => {
                deleted += n;
                if n < u64::from(RETENTION_BATCH) || shutdown.is_cancelled() {
                    break;
                }
            }
            Err(error) => {
                tracing::warn!(error = %error, "retention: cannot delete old rows");
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if deleted > 0 {
        tracing::debug!(rows = deleted, "retention: deleted old published rows");
    }
}
