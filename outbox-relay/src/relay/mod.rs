//! The relay engine: membership and partition leases, lanes that read, publish and settle, one retry decision.
//!
//! - [`membership`]: a heartbeat task keeps the relay a member, takes its fair share of the partitions, hands over
//!   what it should no longer own, and removes dead relays (counting an attempt for what they were publishing).
//! - [`lane`]: the read -> publish -> settle pipeline of a share of the owned partitions.
//! - [`partition`]: what the owner knows of one partition (cursors, held-back aggregates, ranges to read again).
//! - [`batch`]: publishing one batch in order; [`settle`]: writing its outcomes; [`retry`]: what a failure leads to.
//! - [`shared`]: what the relay's tasks share; [`summary`]: the totals of a run.

pub(crate) mod batch;
mod call_size;
mod destination;
mod lane;
mod membership;
mod partition;
mod retry;
mod settle;
pub(crate) mod shared;
pub(crate) mod summary;

use std::sync::Arc;

use outbox_core::store::Store;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::config::{RelayConfig, Wakeup};
use crate::error::Result;
use crate::publish::{ErasedPublisher, Publisher};
use shared::Shared;
use summary::RunSummary;

/// Publishes committed outbox events: joins the relays of the database, owns its share of the partitions, reads
/// their pending rows without writing them, publishes them with a [`Publisher`] and settles each batch with one
/// fenced statement, with retries, ordering, crash accounting and pause as described in the [crate docs](crate).
///
/// Run it in your API's binary next to the server, or in a worker of its own; run as many as you like on one
/// database: they split the partitions. See the [crate docs](crate) for an example.
pub struct Relay {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay").field("id", &self.shared.relay).field("config", &self.shared.config).finish()
    }
}

impl Relay {
    /// A relay publishing the events of `store` with `publisher`. It gets a fresh id (its membership).
    pub fn new(store: impl Store, publisher: impl Publisher, config: RelayConfig) -> Self {
        Self::from_parts(Arc::new(store), Arc::new(publisher), config)
    }

    /// Like [`new`](Self::new), with a store shared with other code.
    pub fn with_shared_store(store: Arc<dyn Store>, publisher: impl Publisher, config: RelayConfig) -> Self {
        Self::from_parts(store, Arc::new(publisher), config)
    }

    fn from_parts(store: Arc<dyn Store>, publisher: Arc<dyn ErasedPublisher>, config: RelayConfig) -> Self {
        let publisher = Arc::new(crate::telemetry::Instrumented::new(publisher));
        Self {
            shared: Arc::new(Shared {
                store,
                publisher,
                config,
                relay: Uuid::now_v7(),
                destination: Default::default(),
                call_size: Default::default(),
            }),
        }
    }

    /// The relay's id: the owner of the partitions it holds.
    #[must_use]
    pub fn id(&self) -> Uuid {
        self.shared.relay
    }

    /// The relay's settings.
    #[must_use]
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

    /// Runs until `shutdown` is cancelled, then stops reading, waits up to the
    /// [shutdown timeout](crate::RelayConfigBuilder::shutdown_timeout) for the batches in flight, hands its
    /// partitions over at once and returns the totals.
    ///
    /// Retryable database errors (the database restarting, a lost connection) are logged and retried with
    /// backoff; the relay keeps going (and keeps its partitions while its heartbeat gets through).
    ///
    /// # Errors
    ///
    /// Fatal errors only: [`Error::Schema`](crate::Error::Schema) when the outbox tables are missing or older than this relay (run
    /// `outbox migrate`) or the database denies access; [`Error::LaneStopped`](crate::Error::LaneStopped) when a lane
    /// stopped by itself (a panic): the relay hands its partitions over and stops. A stop asked for while the first
    /// heartbeat still waits for the database returns `Ok`, with nothing published.
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
        let handover = Arc::new(membership::Handover::default());
        let (members, ownership) = membership::Members::new(Arc::clone(&shared), Arc::clone(&handover));
        // The first heartbeat tells at once whether the tables are there and this relay may use them.
        if !first_beat(&members, &shutdown).await? {
            // Bounded: the leave waits on what the heartbeat waited on; the lease ends the membership otherwise.
            let _ = tokio::time::timeout(config.shutdown_timeout.min(LEAVE_AT_START), members.leave()).await;
            return Ok(RunSummary::default());
        }
        // After the first beat: `outbox wal enable` sees this relay live from then on, and refuses to switch.
        if let Err(error) = table_is_the_source(&shared).await {
            tracing::error!(error = %error, "not starting");
            members.leave().await;
            return Err(error);
        }
        tracing::info!(
            relay_id = %shared.relay, ordering = ?config.ordering, wakeup = ?config.wakeup, lanes = config.concurrency,
            "relay started"
        );
        let background = CancellationToken::new();
        let wake = Arc::new(Notify::new());
        let mut tasks = JoinSet::new();
        if let Wakeup::Notify { channel } = &config.wakeup {
            let listener = crate::telemetry::WatchedListener::wrap(Arc::clone(&shared.store));
            tasks.spawn(crate::wakeup::listen(listener, channel.clone(), Arc::clone(&wake), background.clone()));
        }
        tasks.spawn(crate::maintenance::run(Arc::clone(&shared.store), config.clone(), background.clone()));
        tasks.spawn(crate::telemetry::refresh_backlog(Arc::clone(&shared.store), background.clone()));

        let stop_lanes = CancellationToken::new();
        let summary = Arc::new(std::sync::Mutex::new(RunSummary::default()));
        // Every lane hears every notification (each keeps a permit while it is busy reading).
        let lane_wakes: Vec<Arc<Notify>> = (0..config.concurrency).map(|_| Arc::new(Notify::new())).collect();
        tasks.spawn(fan_out(Arc::clone(&wake), lane_wakes.clone(), background.clone()));
        let mut lanes = JoinSet::new();
        for (index, lane_wake) in lane_wakes.into_iter().enumerate() {
            let lane = lane::Lane::new(
                Arc::clone(&shared),
                index,
                config.concurrency,
                Arc::clone(&handover),
                ownership.clone(),
                Arc::clone(&summary),
            );
            lanes.spawn(lane.run(lane_wake, stop_lanes.clone()));
        }
        let result = tokio::select! {
            result = members.run(&shutdown) => result,
            // A lane runs until the relay stops: one that ended first panicked, and its partitions are read no more.
            Some(ended) = lanes.join_next() => {
                let reason = match ended {
                    Err(error) if error.is_panic() => "panicked",
                    _ => "ended",
                };
                tracing::error!(reason, "a lane of the relay stopped unexpectedly; stopping the relay");
                Err(crate::error::Error::LaneStopped { reason })
            }
        };
        // Shutdown: no more reads; the batches in flight finish within the shutdown timeout, or are abandoned
        // (their events stay pending and are published by the relays that take the partitions). The heartbeat
        // goes on meanwhile, taking nothing: a drain longer than the lease does not have the relay taken for dead
        // and its batches counted as crashed and published again.
        stop_lanes.cancel();
        let drained = tokio::time::timeout(
            config.shutdown_timeout,
            members.keep_alive(async { while lanes.join_next().await.is_some() {} }),
        )
        .await;
        if drained.is_err() {
            tracing::warn!(
                timeout = ?config.shutdown_timeout,
                "batches in flight did not finish in time; their events will be published again"
            );
            lanes.abort_all();
            while lanes.join_next().await.is_some() {}
        }
        members.leave().await;
        let summary = *summary.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        background.cancel();
        while tasks.join_next().await.is_some() {}
        tracing::info!(relay_id = %shared.relay, published = summary.published, "relay stopped");
        result.map(|()| summary)
    }
}

/// Passes each wake-up on to every lane, until `shutdown`.
async fn fan_out(wake: Arc<Notify>, lanes: Vec<Arc<Notify>>, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = wake.notified() => lanes.iter().for_each(|lane| lane.notify_one()),
        }
    }
}

/// How long a relay stopped before its first heartbeat got through tries to leave.
const LEAVE_AT_START: std::time::Duration = std::time::Duration::from_secs(2);

/// The first heartbeat: retried while the database is unreachable, fatal when the schema is wrong; `false` when the
/// relay was stopped first (also while a heartbeat waited, on a lock say).
async fn first_beat(members: &membership::Members, shutdown: &CancellationToken) -> Result<bool> {
    let backoff =
        crate::backoff::Backoff::new(std::time::Duration::from_millis(100), std::time::Duration::from_secs(10))
            .unwrap_or_default();
    let mut failures = 0;
    loop {
        let beat = tokio::select! {
            () = shutdown.cancelled() => return Ok(false),
            beat = members.beat(true) => beat,
        };
        match beat {
            Ok(_) => return Ok(true),
            Err(error) if !error.is_retryable() => {
                tracing::error!(error = %error, "cannot join the relays of this database; stopping");
                return Err(error);
            }
            Err(error) => {
                let wait = backoff.ceiling(failures);
                failures += 1;
                tracing::warn!(retry_in = ?wait, error = %error, "cannot join the relays of this database; retrying");
                tokio::select! {
                    () = shutdown.cancelled() => return Ok(false),
                    () = tokio::time::sleep(wait) => {}
                }
            }
        }
    }
}

/// `Ok` when the table source publishes the table (not the WAL relay).
async fn table_is_the_source(shared: &Shared) -> Result<()> {
    match shared.store.source().await.map_err(crate::error::Error::from_store)? {
        outbox_core::store::Source::Table => Ok(()),
        active => Err(crate::error::Error::WrongSource {
            active,
            hint: "stop the WAL relay, then run `outbox wal disable` to publish from the table again",
        }),
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
