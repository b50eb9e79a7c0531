//! How many events one publisher call may carry (and so one batch: a lane reads no more): unlimited until a call
//! runs past the publish timeout, then half of what that call carried, and twice as many again after each call of
//! the cap's size that took less than a quarter of the timeout.
//!
//! A call that times out is a failed attempt for every event in it, also those the destination already took (the
//! publisher's outcomes are lost with its task): a destination slower than a batch's worth of events per publish
//! timeout (a webhook receiver that answers in a second, sixteen requests at a time, and batches of 2,000) would
//! time out on every call and send the whole backlog to `failed` while receiving it again and again. Smaller calls
//! finish, and the backlog drains at the destination's pace.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The relay's cap on the events of one publisher call, shared by its lanes.
#[derive(Debug)]
pub(crate) struct CallSize {
    cap: AtomicUsize,
}

impl Default for CallSize {
    fn default() -> Self {
        Self { cap: AtomicUsize::new(usize::MAX) }
    }
}

impl CallSize {
    /// The most events the next call may carry.
    pub(crate) fn cap(&self) -> usize {
        self.cap.load(Ordering::Relaxed)
    }

    /// A call of `events` took `took` (`None`: it ran past `timeout`). Returns the new cap when it shrank.
    pub(crate) fn after_call(&self, events: usize, took: Option<Duration>, timeout: Duration) -> Option<usize> {
        match took {
            None => {
                let cap = (events / 2).max(1);
                let before = self.cap.fetch_min(cap, Ordering::Relaxed);
                (cap < before).then_some(cap)
            }
            Some(took) if took < timeout / 4 => {
                let cap = self.cap();
                if cap != usize::MAX && events >= cap {
                    // Grows back while calls of the cap's size finish quickly.
                    let _ = self.cap.compare_exchange(cap, cap.saturating_mul(2), Ordering::Relaxed, Ordering::Relaxed);
                }
                None
            }
            Some(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::CallSize;

    #[test]
    fn a_call_past_the_timeout_halves_the_cap_and_quick_full_calls_grow_it_back() {
        let size = CallSize::default();
        let timeout = Duration::from_secs(60);
        assert_eq!(size.cap(), usize::MAX);
        assert_eq!(size.after_call(2000, None, timeout), Some(1000));
        assert_eq!(size.after_call(1000, None, timeout), Some(500));
        assert_eq!(size.after_call(3, None, timeout), Some(1));
        assert_eq!(size.after_call(1, None, timeout), None, "never below one");
        assert_eq!(size.cap(), 1);
        // Slow but within the timeout: unchanged. Quick and full: doubled.
        assert_eq!(size.after_call(1, Some(Duration::from_secs(30)), timeout), None);
        assert_eq!(size.cap(), 1);
        size.after_call(1, Some(Duration::from_secs(1)), timeout);
        size.after_call(2, Some(Duration::from_secs(1)), timeout);
        assert_eq!(size.cap(), 4);
        // A quick call smaller than the cap says nothing about larger ones.
        size.after_call(3, Some(Duration::from_secs(1)), timeout);
        assert_eq!(size.cap(), 4);
    }
}
