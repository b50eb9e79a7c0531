//! `outbox relay`: validates everything, waits for the database and the sink's broker, and runs until
//! SIGINT/SIGTERM.
//!
//! At start, what cannot pass exits at once with a one-line error and exit code 2: a malformed setting or URL, an
//! unknown sink scheme, a `file:` sink that cannot be written, a server refusing the credentials or permissions, a
//! missing database, vhost or exchange, outbox tables that are missing or that the role may not use.
//! What may pass is waited for: while the database or the broker is unreachable (connection refused, timeout,
//! server starting up) the relay logs a warning naming it (password masked) and tries again with a growing delay,
//! reading nothing until both answer. `--metrics-addr` is served from the start: `/healthz` answers meanwhile and
//! `/readyz` says what the relay waits for.
//!
//! A signal stops the relay: during the start-up waits at once (exit 0), then gracefully (exit 0). A second signal
//! while it stops ends the process at once ([`Failure::Forced`], exit 130).

use std::future::Future;
use std::time::Duration;

use outbox_relay::{CancellationToken, Ordering, Relay, RelayConfig, Retention, Wakeup, WalRelay};

use crate::args::{OrderingArg, RelayArgs, SourceArg};
use crate::{connect, telemetry, Failure, Outcome};

/// The first wait after a failed attempt at start; it doubles up to [`LAST_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(200);
/// The longest wait between two attempts at start.
const LAST_RETRY: Duration = Duration::from_secs(10);

pub(crate) async fn run(database_url: Option<&str>, args: RelayArgs) -> Outcome {
    // Bad input is reported before anything is opened or written.
    let config = config(&args).map_err(|error| Failure::Usage(error.to_string()))?;
    let options = connect::options(database_url)?;
    check_source(&args, &options)?;
    let (shutdown, forced) = shutdown_on_signal();
    tokio::select! {
        outcome = start_and_run(database_url, args, config, options, shutdown) => outcome,
        // The relay is dropped where it stands, as a crash would leave it.
        () = forced.cancelled() => Err(Failure::Forced(
            "second signal; stopped at once, without waiting for the batches in flight (they are published again, \
             as after a crash)"
                .to_owned(),
        )),
    }
}

/// Waits for the database and the sink, then runs the relay until `shutdown`.
async fn start_and_run(
    database_url: Option<&str>,
    args: RelayArgs,
    config: RelayConfig,
    options: connect::Options,
    shutdown: CancellationToken,
) -> Outcome {
    // Served through the start-up waits: a liveness probe must not kill a relay that rightly waits.
    let health = match args.metrics_addr {
        Some(addr) => Some(telemetry::serve(addr, "the database").await?),
        None => None,
    };
    let target = connect::target(database_url.unwrap_or_default());
    if !wait_for(&shutdown, "the database", || connect::probe(&options, &target)).await? {
        return Ok(());
    }
    let database = connect::open(database_url, pool_size(&args)).await?;
    // A sink that cannot work (bad settings, a file that cannot be written) stops the relay before it reads
    // anything, so no event spends an attempt on it. Opened once the database is there: bad input creates no file.
    let publisher = args.sink.open_with(args.create_destinations).map_err(|error| match error {
        outbox_relay::Error::InvalidSink { .. } | outbox_relay::Error::OpenSink { .. } => {
            Failure::Usage(error.to_string())
        }
        other => Failure::runtime(other),
    })?;
    tracing::info!(sink = %args.sink, "connecting to the sink");
    if let Some(health) = &health {
        health.waiting_for("the sink");
    }
    if !wait_for(&shutdown, "the sink", || publisher.connect()).await? {
        return Ok(());
    }
    let store = database.store();
    if let Some(health) = &health {
        health.running(store.clone()).await;
    }
    let summary = match (args.source, &database) {
        (SourceArg::Table, _) => Relay::with_shared_store(store, publisher, config).run(shutdown.clone()).await,
        (SourceArg::Wal, connect::Database::Postgres(pool)) => {
            let url = database_url.unwrap_or_default();
            let mut relay = WalRelay::new(pool.clone(), url, publisher, config).map_err(usage)?;
            if let Some(retry_in_place) = args.retry_in_place {
                relay = relay.retry_in_place(retry_in_place);
            }
            if let Some(slot) = &args.slot {
                relay = relay.slot(slot).map_err(usage)?;
            }
            relay.run(shutdown.clone()).await
        }
        (SourceArg::Wal, connect::Database::Sqlite(_)) => return Err(wal_needs_postgres()),
    };
    let summary = match summary {
        Ok(summary) => summary,
        // The relay returns a retryable error only when the signal came while its first heartbeat waited for the
        // database: a stop during the start-up wait.
        Err(error) if error.is_retryable() && shutdown.is_cancelled() => {
            tracing::info!(error = %error, "stopped while waiting for the database at start");
            return Ok(());
        }
        // What the database or a server refuses (missing tables, a missing grant, a source or setting it does not
        // have) is fixed in the configuration, not by waiting: bad input, as at the checks before.
        Err(
            error @ (outbox_relay::Error::Schema { .. }
            | outbox_relay::Error::WrongSource { .. }
            | outbox_relay::Error::WalUnavailable { .. }
            | outbox_relay::Error::Refused { .. }),
        ) => return Err(usage(error)),
        Err(other) => return Err(Failure::runtime(other)),
    };
    tracing::info!(
        published = summary.published,
        retried = summary.retried,
        failed = summary.failed,
        fenced = summary.fenced,
        "relay exited"
    );
    Ok(())
}

/// Refuses what only `--source wal` takes without it, and `--source wal` on SQLite: before anything is opened.
fn check_source(args: &RelayArgs, options: &connect::Options) -> Outcome {
    match (args.source, options) {
        (SourceArg::Wal, connect::Options::Sqlite(_)) => Err(wal_needs_postgres()),
        (SourceArg::Table, _) if args.slot.is_some() || args.retry_in_place.is_some() => {
            let flag = if args.slot.is_some() { "--slot" } else { "--retry-in-place" };
            Err(Failure::Usage(format!("{flag} is for `--source wal`; the table source has no replication slot")))
        }
        _ => Ok(()),
    }
}

fn wal_needs_postgres() -> Failure {
    Failure::Usage("--source wal needs PostgreSQL; this database is SQLite".to_owned())
}

/// The connections of the relay's pool: as many as it may use at once, so that none of its tasks waits for another
/// one's connection (a heartbeat that waits past the lease loses the relay its partitions).
fn pool_size(args: &RelayArgs) -> u32 {
    let lanes = u32::try_from(args.concurrency).unwrap_or(u32::MAX);
    // Per lane: its read, and up to two settles at once (the batch before settles while the next one publishes).
    // The WAL relay uses as many as one lane: its session's statements, the batch it reads ahead, its settle.
    let per_lane = lanes.max(1).saturating_mul(3);
    // The heartbeat (also the drain's at shutdown; the WAL relay has none), and the backlog gauges' refresh.
    let membership_and_gauges = 2;
    // The `LISTEN` connection of `--notify`, held for as long as the relay runs.
    let listener = u32::from(args.notify.is_some());
    // Retention's deletes (`--retention D`; `0s` deletes in the settle statement).
    let retention = u32::from(args.retention.is_some_and(|age| !age.is_zero()));
    // `/readyz` asks the database whether publishing is paused (`--metrics-addr`).
    let readiness = u32::from(args.metrics_addr.is_some());
    per_lane.saturating_add(membership_and_gauges + listener + retention + readiness)
}

fn usage(error: impl std::fmt::Display) -> Failure {
    Failure::Usage(error.to_string())
}

/// Calls `attempt` until it succeeds. While it reports its server unreachable, logs a warning and tries again after
/// a delay that doubles from [`FIRST_RETRY`] to [`LAST_RETRY`]; a refusal is bad input (exit 2). `Ok(false)` when a
/// signal ended the wait.
async fn wait_for<F, Fut>(shutdown: &CancellationToken, what: &str, mut attempt: F) -> Result<bool, Failure>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = outbox_relay::Result<()>>,
{
    let backoff = outbox_relay::Backoff::new(FIRST_RETRY, LAST_RETRY).unwrap_or_default();
    let mut failures = 0;
    loop {
        let result = tokio::select! {
            result = attempt() => result,
            () = shutdown.cancelled() => return Ok(false),
        };
        match result {
            Ok(()) => return Ok(true),
            Err(error) if error.is_retryable() => {
                let delay = backoff.ceiling(failures);
                failures += 1;
                tracing::warn!(retry_in = ?delay, error = %error, "cannot reach {what} at start; retrying");
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = shutdown.cancelled() => return Ok(false),
                }
            }
            Err(error @ outbox_relay::Error::Refused { .. }) => return Err(Failure::Usage(error.to_string())),
            Err(error) => return Err(Failure::runtime(error)),
        }
    }
}

/// How soon after the first a signal is taken as the same one, sent twice.
const SAME_SIGNAL: Duration = Duration::from_secs(1);

/// Two tokens: the first cancelled at the first SIGINT or SIGTERM, which stops the wait at start, then the relay
/// (gracefully); the second at the next one (a second or more later), which ends the relay at once (exit 130): what was in flight is
/// published again, as after a crash.
fn shutdown_on_signal() -> (CancellationToken, CancellationToken) {
    let (shutdown, forced) = (CancellationToken::new(), CancellationToken::new());
    let (trigger, force) = (shutdown.clone(), forced.clone());
    // Listening from now on: a signal that comes before the task first runs is not lost (nor kills the process).
    let mut signals = Signals::listen();
    tokio::spawn(async move {
        if !signals.next().await {
            return; // no signal can be listened for: each one ends the process as by default
        }
        tracing::info!("signal received; shutting down (a second signal stops at once)");
        trigger.cancel();
        let first = tokio::time::Instant::now();
        while signals.next().await {
            // One Ctrl-C can come twice: to the whole process group and through a wrapper (npm, a shell script)
            // that passes it on. A second signal within a second of the first is that one.
            if first.elapsed() >= SAME_SIGNAL {
                force.cancel();
                return;
            }
        }
    });
    (shutdown, forced)
}

/// SIGINT and SIGTERM, as a stream.
#[cfg(unix)]
struct Signals {
    interrupt: Option<tokio::signal::unix::Signal>,
    terminate: Option<tokio::signal::unix::Signal>,
}

#[cfg(unix)]
impl Signals {
    fn listen() -> Self {
        use tokio::signal::unix::{signal, SignalKind};
        let listen = |kind: SignalKind, name: &str| {
            signal(kind).inspect_err(|error| tracing::error!(error = %error, "cannot listen for {name}")).ok()
        };
        Self {
            interrupt: listen(SignalKind::interrupt(), "SIGINT"),
            terminate: listen(SignalKind::terminate(), "SIGTERM"),
        }
    }

    /// Waits for the next signal; `false` when none can come.
    async fn next(&mut self) -> bool {
        async fn recv(signal: Option<&mut tokio::signal::unix::Signal>) -> Option<()> {
            match signal {
                Some(signal) => signal.recv().await,
                None => std::future::pending().await,
            }
        }
        if self.interrupt.is_none() && self.terminate.is_none() {
            return false;
        }
        tokio::select! {
            received = recv(self.interrupt.as_mut()) => received.is_some(),
            received = recv(self.terminate.as_mut()) => received.is_some(),
        }
    }
}

/// Ctrl-C, as a stream.
#[cfg(not(unix))]
struct Signals;

#[cfg(not(unix))]
impl Signals {
    fn listen() -> Self {
        Self
    }

    async fn next(&mut self) -> bool {
        tokio::signal::ctrl_c().await.is_ok()
    }
}

fn config(args: &RelayArgs) -> outbox_relay::Result<RelayConfig> {
    let retention = match args.retention {
        None => Retention::Keep,
        Some(Duration::ZERO) => Retention::Immediately,
        Some(age) => Retention::After(age),
    };
    let wakeup = match &args.notify {
        None => Wakeup::Poll,
        Some(channel) => Wakeup::Notify { channel: channel.clone() },
    };
    RelayConfig::builder()
        .batch_size(args.batch_size)
        .concurrency(args.concurrency)
        .poll_interval(args.poll_interval)
        .lease(args.lease)
        .max_attempts(args.max_attempts)
        .backoff(args.backoff_base, args.backoff_max)
        .ordering(match args.ordering {
            OrderingArg::Aggregate => Ordering::Aggregate,
            OrderingArg::None => Ordering::None,
        })
        .retention(retention)
        .wakeup(wakeup)
        .shutdown_timeout(args.shutdown_timeout)
        .publish_timeout(args.publish_timeout)
        .build()
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::pool_size;
    use crate::args::{Cli, Command, RelayArgs};

    fn relay(flags: &[&str]) -> RelayArgs {
        let args = [&["outbox", "relay", "--sink", "stdout"], flags].concat();
        match Cli::try_parse_from(args).expect("valid flags").command {
            Command::Relay(args) => *args,
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn the_pool_has_a_connection_for_every_task_that_may_use_one_at_once() {
        // Two lanes of a read and two settles, the heartbeat, the backlog gauges.
        assert_eq!(pool_size(&relay(&[])), 2 * 3 + 2);
        assert_eq!(pool_size(&relay(&["--concurrency", "1"])), 3 + 2);
        // Plus the LISTEN connection, retention's deletes and `/readyz`'s question, each when it runs.
        assert_eq!(pool_size(&relay(&["--concurrency", "1", "--notify"])), 3 + 2 + 1);
        assert_eq!(pool_size(&relay(&["--concurrency", "1", "--retention", "7d"])), 3 + 2 + 1);
        assert_eq!(pool_size(&relay(&["--concurrency", "1", "--retention", "0s"])), 3 + 2);
        assert_eq!(pool_size(&relay(&["--concurrency", "1", "--metrics-addr", "127.0.0.1:9464"])), 3 + 2 + 1);
        let everything = ["--concurrency", "4", "--notify", "--retention", "1h", "--metrics-addr", "127.0.0.1:9464"];
        assert_eq!(pool_size(&relay(&everything)), 4 * 3 + 2 + 3);
    }
}
