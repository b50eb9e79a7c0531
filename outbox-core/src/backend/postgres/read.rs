//! Reading the pending rows of partitions: one plain `SELECT` (nothing written), one index range per partition.

use std::time::Duration;

use futures_util::TryStreamExt;
use sqlx::postgres::PgRow;
use sqlx::{Column, PgPool, Row};
use time::OffsetDateTime;

use crate::error::Result;
use crate::store::{Checked, ReadBatch, ReadRequest, ReadRow, RowVersion, Snapshot, StoredEvent};

/// The columns of a row of `outbox_events e` of range `r` (and the read's settings in `ctl`): `$payload`,
/// `$headers`, `$sensitive` give the three JSON columns (or empty ones, for a range that reads only keys), and
/// `$more` any further columns (each with its leading comma). Times come as they are stored and the relay works out
/// the waits from them (against `read_at`, the database's `now()` of the read): computing them per row here made a
/// read a tenth dearer.
macro_rules! read_columns {
    ($payload:literal, $headers:literal, $sensitive:literal) => {
        read_columns!($payload, $headers, $sensitive, "")
    };
    ($payload:literal, $headers:literal, $sensitive:literal, $more:literal) => {
        concat!(
            "       SELECT e.id, e.ctid::text AS row_version, e.seq, e.partition, e.event_type, e.aggregate_type, e.aggregate_id, e.schema_version,
              ",
            $payload,
            " AS payload, ",
            $headers,
            " AS headers, ",
            $sensitive,
            " AS sensitive_paths,
              e.created_at, e.attempts, e.next_attempt_at,
              -- The commit's own timestamp while the row is as its transaction wrote it (never failed: an operator's
              -- retry sets `attempts` back to 0 and keeps the last error).
              COALESCE(CASE WHEN e.attempts = 0 AND e.last_error IS NULL AND (SELECT track_commit FROM ctl)
                            THEN pg_xact_commit_timestamp(e.xmin) END,
                       e.created_at) AS committed_at",
            $more,
            "
         FROM outbox_events e
"
        )
    };
}
pub(super) use read_columns;

/// The 32-bit transaction id `$xid` (what `pg_locks`, a row's `xmin` and the replication stream carry) widened to
/// the 64-bit id nearest to `$xmax` (a snapshot's `xmax` as `int8`): within 2^31 of it, as every id a statement
/// meets is.
macro_rules! widened_xid {
    ($xid:literal, $xmax:literal) => {
        concat!($xmax, " + (((", $xid, " - (", $xmax, " & 4294967295)) + 2147483648) & 4294967295) - 2147483648")
    };
}
pub(super) use widened_xid;

/// Each range is one scan of `outbox_events_partition_seq_idx` (`partition, seq`) in index order, from `after`, so a
/// read costs what it returns (plus what an aggregate filter skips inside its range, and, once after a takeover, the
/// rows already published between the partition's `start_seq` and its first pending row), never the backlog. The
/// snapshot's bounds come back in the same round trip, on a row of their own (`n = 0`, after the rows read; see
/// [`Snapshot`]): repeated on every row, they cost a twentieth of a read. The rows are a subquery of the final
/// join, not a `WITH` query: the commit timestamp's function is volatile, and a `WITH` query that calls one is
/// computed into a temporary store first (a fifth of a read's time).
const READ: &str = concat!(
    "WITH snap AS (SELECT pg_current_snapshot() AS s),
-- The transactions of the sessions that write to the outbox now, by pg_locks (read after the snapshot): relays hold
-- a RowExclusiveLock on outbox_batches (every statement that records or settles a batch writes it); writers of
-- events hold one on outbox_events. Each transaction holds an ExclusiveLock on its own id.
locks AS MATERIALIZED (
SELECT pid, locktype, relation, transactionid::text::int8 AS xid, virtualtransaction AS vxid
  FROM pg_locks
 WHERE granted AND pid <> pg_backend_pid()
   AND ((locktype = 'transactionid' AND mode = 'ExclusiveLock')
        OR (locktype = 'relation' AND mode = 'RowExclusiveLock'
            AND relation IN ('outbox_batches'::regclass, 'outbox_events'::regclass)))
),
relays AS (SELECT pid FROM locks WHERE relation = 'outbox_batches'::regclass),
writers AS (
SELECT DISTINCT pid FROM locks
 WHERE relation = 'outbox_events'::regclass AND pid NOT IN (SELECT pid FROM relays)
),
-- The snapshot's xmax, and the first id not yet given out (`age` counts from it), read once pg_locks was read: an
-- id below it that pg_locks does not show had finished by then. (`age` reads it once per transaction: this
-- statement runs as a transaction of its own.)
bounds AS (
SELECT x.xmax, x.xmax + age((x.xmax & 4294967295)::text::xid) AS next
  FROM (SELECT pg_snapshot_xmax(snap.s)::text::int8 AS xmax FROM snap) x,
       (SELECT count(*) FROM locks) locks_read_first
),
-- The ids held, widened from 32 to 64 bits next to xmax.
held AS (
SELECT l.pid, ",
    widened_xid!("l.xid", "b.xmax"),
    " AS xid
  FROM locks l, bounds b
 WHERE l.locktype = 'transactionid'
),
-- The snapshot lists the running transactions below xmax only, and xmax is the newest finished one's id + 1: a
-- writer that got its id after that one runs unlisted, though it may have taken a `seq` below the rows read.
-- Of the listed ones, a transaction of a session that holds no lock on outbox_events when pg_locks is read (a
-- relay; any other transaction of the cluster, open for hours perhaps) has taken no `seq`: an INSERT locks the
-- table before it takes one, and keeps the lock to the end. The `seq` it may take later comes after every row
-- read. Not waited for. (A prepared transaction has no session, so no pid in `held`: it is waited for.)
running AS (
SELECT x::text::int8 AS xid FROM snap, pg_snapshot_xip(snap.s) x
 WHERE x::text::int8 NOT IN (SELECT xid FROM held WHERE pid NOT IN (SELECT pid FROM writers))
UNION
-- Writers at or past xmax, each by its transaction's id (the lowest it holds: its subtransactions' come after).
SELECT min(xid) FROM held WHERE pid IN (SELECT pid FROM writers)
 GROUP BY pid HAVING min(xid) >= (SELECT xmax FROM bounds)
UNION
-- Ids past xmax given out by now but not held: finished since the snapshot (perhaps after writing rows below the
-- rows read, also a writer by plain SQL that had no id at the snapshot), or given out after pg_locks was read.
SELECT i FROM bounds b, generate_series(b.xmax, b.next - 1) i WHERE i NOT IN (SELECT xid FROM held)
),
ctl AS (
SELECT COALESCE((SELECT paused FROM outbox_control WHERE id), false) AS paused,
       pg_snapshot_xmin(snap.s)::text AS xmin,
       (SELECT xmax FROM bounds)::text AS xmax,
       ARRAY(SELECT xid::text FROM running) AS running,
       -- The writers with no transaction id yet, by their transaction's virtual id: each may have taken a `seq`
       -- before its id, unless it is idle in its transaction (a statement that took a `seq` and wrote no row, as an
       -- `INSERT ... ON CONFLICT DO NOTHING` that met a conflict, will never write one with it). A session whose
       -- state this role may not see counts as running a statement.
       ARRAY(SELECT DISTINCT l.vxid FROM locks l
              WHERE l.relation = 'outbox_events'::regclass AND l.pid IN (SELECT pid FROM writers)
                AND NOT EXISTS (SELECT 1 FROM held h WHERE h.pid = l.pid)
                AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a
                                 WHERE a.pid = l.pid AND a.state LIKE 'idle in transaction%')) AS unseen_writers,
       current_setting('track_commit_timestamp')::bool AS track_commit,
       now() AS read_at
  FROM snap
),
r AS (
SELECT * FROM UNNEST($1::int2[], $2::int8[], $3::int8[], $4::text[], $5::text[], $6::int4[], $7::bool[], $8::int8[])
       WITH ORDINALITY AS r(partition, after, through, aggregate_type, aggregate_id, lim, keys_only, since, n)
)
SELECT CASE WHEN found.n = 0 THEN ctl.paused END AS paused, CASE WHEN found.n = 0 THEN ctl.xmin END AS xmin,
       CASE WHEN found.n = 0 THEN ctl.xmax END AS xmax, CASE WHEN found.n = 0 THEN ctl.running END AS running,
       CASE WHEN found.n = 0 THEN ctl.unseen_writers END AS unseen_writers, ctl.read_at, found.*
  FROM ctl CROSS JOIN (
-- New rows: an open range, so the planner walks the index in order and stops at the limit (a bounded range with
-- filters looks small enough to fetch whole and sort, which on a backlog costs the whole partition).
SELECT r.n, e.*
  FROM r
 CROSS JOIN LATERAL (
",
    read_columns!("e.payload::text", "e.headers::text", "e.sensitive_paths::text"),
    "        WHERE e.partition = r.partition AND e.status = 'pending' AND e.seq > r.after
        ORDER BY e.seq
        LIMIT r.lim) e
 WHERE r.through IS NULL AND NOT r.keys_only AND NOT (SELECT paused FROM ctl)
UNION ALL
-- Replays (one aggregate) and rechecks (rows written since a transaction, keys only), each bounded by `through`.
SELECT r.n, e.*
  FROM r
 CROSS JOIN LATERAL (
",
    read_columns!(
        "CASE WHEN r.keys_only THEN '{}' ELSE e.payload::text END",
        "CASE WHEN r.keys_only THEN '{}' ELSE e.headers::text END",
        "CASE WHEN r.keys_only THEN '[]' ELSE e.sensitive_paths::text END"
    ),
    "        WHERE e.partition = r.partition AND e.status = 'pending' AND e.seq > r.after
          AND e.seq <= COALESCE(r.through, 9223372036854775807)
          AND (r.aggregate_type IS NULL OR (e.aggregate_type = r.aggregate_type AND e.aggregate_id = r.aggregate_id))
          -- Written since transaction `since`: its 32-bit id in the row, compared modulo 2^32 as PostgreSQL does.
          AND (r.since IS NULL OR ((e.xmin::text::int8 - r.since) & 4294967295) < 2147483648)
        ORDER BY e.seq
        LIMIT r.lim) e
 WHERE (r.through IS NOT NULL OR r.keys_only) AND NOT (SELECT paused FROM ctl)
UNION ALL
-- The flags' row: one NULL for each column of `read_columns!`.
SELECT 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
) found"
);

/// Runs [`READ`] as a statement of its own: `age()` reads the next transaction id once per transaction, so inside
/// a longer one it would count from an earlier moment than the statement's `pg_locks`, and miss the ids given out
/// between.
pub(super) async fn read(pool: &PgPool, request: &ReadRequest) -> Result<ReadBatch> {
    let n = request.ranges.len();
    let (mut partitions, mut after, mut through) =
        (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    let (mut types, mut ids, mut limits) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    let (mut keys_only, mut since) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for range in &request.ranges {
        partitions.push(i16::try_from(range.partition).unwrap_or(i16::MAX));
        after.push(range.after);
        through.push(range.through);
        types.push(range.aggregate.as_ref().map(|(t, _)| t.as_str()));
        ids.push(range.aggregate.as_ref().map(|(_, i)| i.as_str()));
        limits.push(i32::try_from(range.limit).unwrap_or(i32::MAX));
        keys_only.push(range.keys_only);
        // The low 32 bits: what a row's `xmin` holds.
        since.push(range.written_since.map(|xid| (xid & 0xffff_ffff) as i64));
    }
    // Each row is turned into a `ReadRow` as it arrives and dropped at once: collecting the statement's rows first
    // kept a batch's worth of them alive, and their allocations, until the last was converted.
    let mut rows = sqlx::query(READ)
        .bind(partitions)
        .bind(after)
        .bind(through)
        .bind(types)
        .bind(ids)
        .bind(limits)
        .bind(keys_only)
        .bind(since)
        .fetch(pool);
    let mut batch = ReadBatch::default();
    let mut columns: Option<ReadColumns> = None;
    while let Some(row) = rows.try_next().await? {
        let columns = match &columns {
            Some(columns) => columns,
            None => columns.insert(ReadColumns::of_row(&row)?),
        };
        if let Some(read) = columns.read_row(&row)? {
            batch.rows.push(read);
        } else if row.try_get::<Option<i64>, _>(columns.n)? == Some(0) {
            // The read's flags and snapshot, on the row of range 0, the last one.
            batch.paused = row.try_get("paused")?;
            let xmin: String = row.try_get("xmin")?;
            let xmax: String = row.try_get("xmax")?;
            let running: Vec<String> = row.try_get("running")?;
            // An id that does not parse never finishes: its range is checked again rather than taken as complete.
            let running = running.iter().map(|xid| xid.parse().unwrap_or(u64::MAX)).collect();
            let snapshot = Snapshot::new(xmin.parse().unwrap_or(0), xmax.parse().unwrap_or(u64::MAX))
                .running(running)
                .unseen_writers(row.try_get::<Vec<String>, _>("unseen_writers")?);
            batch.snapshot = Some(snapshot);
        }
    }
    // The plan returns them so; sorted only if it did not (by index: a row is large to move).
    if !batch.rows.is_sorted_by_key(|row| (row.range, row.event.seq)) {
        batch.rows.sort_by_cached_key(|row| (row.range, row.event.seq));
    }
    Ok(batch)
}

/// Where the columns of a read row are in a statement's result, found by name once per statement rather than at
/// every row (a lookup by name hashes it).
pub(super) struct ReadColumns {
    n: usize,
    id: usize,
    row_version: Option<usize>,
    seq: usize,
    partition: usize,
    event_type: usize,
    aggregate_type: usize,
    aggregate_id: usize,
    schema_version: usize,
    payload: usize,
    headers: usize,
    sensitive_paths: usize,
    created_at: usize,
    attempts: usize,
    next_attempt_at: usize,
    committed_at: usize,
    read_at: usize,
}

impl ReadColumns {
    /// The columns of a statement's result, found on one of its rows.
    fn of_row(row: &PgRow) -> Result<Self> {
        let at = |name: &str| -> Result<usize> { Ok(row.try_column(name)?.ordinal()) };
        Ok(Self {
            n: at("n")?,
            id: at("id")?,
            row_version: row.try_column("row_version").ok().map(Column::ordinal),
            seq: at("seq")?,
            partition: at("partition")?,
            event_type: at("event_type")?,
            aggregate_type: at("aggregate_type")?,
            aggregate_id: at("aggregate_id")?,
            schema_version: at("schema_version")?,
            payload: at("payload")?,
            headers: at("headers")?,
            sensitive_paths: at("sensitive_paths")?,
            created_at: at("created_at")?,
            attempts: at("attempts")?,
            next_attempt_at: at("next_attempt_at")?,
            committed_at: at("committed_at")?,
            read_at: at("read_at")?,
        })
    }

    /// The rows read of a statement's result (its row that only carries the flags, when nothing was read, is none).
    pub(super) fn read_rows(rows: &[PgRow]) -> Result<Vec<ReadRow>> {
        let Some(columns) = rows.first().map(Self::of_row).transpose()? else {
            return Ok(Vec::new());
        };
        let mut read = Vec::with_capacity(rows.len());
        for row in rows {
            read.extend(columns.read_row(row)?);
        }
        Ok(read)
    }

    /// The row read, or `None` for a row that only carries the flags (range 0, or none when nothing was read).
    fn read_row(&self, row: &PgRow) -> Result<Option<ReadRow>> {
        // Unchecked: the read statements give every column its type (casts where a column could vary), and each
        // decoder still checks the bytes it decodes; a type check at every value costs the relay in a drain.
        let Some(n) = row.try_get_unchecked::<Option<i64>, _>(self.n)?.filter(|&n| n > 0) else {
            return Ok(None);
        };
        // Parsed where they lie in the row, not copied first.
        let headers: &str = row.try_get_unchecked(self.headers)?;
        let sensitive: &str = row.try_get_unchecked(self.sensitive_paths)?;
        let event = StoredEvent {
            id: row.try_get_unchecked(self.id)?,
            seq: row.try_get_unchecked(self.seq)?,
            event_type: row.try_get_unchecked(self.event_type)?,
            aggregate_type: row.try_get_unchecked(self.aggregate_type)?,
            aggregate_id: row.try_get_unchecked(self.aggregate_id)?,
            version: row.try_get_unchecked::<i32, _>(self.schema_version)?.unsigned_abs(),
            payload: row.try_get_unchecked(self.payload)?,
            headers: Checked::from_json_text(headers),
            sensitive_paths: Checked::from_json_text(sensitive),
            created_at: timestamp(row, self.created_at)?,
            attempts: row.try_get_unchecked::<i32, _>(self.attempts)?.unsigned_abs(),
        };
        // Both by the database's clock; zero when the later one is not later.
        let read_at = timestamp(row, self.read_at)?;
        let between = |from: OffsetDateTime, to: OffsetDateTime| Duration::try_from(to - from).unwrap_or_default();
        Ok(Some(ReadRow {
            range: usize::try_from(n - 1).unwrap_or(usize::MAX),
            partition: row.try_get_unchecked::<i16, _>(self.partition)?.unsigned_abs(),
            wait: between(read_at, timestamp(row, self.next_attempt_at)?),
            since_commit: between(timestamp(row, self.committed_at)?, read_at),
            event,
            version: self.row_version.map(|index| row.try_get_unchecked(index).map(RowVersion)).transpose()?,
        }))
    }
}

/// A `timestamptz` column of a read row, clamped to the years `time` holds (-9999 to 9999). PostgreSQL also
/// stores `'infinity'`, `'-infinity'` and years up to 294276 (a row parked by hand with `next_attempt_at =
/// 'infinity'`), which sqlx's decoder turns into a panic, and a panic in the relay's read stops its lane. Decoded
/// from the binary value, microseconds since 2000-01-01 UTC, as sqlx's own decoder does.
fn timestamp(row: &PgRow, index: usize) -> Result<OffsetDateTime> {
    /// 2000-01-01T00:00:00Z, PostgreSQL's epoch.
    const EPOCH_UNIX: i64 = 946_684_800;
    let micros: i64 = row.try_get_unchecked(index)?;
    let epoch = OffsetDateTime::from_unix_timestamp(EPOCH_UNIX).unwrap_or(OffsetDateTime::UNIX_EPOCH);
    Ok(epoch.checked_add(time::Duration::microseconds(micros)).unwrap_or_else(|| {
        if micros < 0 {
            time::PrimitiveDateTime::MIN.assume_utc()
        } else {
            time::PrimitiveDateTime::MAX.assume_utc()
        }
    }))
}

/// Failed rows through the index of rows that failed an attempt (`outbox_events_attempted_idx`; a failed row
/// always has one), filtered to the partitions: the oldest failed event of each aggregate. Such rows are few; a
/// relay runs this once per partition it takes over.
const BLOCKED: &str = "\
SELECT partition, aggregate_type, aggregate_id, min(seq) AS seq
  FROM outbox_events
 WHERE attempts > 0 AND status = 'failed' AND partition = ANY($1)
 GROUP BY partition, aggregate_type, aggregate_id";

pub(super) async fn blocked_aggregates(
    pool: &PgPool,
    partitions: &[u16],
) -> Result<Vec<crate::store::BlockedAggregate>> {
    let partitions: Vec<i16> = partitions.iter().map(|&p| i16::try_from(p).unwrap_or(i16::MAX)).collect();
    let rows = sqlx::query(BLOCKED).bind(partitions).fetch_all(pool).await?;
    rows.iter()
        .map(|row| {
            Ok(crate::store::BlockedAggregate {
                partition: row.try_get::<i16, _>("partition")?.unsigned_abs(),
                aggregate: (row.try_get("aggregate_type")?, row.try_get("aggregate_id")?),
                seq: row.try_get("seq")?,
            })
        })
        .collect()
}
