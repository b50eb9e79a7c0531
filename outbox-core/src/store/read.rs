//! Reading a partition's pending rows: a plain `SELECT`, no row written.

use std::time::Duration;

use super::stored::StoredEvent;

/// How the relay keeps the events of one aggregate in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ordering {
    /// Events of one aggregate (`aggregate_type`, `aggregate_id`) are published in insertion order, one after the
    /// other: every aggregate lives in one partition, and the partition's owner publishes an aggregate's next
    /// event only after the previous one was acknowledged. An event that is retrying or `failed` holds back the
    /// later events of its aggregate, and only those.
    #[default]
    Aggregate,
    /// No ordering: every due event is published as soon as it is read. Maximum throughput.
    None,
}

/// The aggregate an event belongs to: `(aggregate_type, aggregate_id)`.
pub type AggregateKey = (String, String);

/// One range of one partition to read, in `seq` order.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReadRange {
    /// The partition.
    pub partition: u16,
    /// Only rows with a greater `seq`.
    pub after: i64,
    /// Only rows with a `seq` up to this one (`None`: no upper bound).
    pub through: Option<i64>,
    /// Only rows of this aggregate (to read again the events held back behind a retrying head).
    pub aggregate: Option<AggregateKey>,
    /// The most rows to return for this range.
    pub limit: u32,
    /// Return only each row's key (id, `seq`, aggregate, partition, attempts; the payload, headers and sensitive
    /// paths come back empty): to check which rows exist without reading them.
    pub keys_only: bool,
    /// Only rows written by transactions that started at or after this one (a transaction id, as in
    /// [`Snapshot::xmin`]): the rows that may have committed after an earlier read.
    pub written_since: Option<u64>,
}

impl ReadRange {
    /// Up to `limit` pending rows of `partition` after `after`.
    #[must_use]
    pub fn new(partition: u16, after: i64, limit: u32) -> Self {
        Self { partition, after, through: None, aggregate: None, limit, keys_only: false, written_since: None }
    }

    /// Only rows up to `through`.
    #[must_use]
    pub fn through(mut self, through: i64) -> Self {
        self.through = Some(through);
        self
    }

    /// Only rows of `aggregate`.
    #[must_use]
    pub fn aggregate(mut self, aggregate: AggregateKey) -> Self {
        self.aggregate = Some(aggregate);
        self
    }

    /// Only the rows' keys.
    #[must_use]
    pub fn keys_only(mut self) -> Self {
        self.keys_only = true;
        self
    }

    /// Only rows written by transactions that started at or after `xid`.
    #[must_use]
    pub fn written_since(mut self, xid: u64) -> Self {
        self.written_since = Some(xid);
        self
    }
}

/// Which transactions were still running when a read took its snapshot (PostgreSQL's `pg_current_snapshot()`):
/// rows they commit later may have a `seq` below what the read returned, so the relay reads such a range once
/// more after each of them has finished.
///
/// Only transactions that may have written events count: those of sessions that held no lock on the outbox
/// table when the read looked (`pg_locks`, after the snapshot) have taken no `seq` (an insert locks the table
/// before it takes one, and keeps the lock to its end), and whatever they write later comes after every row read.
/// So the relays' own transactions (which record and settle batches, and insert no row) and the cluster's other
/// transactions are left out of [`running`](Self::running): a read taken while nothing but relays was writing to
/// the outbox is complete at once, or at the next read when a relay's transaction ended while it ran. (A prepared
/// transaction has no session to tell: it is counted.)
///
/// PostgreSQL's snapshot lists the running transactions below its `xmax` only, and its `xmax` is the newest
/// finished transaction's id plus one: a writer whose id is newer than every finished one runs unlisted. The
/// PostgreSQL store finds those in `pg_locks`, and counts as running too the ids past `xmax` that had finished
/// by the time it looked there (they ran at the snapshot, or started after it; a relay's among them too, as
/// nothing tells them apart any more).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Snapshot {
    /// The oldest transaction still running (every older one has finished).
    pub xmin: u64,
    /// Every transaction from this id on had not finished when the snapshot was taken (the newest finished one's
    /// id plus one).
    pub xmax: u64,
    /// The transactions not finished at the snapshot that may have written events (those of sessions that hold a
    /// lock on the outbox table, other than the relays', and prepared ones; those at or past
    /// [`xmax`](Self::xmax) included), ascending.
    pub running: Vec<u64>,
    /// The sessions writing to the outbox table without a transaction id, by their transaction's virtual id
    /// (`pg_locks.virtualtransaction`, ascending): writers that may have taken a `seq` before their transaction id
    /// (an insert by plain SQL, between its `seq` and its first row). Their rows can commit below the read's rows
    /// without being waited for by id, so the relay waits for each of them to get its id (or to end).
    pub unseen_writers: Vec<String>,
}

impl Snapshot {
    /// A snapshot with these bounds, every transaction between them finished.
    #[must_use]
    pub fn new(xmin: u64, xmax: u64) -> Self {
        Self { xmin, xmax, running: Vec::new(), unseen_writers: Vec::new() }
    }

    /// The same snapshot with these transactions still running.
    #[must_use]
    pub fn running(mut self, mut running: Vec<u64>) -> Self {
        running.sort_unstable();
        running.dedup();
        self.running = running;
        self
    }

    /// The same snapshot, taken while these writers (by virtual transaction id) were at work without a
    /// transaction id.
    #[must_use]
    pub fn unseen_writers(mut self, mut unseen: Vec<String>) -> Self {
        unseen.sort_unstable();
        unseen.dedup();
        self.unseen_writers = unseen;
        self
    }

    /// Whether transaction `xid`, one of the [`running`](Self::running) transactions of an earlier snapshot, had
    /// finished when this one was taken.
    #[must_use]
    pub fn finished(&self, xid: u64) -> bool {
        xid < self.xmin || (xid < self.xmax && self.running.binary_search(&xid).is_err())
    }
}

/// One row of a read.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ReadRow {
    /// The index of the [`ReadRange`] it answers.
    pub range: usize,
    /// The row's partition.
    pub partition: u16,
    /// How long until it is due (`next_attempt_at`); zero when it is. A row that is not due is a head in
    /// backoff.
    pub wait: Duration,
    /// How long before the read the event's transaction committed, by the database's clock: from its commit
    /// timestamp on PostgreSQL with `track_commit_timestamp = on` (for an event not retried yet), otherwise from
    /// `created_at` (the start of the transaction that enqueued it).
    pub since_commit: Duration,
    /// The event.
    pub event: StoredEvent,
    /// Where the version of the row that the read returned lives, on backends that can settle it from there
    /// (PostgreSQL); pass it on with [`Settlement::at`](super::Settlement::at).
    pub version: Option<RowVersion>,
}

/// Where a row version that a read returned is stored (PostgreSQL's `ctid`): a settle that has it finds the row
/// there instead of through the primary key, and still checks that the row there is the event it names, still
/// pending. Opaque: only the backend that read it makes use of it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RowVersion(pub(crate) String);

/// The location as the backend writes it (`(page,item)` on PostgreSQL).
impl std::fmt::Display for RowVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The result of a [`Store::read`](super::Store::read).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct ReadBatch {
    /// The rows, by range, each range in `seq` order.
    pub rows: Vec<ReadRow>,
    /// The read's snapshot, on backends where rows can commit out of `seq` order (PostgreSQL).
    pub snapshot: Option<Snapshot>,
    /// Whether publishing is paused (then `rows` is empty).
    pub paused: bool,
}

/// The oldest unfinished event of an aggregate whose head has failed: the aggregate is blocked until an operator
/// retries or cancels it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BlockedAggregate {
    /// The partition.
    pub partition: u16,
    /// The aggregate.
    pub aggregate: AggregateKey,
    /// The `seq` of its oldest failed event.
    pub seq: i64,
}
