//! Readiness of the relays' memberships: a relay whose heartbeat has not got through for its lease is no longer one
//! of its database's relays (the others take its partitions over) and publishes nothing, however well its database
//! answers other statements, so `/readyz` says "not ready" until a heartbeat gets through again.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

/// The running relays of this process, each with the moment its membership lapses (`None` before its first
/// heartbeat got through).
static MEMBERSHIPS: Mutex<BTreeMap<u64, Option<Instant>>> = Mutex::new(BTreeMap::new());
static NEXT_KEY: AtomicU64 = AtomicU64::new(0);

/// Whether every relay of this process that publishes from the table is a member of its database's relays: its
/// last heartbeat that got through was sent less than its lease ago (true when no such relay runs).
#[must_use]
pub fn memberships_current() -> bool {
    let now = Instant::now();
    memberships().values().all(|lapses| lapses.is_some_and(|at| now < at))
}

fn memberships() -> std::sync::MutexGuard<'static, BTreeMap<u64, Option<Instant>>> {
    MEMBERSHIPS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One relay's membership, counted by [`memberships_current`] from its creation until it is dropped.
#[derive(Debug)]
pub(crate) struct MembershipWatch {
    key: u64,
}

impl MembershipWatch {
    /// A relay that is not a member yet.
    pub(crate) fn new() -> Self {
        let key = NEXT_KEY.fetch_add(1, Ordering::Relaxed);
        memberships().insert(key, None);
        Self { key }
    }

    /// A heartbeat got through: the membership holds until `lapses`.
    pub(crate) fn renewed(&self, lapses: Instant) {
        memberships().insert(self.key, Some(lapses));
    }
}

impl Drop for MembershipWatch {
    fn drop(&mut self) {
        memberships().remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_membership_is_current_from_its_first_heartbeat_until_its_lease_runs_out_and_counts_no_more_once_dropped() {
        let watch = MembershipWatch::new();
        assert!(!memberships_current(), "not a member before its first heartbeat");
        watch.renewed(Instant::now() + Duration::from_secs(60));
        assert!(memberships_current());
        watch.renewed(Instant::now() - Duration::from_millis(1));
        assert!(!memberships_current(), "the lease ran out");
        drop(watch);
        assert!(memberships_current(), "a stopped relay is not waited for");
    }
}
