//! The database statements of the WAL source, retried while the database is unreachable.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::error::{Error, Result};

/// Runs a statement until it succeeds: a retryable database error is logged and retried with backoff (nothing
/// is acknowledged meanwhile, so nothing is lost); a fatal one is returned. `None` when shutdown came first.
pub(crate) async fn database<T, F, Fut>(shutdown: &CancellationToken, mut statement: F) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = outbox_core::Result<T>>,
{
    let backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(5)).unwrap_or_default();
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
