//! `outbox relay`: validates everything, waits for the database and the sink's broker, and runs until
//! SIGINT/SIGTERM.
//!
//! At start, what cannot pass exits at once with a one-line error and exit code 2: a malformed setting or URL, an
//! unknown sink scheme, a `file:` sink that cannot be written, a server refusing the credentials or permissions, a missing database, vhost or exchange.
//! What may pass is waited for: while the database or the broker is unreachable (connection refused, timeout,
//! server starting up) the relay logs a warning naming it (password masked) and tries again with a growing delay,
//! reading nothing until both answer.

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
    let shutdown = shutdown_on_signal();
    let target = connect::target(database_url.unwrap_or_default());
    if !wait_for(&shutdown, "the database", || connect::probe(&options, &target)).await? {
        return Ok(());
    }
    // Per lane: a read and up to two settles at once; plus the heartbeat, the gauges and the listener.
    let connections = u32::try_from(args.concurrency).unwrap_or(u32::MAX).saturating_mul(3).saturating_add(3);
    let database = connect::open(database_url, connections).await?;
    // A sink that cannot work (bad settings, a file that cannot be written) stops the relay before it reads
    // anything, so no event spends an attempt on it. Opened once the database is there: bad input creates no file.
    let publisher = args.sink.open_with(args.create_destinations).map_err(|error| match error {
        outbox_relay::Error::InvalidSink { .. } | outbox_relay::Error::OpenSink { .. } => {
            Failure::Usage(error.to_string())
        }
        other => Failure::runtime(other),
    })?;
    tracing::info!(sink = %args.sink, "connecting to the sink");
    if !wait_for(&shutdown, "the sink", || publisher.connect()).await? {
        return Ok(());
    }
    let store = database.store();
    if let Some(addr) = args.metrics_addr {
        telemetry::serve(addr, store.clone()).await?;
    }
    let summary = match (args.source, &database) {
        (SourceArg::Table, _) => Relay::with_shared_store(store, publisher, config).run(shutdown).await,
        (SourceArg::Wal, connect::Database::Postgres(pool)) => {
            let url = database_url.unwrap_or_default();
            let mut relay =
                WalRelay::new(pool.clone(), url, publisher, config).map_err(usage)?.retry_in_place(args.retry_in_place);
            if let Some(slot) = &args.slot {
                relay = relay.slot(slot).map_err(usage)?;
            }
            relay.run(shutdown).await
        }
        (SourceArg::Wal, connect::Database::Sqlite(_)) => {
            return Err(Failure::Usage("--source wal needs PostgreSQL; this database is SQLite".to_owned()));
        }
    }
    .map_err(|error| match error {
        outbox_relay::Error::WrongSource { .. }
        | outbox_relay::Error::WalUnavailable { .. }
        | outbox_relay::Error::Refused { .. } => usage(error),
        other => Failure::runtime(other),
    })?;
    tracing::info!(
        published = summary.published,
        retried = summary.retried,
        failed = summary.failed,
        fenced = summary.fenced,
        "relay exited"
    );
    Ok(())
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

/// A token cancelled at the first SIGINT or SIGTERM: it stops the wait at start, then the relay (gracefully).
fn shutdown_on_signal() -> CancellationToken {
    let shutdown = CancellationToken::new();
    let trigger = shutdown.clone();
    tokio::spawn(async move {
        outbox_relay::shutdown_signal().await;
        tracing::info!("signal received; shutting down");
        trigger.cancel();
    });
    shutdown
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
