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
    let delay = retry_after.map_or(backoff, |asked| backoff.max(asked.min(config.backoff.max())));
    SettleOutcome::Retry { error, delay }
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
