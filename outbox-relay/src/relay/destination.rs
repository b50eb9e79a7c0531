//! Whether the publisher's destination is reachable: an event whose publish failed only because the destination
//! could not be reached at all ([`PublishError::unavailable`](crate::PublishError::unavailable)) uses up no
//! attempt while nothing else the relay publishes gets through either, so a broker outage longer than the attempts
//! last sends no event to `failed`. The retries of such events back off by the outage's length (the calls in a row
//! that reached nothing), not by their attempts, which do not grow.
//!
//! When anything gets through meanwhile (the same call, or another lane's call that ended after this one started),
//! the destination is up and the failure is the event's own: it counts, so a publisher that reports one event's
//! failure as the destination's cannot keep that event from `failed` while other events flow.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The relay's view of its destination, shared by its lanes.
#[derive(Debug, Default)]
pub(crate) struct Destination {
    /// Calls that published at least one event, so far.
    reached: AtomicU64,
    /// Calls in a row that reached nothing and had an event fail as unavailable.
    outage: AtomicU32,
}

/// What the relay knew of the destination when a call started.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallStart {
    reached: u64,
}

impl Destination {
    /// A call starts.
    pub(crate) fn call_starts(&self) -> CallStart {
        CallStart { reached: self.reached.load(Ordering::SeqCst) }
    }

    /// A call that started at `start` ended: it published something (`published`), or not and an event failed as
    /// unavailable (`unavailable`). Returns the outage this call is part of: `Some(n)` for the `n`th call in a row
    /// that reached nothing (its unavailable failures count no attempt), `None` when the destination was reached
    /// (by this call or by another since this one started).
    pub(crate) fn call_ended(&self, start: CallStart, published: bool, unavailable: bool) -> Option<u32> {
        if published {
            self.reached.fetch_add(1, Ordering::SeqCst);
            self.outage.store(0, Ordering::SeqCst);
            return None;
        }
        if !unavailable || self.reached.load(Ordering::SeqCst) != start.reached {
            return None;
        }
        Some(self.outage.fetch_add(1, Ordering::SeqCst).saturating_add(1))
    }
}

#[cfg(test)]
mod tests {
    use super::Destination;

    #[test]
    fn an_outage_grows_with_each_call_that_reaches_nothing_and_ends_when_any_call_gets_through() {
        let destination = Destination::default();
        assert_eq!(destination.call_ended(destination.call_starts(), false, true), Some(1));
        assert_eq!(destination.call_ended(destination.call_starts(), false, true), Some(2));
        // A failure that is not the destination's is no part of an outage.
        assert_eq!(destination.call_ended(destination.call_starts(), false, false), None);
        // A call that started before another one got through: the destination is up, its failures count.
        let before = destination.call_starts();
        assert_eq!(destination.call_ended(destination.call_starts(), true, false), None);
        assert_eq!(destination.call_ended(before, false, true), None);
        assert_eq!(destination.call_ended(destination.call_starts(), false, true), Some(1), "a new outage");
    }
}
