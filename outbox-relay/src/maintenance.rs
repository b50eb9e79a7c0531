//! Background upkeep of one relay: deleting old rows (retention).

use std::sync::Arc;
use std::time::Duration;

use outbox_core::store::Store;
use tokio_util::sync::CancellationToken;

use crate::config::{RelayConfig, Retention};

/// Rows deleted per retention statement: small enough that no statement holds many row locks or runs long.
const RETENTION_BATCH: u32 = 2_000;
/// The pause between two statements of a pass, so that a pass over a large backlog of old rows leaves the
/// database room for everything else.
const RETENTION_PAUSE: Duration = Duration::from_millis(10);

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

/// One pass: statement after statement until one deletes less than a full batch, so that rows are deleted as
/// fast as they come of age, whatever the publish rate (a pass capped at a number of rows fell behind any rate
/// above that number per interval, and the table grew for good).
async fn delete_old(store: &dyn Store, age: Duration, shutdown: &CancellationToken) {
    let mut deleted = 0;
    loop {
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
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(RETENTION_PAUSE) => {}
        }
    }
    if deleted > 0 {
        tracing::debug!(rows = deleted, "retention: deleted old published rows");
    }
}
