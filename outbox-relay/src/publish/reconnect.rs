//! A broker connection opened lazily and reopened after a failure, with capped backoff between attempts.

use std::time::Duration;

use crate::backoff::Backoff;

/// A broker connection opened lazily and reopened after a failure, with capped exponential backoff between
/// attempts: while the broker is down, a publish fails fast (transient) instead of waiting for a connect timeout
/// on every batch.
pub(crate) struct Reconnect<C> {
    state: tokio::sync::Mutex<ReconnectState<C>>,
    /// The wait after each failed attempt in a row (its ceiling: no jitter).
    backoff: Backoff,
}

struct ReconnectState<C> {
    connection: Option<C>,
    failures: u32,
    next_try: Option<tokio::time::Instant>,
    last_error: String,
}

impl<C: Clone> Reconnect<C> {
    /// The wait after the first failed attempt; it doubles with each failure in a row, up to [`Self::MAX_DELAY`].
    const FIRST_DELAY: Duration = Duration::from_millis(200);
    /// The longest wait between two connection attempts.
    const MAX_DELAY: Duration = Duration::from_secs(5);

    pub(crate) fn new() -> Self {
        Self {
            state: tokio::sync::Mutex::new(ReconnectState {
                connection: None,
                failures: 0,
                next_try: None,
                last_error: String::new(),
            }),
            backoff: Backoff::new(Self::FIRST_DELAY, Self::MAX_DELAY).unwrap_or_default(),
        }
    }

    /// The open connection, or a new one from `connect` unless the last attempt failed too recently. The error
    /// is a short description for [`Outcome::Transient`](super::Outcome::Transient).
    pub(crate) async fn get<F, Fut>(&self, connect: F) -> std::result::Result<C, String>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = std::result::Result<C, String>>,
    {
        let mut state = self.state.lock().await;
        if let Some(connection) = &state.connection {
            return Ok(connection.clone());
        }
        let now = tokio::time::Instant::now();
        if state.next_try.is_some_and(|next| next > now) {
            return Err(format!("{} (reconnecting)", state.last_error));
        }
        match connect().await {
            Ok(connection) => {
                state.connection = Some(connection.clone());
                state.failures = 0;
                state.next_try = None;
                Ok(connection)
            }
            Err(error) => {
                state.failures = state.failures.saturating_add(1);
                let delay = self.backoff.ceiling(state.failures - 1);
                state.next_try = Some(now + delay);
                state.last_error.clone_from(&error);
                Err(error)
            }
        }
    }

    /// Keeps `connection`, opened ahead of the first publish (the publisher's `connect`), for the next batches.
    pub(crate) async fn put(&self, connection: C) {
        let mut state = self.state.lock().await;
        state.connection = Some(connection);
        state.failures = 0;
        state.next_try = None;
    }

    /// Forgets the connection after a connection-level failure: the next publish reconnects.
    #[cfg_attr(not(any(feature = "rabbitmq", feature = "redis")), allow(dead_code))]
    pub(crate) async fn reset(&self) {
        self.state.lock().await.connection = None;
    }
}
