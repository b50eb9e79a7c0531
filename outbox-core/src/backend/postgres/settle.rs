//! Settling a published batch: every outcome in one statement, fenced by the epochs of its partitions.

use sqlx::{PgPool, Row};

use super::fence::{held_leases, in_held_partition, lease_arrays};
use crate::error::Result;
use crate::store::{retry_name, short_error, SettleBatch, SettleOutcome, SettleReport, Settlement};

/// The `SET` clause of a failed attempt of row `e` with settlement `s`: an attempt counted (not for `postponed`:
/// the destination could not be reached; at most up to the column's largest value, which a row written by hand
/// may hold: past it, the whole settle would fail), the error kept, and either `failed` or a retry after
/// `s.delay_secs`.
macro_rules! failure_set {
    () => {
        "   SET status = CASE s.outcome WHEN 'failed' THEN 'failed' ELSE 'pending' END,
       attempts = CASE s.outcome WHEN 'postponed' THEN e.attempts ELSE LEAST(e.attempts, 2147483646) + 1 END,
       next_attempt_at = CASE WHEN s.outcome IN ('retry', 'postponed') THEN now() + make_interval(secs => s.delay_secs)
                              ELSE e.next_attempt_at END,
       last_error = s.error
"
    };
}
pub(super) use failure_set;

/// Every outcome of a batch: the published rows of `e` written by `$write` (an `UPDATE ... SET` or a `DELETE`),
/// joined with the settlements `s` by `$join` (`FROM` or `USING`), the others by [`failure_set`]; only rows still
/// pending and `$fenced` change. The settlements come from the arrays `$arrays` (ids, outcome names, errors,
/// delays, as [`columns`] makes them). Followed by [`outcome_counts`].
macro_rules! outcomes_sql {
    ($write:expr, $join:literal, $arrays:literal, $fenced:expr) => {
        concat!(
            "s AS (SELECT * FROM UNNEST(",
            $arrays,
            ") AS s(id, outcome, error, delay_secs)),
published AS (
",
            $write,
            "
",
            $join,
            " s
 WHERE s.outcome = 'published' AND e.id = s.id AND e.status = 'pending' AND ",
            $fenced,
            "
RETURNING 'published'::text AS outcome
),
others AS (
UPDATE outbox_events e
",
            $crate::backend::postgres::settle::failure_set!(),
            "  FROM s
 WHERE s.outcome <> 'published' AND e.id = s.id AND e.status = 'pending' AND ",
            $fenced,
            "
RETURNING s.outcome
)"
        )
    };
}
pub(super) use outcomes_sql;

/// The report of [`outcomes_sql`]: how many rows it wrote, per outcome.
macro_rules! outcome_counts {
    () => {
        "SELECT outcome, count(*) AS n FROM (SELECT outcome FROM published UNION ALL SELECT outcome FROM others) done
 GROUP BY outcome"
    };
}
pub(super) use outcome_counts;

/// A batch's outcomes ([`outcomes_sql`]), fenced by its leases (`held_leases!`), and its record deleted. The
/// statement is planned at every call with the arrays' real lengths (unnamed statement): a cached generic plan does
/// not know them and joins the rows with the arrays in a nested loop, far slower for a batch of 1000 than the hash
/// join the real sizes give.
macro_rules! settle_sql {
    ($write:expr, $join:literal) => {
        concat!(
            held_leases!(),
            ",
",
            outcomes_sql!($write, $join, "$5::uuid[], $6::text[], $7::text[], $8::float8[]", in_held_partition!()),
            ",
record AS (DELETE FROM outbox_batches WHERE relay_id = $1 AND batch_id = $4)
",
            outcome_counts!()
        )
    };
}

/// The rows of a batch whose every event was published, written by `$write` (as in [`settle_sql`]) in two steps
/// that both end in `RETURNING e.id`: `located` finds each row where the read found it (`ctid`, `$versions`), one
/// tuple fetch instead of a descent of the primary key, and writes it only if it is still the same event (`$ids`;
/// the slot of a row that vacuum removed may hold another event since), still pending, and `$fenced`. `moved` looks
/// up by primary key the rows not found there: those that moved since the read (an attempt counted for a dead
/// relay's batch, an operator's change) and those settled without a row version (`NULL` in `$versions`). The second
/// step costs nothing when every row was found where it was read. Followed by [`published_count`]. The WAL source runs
/// the same two steps, unfenced, in `outbox_settle_published_at` (migration 12): keep them alike.
///
/// The id is compared with `IS NOT DISTINCT FROM`, not `=` (the same for ids, which are never null): a condition
/// that no index serves and no join can be sorted or hashed on. With `=`, the plan kept by a relay's session whose
/// statement was first planned on an empty table walked the whole primary key in `id` order and compared each row
/// with the batch (2 s for 100 rows beside 100,000), even with sequential scans off; with only the position to join
/// on, the one plan without a sequential scan fetches each row by its position.
macro_rules! located_or_moved {
    ($write:expr, $join:literal, $ids:literal, $versions:literal, $fenced:expr) => {
        concat!(
            "located AS (
",
            $write,
            "
",
            $join,
            " UNNEST(",
            $ids,
            "::uuid[], ",
            $versions,
            "::text[]::tid[]) AS s(id, version)
 WHERE e.ctid = s.version AND e.id IS NOT DISTINCT FROM s.id AND e.status = 'pending' AND ",
            $fenced,
            "
RETURNING e.id
),
moved AS (
",
            $write,
            "
 WHERE e.id = ANY(ARRAY(SELECT id FROM UNNEST(",
            $ids,
            "::uuid[]) AS i(id) EXCEPT SELECT id FROM located))
   AND e.status = 'pending' AND ",
            $fenced,
            "
RETURNING e.id
)"
        )
    };
}

/// The report of [`located_or_moved`]: how many rows it wrote, as `published`.
macro_rules! published_count {
    () => {
        "SELECT 'published'::text AS outcome, (SELECT count(*) FROM located) + (SELECT count(*) FROM moved) AS n"
    };
}

/// A batch whose every event was published, the usual case: its rows written as [`located_or_moved`] says, fenced
/// by the batch's leases, and the batch's record deleted.
macro_rules! all_published_sql {
    ($write:expr, $join:literal) => {
        concat!(
            held_leases!(),
            ",
",
            located_or_moved!($write, $join, "$5", "$6", in_held_partition!()),
            ",
record AS (DELETE FROM outbox_batches WHERE relay_id = $1 AND batch_id = $4)
",
            published_count!()
        )
    };
}

/// Marks a published row, in place: no index covers `status` or `published_at`, so the new row version stays on
/// its page and writes no index entry (see the migration `settle_in_place`).
macro_rules! mark_published {
    () => {
        "UPDATE outbox_events e SET status = 'published', published_at = now()"
    };
}
pub(super) use mark_published;

/// Immediate retention: a published row is deleted.
macro_rules! delete_published {
    () => {
        "DELETE FROM outbox_events e"
    };
}
pub(super) use delete_published;

const MARK_ALL_PUBLISHED: &str = all_published_sql!(mark_published!(), "  FROM");
const DELETE_ALL_PUBLISHED: &str = all_published_sql!(delete_published!(), " USING");
const MARK_PUBLISHED: &str = settle_sql!(mark_published!(), "  FROM");
const DELETE_PUBLISHED: &str = settle_sql!(delete_published!(), " USING");

/// The attempts of a dead relay's batches, counted by the relay that adopted them (no lease: the event may be in any
/// partition), and the adopted batches deleted, in one statement: counted once, whoever dies when. A partition
/// where an event failed gets a new generation, as an operator's change does: a relay that took the partition
/// over before this count, and read its failed heads then, reads it afresh and holds the aggregate back.
const APPLY_ADOPTED: &str = concat!(
    "WITH counted AS (
UPDATE outbox_events e
",
    failure_set!(),
    "  FROM UNNEST($3::uuid[], $4::text[], $5::text[], $6::float8[]) AS s(id, outcome, error, delay_secs)
 WHERE e.id = s.id AND e.status = 'pending' AND s.outcome <> 'published'
RETURNING e.partition, e.status
),
bumped AS (
UPDATE outbox_partitions p SET generation = p.generation + 1
 WHERE p.partition IN (SELECT partition FROM counted WHERE status = 'failed')
),
forgotten AS (DELETE FROM outbox_batches WHERE relay_id = $1 AND crashed AND batch_id = ANY($2))
SELECT count(*) FROM counted"
);

/// The settlements as parallel arrays: ids, outcome names, errors, delays in seconds.
pub(super) struct Columns {
    pub(super) ids: Vec<uuid::Uuid>,
    pub(super) outcomes: Vec<&'static str>,
    pub(super) errors: Vec<Option<String>>,
    pub(super) delays: Vec<f64>,
}

pub(super) fn columns(settlements: &[Settlement]) -> Columns {
    let mut columns = Columns {
        ids: Vec::with_capacity(settlements.len()),
        outcomes: Vec::with_capacity(settlements.len()),
        errors: Vec::with_capacity(settlements.len()),
        delays: Vec::with_capacity(settlements.len()),
    };
    for settlement in settlements {
        let (outcome, error, delay) = match &settlement.outcome {
            SettleOutcome::Published => ("published", None, 0.0),
            SettleOutcome::Retry { error, delay, counted } => {
                (retry_name(*counted), Some(short_error(error)), delay.as_secs_f64())
            }
            SettleOutcome::Failed { error } => ("failed", Some(short_error(error)), 0.0),
        };
        columns.ids.push(settlement.id);
        columns.outcomes.push(outcome);
        columns.errors.push(error);
        columns.delays.push(delay);
    }
    columns
}

/// When every one of `settlements` was published, the usual case: their ids and the row versions the read gave
/// them, as [`located_or_moved`] binds them.
pub(super) fn all_published(settlements: &[Settlement]) -> Option<(Vec<uuid::Uuid>, Vec<Option<&str>>)> {
    if !settlements.iter().all(|s| matches!(s.outcome, SettleOutcome::Published)) {
        return None;
    }
    Some(settlements.iter().map(|s| (s.id, s.version.as_ref().map(|v| v.0.as_str()))).unzip())
}

pub(super) async fn settle(pool: &PgPool, batch: &SettleBatch) -> Result<SettleReport> {
    let (partitions, epochs) = lease_arrays(batch.leases.iter().copied());
    if let Some((ids, versions)) = all_published(&batch.settlements) {
        let sql = if batch.delete_published { DELETE_ALL_PUBLISHED } else { MARK_ALL_PUBLISHED };
        // Prepared once: a nested loop of tuple fetches by `ctid`, whatever the batch's size.
        let rows = sqlx::query(sql)
            .bind(batch.relay)
            .bind(partitions)
            .bind(epochs)
            .bind(batch.batch)
            .bind(ids)
            .bind(versions)
            .fetch_all(pool)
            .await?;
        return report(&rows, batch.settlements.len());
    }
    let columns = columns(&batch.settlements);
    let sql = if batch.delete_published { DELETE_PUBLISHED } else { MARK_PUBLISHED };
    let rows = sqlx::query(sql)
        .persistent(false)
        .bind(batch.relay)
        .bind(partitions)
        .bind(epochs)
        .bind(batch.batch)
        .bind(columns.ids)
        .bind(columns.outcomes)
        .bind(columns.errors)
        .bind(columns.delays)
        .fetch_all(pool)
        .await?;
    report(&rows, batch.settlements.len())
}

/// The report of a settle of `settled` outcomes from its rows (`outcome`, `n`): what was not applied was fenced.
pub(super) fn report(rows: &[sqlx::postgres::PgRow], settled: usize) -> Result<SettleReport> {
    let mut report = SettleReport::default();
    for row in rows {
        let outcome: String = row.try_get("outcome")?;
        let n = row.try_get::<i64, _>("n")?.unsigned_abs();
        match outcome.as_str() {
            "published" => report.published = n,
            "retry" | "postponed" => report.retried += n,
            _ => report.failed = n,
        }
    }
    let applied = report.published + report.retried + report.failed;
    report.fenced = (settled as u64).saturating_sub(applied);
    Ok(report)
}

/// Applies the outcomes of the adopted batches' events and deletes those batches; returns how many events changed.
pub(super) async fn apply_adopted(
    pool: &PgPool,
    relay: uuid::Uuid,
    settlements: &[Settlement],
    batches: &[uuid::Uuid],
) -> Result<u64> {
    let columns = columns(settlements);
    let counted: i64 = sqlx::query_scalar(APPLY_ADOPTED)
        .persistent(false)
        .bind(relay)
        .bind(batches)
        .bind(columns.ids)
        .bind(columns.outcomes)
        .bind(columns.errors)
        .bind(columns.delays)
        .fetch_one(pool)
        .await?;
    Ok(counted.unsigned_abs())
}
