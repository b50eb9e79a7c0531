//! What the owner of a partition knows about it: how far it has read, which aggregates are held back, and which
//! ranges it must read once more because a transaction that was running may still commit rows into them.
//!
//! Reading never writes. The owner reads each partition by `seq` after a cursor, so a read costs what it returns,
//! and keeps in memory what the table would otherwise have to say with a write per event:
//!
//! - **Held-back aggregates.** When an aggregate's oldest unfinished event is retrying (pending, not due yet) or
//!   `failed`, its later events are dropped from the batches as they are read, and only the aggregate's first
//!   held-back `seq` is remembered. When the retry is due, the owner reads that aggregate again from there up to the
//!   cursor (a *replay*, one range filtered to the aggregate), so skipping costs nothing per poll.
//! - **Late commits.** `seq` is taken at insert, not at commit, so a transaction that is still running when a read
//!   takes its snapshot may later commit rows below the cursor. Each read's range stays *open* until every
//!   transaction that was running then and may write events has finished (the relays' own transactions, which
//!   never insert a row, are left out by the read: see [`Snapshot::running`]). While ranges are open, every read
//!   also *rechecks* the `seq` range read since the last complete one: the keys of its rows written since the oldest
//!   transaction waited for (no payloads); when nothing was read since, there is nothing to recheck. A
//!   row found there that the owner has not seen committed late: its aggregate is held back from it and read again
//!   at once, so it is published before any later event of its aggregate, in commit order. A read taken while
//!   nothing but relays wrote to the outbox is complete at once and costs no recheck (or one, when a relay's
//!   transaction ended while the read ran).
//!
//! A partition taken over (or reset after an operator changed its rows) starts from the beginning: its first reads
//! find the retrying heads in order and rebuild the held-back aggregates, and the failed ones come from
//! [`Store::blocked_aggregates`](outbox_core::store::Store::blocked_aggregates).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use outbox_core::store::{AggregateKey, BlockedAggregate, PartitionLease, ReadRange, Snapshot};
use tokio::time::Instant;

/// How long a read's range stays open at least when a writer had no transaction id in its snapshot
/// ([`Snapshot::unseen_writers`]): an insert by plain SQL takes its `seq` before its transaction id (microseconds
/// before, unless a `BEFORE` trigger or a lock wait holds it there; the library's own enqueue takes the id first),
/// so such a writer may commit a row below the read's rows that no transaction id of the snapshot announces. After
/// the grace, the range waits until none of those writers is still without an id in a later read's snapshot, then
/// for the transactions that got their id since the read and still run then: the writers' are among them, however
/// long they run. Only reads taken at such a moment pay for it.
pub(crate) const LATE_COMMIT_GRACE: Duration = Duration::from_millis(100);

/// An aggregate held back until its head is due again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Park {
    /// The `seq` of its oldest held-back event.
    first_seq: i64,
    /// When its head is due again.
    until: Instant,
}

/// A range read but not yet known to be complete.
#[derive(Debug, Clone)]
struct OpenRange {
    through: i64,
    /// The transactions it waits for (running at the read, and not a relay's), ascending.
    waiting: Vec<u64>,
    /// Rows written by transactions from this one on may be late commits (a recheck reads only those).
    since: u64,
    /// Open at least until then ([`LATE_COMMIT_GRACE`]), when a writer had no transaction id in the snapshot.
    grace_until: Option<Instant>,
    /// Those writers, by virtual transaction id, while a later snapshot still shows one of them without an id.
    unseen: Vec<String>,
    /// The read's snapshot's `xmax`: a writer without a transaction id then gets one from here on.
    xmax: u64,
}

/// A read's snapshot, and when the read was sent: the snapshot was taken no earlier.
type Taken<'a> = (&'a Snapshot, Instant);

/// The most open ranges a partition keeps; a later one is merged into the newest.
const MAX_OPEN_RANGES: usize = 64;

impl OpenRange {
    /// Takes in `later`, read after it at `snapshot`: complete only when both would be. The transactions that
    /// snapshot shows finished are waited for no more (finished stays finished), so the merged range waits for
    /// what still runs, not for every transaction met since.
    fn absorb(&mut self, later: Self, snapshot: &Snapshot) {
        self.through = self.through.max(later.through);
        self.waiting.retain(|xid| !snapshot.finished(*xid));
        self.waiting.extend(later.waiting.into_iter().filter(|xid| !snapshot.finished(*xid)));
        self.waiting.sort_unstable();
        self.waiting.dedup();
        self.since = self.since.min(later.since);
        self.grace_until = self.grace_until.max(later.grace_until);
        self.unseen.extend(later.unseen);
        self.unseen.sort_unstable();
        self.unseen.dedup();
        self.xmax = self.xmax.min(later.xmax);
    }

    /// Whether it is complete by snapshot `latest` at `now`.
    ///
    /// A range read while writers had no transaction id yet stays open past its grace while a later snapshot
    /// still shows one of them without an id (it may still commit a row below the read's), then also waits for
    /// the transactions that got their id since the read and still run: the writers' are among them, and their
    /// transactions may run for much longer than the grace.
    fn complete(&mut self, latest: Option<Taken<'_>>, now: Instant) -> bool {
        if let Some(until) = self.grace_until {
            let Some((snapshot, _)) = latest.filter(|(_, taken)| now >= until && *taken >= until) else {
                return false;
            };
            self.unseen.retain(|writer| snapshot.unseen_writers.binary_search(writer).is_ok());
            if !self.unseen.is_empty() {
                return false;
            }
            self.waiting.extend(snapshot.running.iter().copied().filter(|xid| *xid >= self.xmax));
            self.waiting.sort_unstable();
            self.waiting.dedup();
            self.grace_until = None;
        }
        self.waiting.is_empty() || latest.is_some_and(|(s, _)| self.waiting.iter().all(|x| s.finished(*x)))
    }
}

/// The most keys one recheck returns per partition.
const RECHECK_LIMIT: u32 = 20_000;

/// What a range of a read was for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// New rows after the cursor.
    Next,
    /// The keys of the rows of the open ranges written since the oldest transaction they wait for: late commits are
    /// among them.
    Recheck,
    /// The held-back events of one aggregate, from its first held-back `seq`.
    Replay(AggregateKey),
}

/// The owner's state of one partition.
#[derive(Debug)]
pub(crate) struct PartitionState {
    pub(crate) lease: PartitionLease,
    /// Every row up to here was read and no running transaction can still commit one below it.
    safe: i64,
    /// The highest `seq` read after `safe`.
    cursor: i64,
    open: VecDeque<OpenRange>,
    /// Aggregates whose head is retrying (or committed late): held back until it is due.
    parked: HashMap<AggregateKey, Park>,
    /// Aggregates behind a failed head, by its `seq`: held back from there until an operator acts (the partition is
    /// then read afresh). An event of the aggregate below it, committed late or retrying, is still published: the
    /// replays stop short of the failed head.
    failed: HashMap<AggregateKey, i64>,
    /// Aggregates being read again, and after which `seq`.
    replays: HashMap<AggregateKey, i64>,
    /// Events of this partition in batches not settled yet.
    pub(crate) in_flight: usize,
    /// The lowest `seq` of this partition in each batch not settled yet (a multiset).
    in_flight_floors: BTreeMap<i64, usize>,
    /// The start last written for it ([`Store::advance_starts`](outbox_core::store::Store::advance_starts)).
    advanced: i64,
    /// The membership asked to hand it over: no more reads; released once `in_flight` is 0.
    pub(crate) releasing: bool,
    /// Read it afresh once nothing is in flight (an operator changed its rows, or a settle failed).
    pub(crate) reset: bool,
    /// Whether the failed heads were loaded ([`Store::blocked_aggregates`]).
    pub(crate) loaded: bool,
    /// Whether the last read of `Next` returned a full range.
    busy: bool,
    /// The snapshot of its last read, and when that read was sent.
    seen: Option<(Snapshot, Instant)>,
    /// Whether the last read's recheck came back full: keys past its limit were not read, so that read closes no
    /// range.
    recheck_cut: bool,
    /// A recheck pass cut at its limit: the last key it read (the next read's recheck goes on from there), and the
    /// snapshot of the read that began the pass, with when that read was sent. Once the pass reaches the cursor,
    /// ranges close by that snapshot: a transaction that finished later may have committed a row into the part
    /// the pass had already read.
    recheck_page: Option<(i64, Snapshot, Instant)>,
    /// The snapshot a pass that ended with this read's recheck began with, for the same read's range of new rows.
    pass_began: Option<(Snapshot, Instant)>,
}

impl PartitionState {
    /// A partition read from its start: every row below [`PartitionLease::start_seq`] is finished.
    pub(crate) fn new(lease: PartitionLease) -> Self {
        let before_start = lease.start_seq.saturating_sub(1).max(0);
        Self {
            lease,
            safe: before_start,
            cursor: before_start,
            open: VecDeque::new(),
            parked: HashMap::new(),
            failed: HashMap::new(),
            replays: HashMap::new(),
            in_flight: 0,
            in_flight_floors: BTreeMap::new(),
            advanced: lease.start_seq,
            releasing: false,
            reset: false,
            loaded: false,
            busy: false,
            seen: None,
            recheck_cut: false,
            recheck_page: None,
            pass_began: None,
        }
    }

    /// Starts again from the partition's start, as a new owner does.
    pub(crate) fn restart(&mut self) {
        *self = Self::new(self.lease);
    }

    /// Notes a batch with `count` events of this partition, the lowest at `floor`.
    pub(crate) fn batch_started(&mut self, count: usize, floor: i64) {
        self.in_flight += count;
        *self.in_flight_floors.entry(floor).or_default() += 1;
    }

    /// Notes that a batch noted by [`batch_started`](Self::batch_started) is settled (or abandoned).
    pub(crate) fn batch_settled(&mut self, count: usize, floor: i64) {
        self.in_flight = self.in_flight.saturating_sub(count);
        if let Some(n) = self.in_flight_floors.get_mut(&floor) {
            *n -= 1;
            if *n == 0 {
                self.in_flight_floors.remove(&floor);
            }
        }
    }

    /// Where its unfinished rows begin, as far as this owner knows: every row below was read (and no running
    /// transaction can commit one there any more) and is published, cancelled or failed; the rows from here on
    /// include the batches in flight, the held-back aggregates (retrying or behind a failed head) and the
    /// aggregates being read again.
    pub(crate) fn start(&self) -> i64 {
        let mut start = self.safe + 1;
        if let Some((floor, _)) = self.in_flight_floors.first_key_value() {
            start = start.min(*floor);
        }
        for first_seq in self.parked.values().map(|park| park.first_seq).chain(self.failed.values().copied()) {
            start = start.min(first_seq);
        }
        for after in self.replays.values() {
            start = start.min(after + 1);
        }
        start
    }

    /// The start to write for it, if it moved since the last one written.
    pub(crate) fn start_to_advance(&self) -> Option<i64> {
        let start = self.start();
        (start > self.advanced).then_some(start)
    }

    /// Notes that `start` was written.
    pub(crate) fn advanced_to(&mut self, start: i64) {
        self.advanced = self.advanced.max(start);
    }

    /// Whether the partition is read now.
    pub(crate) fn readable(&self) -> bool {
        !(self.releasing || (self.reset && self.in_flight > 0))
    }

    pub(crate) fn load_blocked(&mut self, blocked: &[BlockedAggregate]) {
        let partition = self.lease.partition;
        for aggregate in blocked.iter().filter(|b| b.partition == partition) {
            self.park(aggregate.aggregate.clone(), aggregate.seq, None);
        }
        self.loaded = true;
    }

    /// Holds back `aggregate` from `seq` on, until `until` (with `None`, `seq` failed: until an operator acts).
    pub(crate) fn park(&mut self, aggregate: AggregateKey, seq: i64, until: Option<Instant>) {
        let Some(until) = until else {
            let head = *self.failed.entry(aggregate.clone()).and_modify(|head| *head = (*head).min(seq)).or_insert(seq);
            // What the failed head holds for good needs no retry; what lies below it still does.
            if self.parked.get(&aggregate).is_some_and(|park| park.first_seq >= head) {
                self.parked.remove(&aggregate);
            }
            if self.replays.get(&aggregate).is_some_and(|after| after + 1 >= head) {
                self.replays.remove(&aggregate);
            }
            return;
        };
        if self.failed.get(&aggregate).is_some_and(|head| seq >= *head) {
            return;
        }
        // A replay still reading it is folded in: its rows not read yet lie from its position on, below `seq`
        // when the event held back came from a read of new rows (without ordering, those do not wait for replays).
        let first_seq = self.replays.remove(&aggregate).map_or(seq, |after| seq.min(after + 1));
        let park = self.parked.entry(aggregate).or_insert(Park { first_seq, until });
        park.first_seq = park.first_seq.min(first_seq);
        park.until = park.until.max(until);
    }

    /// Whether an event of `aggregate` at `seq` is held back: it comes after the aggregate's retrying or failed
    /// event (an earlier one, committed late, goes first).
    pub(crate) fn held_back(&self, aggregate: &AggregateKey, seq: i64) -> bool {
        self.parked.get(aggregate).is_some_and(|park| seq >= park.first_seq)
            || self.failed.get(aggregate).is_some_and(|head| seq >= *head)
    }

    /// Whether `aggregate` is being read again and its replay has not reached `seq` yet: the event waits for the
    /// replay, which reads it in order (an event below the replay's position, committed late, goes at once).
    pub(crate) fn replay_pending(&self, aggregate: &AggregateKey, seq: i64) -> bool {
        self.replays.get(aggregate).is_some_and(|after| seq > *after)
    }

    /// Whether its last read of new rows came back full: it gets a larger share of the next batch.
    pub(crate) fn busy(&self) -> bool {
        self.busy
    }

    /// The ranges of the next read, each with its purpose: due replays, the open ranges to recheck, then new rows.
    /// `limit` is this partition's share of the batch.
    pub(crate) fn ranges(&mut self, limit: u32, now: Instant) -> Vec<(ReadRange, Purpose)> {
        let partition = self.lease.partition;
        let mut ranges = Vec::new();
        let due: Vec<AggregateKey> =
            self.parked.iter().filter(|(_, park)| park.until <= now).map(|(k, _)| k.clone()).collect();
        for aggregate in due {
            if let Some(park) = self.parked.remove(&aggregate) {
                self.replays.insert(aggregate, park.first_seq - 1);
            }
        }
        for (aggregate, after) in &self.replays {
            // Up to the cursor, or short of the aggregate's failed head.
            let through = self.failed.get(aggregate).map_or(self.cursor, |head| self.cursor.min(head - 1));
            let range = ReadRange::new(partition, *after, limit).through(through).aggregate(aggregate.clone());
            ranges.push((range, Purpose::Replay(aggregate.clone())));
        }
        // By the snapshot of its own last read: that read rechecked its open ranges (those with rows to recheck), so
        // a transaction finished by then had its rows read (the lane's newer reads may have left this partition out).
        if !self.recheck_cut {
            let seen = self.seen.take();
            self.close_complete(seen.as_ref().map(|(snapshot, sent)| (snapshot, *sent)), now);
            self.seen = seen;
        }
        // A late commit lies after `safe`, at or below the cursor: when nothing was read since `safe`, there is no
        // row to recheck (a row with a `seq` above the cursor is read by the same read's range of new rows).
        let since = self.open.iter().map(|open| open.since).min().filter(|_| self.safe < self.cursor);
        if let Some(since) = since {
            let from = self.recheck_page.as_ref().map_or(self.safe, |(last, _, _)| *last);
            let recheck =
                ReadRange::new(partition, from, RECHECK_LIMIT).through(self.cursor).keys_only().written_since(since);
            ranges.push((recheck, Purpose::Recheck));
        } else {
            self.recheck_cut = false;
            self.recheck_page = None;
        }
        ranges.push((ReadRange::new(partition, self.cursor, limit), Purpose::Next));
        ranges
    }

    /// Closes the open ranges that are complete, oldest first: every row up to the last of them is known.
    fn close_complete(&mut self, latest: Option<Taken<'_>>, now: Instant) {
        while let Some(open) = self.open.front_mut() {
            if !open.complete(latest, now) {
                break;
            }
            self.safe = self.safe.max(open.through);
            self.open.pop_front();
        }
    }

    /// Notes what one range returned: `count` rows, the last at `last_seq`, out of `limit`, by a read sent at the
    /// instant that comes with its `snapshot`.
    pub(crate) fn answered(
        &mut self,
        purpose: &Purpose,
        count: usize,
        limit: u32,
        last_seq: Option<i64>,
        snapshot: Option<Taken<'_>>,
        now: Instant,
    ) {
        let full = count >= limit as usize;
        match purpose {
            Purpose::Next => {
                self.busy = full;
                if let Some(last) = last_seq {
                    self.cursor = self.cursor.max(last);
                }
                match snapshot {
                    // Rows can commit out of `seq` order: this range stays open until its transactions finished.
                    Some((snapshot, sent)) => {
                        // Ranges close by the snapshot of the read that began the recheck pass this read ended.
                        let close_by = self.pass_began.take().unwrap_or_else(|| (snapshot.clone(), sent));
                        let open = OpenRange {
                            through: self.cursor,
                            waiting: snapshot.running.clone(),
                            since: snapshot.running.first().copied().unwrap_or(snapshot.xmax),
                            grace_until: (!snapshot.unseen_writers.is_empty()).then(|| now + LATE_COMMIT_GRACE),
                            unseen: snapshot.unseen_writers.clone(),
                            xmax: snapshot.xmax,
                        };
                        let crowded = self.open.len() >= MAX_OPEN_RANGES;
                        match self.open.back_mut() {
                            // The same transactions and writers to wait for: one range (a writer that keeps no id
                            // for long does not add a range per read).
                            Some(back) if back.waiting == open.waiting && back.unseen == open.unseen => {
                                back.through = open.through;
                            }
                            // Behind a writer that stays open for long, the ranges of later reads add up: past a
                            // bound, the newest range takes this one in, waiting for what both wait for.
                            Some(back) if crowded => back.absorb(open, snapshot),
                            _ => self.open.push_back(open),
                        }
                        if !self.recheck_cut {
                            self.close_complete(Some((&close_by.0, close_by.1)), now);
                        }
                        self.seen = Some(close_by);
                    }
                    None => self.safe = self.cursor,
                }
            }
            // A full recheck may have left late commits past its limit: the ranges stay open, and the next read's
            // recheck goes on after its last key, until a pass reaches the cursor.
            Purpose::Recheck => {
                let began = match self.recheck_page.take() {
                    Some((_, began, sent)) => Some((began, sent)),
                    None => snapshot.map(|(snapshot, sent)| (snapshot.clone(), sent)),
                };
                self.recheck_cut = full;
                match (full, last_seq, began) {
                    (true, Some(last), Some((began, sent))) => self.recheck_page = Some((last, began, sent)),
                    (false, _, began) => self.pass_began = began,
                    _ => {}
                }
            }
            Purpose::Replay(aggregate) => {
                if full {
                    if let (Some(after), Some(last)) = (self.replays.get_mut(aggregate), last_seq) {
                        *after = last;
                    }
                } else {
                    self.replays.remove(aggregate);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use outbox_core::store::{PartitionLease, Snapshot};
    use tokio::time::Instant;

    use super::{PartitionState, Purpose, LATE_COMMIT_GRACE};

    fn key(id: &str) -> (String, String) {
        ("order".to_owned(), id.to_owned())
    }

    /// The partition's read of new rows at `snapshot`: `count` rows, the last at `last`.
    fn read(state: &mut PartitionState, count: usize, last: Option<i64>, snapshot: &Snapshot, now: Instant) {
        state.answered(&Purpose::Next, count, 100, last, Some((snapshot, now)), now);
    }

    fn recheck(ranges: &[(outbox_core::store::ReadRange, Purpose)]) -> Option<&outbox_core::store::ReadRange> {
        ranges.iter().find(|(_, purpose)| *purpose == Purpose::Recheck).map(|(range, _)| range)
    }

    #[test]
    fn open_ranges_are_rechecked_until_the_transactions_they_wait_for_finished() {
        let mut state = PartitionState::new(PartitionLease::new(3, 1, 0));
        let start = Instant::now();
        let ranges = state.ranges(100, start);
        assert_eq!(ranges.len(), 1);
        // Transactions 12 and 19 were running (and may write events): the range waits for both.
        read(&mut state, 2, Some(40), &Snapshot::new(10, 20).running(vec![19, 12]), start);
        let ranges = state.ranges(100, start);
        let range = recheck(&ranges).unwrap();
        // Rows written since transaction 12, the oldest waited for.
        assert_eq!((range.after, range.through, range.written_since), (0, Some(40), Some(12)));
        assert!(range.keys_only);
        // 19 finished, 12 still runs: rechecked again.
        read(&mut state, 0, None, &Snapshot::new(12, 25).running(vec![12]), start);
        assert!(recheck(&state.ranges(100, start)).is_some());
        // 21 started after the first read: the first read's range is complete once 12 finished, but the rows read
        // while 21 ran wait for it in turn.
        read(&mut state, 1, Some(45), &Snapshot::new(21, 25).running(vec![21]), start);
        let range = recheck(&state.ranges(100, start)).cloned().unwrap();
        assert_eq!((range.after, range.through, range.written_since), (40, Some(45), Some(21)));
        read(&mut state, 0, None, &Snapshot::new(25, 25), start);
        let ranges = state.ranges(100, start);
        assert_eq!(ranges.len(), 1, "{ranges:?}");
        assert_eq!((ranges[0].1.clone(), ranges[0].0.after), (Purpose::Next, 45));
    }

    #[test]
    fn an_open_range_with_nothing_read_since_the_last_complete_one_is_not_rechecked() {
        let mut state = PartitionState::new(PartitionLease::new(3, 1, 0));
        let now = Instant::now();
        read(&mut state, 2, Some(40), &Snapshot::new(10, 20), now);
        // Nothing new, while a producer's transaction 21 runs: the range it opens ends where the complete one did.
        read(&mut state, 0, None, &Snapshot::new(21, 22).running(vec![21]), now);
        let ranges = state.ranges(100, now);
        assert_eq!(ranges.len(), 1, "an empty recheck is not sent: {ranges:?}");
        assert_eq!((ranges[0].1.clone(), ranges[0].0.after), (Purpose::Next, 40));
        // Rows read while 21 still runs: a late commit of 21 may lie among them (41 to 55), so they are rechecked.
        read(&mut state, 3, Some(55), &Snapshot::new(21, 23).running(vec![21]), now);
        let range = recheck(&state.ranges(100, now)).cloned().unwrap();
        assert_eq!((range.after, range.through, range.written_since), (40, Some(55), Some(21)));
        read(&mut state, 0, None, &Snapshot::new(23, 23), now);
        assert_eq!(state.ranges(100, now).len(), 1);
    }

    #[test]
    fn a_recheck_that_comes_back_full_closes_no_range() {
        let mut state = PartitionState::new(PartitionLease::new(3, 1, 0));
        let now = Instant::now();
        read(&mut state, 2, Some(40), &Snapshot::new(10, 20).running(vec![15]), now);
        let range = recheck(&state.ranges(100, now)).cloned().unwrap();
        // The recheck returned its limit of keys, and 15 has finished by the same read's snapshot.
        state.answered(&Purpose::Recheck, range.limit as usize, range.limit, Some(40), None, now);
        read(&mut state, 0, None, &Snapshot::new(20, 20), now);
        let range = recheck(&state.ranges(100, now)).cloned().unwrap();
        assert_eq!((range.after, range.through), (0, Some(40)), "the cut recheck's range is read again");
        // A whole recheck: the ranges close.
        state.answered(&Purpose::Recheck, 3, range.limit, Some(40), None, now);
        read(&mut state, 0, None, &Snapshot::new(20, 20), now);
        assert_eq!(state.ranges(100, now).len(), 1);
    }

    #[test]
    fn a_read_while_only_relays_wrote_is_complete_at_once() {
        let mut state = PartitionState::new(PartitionLease::new(3, 1, 0));
        let now = Instant::now();
        // The relays' own transactions are not in `running`: nothing to wait for.
        read(&mut state, 2, Some(40), &Snapshot::new(10, 20), now);
        let ranges = state.ranges(100, now);
        assert_eq!(ranges.len(), 1, "{ranges:?}");
        assert_eq!((ranges[0].1.clone(), ranges[0].0.after), (Purpose::Next, 40));
    }

    #[test]
    fn a_writer_without_a_transaction_id_keeps_the_range_open_for_the_grace() {
        let mut state = PartitionState::new(PartitionLease::new(3, 1, 0));
        let start = Instant::now();
        read(&mut state, 2, Some(40), &Snapshot::new(10, 20).unseen_writers(vec!["3/7".into()]), start);
        // Its transaction id comes after the snapshot's.
        assert_eq!(recheck(&state.ranges(100, start)).unwrap().written_since, Some(20));
        // The grace is over, but no read was taken since: still open.
        let after = start + LATE_COMMIT_GRACE;
        assert!(recheck(&state.ranges(100, after)).is_some());
        // A read taken after the grace, with no transaction that got its id since the first read still running.
        read(&mut state, 0, None, &Snapshot::new(20, 20), after);
        assert_eq!(state.ranges(100, after).len(), 1);
    }

    #[test]
    fn a_writer_still_without_a_transaction_id_after_the_grace_keeps_the_range_open_until_it_has_one() {
        let mut state = PartitionState::new(PartitionLease::new(3, 1, 0));
        let start = Instant::now();
        let stalled = || vec!["3/7".to_owned()];
        read(&mut state, 2, Some(40), &Snapshot::new(10, 20).unseen_writers(stalled()), start);
        // Long past the grace, the same writer still has no id (a `BEFORE` trigger holds it): still open.
        let later = start + LATE_COMMIT_GRACE * 20;
        read(&mut state, 0, None, &Snapshot::new(20, 20).unseen_writers(stalled()), later);
        assert!(recheck(&state.ranges(100, later)).is_some());
        // It has its id (21) now and runs: the range waits for it.
        let later = later + LATE_COMMIT_GRACE * 2;
        read(&mut state, 0, None, &Snapshot::new(20, 22).running(vec![21]), later);
        assert!(recheck(&state.ranges(100, later)).is_some());
        let later = later + LATE_COMMIT_GRACE;
        read(&mut state, 0, None, &Snapshot::new(22, 22), later);
        let ranges = state.ranges(100, later);
        assert_eq!(ranges.len(), 1, "{ranges:?}");
        assert_eq!(ranges[0].0.after, 40);
    }

    #[test]
    fn reads_that_wait_for_the_same_writer_without_a_transaction_id_share_one_open_range() {
        let mut state = PartitionState::new(PartitionLease::new(3, 1, 0));
        let start = Instant::now();
        let stalled = || Snapshot::new(20, 20).unseen_writers(vec!["3/7".to_owned()]);
        for (n, last) in [40, 50, 60, 70].into_iter().enumerate() {
            read(&mut state, 1, Some(last), &stalled(), start + LATE_COMMIT_GRACE * (n as u32 * 2));
        }
        assert_eq!(state.open.len(), 1, "{:?}", state.open);
        assert_eq!(recheck(&state.ranges(100, start + LATE_COMMIT_GRACE * 8)).unwrap().through, Some(70));
    }

    #[test]
    fn a_writer_without_a_transaction_id_at_a_read_holds_its_range_until_its_transaction_ends_past_the_grace() {
        let mut state = PartitionState::new(PartitionLease::new(3, 1, 0));
        let start = Instant::now();
        // A plain SQL insert took its `seq` (below 40) but not yet its transaction id when this read was taken.
        read(&mut state, 2, Some(40), &Snapshot::new(10, 20).unseen_writers(vec!["3/7".into()]), start);
        // It has id 21 now, and its transaction keeps running (more work after the insert).
        read(&mut state, 1, Some(50), &Snapshot::new(21, 22).running(vec![21]), start + LATE_COMMIT_GRACE / 2);
        let after = start + LATE_COMMIT_GRACE;
        read(&mut state, 0, None, &Snapshot::new(21, 23).running(vec![21]), after);
        read(&mut state, 0, None, &Snapshot::new(21, 24).running(vec![21]), after + LATE_COMMIT_GRACE);
        // Long past the grace, its row may still commit below 40: the first read's range is still rechecked.
        let range = recheck(&state.ranges(100, after + LATE_COMMIT_GRACE)).cloned().unwrap();
        assert_eq!((range.after, range.through, range.written_since), (0, Some(50), Some(20)));
        // 21 ended: the read that saw it end rechecked its rows, and every range closes.
        read(&mut state, 0, None, &Snapshot::new(24, 24), after + LATE_COMMIT_GRACE * 2);
        let ranges = state.ranges(100, after + LATE_COMMIT_GRACE * 2);
        assert_eq!(ranges.len(), 1, "{ranges:?}");
        assert_eq!(ranges[0].0.after, 50);
    }

    #[test]
    fn a_later_complete_read_waits_behind_an_earlier_open_one() {
        let mut state = PartitionState::new(PartitionLease::new(3, 1, 0));
        let now = Instant::now();
        state.answered(&Purpose::Next, 2, 2, Some(40), Some((&Snapshot::new(10, 20).running(vec![15]), now)), now);
        // Transaction 15 is still running: the rows read after it are not known complete either.
        state.answered(&Purpose::Next, 2, 2, Some(60), Some((&Snapshot::new(15, 22).running(vec![15]), now)), now);
        let range = recheck(&state.ranges(100, now)).cloned().unwrap();
        assert_eq!((range.after, range.through), (0, Some(60)));
        read(&mut state, 0, None, &Snapshot::new(22, 22), now);
        let ranges = state.ranges(100, now);
        assert_eq!(ranges.len(), 1);
        assert_eq!(ranges[0].0.after, 60);
    }

    #[test]
    fn a_range_closes_only_by_the_partitions_own_reads() {
        let mut state = PartitionState::new(PartitionLease::new(3, 1, 0));
        let now = Instant::now();
        read(&mut state, 2, Some(40), &Snapshot::new(10, 20).running(vec![15]), now);
        // Other partitions' reads saw 15 finish, but this partition has not been read (and rechecked) since: its
        // range is still open, and its next read rechecks it.
        assert!(recheck(&state.ranges(100, now)).is_some());
        assert!(recheck(&state.ranges(100, now)).is_some());
    }

    #[test]
    fn a_held_back_aggregate_is_read_again_from_its_head_when_the_retry_is_due() {
        let mut state = PartitionState::new(PartitionLease::new(0, 1, 0));
        let now = Instant::now();
        state.answered(&Purpose::Next, 3, 100, Some(90), None, now);
        state.park(key("7"), 50, Some(now + LATE_COMMIT_GRACE));
        assert!(state.held_back(&key("7"), 60));
        assert!(state.held_back(&key("7"), 50));
        assert!(!state.held_back(&key("7"), 49), "an earlier event is not held back by a later failure");
        assert!(!state.held_back(&key("8"), 61));
        assert!(state.ranges(100, now).iter().all(|(_, purpose)| *purpose == Purpose::Next));
        let ranges = state.ranges(100, now + LATE_COMMIT_GRACE);
        let replay = ranges.iter().find(|(_, purpose)| *purpose == Purpose::Replay(key("7"))).unwrap();
        assert_eq!((replay.0.after, replay.0.through, replay.0.aggregate.clone()), (49, Some(90), Some(key("7"))));
        assert!(state.replay_pending(&key("7"), 60));
        assert!(!state.replay_pending(&key("7"), 40), "an event before the replay's position goes at once");
        state.answered(&Purpose::Replay(key("7")), 2, 100, Some(70), None, now);
        assert!(!state.replay_pending(&key("7"), 60));
    }

    #[test]
    fn an_event_below_a_failed_head_is_read_again_up_to_the_head_which_still_holds_the_rest() {
        let mut state = PartitionState::new(PartitionLease::new(0, 1, 0));
        let now = Instant::now();
        state.answered(&Purpose::Next, 3, 100, Some(90), None, now);
        state.park(key("7"), 60, None);
        // An event at 50 committed late (or retrying): due at once, though a later event of its aggregate failed.
        state.park(key("7"), 50, Some(now));
        assert!(!state.held_back(&key("7"), 49));
        assert!(state.held_back(&key("7"), 50));
        let ranges = state.ranges(100, now);
        let replay = ranges.iter().find(|(_, purpose)| *purpose == Purpose::Replay(key("7"))).unwrap();
        assert_eq!((replay.0.after, replay.0.through), (49, Some(59)), "the replay stops short of the failed head");
        state.answered(&Purpose::Replay(key("7")), 1, 100, Some(50), None, now);
        assert!(!state.held_back(&key("7"), 55));
        assert!(state.held_back(&key("7"), 60) && state.held_back(&key("7"), 70), "the failed head still holds");
        // A retry of an event past the failed head changes nothing: the head holds it for good.
        state.park(key("7"), 70, Some(now));
        let later = now + std::time::Duration::from_secs(3600);
        assert!(state.ranges(100, later).iter().all(|(_, purpose)| *purpose == Purpose::Next));
        assert_eq!(state.start(), 60);
    }

    #[test]
    fn a_recheck_cut_at_its_limit_goes_on_from_its_last_key_and_closes_by_the_snapshot_its_pass_began_with() {
        let mut state = PartitionState::new(PartitionLease::new(3, 1, 0));
        let now = Instant::now();
        let recheck_answer = |state: &mut PartitionState, count: usize, last: Option<i64>, snapshot: &Snapshot| {
            state.answered(&Purpose::Recheck, count, super::RECHECK_LIMIT, last, Some((snapshot, now)), now);
        };
        // Transaction 15 was running at the read of rows up to 40.
        read(&mut state, 2, Some(40), &Snapshot::new(10, 20).running(vec![15]), now);
        assert_eq!(recheck(&state.ranges(100, now)).unwrap().after, 0);
        // The recheck comes back full at key 30 (15 still running).
        let running = Snapshot::new(15, 20).running(vec![15]);
        recheck_answer(&mut state, super::RECHECK_LIMIT as usize, Some(30), &running);
        read(&mut state, 0, None, &running, now);
        assert_eq!(recheck(&state.ranges(100, now)).unwrap().after, 30, "the next page goes on from the last key");
        // The pass reaches the cursor by a read that sees 15 finished; but 15 may have committed a row below 30
        // after the first page was read: the range stays open, and a new pass begins from the start.
        let finished = Snapshot::new(20, 20);
        recheck_answer(&mut state, 0, None, &finished);
        read(&mut state, 0, None, &finished, now);
        assert_eq!(recheck(&state.ranges(100, now)).unwrap().after, 0);
        // A whole pass that begins after 15 finished closes the range.
        recheck_answer(&mut state, 0, None, &finished);
        read(&mut state, 0, None, &finished, now);
        let ranges = state.ranges(100, now);
        assert_eq!(ranges.len(), 1, "{ranges:?}");
        assert_eq!(ranges[0].0.after, 40);
    }

    #[test]
    fn an_aggregate_held_back_while_its_replay_reads_on_is_read_again_from_the_replays_position() {
        let mut state = PartitionState::new(PartitionLease::new(0, 1, 0));
        let now = Instant::now();
        state.answered(&Purpose::Next, 3, 100, Some(400), None, now);
        state.park(key("7"), 100, Some(now));
        assert!(state.ranges(15, now).iter().any(|(_, purpose)| *purpose == Purpose::Replay(key("7"))));
        // The replay came back full at 150: the aggregate's rows after it are not read yet.
        state.answered(&Purpose::Replay(key("7")), 15, 15, Some(150), None, now);
        // Without ordering, a new row of the aggregate (200) was taken in the same read, and its publish failed.
        state.park(key("7"), 200, Some(now + LATE_COMMIT_GRACE));
        assert_eq!(state.start(), 151, "the rows the replay had yet to read are unfinished");
        assert!(state.held_back(&key("7"), 151));
        let ranges = state.ranges(15, now + LATE_COMMIT_GRACE);
        let replay = ranges.iter().find(|(_, purpose)| *purpose == Purpose::Replay(key("7"))).unwrap();
        assert_eq!(replay.0.after, 150, "read again from where the replay was");
    }

    #[test]
    fn the_open_ranges_behind_a_long_writer_stay_bounded_and_close_when_everything_they_wait_for_finished() {
        let mut state = PartitionState::new(PartitionLease::new(3, 1, 0));
        let now = Instant::now();
        // Writer 10 stays open while each read sees another short transaction running.
        for n in 0..1_000_u64 {
            let seq = i64::try_from(n).unwrap() * 2 + 2;
            read(&mut state, 1, Some(seq), &Snapshot::new(10, 20 + n).running(vec![10, 11 + n]), now);
        }
        assert!(state.open.len() <= super::MAX_OPEN_RANGES, "{} open ranges", state.open.len());
        let waiting: usize = state.open.iter().map(|open| open.waiting.len()).sum();
        assert!(waiting <= 3 * super::MAX_OPEN_RANGES, "{waiting} transactions waited for");
        // Every short transaction finished; 10 still runs.
        read(&mut state, 0, None, &Snapshot::new(10, 2_000).running(vec![10]), now);
        assert!(recheck(&state.ranges(100, now)).is_some());
        assert!(state.start() <= 2, "nothing is complete while 10 runs");
        read(&mut state, 0, None, &Snapshot::new(2_000, 2_000), now);
        let ranges = state.ranges(100, now);
        assert_eq!(ranges.len(), 1, "{ranges:?}");
        assert_eq!(state.start(), 2_001);
    }

    #[test]
    fn a_failed_head_holds_its_aggregate_until_the_partition_is_read_afresh() {
        let mut state = PartitionState::new(PartitionLease::new(0, 1, 0));
        state.park(key("1"), 5, None);
        let later = Instant::now() + std::time::Duration::from_secs(3600);
        assert!(state.ranges(100, later).iter().all(|(_, purpose)| *purpose == Purpose::Next));
        state.restart();
        assert!(!state.held_back(&key("1"), 6));
    }
}
