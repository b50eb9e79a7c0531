//! The one retry decision: what a failed attempt leads to, whatever failed (the broker, the publisher panicking
//! or timing out, a relay dying while it published the event).

use outbox_core::store::SettleOutcome;

use crate::config::RelayConfig;

/// The outcome of a failed attempt of an event that had failed `attempts` times before: `failed` once the
/// attempts reach the configured maximum (or at once for a permanent failure), otherwise a retry after the backoff.
pub(crate) fn after_failure(config: &RelayConfig, attempts: u32, error: String, permanent: bool) -> SettleOutcome {
    after_failure_waiting(config, attempts, error, permanent, None)
}

/// [`after_failure`], when the receiver asked to wait `retry_after` (HTTP `Retry-After`, a throttled queue): the
/// retry waits at least that long, up to the backoff's maximum.
pub(crate) fn after_failure_waiting(
    config: &RelayConfig,
    attempts: u32,
    error: String,
    permanent: bool,
    retry_after: Option<std::time::Duration>,
) -> SettleOutcome {
    if permanent {
        return SettleOutcome::Failed { error };
    }
    let attempts = attempts.saturating_add(1);
    if attempts >= config.max_attempts {
        return SettleOutcome::Failed { error: format!("gave up after {attempts} attempts: {error}") };
    }
    let backoff = config.backoff.delay(attempts - 1);
    SettleOutcome::Retry { error, delay: waiting(config, backoff, retry_after), counted: true }
}

/// The outcome of an attempt that could not reach the destination at all, in the `outage`th call in a row that
/// reached nothing: no attempt counted, a retry after the backoff of the outage's length (at least `retry_after`).
pub(crate) fn while_unreachable(
    config: &RelayConfig,
    outage: u32,
    error: String,
    retry_after: Option<std::time::Duration>,
) -> SettleOutcome {
    let backoff = config.backoff.delay(outage.saturating_sub(1));
    SettleOutcome::Retry { error, delay: waiting(config, backoff, retry_after), counted: false }
}

/// `backoff`, or the wait the receiver asked for if longer, up to the backoff's maximum.
fn waiting(
    config: &RelayConfig,
    backoff: std::time::Duration,
    retry_after: Option<std::time::Duration>,
) -> std::time::Duration {
    retry_after.map_or(backoff, |asked| backoff.max(asked.min(config.backoff.max())))
}

#[cfg(test)]
mod tests {
    use outbox_core::store::SettleOutcome;

    use super::after_failure;
    use crate::config::RelayConfig;

    #[test]
    fn transient_failures_retry_until_the_last_attempt_then_fail() {
        let config = RelayConfig::builder().max_attempts(3).build().unwrap();
        assert!(matches!(after_failure(&config, 0, "x".into(), false), SettleOutcome::Retry { .. }));
        assert!(matches!(after_failure(&config, 1, "x".into(), false), SettleOutcome::Retry { .. }));
        let last = after_failure(&config, 2, "boom".into(), false);
        assert_eq!(last, SettleOutcome::Failed { error: "gave up after 3 attempts: boom".into() });
        assert_eq!(after_failure(&config, 0, "no".into(), true), SettleOutcome::Failed { error: "no".into() });
    }

    #[test]
    fn an_unreachable_destination_counts_no_attempt_and_backs_off_by_the_outage() {
        use std::time::Duration;
        let config = RelayConfig::builder()
            .max_attempts(1)
            .backoff(Duration::from_millis(100), Duration::from_secs(1))
            .build()
            .unwrap();
        let delay = |outage| match super::while_unreachable(&config, outage, "refused".into(), None) {
            SettleOutcome::Retry { counted: false, delay, .. } => delay,
            other => panic!("{other:?}"),
        };
        // The first call of an outage waits up to the base; the fifth up to 16 times that (the maximum here).
        assert!((0..50).map(|_| delay(1)).all(|d| d <= Duration::from_millis(100)));
        assert!((0..50).map(|_| delay(5)).any(|d| d > Duration::from_millis(100)), "the wait grows with the outage");
        assert!([10, u32::MAX].into_iter().all(|outage| delay(outage) <= Duration::from_secs(1)));
    }

    #[test]
    fn a_requested_wait_is_honoured_up_to_the_backoff_maximum() {
        use std::time::Duration;
        let config = RelayConfig::builder().backoff(Duration::from_millis(10), Duration::from_secs(5)).build().unwrap();
        let delay = |asked| match super::after_failure_waiting(&config, 0, "429".into(), false, Some(asked)) {
            SettleOutcome::Retry { delay, .. } => delay,
            other => panic!("{other:?}"),
        };
        assert_eq!(delay(Duration::from_secs(2)), Duration::from_secs(2));
        assert_eq!(delay(Duration::from_secs(60)), Duration::from_secs(5));
    }
}
