//! The `LISTEN` side of [`Wakeup::Notify`](crate::Wakeup::Notify): a task that turns notifications into wake-ups
//! and reconnects with backoff when the database goes away.

use std::sync::Arc;
use std::time::Duration;

use outbox_core::store::Store;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;

/// Reconnection delays: 100ms doubling up to 30s.
fn reconnect_backoff() -> Backoff {
    Backoff::new(Duration::from_millis(100), Duration::from_secs(30)).unwrap_or_default()
}

/// Listens on `channel` until `shutdown`, calling `wake.notify_one()` for every notification and once after
/// every (re)connection, since notifications sent while disconnected are lost.
pub(crate) async fn listen(store: Arc<dyn Store>, channel: String, wake: Arc<Notify>, shutdown: CancellationToken) {
    let backoff = reconnect_backoff();
    let mut failures = 0;
    while !shutdown.is_cancelled() {
        let connected = tokio::select! {
            _ = shutdown.cancelled() => return,
            connected = store.listen(&channel) => connected,
        };
        let mut wakeups = match connected {
            Ok(wakeups) => {
                tracing::debug!(channel = %channel, "listening for commit notifications");
                failures = 0;
                wake.notify_one();
                wakeups
            }
            Err(error) => {
                let retry = backoff.ceiling(failures);
                failures += 1;
                tracing::warn!(channel = %channel, retry_in = ?retry, error = %error, "cannot listen for notifications");
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(retry) => {}
                }
                continue;
            }
        };
        loop {
            let next = tokio::select! {
                _ = shutdown.cancelled() => return,
                next = wakeups.next() => next,
            };
            match next {
                Ok(()) => wake.notify_one(),
                Err(error) => {
                    tracing::warn!(channel = %channel, error = %error, "notification connection lost; reconnecting");
                    break;
                }
            }
        }
        let retry = backoff.ceiling(failures);
        failures += 1;
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(retry) => {}
        }
    }
}
