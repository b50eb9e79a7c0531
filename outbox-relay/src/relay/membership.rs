//! The relay's membership: a heartbeat that does not depend on publishing, so a publish longer than the lease
//! keeps the partitions. Each beat renews the membership, removes dead relays (counting an attempt for the events
//! they were publishing), hands over the partitions the lanes have drained, and takes free partitions up to the
//! relay's fair share; the lanes learn the result through a watch channel.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};

use outbox_core::store::{CrashedEvent, Heartbeat, Membership, PartitionLease, SettleOutcome};
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::retry;
use super::shared::Shared;
use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::telemetry::MembershipWatch;

/// What the lanes read from the membership.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Ownership {
    /// The partitions this relay owns, with their leases.
    pub(crate) leases: BTreeMap<u16, PartitionLease>,
    /// Owned partitions to hand over: the lanes stop reading them and report them drained.
    pub(crate) releasing: BTreeSet<u16>,
    /// Whether publishing is paused.
    pub(crate) paused: bool,
}

/// What lanes and membership share: how busy each partition is (reads in progress and events not settled), so
/// the heartbeat hands over a partition only once nothing of it is in flight, and no read starts on a partition
/// being handed over.
#[derive(Debug, Default)]
pub(crate) struct Handover {
    state: Mutex<Busy>,
    /// Asks for a heartbeat now (a partition being handed over became idle, or a lane waits for a fresh one).
    pub(crate) kick: Notify,
    /// When the last heartbeat that got through was sent.
    beat_at: Mutex<Option<tokio::time::Instant>>,
    /// Told of every heartbeat that got through.
    pub(crate) beaten: Notify,
    /// Batches whose settle failed for good: the next heartbeat deletes their records.
    abandoned: Mutex<Vec<Uuid>>,
    /// The relay stops: every partition is to be handed over as soon as nothing of it is in flight.
    stopping: std::sync::atomic::AtomicBool,
}

#[derive(Debug, Default)]
struct Busy {
    counts: BTreeMap<u16, usize>,
    /// Partitions this heartbeat hands over: no lane reads them any more.
    leaving: BTreeSet<u16>,
    /// Partitions beyond the relay's share, to hand over once nothing of theirs is in flight.
    releasing: BTreeSet<u16>,
}

impl Handover {
    fn lock(&self) -> std::sync::MutexGuard<'_, Busy> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a read of `partition`; false when it is being handed over (then the lane leaves it alone).
    pub(crate) fn begin_read(&self, partition: u16) -> bool {
        let mut busy = self.lock();
        if busy.leaving.contains(&partition) {
            return false;
        }
        *busy.counts.entry(partition).or_default() += 1;
        true
    }

    /// `n` more events of `partition` in flight.
    pub(crate) fn add(&self, partition: u16, n: usize) {
        if n > 0 {
            *self.lock().counts.entry(partition).or_default() += n;
        }
    }

    /// `n` fewer reads or events in flight; kicks a heartbeat when a partition to hand over became idle (only
    /// then: a partition of the relay's own share goes idle after nearly every settle of a light load, and a
    /// heartbeat for each would cost the database more than the publishing does).
    pub(crate) fn remove(&self, partition: u16, n: usize) {
        if n == 0 {
            return;
        }
        let mut busy = self.lock();
        if let Some(count) = busy.counts.get_mut(&partition) {
            *count = count.saturating_sub(n);
            if *count == 0 {
                busy.counts.remove(&partition);
                if busy.releasing.contains(&partition) {
                    self.kick.notify_one();
                }
            }
        }
    }

    /// Hands `batch` to the next heartbeat, which deletes its record: its settle failed for good (or its record's
    /// fate is unknown), and its events, still pending, are read and published again.
    pub(crate) fn abandon(&self, batch: Uuid) {
        self.abandoned.lock().unwrap_or_else(PoisonError::into_inner).push(batch);
    }

    /// Of the partitions to hand over, those with nothing in flight, now closed to reads: this heartbeat hands them
    /// over.
    fn take_idle(&self) -> Vec<u16> {
        let mut busy = self.lock();
        let idle: Vec<u16> = busy.releasing.iter().copied().filter(|p| !busy.counts.contains_key(p)).collect();
        busy.leaving.extend(idle.iter().copied());
        idle
    }

    /// Whether a heartbeat sent less than `within` ago got through: the relay is surely still a member, and the
    /// partitions it knows of are still its own. A relay that was stopped (SIGSTOP, a paused VM) past its lease
    /// finds out here before it publishes anything.
    pub(crate) fn fresh(&self, within: std::time::Duration) -> bool {
        self.beat_at.lock().unwrap_or_else(PoisonError::into_inner).is_some_and(|at| at.elapsed() < within)
    }

    fn beat_got_through(&self, sent: tokio::time::Instant) {
        *self.beat_at.lock().unwrap_or_else(PoisonError::into_inner) = Some(sent);
        self.beaten.notify_waiters();
    }

    /// Partitions owned (again) are open to reads; of them, `releasing` are to be handed over, and a heartbeat is
    /// kicked at once when one of those is idle already.
    fn owned(&self, owned: &BTreeMap<u16, PartitionLease>, releasing: &BTreeSet<u16>) {
        let mut busy = self.lock();
        busy.leaving.retain(|p| !owned.contains_key(p));
        busy.releasing.clone_from(releasing);
        if busy.releasing.iter().any(|p| !busy.counts.contains_key(p)) {
            self.kick.notify_one();
        }
    }
}

/// The membership task's side.
pub(crate) struct Members {
    shared: Arc<Shared>,
    handover: Arc<Handover>,
    ownership: watch::Sender<Ownership>,
    host: String,
    /// What `/readyz` learns of this membership.
    watch: MembershipWatch,
}

impl Members {
    pub(crate) fn new(shared: Arc<Shared>, handover: Arc<Handover>) -> (Self, watch::Receiver<Ownership>) {
        let (ownership, receiver) = watch::channel(Ownership::default());
        let host = format!(
            "{}:{}",
            std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()).unwrap_or_else(|| "localhost".to_owned()),
            std::process::id()
        );
        (Self { shared, handover, ownership, host, watch: MembershipWatch::new() }, receiver)
    }

    /// One heartbeat; `take` is false while the relay shuts down.
    pub(crate) async fn beat(&self, take: bool) -> Result<Membership> {
        let release = self.handover.take_idle();
        let forget = std::mem::take(&mut *self.handover.abandoned.lock().unwrap_or_else(PoisonError::into_inner));
        let config = &self.shared.config;
        let on_crash = |event: &CrashedEvent| -> SettleOutcome {
            retry::after_failure(config, event.attempts, "a relay stopped while publishing this event".into(), false)
        };
        let beat = Heartbeat::new(self.shared.relay, &self.host, config.lease, &on_crash)
            .release(&release)
            .take(take)
            .forget(&forget);
        let sent = tokio::time::Instant::now();
        let membership = match self.shared.store.heartbeat(&beat).await {
            Ok(membership) => membership,
            Err(error) => {
                // Not deleted: the next heartbeat tries again.
                self.handover.abandoned.lock().unwrap_or_else(PoisonError::into_inner).extend(forget);
                return Err(Error::from_store(error));
            }
        };
        if membership.removed > 0 || membership.crashed > 0 {
            tracing::warn!(
                relays = membership.removed,
                events = membership.crashed,
                "removed relays whose heartbeat lapsed; counted an attempt for the events they were publishing"
            );
        }
        self.publish(&membership);
        self.handover.beat_got_through(sent);
        self.watch.renewed(sent.into_std() + config.lease);
        Ok(membership)
    }

    /// Tells the lanes what this relay owns now, and which partitions beyond its share it hands over (the
    /// highest, so the split converges without moving a partition twice).
    fn publish(&self, membership: &Membership) {
        let leases: BTreeMap<u16, PartitionLease> = membership.owned.iter().map(|l| (l.partition, *l)).collect();
        let excess = if self.handover.stopping.load(std::sync::atomic::Ordering::Relaxed) {
            leases.len()
        } else {
            leases.len().saturating_sub(usize::from(membership.share))
        };
        let releasing: BTreeSet<u16> = leases.keys().rev().take(excess).copied().collect();
        self.handover.owned(&leases, &releasing);
        let next = Ownership { leases, releasing, paused: membership.paused };
        self.ownership.send_if_modified(|current| {
            if *current == next {
                return false;
            }
            let before: BTreeSet<u16> = current.leases.keys().copied().collect();
            let after: BTreeSet<u16> = next.leases.keys().copied().collect();
            let taken = after.difference(&before).count();
            let lost = before.difference(&after).count();
            if taken > 0 || lost > 0 {
                tracing::info!(
                    relays = membership.relays.len(),
                    owned = after.len(),
                    taken,
                    handed_over = lost,
                    "partition ownership changed"
                );
            }
            if next.paused != current.paused {
                crate::telemetry::set_paused(next.paused);
                if next.paused {
                    tracing::info!("publishing is paused (`outbox resume` resumes it)");
                } else {
                    tracing::info!("publishing resumed");
                }
            }
            *current = next;
            true
        });
    }

    /// Beats every heartbeat interval (or at once when a lane drained a partition) until `shutdown`. Database
    /// errors are retried with backoff; a fatal one (the tables are gone, access denied) stops the relay.
    pub(crate) async fn run(&self, shutdown: &CancellationToken) -> Result<()> {
        let interval = self.shared.config.heartbeat_interval();
        let backoff = Backoff::new(interval, self.shared.config.lease.max(interval)).unwrap_or_default();
        let mut failures = 0;
        loop {
            let wait = match self.beat(true).await {
                Ok(_) => {
                    failures = 0;
                    interval
                }
                Err(error) if !error.is_retryable() => {
                    tracing::error!(error = %error, "cannot renew the relay's membership; stopping");
                    return Err(error);
                }
                Err(error) => {
                    failures += 1;
                    let wait = backoff.ceiling(failures - 1);
                    tracing::warn!(retry_in = ?wait, error = %error, "cannot renew the relay's membership; retrying");
                    wait
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => return Ok(()),
                () = self.handover.kick.notified() => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Runs `work` (the lanes' drain at shutdown), renewing the membership meanwhile without taking partitions:
    /// at once, then every heartbeat interval, and whenever a partition goes idle, each beat handing over the
    /// partitions with nothing in flight (all are to be handed over now). A failed beat is logged and tried again.
    pub(crate) async fn keep_alive<F: std::future::Future>(&self, work: F) -> F::Output {
        self.handover.stopping.store(true, std::sync::atomic::Ordering::Relaxed);
        let interval = self.shared.config.heartbeat_interval();
        tokio::pin!(work);
        let mut next = tokio::time::Instant::now();
        loop {
            tokio::select! {
                output = &mut work => return output,
                () = tokio::time::sleep_until(next) => {}
                () = self.handover.kick.notified() => {}
            }
            if let Err(error) = self.beat(false).await {
                tracing::warn!(error = %error, "cannot renew the relay's membership while it stops");
            }
            next = tokio::time::Instant::now() + interval;
        }
    }

    /// A graceful exit: every partition handed over at once, the membership removed.
    pub(crate) async fn leave(&self) {
        match self.shared.store.leave(self.shared.relay).await {
            Ok(()) => tracing::info!("partitions handed over"),
            Err(error) => tracing::warn!(
                error = %error,
                "cannot hand the partitions over; other relays take them when this relay's lease expires"
            ),
        }
    }
}
