//! `outbox relay`: validates everything, connects, opens the sink, and runs until SIGINT/SIGTERM.

use std::time::Duration;

use outbox_relay::{Ordering, Relay, RelayConfig, Retention, Wakeup};

use crate::args::{OrderingArg, RelayArgs};
use crate::{connect, telemetry, Failure, Outcome};

pub(crate) async fn run(database_url: Option<&str>, args: RelayArgs) -> Outcome {
    // Bad input is reported before anything is opened or written.
    let config = config(&args).map_err(|error| Failure::Usage(error.to_string()))?;
    connect::options(database_url)?;
    let connections = u32::try_from(args.concurrency).unwrap_or(u32::MAX).saturating_add(3);
    let database = connect::open(database_url, connections).await?;
    let publisher = args.sink.open().map_err(|error| match error {
        outbox_relay::Error::InvalidSink { .. } => Failure::Usage(error.to_string()),
        other => Failure::runtime(other),
    })?;
    let store = database.store();
    if let Some(addr) = args.metrics_addr {
        telemetry::serve(addr, store.clone()).await?;
    }
    let relay = Relay::with_shared_store(store, publisher, config);
    let summary = relay.run_until_signal().await.map_err(Failure::runtime)?;
    tracing::info!(
        published = summary.published,
        retried = summary.retried,
        failed = summary.failed,
        released = summary.released,
        "relay exited"
    );
    Ok(())
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
        .build()
}
