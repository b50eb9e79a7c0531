//! Operator actions: retry failed events, cancel pending or failed ones.

use sqlx::{PgPool, Row};
use uuid::Uuid;

use super::inspect::{bind_filter, FILTER};
use crate::error::Result;
use crate::store::{CancelTarget, RetryTarget};

/// Every change also grows the generation of the partitions it touched, so their owners read them afresh (a
/// retried or cancelled failed event unblocks its aggregate), and moves each partition's start back to the first
/// row changed if it was past it (a retried row is pending again, and every row below the start must be finished).
macro_rules! bump_generations {
    ($change:literal) => {
        concat!(
            "WITH changed AS (\n",
            $change,
            "\nRETURNING id, partition, seq
),
bumped AS (
UPDATE outbox_partitions p SET generation = p.generation + 1, start_seq = LEAST(p.start_seq, c.first)
  FROM (SELECT partition, min(seq) AS first FROM changed GROUP BY partition) c
 WHERE p.partition = c.partition
)
SELECT id FROM changed"
        )
    };
}

const RETRY_IDS: &str = bump_generations!(
    "UPDATE outbox_events SET status = 'pending', attempts = 0, next_attempt_at = now()
 WHERE id = ANY($1) AND status = 'failed'"
);

const RETRY_ALL_FAILED: &str = bump_generations!(
    "UPDATE outbox_events SET status = 'pending', attempts = 0, next_attempt_at = now()
 WHERE attempts > 0 AND status = 'failed' AND ($1::text IS NULL OR event_type = $1)"
);

/// Events in a batch being published are left alone.
const CANCEL: &str = bump_generations!(
    "UPDATE outbox_events e SET status = 'cancelled'
 WHERE e.id = ANY($1) AND e.status IN ('pending', 'failed')
   AND NOT EXISTS (SELECT 1 FROM outbox_batches b WHERE e.id = ANY(b.events))"
);

/// `SET` for the events of a filter in one of `statuses` (and `unless`, on rows `e`, does not exclude them): the
/// rows [`list`](super::inspect::list) returns for it, oldest first, at most the limit of them. They are locked
/// first, waiting for a session that holds one (a row skipped would be a match left unchanged) up to the lock
/// timeout, and checked again once locked, so a row that changed meanwhile is left as it is.
fn matching(set: &str, statuses: &str, unless: &str) -> String {
    format!(
        bump_generations!(
            "UPDATE outbox_events e SET {set}
 WHERE e.id IN (SELECT e.id FROM outbox_events e WHERE e.status IN ({statuses}) AND {FILTER}{unless}
                 ORDER BY e.seq LIMIT $6 FOR UPDATE)
   AND e.status IN ({statuses}){unless}"
        ),
        set = set,
        statuses = statuses,
        FILTER = FILTER,
        unless = unless,
    )
}

const RETRY_SET: &str = "status = 'pending', attempts = 0, next_attempt_at = now()";
const CANCEL_SET: &str = "status = 'cancelled'";
/// Events in a batch being published are left alone.
const NOT_IN_A_BATCH: &str = "\n   AND NOT EXISTS (SELECT 1 FROM outbox_batches b WHERE e.id = ANY(b.events))";

/// How long each lock wait of an operator's change lasts at most before it gives up (SQLSTATE 55P03), changing
/// nothing: a cancel holds every partition meanwhile, which stops the relays' settles. Only when the session sets
/// no `lock_timeout` of its own (the database URL's `options[lock_timeout]`).
const LOCK_TIMEOUT: &str =
    "SELECT set_config('lock_timeout', '5s', true) WHERE current_setting('lock_timeout') IN ('0', '0ms', '0s')";

pub(super) async fn retry(pool: &PgPool, target: &RetryTarget) -> Result<Vec<Uuid>> {
    let mut tx = pool.begin().await?;
    sqlx::query(LOCK_TIMEOUT).execute(&mut *tx).await?;
    let rows = match target {
        RetryTarget::Ids(ids) => sqlx::query(RETRY_IDS).bind(ids).fetch_all(&mut *tx).await?,
        RetryTarget::AllFailed { event_type } => {
            sqlx::query(RETRY_ALL_FAILED).bind(event_type.as_deref()).fetch_all(&mut *tx).await?
        }
        RetryTarget::Matching(filter) => {
            bind_filter(sqlx::query(&matching(RETRY_SET, "'failed'", "")), filter).fetch_all(&mut *tx).await?
        }
    };
    tx.commit().await?;
    rows.iter().map(|row| Ok(row.try_get("id")?)).collect()
}

/// Before a cancel checks which events are in a batch, it locks their partitions (`FOR UPDATE`, which a batch's
/// record waits for under its `FOR KEY SHARE`): a record in progress commits first and its events are then seen
/// in flight and left alone; a record that starts later waits, then finds the generation this cancel grows and is
/// refused, so the relay never publishes an event it read before the cancel. In partition order, as the record
/// locks them, so the two never deadlock.
const LOCK_PARTITIONS_OF: &str = "\
SELECT 1 FROM outbox_partitions
 WHERE partition IN (SELECT partition FROM outbox_events WHERE id = ANY($1))
 ORDER BY partition FOR UPDATE";
const LOCK_ALL_PARTITIONS: &str = "SELECT 1 FROM outbox_partitions ORDER BY partition FOR UPDATE";

pub(super) async fn cancel(pool: &PgPool, target: &CancelTarget) -> Result<Vec<Uuid>> {
    let mut tx = pool.begin().await?;
    sqlx::query(LOCK_TIMEOUT).execute(&mut *tx).await?;
    let rows = match target {
        CancelTarget::Ids(ids) => {
            sqlx::query(LOCK_PARTITIONS_OF).bind(ids).execute(&mut *tx).await?;
            sqlx::query(CANCEL).bind(ids).fetch_all(&mut *tx).await?
        }
        CancelTarget::Matching(filter) => {
            sqlx::query(LOCK_ALL_PARTITIONS).execute(&mut *tx).await?;
            let sql = matching(CANCEL_SET, "'pending', 'failed'", NOT_IN_A_BATCH);
            bind_filter(sqlx::query(&sql), filter).fetch_all(&mut *tx).await?
        }
    };
    tx.commit().await?;
    rows.iter().map(|row| Ok(row.try_get("id")?)).collect()
}
