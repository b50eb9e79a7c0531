//! Relay settings, validated when they are built.

use std::time::Duration;

use outbox_core::store::Ordering;

use crate::backoff::Backoff;
use crate::error::{Error, Result};

/// How the relay learns that new events were committed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Wakeup {
    /// Adaptive polling (the default): read again at once after a read that found events, and once more after
    /// the first that finds none, then wait 1 ms, doubling up to the poll interval while nothing comes. Costs
    /// producers nothing; an idle relay reads one empty index range per partition it owns per poll interval.
    #[default]
    Poll,
    /// `LISTEN` on a channel that producers `NOTIFY` at commit (`Outbox::new().with_notify()`), plus polling at
    /// the poll interval as a safety net. Lowest idle latency, but PostgreSQL serializes the commits of notifying
    /// transactions, which costs producers commit throughput under concurrency. An idle relay polls only at the
    /// poll interval, as a safety net. The listener reconnects with backoff when its connection drops.
    Notify {
        /// The channel, e.g. [`outbox_core::DEFAULT_CHANNEL`].
        channel: String,
    },
}

/// What happens to published (and cancelled) rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Retention {
    /// Keep them forever (delete them with `outbox events purge`).
    #[default]
    Keep,
    /// Delete them, in small batches, once they are older than this.
    After(Duration),
    /// Delete published rows in the statement that would mark them published (cancelled rows are kept).
    Immediately,
}

/// Validated relay settings. Build them with [`RelayConfig::builder`].
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use outbox_relay::{Ordering, RelayConfig, Retention};
///
/// let config = RelayConfig::builder()
///     .batch_size(500)
///     .lease(Duration::from_secs(30))
///     .max_attempts(12)
///     .ordering(Ordering::Aggregate)
///     .retention(Retention::After(Duration::from_secs(7 * 24 * 3600)))
///     .build()?;
/// assert_eq!(config.batch_size(), 500);
///
/// assert!(RelayConfig::builder().batch_size(0).build().is_err());
/// # Ok::<(), outbox_relay::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct RelayConfig {
    pub(crate) batch_size: u32,
    pub(crate) concurrency: usize,
    pub(crate) poll_interval: Duration,
    pub(crate) lease: Duration,
    pub(crate) max_attempts: u32,
    pub(crate) backoff: Backoff,
    pub(crate) ordering: Ordering,
    pub(crate) wakeup: Wakeup,
    pub(crate) retention: Retention,
    pub(crate) shutdown_timeout: Duration,
    pub(crate) publish_timeout: Duration,
}

impl RelayConfig {
    /// The largest allowed batch size.
    pub const MAX_BATCH_SIZE: u32 = 10_000;
    /// The largest allowed number of concurrent batches.
    pub const MAX_CONCURRENCY: usize = 256;
    /// The shortest allowed lease.
    pub const MIN_LEASE: Duration = Duration::from_millis(100);

    /// A builder with the defaults: batches of up to 2000, 2 lanes, 20ms idle poll interval, 10s lease, 10
    /// attempts, [`Backoff::default`], ordering by aggregate, polling, no retention, 10s shutdown, 60s publish
    /// timeout.
    #[must_use]
    pub fn builder() -> RelayConfigBuilder {
        RelayConfigBuilder::default()
    }

    /// Whether settling deletes published rows (`--retention 0s`) instead of marking them `published`.
    pub(crate) fn deletes_published(&self) -> bool {
        self.retention == Retention::Immediately
    }

    /// The most events read and published in one batch.
    #[must_use]
    pub fn batch_size(&self) -> u32 {
        self.batch_size
    }

    /// How many lanes one relay runs: each reads, publishes and settles the batches of its share of the relay's
    /// partitions, so lanes never hold events of the same aggregate.
    #[must_use]
    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    /// The longest wait between two reads when idle.
    #[must_use]
    pub fn poll_interval(&self) -> Duration {
        self.poll_interval
    }

    /// How long a relay stays a member without a heartbeat (it sends one every `lease / 10`, at most every
    /// second); after it, the relay's partitions are taken over by the others.
    #[must_use]
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// Attempts before an event with transient failures goes to `failed`.
    #[must_use]
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The retry backoff.
    #[must_use]
    pub fn backoff(&self) -> Backoff {
        self.backoff
    }

    /// The ordering mode.
    #[must_use]
    pub fn ordering(&self) -> Ordering {
        self.ordering
    }

    /// The wake-up mode.
    #[must_use]
    pub fn wakeup(&self) -> &Wakeup {
        &self.wakeup
    }

    /// The retention of published rows.
    #[must_use]
    pub fn retention(&self) -> Retention {
        self.retention
    }

    /// How long shutdown waits for in-flight batches before releasing them.
    #[must_use]
    pub fn shutdown_timeout(&self) -> Duration {
        self.shutdown_timeout
    }

    /// How long one publish call may take before it counts as a failed attempt for every event it carries.
    #[must_use]
    pub fn publish_timeout(&self) -> Duration {
        self.publish_timeout
    }

    /// How often the relay renews its membership: a tenth of the lease, between 50ms and 1s.
    #[must_use]
    pub fn heartbeat_interval(&self) -> Duration {
        (self.lease / 10).clamp(Duration::from_millis(50), Duration::from_secs(1))
    }
}

/// Builds a [`RelayConfig`]; every value is checked in [`build`](Self::build).
#[derive(Debug, Clone)]
pub struct RelayConfigBuilder {
    batch_size: u32,
    concurrency: usize,
    poll_interval: Duration,
    lease: Duration,
    max_attempts: u32,
    backoff_base: Duration,
    backoff_max: Duration,
    ordering: Ordering,
    wakeup: Wakeup,
    retention: Retention,
    shutdown_timeout: Duration,
    publish_timeout: Duration,
}

impl Default for RelayConfigBuilder {
    fn default() -> Self {
        let backoff = Backoff::default();
        Self {
            batch_size: 2000,
            concurrency: 2,
            poll_interval: Duration::from_millis(20),
            lease: Duration::from_secs(10),
            max_attempts: 10,
            backoff_base: backoff.base(),
            backoff_max: backoff.max(),
            ordering: Ordering::Aggregate,
            wakeup: Wakeup::Poll,
            retention: Retention::Keep,
            shutdown_timeout: Duration::from_secs(10),
            publish_timeout: Duration::from_secs(60),
        }
    }
}

impl RelayConfigBuilder {
    /// The most events per batch (1 to 10000; 2000 by default). Partitions with no backlog get a small range each,
    /// which grows to a share of the batch as soon as it comes back full.
    #[must_use]
    pub fn batch_size(mut self, batch_size: u32) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// Batches published at once by this relay (1 to 256).
    #[must_use]
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// The longest wait between reads when idle (1ms to 1h).
    #[must_use]
    pub fn poll_interval(mut self, poll_interval: Duration) -> Self {
        self.poll_interval = poll_interval;
        self
    }

    /// How long the relay stays a member without a heartbeat (100ms to 24h); after it, the other relays take its
    /// partitions over and it can no longer mark their rows. Heartbeats do not wait for publishing, so a publish
    /// may take longer than the lease.
    #[must_use]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Attempts before an event that keeps failing transiently goes to `failed` (1 to 1000000).
    #[must_use]
    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// Retry delays: full jitter under `min(max, base * 2^failures)`; see [`Backoff::new`] for the ranges.
    #[must_use]
    pub fn backoff(mut self, base: Duration, max: Duration) -> Self {
        self.backoff_base = base;
        self.backoff_max = max;
        self
    }

    /// Keep events of one aggregate in order ([`Ordering::Aggregate`], the default) or not.
    #[must_use]
    pub fn ordering(mut self, ordering: Ordering) -> Self {
        self.ordering = ordering;
        self
    }

    /// How the relay wakes up for new events.
    #[must_use]
    pub fn wakeup(mut self, wakeup: Wakeup) -> Self {
        self.wakeup = wakeup;
        self
    }

    /// What happens to published rows. `After(d)` needs `d` of at most 100 years.
    #[must_use]
    pub fn retention(mut self, retention: Retention) -> Self {
        self.retention = retention;
        self
    }

    /// How long shutdown waits for in-flight batches (at most 1h); with the WAL source
    /// ([`WalRelay`](crate::WalRelay)), for the settles of published batches: a settle still running then (waiting
    /// for a row lock, say) is not waited for, and its events are streamed again at the next start (with `0s`, a
    /// stop takes only the settles that have already ended).
    #[must_use]
    pub fn shutdown_timeout(mut self, shutdown_timeout: Duration) -> Self {
        self.shutdown_timeout = shutdown_timeout;
        self
    }

    /// How long one publish call may take (default 60s): past it, every event of the call counts a failed
    /// attempt, so a sink that hangs cannot hold an event forever.
    #[must_use]
    pub fn publish_timeout(mut self, publish_timeout: Duration) -> Self {
        self.publish_timeout = publish_timeout;
        self
    }

    /// Checks every setting.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the first setting out of its range.
    pub fn build(self) -> Result<RelayConfig> {
        in_range("batch_size", self.batch_size, 1, RelayConfig::MAX_BATCH_SIZE)?;
        in_range("concurrency", self.concurrency, 1, RelayConfig::MAX_CONCURRENCY)?;
        in_duration("poll_interval", self.poll_interval, Duration::from_millis(1), Duration::from_secs(3600))?;
        in_duration("lease", self.lease, RelayConfig::MIN_LEASE, Duration::from_secs(24 * 3600))?;
        in_range("max_attempts", self.max_attempts, 1, 1_000_000)?;
        let backoff = Backoff::new(self.backoff_base, self.backoff_max)?;
        in_duration("shutdown_timeout", self.shutdown_timeout, Duration::ZERO, Duration::from_secs(3600))?;
        in_duration("publish_timeout", self.publish_timeout, Duration::from_millis(1), Duration::from_secs(24 * 3600))?;
        if let Retention::After(age) = self.retention {
            in_duration("retention", age, Duration::ZERO, Duration::from_secs(100 * 365 * 24 * 3600))?;
        }
        if let Wakeup::Notify { channel } = &self.wakeup {
            if outbox_core::Outbox::new().with_notify_channel(channel).is_err() {
                return Err(Error::config(
                    "wakeup",
                    format!(
                        "channel `{}` must be 1 to 63 characters of [a-z0-9_], starting with a letter or `_`",
                        channel.escape_debug()
                    ),
                ));
            }
        }
        Ok(RelayConfig {
            batch_size: self.batch_size,
            concurrency: self.concurrency,
            poll_interval: self.poll_interval,
            lease: self.lease,
            max_attempts: self.max_attempts,
            backoff,
            ordering: self.ordering,
            wakeup: self.wakeup,
            retention: self.retention,
            shutdown_timeout: self.shutdown_timeout,
            publish_timeout: self.publish_timeout,
        })
    }
}

fn in_range<T: PartialOrd + std::fmt::Display + Copy>(field: &'static str, value: T, min: T, max: T) -> Result<()> {
    if value < min || value > max {
        return Err(Error::config(field, format!("must be between {min} and {max}, got {value}")));
    }
    Ok(())
}

fn in_duration(field: &'static str, value: Duration, min: Duration, max: Duration) -> Result<()> {
    if value < min || value > max {
        return Err(Error::config(field, format!("must be between {min:?} and {max:?}, got {value:?}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::{RelayConfig, Retention, Wakeup};
    use crate::error::Error;

    #[test]
    fn defaults_are_valid() {
        let config = RelayConfig::builder().build().unwrap();
        assert_eq!(config.batch_size(), 2000);
        assert_eq!(config.wakeup(), &Wakeup::Poll);
    }

    #[test]
    fn errors_name_the_setting_at_fault() {
        let error = RelayConfig::builder().lease(Duration::from_millis(5)).build().unwrap_err();
        assert!(matches!(error, Error::InvalidConfig { field: "lease", .. }), "{error}");
        let error = RelayConfig::builder().wakeup(Wakeup::Notify { channel: "Bad-Name".into() }).build().unwrap_err();
        assert!(matches!(error, Error::InvalidConfig { field: "wakeup", .. }), "{error}");
    }

    proptest! {
        #[test]
        fn build_accepts_exactly_the_documented_ranges(
            batch_size in 0u32..20_000,
            concurrency in 0usize..300,
            poll_ms in 0u64..4_000_000,
            lease_ms in 0u64..200_000_000,
            max_attempts in 0u32..2_000_000,
            base_ms in 0u64..1000,
            max_ms in 0u64..1000,
            shutdown_ms in 0u64..4_000_000,
        ) {
            let built = RelayConfig::builder()
                .batch_size(batch_size)
                .concurrency(concurrency)
                .poll_interval(Duration::from_millis(poll_ms))
                .lease(Duration::from_millis(lease_ms))
                .max_attempts(max_attempts)
                .backoff(Duration::from_millis(base_ms), Duration::from_millis(max_ms))
                .shutdown_timeout(Duration::from_millis(shutdown_ms))
                .retention(Retention::After(Duration::from_secs(60)))
                .build();
            let valid = (1..=10_000).contains(&batch_size)
                && (1..=256).contains(&concurrency)
                && (1..=3_600_000).contains(&poll_ms)
                && (100..=86_400_000).contains(&lease_ms)
                && (1..=1_000_000).contains(&max_attempts)
                && base_ms >= 1 && max_ms >= base_ms
                && shutdown_ms <= 3_600_000;
            prop_assert_eq!(built.is_ok(), valid, "{:?}", built.err());
        }
    }
}
