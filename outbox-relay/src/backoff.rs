//! Exponential backoff with full jitter, for publish retries.

use std::time::Duration;

use rand::Rng;

use crate::error::{Error, Result};

/// Exponential backoff with full jitter: after the `n`-th failure (counting from 0) the next attempt waits a
/// uniformly random time in `[0, min(max, base * 2^n)]` (the "full jitter" of the AWS architecture blog), so
/// relays retrying after a broker outage spread out instead of stampeding.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use outbox_relay::Backoff;
///
/// let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(10))?;
/// assert_eq!(backoff.ceiling(0), Duration::from_millis(100));
/// assert_eq!(backoff.ceiling(3), Duration::from_millis(800));
/// assert_eq!(backoff.ceiling(30), Duration::from_secs(10));
/// assert!(backoff.delay(3) <= Duration::from_millis(800));
/// # Ok::<(), outbox_relay::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    max: Duration,
}

impl Backoff {
    /// The smallest allowed base.
    pub const MIN_BASE: Duration = Duration::from_millis(1);
    /// The largest allowed maximum delay.
    pub const MAX_DELAY: Duration = Duration::from_secs(7 * 24 * 3600);

    /// A backoff starting at `base` and never waiting longer than `max`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] unless `1ms <= base <= max <= 7 days`.
    pub fn new(base: Duration, max: Duration) -> Result<Self> {
        if base < Self::MIN_BASE {
            return Err(Error::config("backoff_base", format!("must be at least 1ms, got {base:?}")));
        }
        if max < base {
            return Err(Error::config("backoff_max", format!("must be at least the base {base:?}, got {max:?}")));
        }
        if max > Self::MAX_DELAY {
            return Err(Error::config("backoff_max", format!("must be at most 7 days, got {max:?}")));
        }
        Ok(Self { base, max })
    }

    /// The first delay's ceiling.
    #[must_use]
    pub fn base(&self) -> Duration {
        self.base
    }

    /// The largest delay.
    #[must_use]
    pub fn max(&self) -> Duration {
        self.max
    }

    /// The upper bound of the delay after failure number `failures` (0 for the first): `min(max, base * 2^n)`.
    #[must_use]
    pub fn ceiling(&self, failures: u32) -> Duration {
        let factor = 2u32.checked_pow(failures.min(31)).unwrap_or(u32::MAX);
        self.base.checked_mul(factor).map_or(self.max, |d| d.min(self.max))
    }

    /// A random delay in `[0, ceiling(failures)]`.
    #[must_use]
    pub fn delay(&self, failures: u32) -> Duration {
        let ceiling = self.ceiling(failures);
        let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rand::thread_rng().gen_range(0..=nanos))
    }
}

impl Default for Backoff {
    /// 500ms base, 5 minutes max.
    fn default() -> Self {
        Self { base: Duration::from_millis(500), max: Duration::from_secs(300) }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::Backoff;

    #[test]
    fn ceilings_double_from_the_base_up_to_the_max() {
        let backoff = Backoff::new(Duration::from_millis(10), Duration::from_millis(100)).unwrap();
        let ceilings: Vec<u128> = (0..6).map(|n| backoff.ceiling(n).as_millis()).collect();
        assert_eq!(ceilings, [10, 20, 40, 80, 100, 100]);
        assert_eq!(backoff.ceiling(u32::MAX), Duration::from_millis(100));
    }

    #[test]
    fn jitter_spreads_delays_over_the_whole_range() {
        let backoff = Backoff::new(Duration::from_millis(100), Duration::from_millis(100)).unwrap();
        let delays: Vec<Duration> = (0..200).map(|_| backoff.delay(0)).collect();
        assert!(delays.iter().any(|d| *d < Duration::from_millis(30)), "no short delay in 200 draws");
        assert!(delays.iter().any(|d| *d > Duration::from_millis(70)), "no long delay in 200 draws");
    }

    proptest! {
        #[test]
        fn every_delay_is_within_zero_and_its_ceiling(base_ms in 1u64..10_000, extra_ms in 0u64..1_000_000, failures in 0u32..100) {
            let base = Duration::from_millis(base_ms);
            let backoff = Backoff::new(base, base + Duration::from_millis(extra_ms)).unwrap();
            let ceiling = backoff.ceiling(failures);
            prop_assert!(ceiling >= base && ceiling <= backoff.max());
            prop_assert!(backoff.delay(failures) <= ceiling);
            prop_assert!(backoff.ceiling(failures + 1) >= ceiling);
        }

        #[test]
        fn construction_accepts_exactly_the_valid_ranges(base_ms in 0u64..100, max_ms in 0u64..100) {
            let valid = base_ms >= 1 && max_ms >= base_ms;
            let built = Backoff::new(Duration::from_millis(base_ms), Duration::from_millis(max_ms));
            prop_assert_eq!(built.is_ok(), valid);
        }
    }
}
