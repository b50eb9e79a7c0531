//! One lane of a relay: the read -> publish -> settle pipeline over its share of the relay's partitions.
//!
//! A lane reads with one plain `SELECT` (a range per partition), records the batch, publishes it, and hands the
//! settle to a task of its own while it reads and publishes the next batch, so the database settles one batch while
//! the next one is read and published. Batches of one lane publish one after the other, and a partition belongs to
//! one lane, so the events of an aggregate are published in order; lanes never share an aggregate.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

use foldhash::HashMap;
use outbox_core::store::{
    AggregateKey, Ordering, PartitionLease, PartitionStart, ReadBatch, ReadRequest, SettleBatch, SettleOutcome,
    SettleReport,
};
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use uuid::Uuid;

use super::batch::{self, Item};
use super::membership::{Handover, Ownership};
use super::partition::{PartitionState, Purpose};
use super::settle;
use super::shared::Shared;
use super::summary::RunSummary;
use crate::backoff::Backoff;
use crate::config::Wakeup;
use crate::error::Error;

/// Settles in flight at once per lane: one batch settling while the next is read and published.
const SETTLES_IN_FLIGHT: usize = 2;
/// The wait after the second read in a row that found nothing, with adaptive polling (the first is followed by
/// another at once); it doubles with each further such read, up to the poll interval.
const BUSY_DELAY: Duration = Duration::from_millis(1);
/// The most rows read from a partition that had no backlog at its last read.
const IDLE_RANGE: u32 = 16;
/// How often a lane writes where its partitions' unfinished rows begin.
const ADVANCE_STARTS_EVERY: Duration = Duration::from_secs(1);

/// A read's rows, the purpose and limit of each of its ranges, the partitions it read, and when it was sent.
type Read = (ReadBatch, Vec<(u16, Purpose, u32)>, BTreeSet<u16>, Instant);

/// An aggregate of a partition as 64 bits (with the lane's seed), so that counting its batches in flight copies no
/// string. Two aggregates with one digest (about one chance in 2^64 per pair) only make a replay wait for the
/// other's batch.
fn aggregate_digest(digests: &foldhash::fast::RandomState, partition: u16, aggregate: &AggregateKey) -> u64 {
    digests.hash_one((partition, aggregate))
}

/// A settle task's result.
struct Settled {
    batch: Uuid,
    report: Option<SettleReport>,
    /// Per partition: how many events of the batch (attempted or not), the lowest `seq` among them, and the epoch
    /// they were read at.
    partitions: BTreeMap<u16, (usize, i64, i64)>,
    /// The batch's events, each with the epoch it was read at.
    ids: Vec<(Uuid, i64)>,
    /// The batch's aggregates, each once, by [`aggregate_digest`].
    aggregates: Vec<u64>,
}

pub(crate) struct Lane {
    shared: Arc<Shared>,
    index: usize,
    lanes: usize,
    handover: Arc<Handover>,
    ownership: watch::Receiver<Ownership>,
    partitions: BTreeMap<u16, PartitionState>,
    /// Events read and not settled yet, with the epoch of their partition then: a rescan or replay at that epoch
    /// that finds one again skips it. A partition lost and taken back starts at a new epoch, and its fresh reads
    /// must not skip what an old, fenced batch still holds: that settle changes nothing, so the event is read
    /// (and published) again instead of staying pending behind the cursor.
    in_flight: HashMap<Uuid, i64>,
    /// Batches in flight per aggregate (by [`aggregate_digest`]): a held-back aggregate is read again only once
    /// none is.
    in_flight_aggregates: HashMap<u64, usize>,
    /// The seed of the aggregates' digests (random per lane).
    digests: foldhash::fast::RandomState,
    settles: JoinSet<Settled>,
    /// When the partitions' starts were last written.
    starts_advanced_at: Instant,
    paused: bool,
    /// Reads in a row that found nothing (since a notification or a read with rows): after the first, the adaptive
    /// polling wait is `idle_backoff`'s ceiling for one fewer.
    idle_reads: u32,
    idle_backoff: Backoff,
    summary: Arc<std::sync::Mutex<RunSummary>>,
}

impl Lane {
    pub(crate) fn new(
        shared: Arc<Shared>,
        index: usize,
        lanes: usize,
        handover: Arc<Handover>,
        ownership: watch::Receiver<Ownership>,
        summary: Arc<std::sync::Mutex<RunSummary>>,
    ) -> Self {
        // The poll interval is at least the first wait (the configuration checks it).
        let idle_backoff = Backoff::new(BUSY_DELAY, shared.config.poll_interval).unwrap_or_default();
        Self {
            shared,
            index,
            lanes,
            handover,
            ownership,
            partitions: BTreeMap::new(),
            in_flight: HashMap::default(),
            in_flight_aggregates: HashMap::default(),
            digests: foldhash::fast::RandomState::default(),
            settles: JoinSet::new(),
            starts_advanced_at: Instant::now(),
            paused: false,
            idle_reads: 0,
            idle_backoff,
            summary,
        }
    }

    fn mine(&self, partition: u16) -> bool {
        usize::from(partition) % self.lanes == self.index
    }

    /// Brings the partitions in line with the membership: new ones (or ones taken back at another epoch) start
    /// afresh, lost ones are dropped (their settles in flight are fenced), and releasing ones stop being read.
    fn sync_ownership(&mut self) {
        let ownership = self.ownership.borrow_and_update().clone();
        self.paused = ownership.paused;
        let leases: BTreeMap<u16, _> =
            ownership.leases.iter().filter(|(p, _)| self.mine(**p)).map(|(p, l)| (*p, *l)).collect();
        self.partitions.retain(|p, state| leases.get(p).is_some_and(|l| l.epoch == state.lease.epoch));
        for (partition, lease) in leases {
            let state = self.partitions.entry(partition).or_insert_with(|| PartitionState::new(lease));
            if state.lease.generation != lease.generation {
                state.reset = true;
            }
            state.lease = lease;
            state.releasing = ownership.releasing.contains(&partition);
        }
        self.restart_reset();
    }

    /// Partitions to read afresh start again once nothing of theirs is in flight.
    fn restart_reset(&mut self) {
        for state in self.partitions.values_mut() {
            if state.reset && state.in_flight == 0 {
                state.restart();
            }
        }
    }

    /// Runs until `shutdown`, then waits for its settles in flight.
    pub(crate) async fn run(mut self, wake: Arc<Notify>, shutdown: CancellationToken) {
        let read_retry = Backoff::new(Duration::from_millis(100), Duration::from_secs(10)).unwrap_or_default();
        let mut failures = 0;
        loop {
            if shutdown.is_cancelled() {
                break;
            }
            self.sync_ownership();
            while let Some(done) = self.settles.try_join_next() {
                self.settled(done);
            }
            self.advance_starts().await;
            let read = match self.read().await {
                Ok(read) => {
                    failures = 0;
                    read
                }
                Err(error) => {
                    let wait = read_retry.ceiling(failures);
                    failures += 1;
                    tracing::warn!(retry_in = ?wait, error = %error, "cannot read pending events; retrying");
                    self.wait(wait, &wake, &shutdown).await;
                    continue;
                }
            };
            let Some(read) = read else {
                // Nothing to read: no partition, or all released or paused.
                let wait = self.shared.config.poll_interval;
                self.wait(wait, &wake, &shutdown).await;
                continue;
            };
            let items = self.accept(read);
            if items.is_empty() {
                let notified = matches!(self.shared.config.wakeup, Wakeup::Notify { .. });
                let wait = if notified || self.paused {
                    Some(self.shared.config.poll_interval)
                } else {
                    // The first read that finds nothing is followed by another at once: events come in while it
                    // runs. Then the waits grow.
                    self.idle_reads.checked_sub(1).map(|waited| self.idle_backoff.ceiling(waited))
                };
                self.idle_reads = self.idle_reads.saturating_add(1);
                if let Some(wait) = wait {
                    self.wait(wait, &wake, &shutdown).await;
                }
                continue;
            }
            self.idle_reads = 0;
            self.publish(items, &shutdown).await;
        }
        self.drain().await;
    }

    /// Writes, at most once per [`ADVANCE_STARTS_EVERY`], where the unfinished rows of each partition begin, so
    /// that a relay that takes one over reads it from there rather than from its first row. Not for a partition
    /// to be read afresh: an operator changed its rows, and its start may have moved back.
    async fn advance_starts(&mut self) {
        if self.starts_advanced_at.elapsed() < ADVANCE_STARTS_EVERY {
            return;
        }
        self.starts_advanced_at = Instant::now();
        let starts: Vec<PartitionStart> = self
            .partitions
            .values()
            .filter(|state| !state.reset)
            .filter_map(|state| state.start_to_advance().map(|start| PartitionStart::new(state.lease, start)))
            .collect();
        if starts.is_empty() {
            return;
        }
        match self.shared.store.advance_starts(self.shared.relay, &starts).await {
            Ok(()) => {
                for start in &starts {
                    if let Some(state) = self.partitions.get_mut(&start.lease.partition) {
                        state.advanced_to(start.start_seq);
                    }
                }
            }
            // Only an older start: a new owner reads a little more. Tried again at the next interval.
            Err(error) => tracing::debug!(error = %Error::from_store(error), "cannot write the partitions' starts"),
        }
    }

    /// Sleeps up to `wait`, or until woken (a notification, a changed membership, a settle done), or shutdown.
    async fn wait(&mut self, wait: Duration, wake: &Notify, shutdown: &CancellationToken) {
        tokio::select! {
            () = shutdown.cancelled() => {}
            () = wake.notified() => self.idle_reads = 0,
            _ = self.ownership.changed() => {}
            Some(done) = self.settles.join_next(), if !self.settles.is_empty() => self.settled(done),
            () = tokio::time::sleep(wait) => {}
        }
    }

    /// One read over every readable partition; `None` when there is none.
    async fn read(&mut self) -> Result<Option<Read>, Error> {
        let aggregate_order = self.shared.config.ordering == Ordering::Aggregate;
        let unloaded: Vec<u16> =
            self.partitions.iter().filter(|(_, s)| s.readable() && !s.loaded).map(|(p, _)| *p).collect();
        if !unloaded.is_empty() {
            let blocked = if aggregate_order {
                self.shared.store.blocked_aggregates(&unloaded).await.map_err(Error::from_store)?
            } else {
                Vec::new()
            };
            for partition in unloaded {
                if let Some(state) = self.partitions.get_mut(&partition) {
                    state.load_blocked(&blocked);
                }
            }
        }
        if self.paused {
            return Ok(None);
        }
        // The read counts as in flight for its partitions (none is handed over while its rows are on their way),
        // and a partition being handed over is not read.
        let mut reading: BTreeSet<u16> = BTreeSet::new();
        for (partition, state) in &self.partitions {
            if state.readable() && self.handover.begin_read(*partition) {
                reading.insert(*partition);
            }
        }
        let readable = reading.len();
        if readable == 0 {
            return Ok(None);
        }
        // The batch is shared by the partitions whose last read came back full (a backlog); the others get a
        // small range each, which grows to a full share as soon as it comes back full. No larger than one publisher
        // call may carry ([`CallSize`](super::call_size::CallSize)): a batch is settled once all of it is
        // published, and a batch of many capped calls would hold its published events unsettled for long.
        let cap = u32::try_from(self.shared.call_size.cap()).unwrap_or(u32::MAX);
        let batch = self.shared.config.batch_size.min(cap).max(1);
        let busy = self.partitions.iter().filter(|(p, s)| reading.contains(p) && s.busy()).count();
        let busy_share = (batch / u32::try_from(busy.max(1)).unwrap_or(u32::MAX)).max(1);
        let idle_share = (batch / u32::try_from(readable).unwrap_or(u32::MAX)).clamp(1, IDLE_RANGE);
        let now = Instant::now();
        let (mut ranges, mut purposes) = (Vec::new(), Vec::new());
        for (partition, state) in self.partitions.iter_mut().filter(|(p, _)| reading.contains(p)) {
            let (in_flight, digests) = (&self.in_flight_aggregates, &self.digests);
            let share = if state.busy() { busy_share } else { idle_share };
            for (range, purpose) in state.ranges(share, now) {
                if let Purpose::Replay(aggregate) = &purpose {
                    // Read it again only once its events in flight are settled.
                    if in_flight.contains_key(&aggregate_digest(digests, *partition, aggregate)) {
                        state.park(aggregate.clone(), range.after + 1, Some(now + BUSY_DELAY * 10));
                        continue;
                    }
                }
                purposes.push((*partition, purpose, range.limit));
                ranges.push(range);
            }
        }
        let span = crate::telemetry::read_span(ranges.len());
        let request = ReadRequest::new(ranges);
        let read = tracing::Instrument::instrument(self.shared.store.read(&request), span).await;
        let read = match read {
            Ok(read) => read,
            Err(error) => {
                for partition in &reading {
                    self.handover.remove(*partition, 1);
                }
                return Err(Error::from_store(error));
            }
        };
        Ok(Some((read, purposes, reading, now)))
    }

    /// Turns what a read returned into the next batch, and updates every partition's cursors and held-back
    /// aggregates.
    fn accept(&mut self, (read, purposes, reading, sent): Read) -> Vec<Item> {
        self.paused = read.paused;
        if read.paused {
            // A paused read returns no rows, which says nothing about its ranges: a recheck that found nothing
            // would close a range whose late commit it did not look for, and a replay would end before its
            // aggregate was read. Nothing is answered; the same ranges are read once publishing resumes.
            for partition in reading {
                self.handover.remove(partition, 1);
            }
            return Vec::new();
        }
        let now = Instant::now();
        let aggregate_order = self.shared.config.ordering == Ordering::Aggregate;
        let read_count = read.rows.len();
        let mut by_range: Vec<Vec<outbox_core::store::ReadRow>> = vec![Vec::new(); purposes.len()];
        for row in read.rows {
            if let Some(rows) = by_range.get_mut(row.range) {
                rows.push(row);
            }
        }
        // Rechecks first (a late commit holds its aggregate back before any later event of it is taken), then
        // replays (one that completes in this read lets the same read's new rows of its aggregate in).
        let mut order: Vec<usize> = (0..purposes.len()).collect();
        order.sort_by_key(|&i| match purposes[i].1 {
            Purpose::Recheck => 0,
            Purpose::Replay(_) => 1,
            Purpose::Next => 2,
        });
        // The database measured each row's time since its commit when the read started.
        let since_sent = sent.elapsed();
        let mut items = Vec::with_capacity(read_count);
        for index in order {
            let (partition, purpose, limit) = &purposes[index];
            let rows = std::mem::take(&mut by_range[index]);
            let Some(state) = self.partitions.get_mut(partition) else { continue };
            let count = rows.len();
            let last_seq = rows.last().map(|row| row.event.seq);
            let taken = items.len();
            for row in rows {
                let id = row.event.id;
                if self.in_flight.get(&id) == Some(&state.lease.epoch) {
                    continue;
                }
                let aggregate = row.event.aggregate_key();
                if *purpose == Purpose::Recheck {
                    let seen =
                        state.held_back(&aggregate, row.event.seq) || state.replay_pending(&aggregate, row.event.seq);
                    if !seen {
                        // Not seen before: it committed after the read that passed its `seq`. Its aggregate waits
                        // for it and is read again from it at once.
                        tracing::debug!(event_id = %id, "a late commit; its aggregate is read again from it");
                        state.park(aggregate, row.event.seq, Some(now));
                    }
                    continue;
                }
                if state.held_back(&aggregate, row.event.seq) {
                    continue;
                }
                let replay = matches!(purpose, Purpose::Replay(_));
                if aggregate_order && !replay && state.replay_pending(&aggregate, row.event.seq) {
                    // Its aggregate is being read again from an earlier event: the replay reads this one in order.
                    continue;
                }
                if !row.wait.is_zero() {
                    // A head in backoff: it and the rest of its aggregate wait for it.
                    state.park(aggregate, row.event.seq, Some(now + row.wait));
                    continue;
                }
                let since_commit = row.since_commit + since_sent;
                let item = Item::new(*partition, state.lease.epoch, row.event, aggregate, since_commit);
                items.push(item.at(row.version).in_generation(state.lease.generation));
            }
            // The read's guard becomes the batch's events in flight (released by its settle).
            self.handover.add(*partition, items.len() - taken);
            state.answered(purpose, count, *limit, last_seq, read.snapshot.as_ref().map(|s| (s, sent)), now);
        }
        // By index: an item is large to move.
        items.sort_by_cached_key(|item| item.seq);
        for partition in reading {
            self.handover.remove(partition, 1);
        }
        items
    }

    /// Waits until a heartbeat sent within half a lease got through, then keeps the items of partitions still owned
    /// at the epoch they were read with: a relay that was stopped past its lease publishes nothing its successor
    /// owns. `None` on shutdown.
    async fn still_owned(&mut self, mut items: Vec<Item>, shutdown: &CancellationToken) -> Option<Vec<Item>> {
        let within = self.shared.config.lease / 2;
        while !self.handover.fresh(within) {
            let beaten = self.handover.beaten.notified();
            self.handover.kick.notify_one();
            tokio::select! {
                () = shutdown.cancelled() => {
                    self.drop_items(&items);
                    return None;
                }
                () = beaten => {}
                () = tokio::time::sleep(self.shared.config.heartbeat_interval()) => {}
            }
        }
        self.sync_ownership();
        let partitions = &self.partitions;
        let lost: Vec<Item> = items
            .extract_if(.., |item| partitions.get(&item.partition).is_none_or(|s| s.lease.epoch != item.epoch))
            .collect();
        if !lost.is_empty() {
            tracing::warn!(
                events = lost.len(),
                "partitions taken over while reading; their events are not published here"
            );
            self.drop_items(&lost);
        }
        Some(items)
    }

    /// Items that will not be published: no longer in flight.
    fn drop_items(&self, items: &[Item]) {
        for item in items {
            self.handover.remove(item.partition, 1);
        }
    }

    /// Records the batch, publishes it, and hands its settle to a task.
    async fn publish(&mut self, items: Vec<Item>, shutdown: &CancellationToken) {
        let Some(mut items) = self.still_owned(items, shutdown).await else { return };
        if items.is_empty() {
            return;
        }
        let shared = Arc::clone(&self.shared);
        let batch_id = Uuid::now_v7();
        let ids: Vec<Uuid> = items.iter().map(|item| item.id).collect();
        let read_at: Vec<(Uuid, i64)> = items.iter().map(|item| (item.id, item.epoch)).collect();
        let span = crate::telemetry::read_span(0);
        let batch_span = crate::telemetry::record_batch(&span, items.iter().map(Item::event_type), items.len());
        let read_under: Vec<PartitionLease> = items
            .iter()
            .map(|item| (item.partition, PartitionLease::new(item.partition, item.epoch, item.generation)))
            .collect::<BTreeMap<_, _>>()
            .into_values()
            .collect();
        let leases: Vec<(u16, i64)> = read_under.iter().map(|lease| (lease.partition, lease.epoch)).collect();
        let recorded = match shared.store.start_batch(shared.relay, batch_id, &read_under, &ids).await {
            Ok(true) => true,
            Ok(false) => {
                // Taken over since the ownership check (the new owner publishes these events), or an operator
                // changed rows of its partitions since the read (a cancel): read them again.
                tracing::info!(events = items.len(), "partitions taken over or changed since the read; not published");
                false
            }
            Err(error) => {
                tracing::warn!(error = %Error::from_store(error), "cannot record the batch; reading its partitions again");
                // Its record may have been written all the same.
                self.handover.abandon(batch_id);
                false
            }
        };
        if !recorded {
            for item in &items {
                self.handover.remove(item.partition, 1);
                if let Some(state) = self.partitions.get_mut(&item.partition) {
                    state.reset = true;
                }
            }
            self.handover.kick.notify_one();
            return;
        }
        let mut partitions: BTreeMap<u16, (usize, i64, i64)> = BTreeMap::new();
        let mut aggregates: Vec<u64> = Vec::with_capacity(items.len());
        for item in &items {
            self.in_flight.insert(item.id, item.epoch);
            let (count, floor, _) = partitions.entry(item.partition).or_insert((0, item.seq, item.epoch));
            *count += 1;
            *floor = (*floor).min(item.seq);
            aggregates.push(aggregate_digest(&self.digests, item.partition, &item.aggregate));
        }
        for (partition, (count, floor, _)) in &partitions {
            if let Some(state) = self.partitions.get_mut(partition) {
                state.batch_started(*count, *floor);
            }
        }
        aggregates.sort_unstable();
        aggregates.dedup();
        for digest in &aggregates {
            *self.in_flight_aggregates.entry(*digest).or_default() += 1;
        }
        self.summary.lock().unwrap_or_else(std::sync::PoisonError::into_inner).batches += 1;
        let published = tracing::Instrument::instrument(batch::publish(&shared, &mut items), batch_span.clone()).await;
        let now = Instant::now();
        for (partition, aggregate, seq, outcome) in published.held_back {
            if let Some(state) = self.partitions.get_mut(&partition) {
                let until = match outcome {
                    SettleOutcome::Retry { delay, .. } => Some(now + delay),
                    SettleOutcome::Failed { .. } | SettleOutcome::Published => None,
                };
                state.park(aggregate, seq, until);
            }
        }
        let settle = SettleBatch::new(shared.relay, batch_id, leases, published.settlements)
            .delete_published(shared.config.deletes_published());
        while self.settles.len() >= SETTLES_IN_FLIGHT {
            if let Some(done) = self.settles.join_next().await {
                self.settled(done);
            }
        }
        self.settles.spawn(tracing::Instrument::instrument(
            async move {
                // In a task of its own, as the publisher is: a panic is a settle that failed (the partitions are
                // read afresh), not a task whose partitions would stay counted in flight and never be read again.
                // Aborted with this task when the shutdown timeout abandons the lane.
                let settling = AbortOnDropHandle::new(tokio::spawn(tracing::Instrument::in_current_span(
                    async move { settle::settle(&shared, &settle).await },
                )));
                let report = settling.await.unwrap_or_else(|error| {
                    tracing::error!(error = %error, "the batch's settle failed unexpectedly; its partitions are read again");
                    None
                });
                Settled { batch: batch_id, report, partitions, ids: read_at, aggregates }
            },
            batch_span,
        ));
    }

    fn settled(&mut self, done: Result<Settled, tokio::task::JoinError>) {
        let Ok(done) = done else {
            // A settle task ends only by returning (its settle runs in a task of its own) or by the runtime shutting
            // down; should one end otherwise, its partitions are read again.
            for state in self.partitions.values_mut() {
                state.reset = true;
            }
            return;
        };
        for (id, epoch) in &done.ids {
            // Unless it was read again since, at a later epoch.
            if self.in_flight.get(id) == Some(epoch) {
                self.in_flight.remove(id);
            }
        }
        for digest in done.aggregates {
            if let Some(count) = self.in_flight_aggregates.get_mut(&digest) {
                *count -= 1;
                if *count == 0 {
                    self.in_flight_aggregates.remove(&digest);
                }
            }
        }
        for (partition, (count, floor, epoch)) in &done.partitions {
            self.handover.remove(*partition, *count);
            // A partition lost and taken back since is a new state: the batch was not counted in it.
            if let Some(state) = self.partitions.get_mut(partition).filter(|state| state.lease.epoch == *epoch) {
                state.batch_settled(*count, *floor);
                if done.report.is_none() {
                    state.reset = true;
                }
            }
        }
        match done.report {
            Some(report) => self.summary.lock().unwrap_or_else(std::sync::PoisonError::into_inner).add(report),
            None => self.handover.abandon(done.batch),
        }
        self.restart_reset();
    }

    /// Shutdown: waits for the settles in flight (the relay bounds the whole shutdown by its timeout).
    async fn drain(&mut self) {
        while let Some(done) = self.settles.join_next().await {
            self.settled(done);
        }
    }
}
