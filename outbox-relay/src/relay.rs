//! The relay: the claim -> publish -> settle loop.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use outbox_core::store::{ClaimRequest, SettleReport, Store};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::batch::{self, Held};
use crate::publish::{ErasedPublisher, Publisher};
use crate::{maintenance, wakeup, Error, RelayConfig, Result, Wakeup};

/// What the relay, its batch tasks and its background tasks share.
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) publisher: Arc<dyn ErasedPublisher>,
    pub(crate) config: RelayConfig,
    pub(crate) owner: Uuid,
}

/// Totals of one [`Relay::run`], returned when it stops.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunSummary {
    /// Batches claimed.
    pub batches: u64,
    /// Events marked published.
    pub published: u64,
    /// Events rescheduled after a transient failure.
    pub retried: u64,
    /// Events moved to `failed`.
    pub failed: u64,
    /// Events released without being attempted (shutdown, or an earlier event of their aggregate failed).
    pub released: u64,
    /// Outcomes not written because the lease was lost (another relay reclaimed the events).
    pub fenced: u64,
}

impl RunSummary {
    fn add(&mut self, report: SettleReport) {
        self.published += report.published;
        self.retried += report.retried;
        self.failed += report.failed;
        self.released += report.released;
        self.fenced += report.fenced;
    }
}

/// Publishes committed outbox events: claims due events in short transactions, publishes them with a
/// [`Publisher`], and marks them, with leases, fencing, retries, ordering and pause as described in the
/// [crate docs](crate).
///
/// Run it in your API's binary next to the server, or in a worker of its own; run as many as you like on one
/// database. See the [crate docs](crate) for an example.
pub struct Relay {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay").field("id", &self.shared.owner).field("config", &self.shared.config).finish()
    }
}

impl Relay {
    /// A relay publishing the events of `store` with `publisher`. It gets a fresh id (its lease owner).
    pub fn new(store: impl Store, publisher: impl Publisher, config: RelayConfig) -> Self {
        Self::from_parts(Arc::new(store), Arc::new(publisher), config)
    }

    /// Like [`new`](Self::new), with a store shared with other code.
    pub fn with_shared_store(store: Arc<dyn Store>, publisher: impl Publisher, config: RelayConfig) -> Self {
        Self::from_parts(store, Arc::new(publisher), config)
    }

    fn from_parts(store: Arc<dyn Store>, publisher: Arc<dyn ErasedPublisher>, config: RelayConfig) -> Self {
        let publisher = Arc::new(crate::telemetry::Instrumented::new(publisher));
        Self { shared: Arc::new(Shared { store, publisher, config, owner: Uuid::now_v7() }) }
    }

    /// The relay's id: the `lease_owner` of the rows it holds.
    pub fn id(&self) -> Uuid {
        self.shared.owner
    }

    /// The relay's settings.
    pub fn config(&self) -> &RelayConfig {
        &self.shared.config
    }

    /// Runs until SIGINT or SIGTERM, then shuts down gracefully (see [`run`](Self::run)).
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run).
    pub async fn run_until_signal(self) -> Result<RunSummary> {
        let shutdown = CancellationToken::new();
        let trigger = shutdown.clone();
        tokio::spawn(async move {
            shutdown_signal().await;
            tracing::info!("signal received; shutting down");
            trigger.cancel();
        });
        self.run(shutdown).await
    }

    /// Runs until `shutdown` is cancelled, then stops claiming, waits up to the
    /// [shutdown timeout](crate::RelayConfigBuilder::shutdown_timeout) for in-flight batches, releases whatever
    /// is still unfinished, and returns the totals.
    ///
    /// Retryable database errors (the database restarting, a lost connection) are logged and retried with
    /// backoff; the relay keeps going.
    ///
    /// # Errors
    ///
    /// Fatal errors only: [`Error::Schema`] when the outbox tables are missing (run `outbox migrate`) or the
    /// database denies access. In-flight batches are finished or released first.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use outbox_relay::{Relay, RelayConfig, StdoutPublisher};
    /// # async fn run(pool: sqlx::PgPool) -> Result<(), outbox_relay::Error> {
    /// let relay = Relay::new(outbox_core::store::PgStore::new(pool), StdoutPublisher::new(), RelayConfig::builder().build()?);
    /// let shutdown = tokio_util::sync::CancellationToken::new();
    /// let handle = tokio::spawn(relay.run(shutdown.clone()));
    /// // ... later, e.g. when the API server stops:
    /// shutdown.cancel();
    /// let summary = handle.await.expect("relay task")?;
    /// println!("published {} events", summary.published);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn run(self, shutdown: CancellationToken) -> Result<RunSummary> {
        let shared = self.shared;
        let config = &shared.config;
        tracing::info!(relay_id = %shared.owner, ordering = ?config.ordering, wakeup = ?config.wakeup, "relay started");
        let background = CancellationToken::new();
        let wake = Arc::new(Notify::new());
        let mut tasks = JoinSet::new();
        if let Wakeup::Notify { channel } = &config.wakeup {
            tasks.spawn(wakeup::listen(
                crate::telemetry::WatchedListener::wrap(Arc::clone(&shared.store)),
                channel.clone(),
                Arc::clone(&wake),
                background.clone(),
            ));
        }
        tasks.spawn(maintenance::run(Arc::clone(&shared.store), config.clone(), background.clone()));
        tasks.spawn(crate::telemetry::refresh_backlog(Arc::clone(&shared.store), background.clone()));

        let mut engine = Engine::new(Arc::clone(&shared));
        let result = engine.run(&shutdown, &wake).await;
        engine.drain().await;
        background.cancel();
        while tasks.join_next().await.is_some() {}
        tracing::info!(relay_id = %shared.owner, published = engine.summary.published, "relay stopped");
        result.map(|()| engine.summary)
    }
}

/// The claim loop's state.
struct Engine {
    shared: Arc<Shared>,
    batches: JoinSet<SettleReport>,
    held: HashMap<tokio::task::Id, Held>,
    summary: RunSummary,
    /// The claim limit: grows to the batch size while claims come back full, shrinks when they do not.
    limit: u32,
    /// The adaptive poll delay after an empty claim.
    idle_delay: Duration,
    next_claim: Instant,
    paused: bool,
    database_retry: Duration,
}

const FIRST_LIMIT: u32 = 16;
const BUSY_DELAY: Duration = Duration::from_millis(1);
const FIRST_DATABASE_RETRY: Duration = Duration::from_millis(100);
const LAST_DATABASE_RETRY: Duration = Duration::from_secs(10);

impl Engine {
    fn new(shared: Arc<Shared>) -> Self {
        let limit = shared.config.batch_size.min(FIRST_LIMIT);
        Self {
            shared,
            batches: JoinSet::new(),
            held: HashMap::new(),
            summary: RunSummary::default(),
            limit,
            idle_delay: BUSY_DELAY,
            next_claim: Instant::now(),
            paused: false,
            database_retry: FIRST_DATABASE_RETRY,
        }
    }

    async fn run(&mut self, shutdown: &CancellationToken, wake: &Notify) -> Result<()> {
        let concurrency = self.shared.config.concurrency;
        loop {
            if shutdown.is_cancelled() {
                return Ok(());
            }
            if self.batches.len() < concurrency && Instant::now() >= self.next_claim {
                self.claim().await?;
                continue;
            }
            let capacity = self.batches.len() < concurrency;
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return Ok(()),
                Some(done) = self.batches.join_next_with_id(), if !self.batches.is_empty() => {
                    self.finished(done).await;
                    // A finished batch may have unblocked the next events of its aggregates.
                    self.next_claim = self.next_claim.min(Instant::now());
                }
                _ = wake.notified() => {
                    self.idle_delay = BUSY_DELAY;
                    self.next_claim = Instant::now();
                }
                _ = tokio::time::sleep_until(self.next_claim), if capacity => {}
            }
        }
    }

    async fn claim(&mut self) -> Result<()> {
        let config = &self.shared.config;
        let request = ClaimRequest::new(self.shared.owner, config.lease, self.limit, config.ordering);
        let claimed_at = Instant::now();
        let span = crate::telemetry::claim_span(self.limit);
        let claim = match tracing::Instrument::instrument(self.shared.store.claim(&request), span.clone()).await {
            Ok(claim) => claim,
            Err(error) => {
                let error = Error::from_store(error);
                if !error.is_retryable() {
                    tracing::error!(error = %error, "cannot claim; stopping");
                    return Err(error);
                }
                tracing::warn!(retry_in = ?self.database_retry, error = %error, "cannot claim; retrying");
                self.next_claim = Instant::now() + self.database_retry;
                self.database_retry = (self.database_retry * 2).min(LAST_DATABASE_RETRY);
                return Ok(());
            }
        };
        self.database_retry = FIRST_DATABASE_RETRY;
        span.record("events", claim.events.len());
        if claim.paused != self.paused {
            self.paused = claim.paused;
            crate::telemetry::set_paused(claim.paused);
            if claim.paused {
                tracing::info!("publishing is paused (`outbox resume` resumes it)");
            } else {
                tracing::info!("publishing resumed");
            }
        }
        let claimed = claim.events.len();
        if claimed == 0 {
            // Polling backs off from tight to the poll interval; with notifications, the poll is a safety net.
            let notified = matches!(config.wakeup, Wakeup::Notify { .. });
            let delay = if claim.paused || notified { config.poll_interval } else { self.idle_delay };
            self.next_claim = Instant::now() + delay;
            self.idle_delay = (self.idle_delay * 2).min(config.poll_interval);
            self.limit = config.batch_size.min(FIRST_LIMIT);
            return Ok(());
        }
        self.summary.batches += 1;
        let batch_span = crate::telemetry::record_claim(&span, &claim.events);
        self.idle_delay = BUSY_DELAY;
        let full = claimed >= self.limit as usize;
        if full {
            self.next_claim = Instant::now();
            self.limit = (self.limit.saturating_mul(2)).min(config.batch_size);
        } else {
            self.next_claim = Instant::now() + BUSY_DELAY.min(config.poll_interval);
            self.limit = (self.limit / 2).max(config.batch_size.min(FIRST_LIMIT));
        }
        let held = Held::of(&claim.events);
        let shared = Arc::clone(&self.shared);
        let batch = async move { batch::publish(&shared, claim.events, claimed_at).await };
        let handle = self.batches.spawn(tracing::Instrument::instrument(batch, batch_span));
        self.held.insert(handle.id(), held);
        Ok(())
    }

    async fn finished(&mut self, done: std::result::Result<(tokio::task::Id, SettleReport), tokio::task::JoinError>) {
        match done {
            Ok((id, report)) => {
                self.held.remove(&id);
                self.summary.add(report);
            }
            Err(error) => {
                let Some(held) = self.held.remove(&error.id()) else { return };
                let settlements = if error.is_panic() {
                    tracing::error!(events = held.rows.len(), "the publisher panicked; the batch will be retried");
                    held.panicked(&self.shared)
                } else {
                    held.release()
                };
                let report = batch::settle(&self.shared, &settlements).await;
                self.summary.add(report);
            }
        }
    }

    /// Shutdown: no more claims; wait for in-flight batches up to the deadline, then abort and release them.
    async fn drain(&mut self) {
        let deadline = Instant::now() + self.shared.config.shutdown_timeout;
        while !self.batches.is_empty() {
            tokio::select! {
                Some(done) = self.batches.join_next_with_id() => self.finished(done).await,
                _ = tokio::time::sleep_until(deadline) => {
                    tracing::warn!(
                        batches = self.batches.len(),
                        timeout = ?self.shared.config.shutdown_timeout,
                        "in-flight batches did not finish in time; releasing them"
                    );
                    self.batches.abort_all();
                    while let Some(done) = self.batches.join_next_with_id().await {
                        self.finished(done).await;
                    }
                }
            }
        }
    }
}

/// Completes at the first SIGTERM or SIGINT (Ctrl-C; SIGINT only where there is no SIGTERM): the signal a
/// process manager sends to stop a relay. [`Relay::run_until_signal`] waits for it; a program that runs the
/// relay next to other work can wait for it to cancel its own shutdown token.
///
/// # Example
///
/// ```no_run
/// # async fn run() {
/// let shutdown = outbox_relay::CancellationToken::new();
/// let trigger = shutdown.clone();
/// tokio::spawn(async move {
///     outbox_relay::shutdown_signal().await;
///     trigger.cancel();
/// });
/// # }
/// ```
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = terminate.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(error) => {
                tracing::error!(error = %error, "cannot listen for SIGTERM; only SIGINT stops the relay");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
