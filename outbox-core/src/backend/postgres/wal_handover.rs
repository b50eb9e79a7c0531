//! The statements of the WAL source's hand-over to the table's retry path: which aggregates it holds, and the
//! events of the message mode (no table row) written to the table when they leave the stream.

use sqlx::Row;

use super::read::{read_columns, ReadColumns};
use crate::error::Result;
use crate::store::{short_error, AggregateKey, HandedOverRead, HandedOverRow, PgStore, SettleOutcome, StoredEvent};

/// The aggregates the WAL relay handed to the table's retry path: those it recorded (migration 14), and those with
/// a pending event that failed an attempt or a failed event (a failed row always has an attempt), through
/// `outbox_events_attempted_idx`: a relay of the previous version recorded none. Such an event not numbered yet
/// (attempted by the table source before the switch, or by a relay that stopped before handing it over) is
/// numbered 0: it goes first, in `seq` order. The first time a relay of this version runs this on a table whose
/// WAL source an earlier version ran (`wal_hand_over_numbered`, migration 16), every pending or failed event of
/// those aggregates is numbered 0 too: an earlier version left them without a number, and the retry path
/// publishes numbered events only.
const HANDED_OVER: &str = "\
WITH first AS (
UPDATE outbox_control SET wal_hand_over_numbered = true WHERE id AND NOT wal_hand_over_numbered RETURNING id
),
held AS (
SELECT partition, aggregate_type, aggregate_id FROM outbox_wal_handed_over
UNION
SELECT partition, aggregate_type, aggregate_id FROM outbox_events
 WHERE attempts > 0 AND status IN ('pending', 'failed')
),
attempted AS (
UPDATE outbox_events SET handed_over = 0
 WHERE attempts > 0 AND status IN ('pending', 'failed') AND handed_over IS NULL
),
upgraded AS (
UPDATE outbox_events e SET handed_over = 0
  FROM held h
 WHERE EXISTS (SELECT 1 FROM first)
   AND e.partition = h.partition AND e.aggregate_type = h.aggregate_type AND e.aggregate_id = h.aggregate_id
   AND e.status IN ('pending', 'failed') AND e.handed_over IS NULL
)
SELECT partition, aggregate_type, aggregate_id FROM held";

/// Records aggregates handed over (`$1`-`$3`: partitions, aggregate types, aggregate ids; one already recorded is
/// left as it is) and forgets aggregates released to the stream (`$4`, `$5`: aggregate types and ids), in one
/// statement. An aggregate is never in both lists.
const UPDATE_HANDED_OVER: &str = "\
WITH recorded AS (
INSERT INTO outbox_wal_handed_over (partition, aggregate_type, aggregate_id)
SELECT * FROM UNNEST($1::int2[], $2::text[], $3::text[])
    ON CONFLICT (aggregate_type, aggregate_id) DO NOTHING
)
DELETE FROM outbox_wal_handed_over h
 USING UNNEST($4::text[], $5::text[]) AS f(aggregate_type, aggregate_id)
 WHERE h.aggregate_type = f.aggregate_type AND h.aggregate_id = f.aggregate_id";

/// The number of a message-mode event written to the table for the retry path and not numbered yet: it holds its
/// aggregate on the retry path (which reads it first and publishes nothing of the aggregate while it is there)
/// until the stream numbers it. A relay that stopped between the write and the numbering left it so; the stream
/// gives the event again (it was not acknowledged past it), and the relay numbers it then.
const UNNUMBERED: i64 = -1;

/// Numbers events the stream left in the table (`$1`, in the stream's order: handed over, or passed while their
/// aggregate was handed over, rows and message-mode events alike), so that the retry path publishes them in that
/// order ([`HANDED_OVER_EVENTS`]). An event numbered before (the stream replayed it after a restart) keeps its
/// number, one no longer pending or failed is left alone, and an id given twice counts at its first place. The
/// numbers are drawn in the order of `$1`: PostgreSQL computes a volatile function of the output after `ORDER BY`.
const NUMBER_HANDED_OVER: &str = "\
UPDATE outbox_events e SET handed_over = o.number
  FROM (SELECT u.id, nextval('outbox_wal_hand_over_order') AS number
          FROM (SELECT DISTINCT ON (id) id, n FROM UNNEST($1::uuid[]) WITH ORDINALITY AS u(id, n) ORDER BY id, n) u
         ORDER BY u.n) o
 WHERE e.id = o.id AND (e.handed_over IS NULL OR e.handed_over < 0) AND e.status IN ('pending', 'failed')";

/// The events of handed-over aggregates (`$1`-`$3`: partitions, aggregate types, aggregate ids) that the stream
/// numbered, at most `$5` of each, in the stream's order: pending ones and failed ones (which, with `$4`, ordering
/// per aggregate, hold the rest). A row of the aggregate that is not numbered has not been passed by the stream
/// yet (its transaction committed after those handed over): it waits for the stream. Each range is one scan of
/// the aggregate's partition in `outbox_events_partition_seq_idx`, as the table source's replays are.
const HANDED_OVER_EVENTS: &str = concat!(
    "WITH ctl AS (
SELECT COALESCE((SELECT paused FROM outbox_control WHERE id), false) AS paused,
       current_setting('track_commit_timestamp')::bool AS track_commit,
       now() AS read_at
)
SELECT r.n, e.*, ctl.paused, ctl.read_at
  FROM ctl
 CROSS JOIN UNNEST($1::int2[], $2::text[], $3::text[]) WITH ORDINALITY AS r(partition, aggregate_type, aggregate_id, n)
 CROSS JOIN LATERAL (
",
    read_columns!(
        "e.payload::text",
        "e.headers::text",
        "e.sensitive_paths::text",
        ", e.status = 'failed' AS failed, e.handed_over < 0 AS unnumbered, e.handed_over"
    ),
    "        WHERE e.partition = r.partition AND e.aggregate_type = r.aggregate_type AND e.aggregate_id = r.aggregate_id
          AND e.handed_over IS NOT NULL AND e.status IN ('pending', 'failed')
          -- Without ordering, the failed ones behind the first pending one are not needed.
          AND (e.status = 'pending' OR $4 OR NOT EXISTS (
                SELECT 1 FROM outbox_events p
                 WHERE p.partition = r.partition AND p.aggregate_type = r.aggregate_type
                   AND p.aggregate_id = r.aggregate_id AND p.handed_over IS NOT NULL AND p.status = 'pending'))
        ORDER BY e.handed_over, e.seq
        LIMIT $5) e
 ORDER BY r.n, e.handed_over, e.seq"
);

/// Message-mode events leaving the stream, in order (numbered by [`NUMBER_HANDED_OVER`] with the rows; `$14`:
/// [`UNNUMBERED`] for the relay's hand-over, `NULL` for the slot's removal, which leaves them to the table source):
/// pending (`held`: behind a handed-over event of their
/// aggregate; `retry`: after `delay_secs`, an attempt counted; `postponed`: the same without an attempt, the
/// destination could not be reached) or `failed` (an attempt counted). An event already
/// in the table (written before a restart replayed its message) is left as it is. Returns the partition of every
/// event's aggregate, written now or before, as the table places it. `$recorded`: a `WITH` query to run with it.
macro_rules! write_events {
    ($recorded:literal) => {
        concat!(
            "WITH ",
            $recorded,
            "written AS (
INSERT INTO outbox_events
    (id, aggregate_type, aggregate_id, event_type, schema_version, payload, headers, sensitive_paths, created_at,
     status, attempts, next_attempt_at, last_error, handed_over)
SELECT e.id, e.aggregate_type, e.aggregate_id, e.event_type, e.schema_version,
       e.payload::jsonb, e.headers::jsonb, e.sensitive_paths::jsonb, e.created_at,
       CASE e.outcome WHEN 'failed' THEN 'failed' ELSE 'pending' END,
       CASE WHEN e.outcome IN ('held', 'postponed') THEN e.attempts ELSE LEAST(e.attempts, 2147483646) + 1 END,
       now() + make_interval(secs => e.delay_secs), e.error, $14::int8
  FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::text[], $5::int4[], $6::text[], $7::text[], $8::text[],
              $9::timestamptz[], $10::text[], $11::int4[], $12::float8[], $13::text[])
       WITH ORDINALITY
       AS e(id, aggregate_type, aggregate_id, event_type, schema_version, payload, headers, sensitive_paths,
            created_at, outcome, attempts, delay_secs, error, n)
 ORDER BY e.n
    ON CONFLICT (id) DO NOTHING
RETURNING id
)
SELECT outbox_partition_of(u.aggregate_type, u.aggregate_id) AS partition, u.aggregate_type, u.aggregate_id,
       u.id IN (SELECT id FROM written) AS written
  FROM UNNEST($1::uuid[], $2::text[], $3::text[]) AS u(id, aggregate_type, aggregate_id)"
        )
    };
}

/// [`write_events`] for the slot's removal.
const WRITE_EVENTS: &str = write_events!("");

/// [`write_events`] for the relay's hand-over, which records the events' aggregates as handed over in the same
/// statement ([`UPDATE_HANDED_OVER`]'s table): a message-mode event is in the table only because its aggregate left
/// the stream, and a relay that stopped before recording that otherwise would publish the replayed message from the
/// stream and leave its row pending for good (nothing else publishes it; an event that was merely postponed counts
/// no attempt, by which the hand-over is also found).
const WRITE_HANDED_OVER_EVENTS: &str = write_events!(
    "recorded AS (
INSERT INTO outbox_wal_handed_over (partition, aggregate_type, aggregate_id)
SELECT DISTINCT outbox_partition_of(u.aggregate_type, u.aggregate_id), u.aggregate_type, u.aggregate_id
  FROM UNNEST($2::text[], $3::text[]) AS u(aggregate_type, aggregate_id)
 WHERE $14::int8 IS NOT NULL
    ON CONFLICT (aggregate_type, aggregate_id) DO NOTHING
),
"
);

impl PgStore {
    /// Why a message-mode event cannot be written to the table when it leaves the stream, if it cannot: its
    /// aggregate type and id are too long together for the index of handed-over aggregates (`Outbox::via_wal`
    /// refuses such an event at enqueue; one written otherwise, or by an older version, is a permanent failure of
    /// its own, never one that stops the stream).
    #[must_use]
    pub fn wal_event_unwritable(event: &StoredEvent) -> Option<String> {
        crate::via_wal::wal_aggregate_too_long(&event.aggregate_type, &event.aggregate_id)
    }

    /// The aggregates whose events the WAL relay publishes from the table (see `WalRelay`'s hand-over): those it
    /// recorded ([`update_wal_hand_over`](Self::update_wal_hand_over)), and every aggregate with a pending event
    /// that has failed an attempt, or with a failed event. A WAL relay rebuilds its hand-over from them when its
    /// session starts. Writes too: such events not numbered yet are numbered 0, and the first time on a table whose
    /// WAL source an earlier version ran, every pending or failed event of those aggregates (see
    /// [`number_wal_handed_over`](Self::number_wal_handed_over)).
    ///
    /// # Errors
    ///
    /// [`Error::Database`](crate::Error::Database).
    pub async fn wal_handed_over(&self) -> Result<Vec<(u16, AggregateKey)>> {
        let rows = sqlx::query(HANDED_OVER).fetch_all(&self.pool).await?;
        rows.iter().map(placed).collect()
    }

    /// Updates the record of the WAL relay's hand-over to the table's retry path: `handed_over` aggregates (with
    /// their partitions) are recorded, so that a relay that starts later goes on publishing their events from the
    /// table whatever happened to them meanwhile (an operator's retry resets a failed event's attempts), and
    /// `released` ones, whose events the table holds no more, are forgotten. One statement; an aggregate must not
    /// be in both lists.
    ///
    /// # Errors
    ///
    /// [`Error::Database`](crate::Error::Database).
    pub async fn update_wal_hand_over(
        &self,
        handed_over: &[(u16, AggregateKey)],
        released: &[AggregateKey],
    ) -> Result<()> {
        if handed_over.is_empty() && released.is_empty() {
            return Ok(());
        }
        let partitions: Vec<i16> = handed_over.iter().map(|(p, _)| i16::try_from(*p).unwrap_or(i16::MAX)).collect();
        let (types, ids): (Vec<&str>, Vec<&str>) =
            handed_over.iter().map(|(_, (kind, id))| (kind.as_str(), id.as_str())).unzip();
        let (released_types, released_ids): (Vec<&str>, Vec<&str>) =
            released.iter().map(|(kind, id)| (kind.as_str(), id.as_str())).unzip();
        sqlx::query(UPDATE_HANDED_OVER)
            .bind(partitions)
            .bind(types)
            .bind(ids)
            .bind(released_types)
            .bind(released_ids)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Numbers events that the WAL stream left in the table for its retry path (handed over, or passed while their
    /// aggregate was handed over: rows, and message-mode events once [written](Self::write_wal_events)), in the
    /// order of `ids` (the stream's), so that the retry path publishes them in that order
    /// ([`wal_handed_over_events`](Self::wal_handed_over_events)): called before the stream is acknowledged past
    /// them. An event numbered before keeps its number, one no longer pending or failed is left alone, and an id
    /// given twice counts at its first place. One statement, none for no ids.
    ///
    /// # Errors
    ///
    /// [`Error::Database`](crate::Error::Database).
    pub async fn number_wal_handed_over(&self, ids: &[uuid::Uuid]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        sqlx::query(NUMBER_HANDED_OVER).bind(ids).execute(&self.pool).await?;
        Ok(())
    }

    /// The events of handed-over `aggregates` (with their partitions) that the WAL stream numbered, at most
    /// `per_aggregate` of each, every aggregate's in the stream's order: pending ones and failed ones. With
    /// `failed_hold` (ordering per aggregate) a failed one holds what follows it, and what follows is read too;
    /// without, failed ones are read only for an aggregate with no pending one (they keep it on the table's path,
    /// where an operator's retry is seen). One statement.
    ///
    /// # Errors
    ///
    /// [`Error::Database`](crate::Error::Database).
    pub async fn wal_handed_over_events(
        &self,
        aggregates: &[(AggregateKey, u16)],
        per_aggregate: u32,
        failed_hold: bool,
    ) -> Result<HandedOverRead> {
        let partitions: Vec<i16> =
            aggregates.iter().map(|(_, partition)| i16::try_from(*partition).unwrap_or(i16::MAX)).collect();
        let (types, ids): (Vec<&str>, Vec<&str>) =
            aggregates.iter().map(|((kind, id), _)| (kind.as_str(), id.as_str())).unzip();
        let rows = sqlx::query(HANDED_OVER_EVENTS)
            .bind(partitions)
            .bind(types)
            .bind(ids)
            .bind(failed_hold)
            .bind(i32::try_from(per_aggregate).unwrap_or(i32::MAX))
            .fetch_all(&self.pool)
            .await?;
        let mut read = HandedOverRead::default();
        for (row, read_row) in rows.iter().zip(ReadColumns::read_rows(&rows)?) {
            read.paused |= row.try_get::<bool, _>("paused")?;
            read.rows.push(HandedOverRow {
                row: read_row,
                failed: row.try_get("failed")?,
                unnumbered: row.try_get("unnumbered")?,
            });
        }
        Ok(read)
    }

    /// Writes events of the message mode (`WalOutbox`) to the table as they leave the stream, in order, in one
    /// statement: `None` pending as they are (behind a handed-over event of their aggregate), a retry pending
    /// after its delay, a failure `failed`; each failure counts an attempt and keeps its error. A published
    /// outcome writes nothing. Events already in the table are left alone. Returns the partition of each event's
    /// aggregate, written now or before (the database places it). Each is written as not numbered yet: it holds
    /// its aggregate on the retry path ([`wal_handed_over_events`](Self::wal_handed_over_events)) until
    /// [`number_wal_handed_over`](Self::number_wal_handed_over) numbers it, also when the relay stops in between.
    /// The same statement records the events' aggregates as handed over
    /// ([`update_wal_hand_over`](Self::update_wal_hand_over)), so a relay that stops before it recorded them itself
    /// still finds them when it starts again.
    ///
    /// Corrupted headers are written as `{}`; sensitive paths that cannot be read as `["*"]`, which masks every
    /// value wherever the outbox prints the payload.
    ///
    /// # Errors
    ///
    /// [`Error::Database`](crate::Error::Database).
    pub async fn write_wal_events(
        &self,
        events: &[(StoredEvent, Option<SettleOutcome>)],
    ) -> Result<Vec<(u16, AggregateKey)>> {
        Ok(write_wal_events(&self.pool, events, Some(UNNUMBERED)).await?.0)
    }
}

/// [`PgStore::write_wal_events`] on any connection, with how many events it wrote: the slot's removal writes the
/// messages it still holds in its own transaction.
pub(super) async fn write_wal_events<'c, X>(
    executor: X,
    events: &[(StoredEvent, Option<SettleOutcome>)],
    handed_over: Option<i64>,
) -> Result<(Vec<(u16, AggregateKey)>, u64)>
where
    X: sqlx::Executor<'c, Database = sqlx::Postgres>,
{
    let events: Vec<&(StoredEvent, Option<SettleOutcome>)> =
        events.iter().filter(|(_, outcome)| !matches!(outcome, Some(SettleOutcome::Published))).collect();
    if events.is_empty() {
        return Ok((Vec::new(), 0));
    }
    let n = events.len();
    let (mut ids, mut types, mut aggregate_ids, mut event_types) =
        (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    let (mut versions, mut payloads, mut headers, mut sensitive) =
        (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    let (mut created, mut outcomes, mut attempts, mut delays, mut errors) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for (event, outcome) in events {
        ids.push(event.id);
        types.push(event.aggregate_type.as_str());
        aggregate_ids.push(event.aggregate_id.as_str());
        event_types.push(event.event_type.as_str());
        versions.push(i32::try_from(event.version).unwrap_or(i32::MAX));
        payloads.push(event.payload.as_str());
        headers.push(event.headers.valid().map_or_else(|| "{}".to_owned(), super::super::json_text));
        sensitive.push(event.sensitive_paths.valid().map_or_else(|| r#"["*"]"#.to_owned(), super::super::json_text));
        created.push(event.created_at);
        attempts.push(i32::try_from(event.attempts).unwrap_or(i32::MAX));
        let (name, delay, error) = match outcome {
            None | Some(SettleOutcome::Published) => ("held", 0.0, None),
            Some(SettleOutcome::Retry { error, delay, counted }) => {
                (crate::store::retry_name(*counted), delay.as_secs_f64(), Some(short_error(error)))
            }
            Some(SettleOutcome::Failed { error }) => ("failed", 0.0, Some(short_error(error))),
        };
        outcomes.push(name);
        delays.push(delay);
        errors.push(error);
    }
    let sql = if handed_over.is_some() { WRITE_HANDED_OVER_EVENTS } else { WRITE_EVENTS };
    let rows = sqlx::query(sql)
        .persistent(false)
        .bind(ids)
        .bind(types)
        .bind(aggregate_ids)
        .bind(event_types)
        .bind(versions)
        .bind(payloads)
        .bind(headers)
        .bind(sensitive)
        .bind(created)
        .bind(outcomes)
        .bind(attempts)
        .bind(delays)
        .bind(errors)
        .bind(handed_over)
        .fetch_all(executor)
        .await?;
    let mut written = 0;
    for row in &rows {
        written += u64::from(row.try_get::<bool, _>("written")?);
    }
    Ok((rows.iter().map(placed).collect::<Result<_>>()?, written))
}

/// A row's partition and aggregate.
fn placed(row: &sqlx::postgres::PgRow) -> Result<(u16, AggregateKey)> {
    let partition = row.try_get::<i16, _>("partition")?.unsigned_abs();
    Ok((partition, (row.try_get("aggregate_type")?, row.try_get("aggregate_id")?)))
}
