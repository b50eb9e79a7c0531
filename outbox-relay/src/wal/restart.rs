//! How long the relay waits before it starts a failed replication session again: the wait doubles with each
//! failure in a row, and starts over from the shortest after a session that streamed long enough to count as
//! healthy, so a relay that recovered from an outage reconnects at once the next time its connection goes.

use std::time::Duration;

use crate::backoff::Backoff;

/// The wait after the first failure in a row; it doubles up to [`LONGEST`].
const FIRST: Duration = Duration::from_millis(200);
/// The longest wait between two sessions.
const LONGEST: Duration = Duration::from_secs(10);
/// A session that streamed this long was healthy, and its failure is the first of a new row. As long as the
/// longest wait: a session that fails soon after every start still backs off, and one that streamed for longer
/// than that has recovered from whatever made the earlier ones fail.
const HEALTHY: Duration = LONGEST;

/// The failures in a row of the relay's replication sessions.
#[derive(Debug)]
pub(crate) struct Restarts {
    backoff: Backoff,
    failures: u32,
}

impl Restarts {
    /// No failure yet.
    pub(crate) fn new() -> Self {
        Self { backoff: Backoff::new(FIRST, LONGEST).unwrap_or_default(), failures: 0 }
    }

    /// The wait before the next session, after one that failed having streamed for `streamed` (`None`: it failed
    /// before it streamed).
    pub(crate) fn after_failure(&mut self, streamed: Option<Duration>) -> Duration {
        if streamed.is_some_and(|streamed| streamed >= HEALTHY) {
            self.failures = 0;
        }
        let wait = self.backoff.ceiling(self.failures);
        self.failures = self.failures.saturating_add(1);
        wait
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Restarts, HEALTHY};

    fn millis(wait: Duration) -> u128 {
        wait.as_millis()
    }

    #[test]
    fn failures_in_a_row_wait_longer_each_time_up_to_ten_seconds() {
        let mut restarts = Restarts::new();
        let waits: Vec<u128> = (0..8).map(|_| millis(restarts.after_failure(None))).collect();
        assert_eq!(waits, [200, 400, 800, 1_600, 3_200, 6_400, 10_000, 10_000]);
    }

    #[test]
    fn a_failure_after_a_healthy_session_waits_the_shortest_again() {
        let mut restarts = Restarts::new();
        for _ in 0..6 {
            restarts.after_failure(None);
        }
        assert_eq!(millis(restarts.after_failure(Some(HEALTHY))), 200, "the session streamed long enough");
        assert_eq!(millis(restarts.after_failure(None)), 400, "a new row of failures grows again");
        assert_eq!(millis(restarts.after_failure(Some(Duration::from_secs(3_600)))), 200);
    }

    #[test]
    fn a_session_that_fails_soon_after_it_starts_streaming_keeps_backing_off() {
        let mut restarts = Restarts::new();
        let short = Some(HEALTHY - Duration::from_millis(1));
        let waits: Vec<u128> = (0..4).map(|_| millis(restarts.after_failure(short))).collect();
        assert_eq!(waits, [200, 400, 800, 1_600]);
    }
}
