//! Relay membership and partition leases: who publishes which partition.
//!
//! Every event belongs to one of [`Membership::partitions`] partitions by a hash of its aggregate, computed by the
//! database. Live relays (those whose heartbeat is younger than their lease) split the partitions evenly: at each
//! [`Store::heartbeat`](super::Store::heartbeat) a relay renews its membership, removes the relays whose heartbeat
//! lapsed (counting an attempt for the events they were publishing), hands over the partitions it was asked to
//! release, and takes free partitions up to its [fair share](fair_share). Each change of owner grows the
//! partition's epoch, the fencing token of every settle.

use std::time::Duration;

use uuid::Uuid;

use super::settle::SettleOutcome;

/// What one heartbeat of a relay says and asks.
#[non_exhaustive]
pub struct Heartbeat<'a> {
    /// The relay's id.
    pub relay: Uuid,
    /// Where it runs, for `outbox status` (host name and process id).
    pub host: &'a str,
    /// How long its membership lasts without another heartbeat.
    pub lease: Duration,
    /// Partitions it has stopped reading and has no batch in flight for: handed over now.
    pub release: &'a [u16],
    /// Whether it takes free partitions up to its fair share (false while it shuts down).
    pub take: bool,
    /// Its batches whose settle failed for good: their records are deleted (their events, still pending, are
    /// read and published again), so they no longer show as being published, and no attempt is counted for them
    /// if the relay dies later.
    pub forget: &'a [Uuid],
    /// What happens to an event that was in a batch of a relay that died while publishing it: the relay's retry
    /// decision for one more failed attempt (retry later, or `failed` once attempts are exhausted).
    pub on_crash: &'a (dyn Fn(&CrashedEvent) -> SettleOutcome + Send + Sync),
}

impl<'a> Heartbeat<'a> {
    /// A heartbeat of `relay` that releases nothing and takes its fair share.
    pub fn new(
        relay: Uuid,
        host: &'a str,
        lease: Duration,
        on_crash: &'a (dyn Fn(&CrashedEvent) -> SettleOutcome + Send + Sync),
    ) -> Self {
        Self { relay, host, lease, release: &[], take: true, forget: &[], on_crash }
    }

    /// Hands over `partitions`.
    #[must_use]
    pub fn release(mut self, partitions: &'a [u16]) -> Self {
        self.release = partitions;
        self
    }

    /// Whether to take free partitions.
    #[must_use]
    pub fn take(mut self, take: bool) -> Self {
        self.take = take;
        self
    }

    /// Deletes the records of these batches of the relay, whose settle failed for good.
    #[must_use]
    pub fn forget(mut self, batches: &'a [Uuid]) -> Self {
        self.forget = batches;
        self
    }
}

impl std::fmt::Debug for Heartbeat<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Heartbeat")
            .field("relay", &self.relay)
            .field("host", &self.host)
            .field("lease", &self.lease)
            .field("release", &self.release)
            .field("take", &self.take)
            .field("forget", &self.forget)
            .finish_non_exhaustive()
    }
}

/// An event of a dead relay's batch in flight, before its attempt is counted.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CrashedEvent {
    /// The event id.
    pub id: Uuid,
    /// Failed attempts before this one.
    pub attempts: u32,
}

/// A partition owned by the relay, with the epoch it holds it at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub struct PartitionLease {
    /// The partition.
    pub partition: u16,
    /// The fencing token: grows at every change of owner.
    pub epoch: i64,
    /// Grows when an operator changes rows of the partition (retry, cancel): read it afresh.
    pub generation: i64,
    /// Where the partition's unfinished rows begin: every row with a lower `seq` is published, cancelled or failed
    /// (failed rows are found by attempts), so its owner reads it from here (0 where the backend keeps no start).
    pub start_seq: i64,
}

impl PartitionLease {
    /// The lease of `partition` at `epoch` and `generation`, read from its first row.
    #[must_use]
    pub fn new(partition: u16, epoch: i64, generation: i64) -> Self {
        Self { partition, epoch, generation, start_seq: 0 }
    }

    /// The same lease, its unfinished rows beginning at `start_seq`.
    #[must_use]
    pub fn starting_at(mut self, start_seq: i64) -> Self {
        self.start_seq = start_seq;
        self
    }
}

/// How far the owner of a partition knows its rows finished: [`Store::advance_starts`](super::Store::advance_starts)
/// moves the partition's `start_seq` up to `start_seq` while the relay holds it at the lease's epoch and no operator
/// changed its rows since the lease's generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionStart {
    /// The partition, and the epoch and generation its owner knows it at.
    pub lease: PartitionLease,
    /// Every row of the partition below it is published, cancelled or failed.
    pub start_seq: i64,
}

impl PartitionStart {
    /// Every row of the partition of `lease` below `start_seq` is finished, as its owner knows.
    #[must_use]
    pub fn new(lease: PartitionLease, start_seq: i64) -> Self {
        Self { lease, start_seq }
    }
}

/// The result of a heartbeat.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Membership {
    /// The live relays, by id (this one included).
    pub relays: Vec<Uuid>,
    /// The number of partitions of the database.
    pub partitions: u16,
    /// How many partitions this relay should own: its [fair share](fair_share).
    pub share: u16,
    /// The partitions it owns now, by partition.
    pub owned: Vec<PartitionLease>,
    /// Events of dead relays' batches whose attempt this heartbeat counted.
    pub crashed: u64,
    /// Relays this heartbeat found dead and removed.
    pub removed: u64,
    /// Whether publishing is paused.
    pub paused: bool,
}

/// How many of `partitions` the relay at `rank` (0-based, in id order) of `relays` live relays owns: an even split,
/// the first `partitions % relays` relays taking one more.
///
/// # Example
///
/// ```
/// use outbox_core::store::fair_share;
///
/// assert_eq!((0..3).map(|rank| fair_share(256, 3, rank)).collect::<Vec<_>>(), [86, 85, 85]);
/// assert_eq!(fair_share(256, 0, 0), 256);
/// ```
#[must_use]
pub fn fair_share(partitions: u16, relays: usize, rank: usize) -> u16 {
    if relays == 0 {
        return partitions;
    }
    let relays = u16::try_from(relays).unwrap_or(u16::MAX);
    let rank = u16::try_from(rank).unwrap_or(u16::MAX);
    partitions / relays + u16::from(rank < partitions % relays)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::fair_share;

    proptest! {
        #[test]
        fn fair_shares_add_up_to_every_partition(partitions in 1u16..=1024, relays in 1usize..=300) {
            let shares: Vec<u16> = (0..relays).map(|rank| fair_share(partitions, relays, rank)).collect();
            prop_assert_eq!(shares.iter().map(|&s| u32::from(s)).sum::<u32>(), u32::from(partitions));
            let (min, max) = (shares.iter().min().unwrap(), shares.iter().max().unwrap());
            prop_assert!(max - min <= 1);
        }
    }
}
