//! The database statements of the WAL source, retried while the database is unreachable.

use std::sync::OnceLock;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::error::{Error, Result};

/// Runs a statement until it succeeds: a retryable database error is logged and retried with backoff (nothing
/// is acknowledged meanwhile, so nothing is lost); a fatal one is returned, and so is one that says the server is
/// shutting down ([`server_stopping`]). `None` when shutdown came first.
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
            Err(error) => {
                let stopping = server_stopping(&error);
                let error = Error::from_store(error);
                if stopping {
                    return Err(error);
                }
                error
            }
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

/// Waits for `settle` (a [`database`] call, or its [`Background`]'s end) until it ends, or, once shutdown was asked
/// for, until `stop_by` (see [`until_stopped`]): a row lock held by a transaction could keep a settle waiting for
/// ever. Then the settle is left to end on its own and `Ok(None)` says so, as when shutdown came first: the caller
/// acknowledges nothing past its rows, which are streamed again. A settle that has ended is taken, however late.
pub(crate) async fn settle_before_stop<T>(
    settle: impl std::future::Future<Output = Result<Option<T>>>,
    shutdown: &CancellationToken,
    stop_by: &OnceLock<Instant>,
    timeout: Duration,
) -> Result<Option<T>> {
    let abandoned = "stopping before a settle ended (is a row lock held?); its events will be streamed again";
    until_stopped(settle, shutdown, stop_by, timeout, None, abandoned).await
}

/// Runs `session` to its end, or, once shutdown was asked for, until the shutdown timeout after the signal is
/// over: then `session` is dropped with whatever it was waiting for (a publish the sink has not answered, a
/// settle held up), `abandoned` is logged and `stopped_value` returned. Nothing past the events it settled was
/// acknowledged, so the rest is streamed again. The deadline is kept in `stop_by`, set by the first wait that sees
/// the signal (this one, which waits for it from the start), so that every wait of the stop ends by it.
pub(crate) async fn until_stopped<T>(
    session: impl std::future::Future<Output = Result<T>>,
    shutdown: &CancellationToken,
    stop_by: &OnceLock<Instant>,
    timeout: Duration,
    stopped_value: T,
    abandoned: &'static str,
) -> Result<T> {
    tokio::select! {
        biased;
        ended = session => ended,
        () = stopped(shutdown, stop_by, timeout) => {
            tracing::warn!(shutdown_timeout = ?timeout, "{abandoned}");
            Ok(stopped_value)
        }
    }
}

/// Resolves once shutdown was asked for and the shutdown timeout has passed since.
async fn stopped(shutdown: &CancellationToken, stop_by: &OnceLock<Instant>, timeout: Duration) {
    shutdown.cancelled().await;
    let deadline = *stop_by.get_or_init(|| Instant::now() + timeout);
    tokio::time::sleep_until(deadline).await;
}

/// A statement run by [`database`] in a task of its own while the caller goes on.
pub(crate) struct Background<T> {
    task: tokio::task::JoinHandle<Result<Option<T>>>,
    /// The task's result, once [`ended`](Self::ended) has seen it.
    outcome: Option<std::result::Result<Result<Option<T>>, tokio::task::JoinError>>,
}

impl<T: Send + 'static> Background<T> {
    /// Runs `statement` (a [`database`] call) in a task of its own.
    pub(crate) fn spawn(statement: impl std::future::Future<Output = Result<Option<T>>> + Send + 'static) -> Self {
        Self { task: tokio::spawn(statement), outcome: None }
    }

    /// Waits until the statement has ended, keeping its result for [`finish`](Self::finish). Cancel safe.
    pub(crate) async fn ended(&mut self) {
        if self.outcome.is_none() {
            self.outcome = Some((&mut self.task).await);
        }
    }

    /// Whether the statement has ended (its result waits for [`finish`](Self::finish)).
    pub(crate) fn is_done(&self) -> bool {
        self.outcome.is_some() || self.task.is_finished()
    }

    /// The statement's result, once it has ended; `None` when shutdown came first (or the runtime shut down).
    ///
    /// # Errors
    ///
    /// The statement's fatal database error.
    pub(crate) async fn finish(mut self) -> Result<Option<T>> {
        self.ended().await;
        match self.outcome.take() {
            Some(Ok(result)) => result,
            Some(Err(error)) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
            // Cancelled only when the runtime shuts down: nothing is known to have been done.
            Some(Err(_)) | None => Ok(None),
        }
    }
}

/// Whether `error` says that the server is shutting down (SQLSTATE 57P01, 57P02, 57P03: a session ended by a
/// shutdown, a new one refused during it), or could not be reached for the pool's acquire timeout (the pool
/// retries a connection refused during a shutdown until then, and reports only that it timed out). The session
/// then ends rather than retry in place: at a shutdown the server's WAL sender waits, until
/// `wal_sender_timeout`, for the reader to confirm everything it sent, which a relay whose settles fail cannot do,
/// and a fast shutdown would wait as long. Closing the replication connection lets it end; the next session
/// resumes from the last confirmed position (what was in flight is published again).
fn server_stopping(error: &outbox_core::Error) -> bool {
    match error {
        outbox_core::Error::Database(sqlx::Error::Database(db)) => {
            matches!(db.code().as_deref(), Some("57P01" | "57P02" | "57P03"))
        }
        outbox_core::Error::Database(sqlx::Error::PoolTimedOut) => true,
        _ => false,
    }
}
