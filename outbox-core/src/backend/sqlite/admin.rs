//! Operator actions on SQLite: retry failed events, cancel pending or failed ones.

use sqlx::{Row, SqliteConnection, SqlitePool};
use uuid::Uuid;

use super::clock::{self, now};
use super::inspect::{bind_filter, FILTER};
use crate::error::Result;
use crate::store::{CancelTarget, EventFilter, RetryTarget};

const RETRY_IDS: &str = concat!(
    "UPDATE outbox_events SET status = 'pending', attempts = 0, next_attempt_at = ",
    now!(),
    " WHERE id IN (SELECT value FROM json_each(?1)) AND status = 'failed' RETURNING id"
);

const RETRY_ALL_FAILED: &str = concat!(
    "UPDATE outbox_events SET status = 'pending', attempts = 0, next_attempt_at = ",
    now!(),
    " WHERE status = 'failed' AND (?1 IS NULL OR event_type = ?1) RETURNING id"
);

/// Events in a batch being published are left alone.
const CANCEL: &str = "\
UPDATE outbox_events SET status = 'cancelled'
 WHERE id IN (SELECT value FROM json_each(?1)) AND status IN ('pending', 'failed')
   AND id NOT IN (SELECT j.value FROM outbox_batches b, json_each(b.events) j)
RETURNING id";

/// The owner of partition 0 reads it afresh after an operator changed rows (a retried or cancelled failed event
/// unblocks its aggregate).
pub(super) const BUMP_GENERATION: &str = "UPDATE outbox_partitions SET generation = generation + 1";

fn id_list(ids: &[Uuid]) -> String {
    let ids: Vec<String> = ids.iter().map(|id| id.hyphenated().to_string()).collect();
    serde_json::to_string(&ids).unwrap_or_else(|_| String::from("[]"))
}

/// `SET` for the events of a filter in one of `statuses` (and `unless` does not exclude them): the rows
/// [`list`](super::inspect::list) returns for it, oldest first, at most the limit of them (one statement: SQLite
/// has one writer at a time).
fn matching(set: &str, statuses: &str, unless: &str) -> String {
    format!(
        "UPDATE outbox_events SET {set}
          WHERE id IN (SELECT id FROM outbox_events
                        WHERE status IN ({statuses}) AND {FILTER}{unless}
                        ORDER BY seq LIMIT ?6)
            AND status IN ({statuses}){unless}
         RETURNING id"
    )
}

const RETRY_SET: &str = concat!("status = 'pending', attempts = 0, next_attempt_at = ", now!());
const CANCEL_SET: &str = "status = 'cancelled'";
/// Events in a batch being published are left alone.
const NOT_IN_A_BATCH: &str = "\n   AND id NOT IN (SELECT j.value FROM outbox_batches b, json_each(b.events) j)";

/// The change and the generation's bump commit together: a change whose bump failed would leave a relay blocked
/// behind a failed head that is pending again, never told to read it afresh.
pub(super) async fn retry(pool: &SqlitePool, target: &RetryTarget) -> Result<Vec<Uuid>> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let rows = match target {
        RetryTarget::Ids(ids) => sqlx::query(RETRY_IDS).bind(id_list(ids)).fetch_all(&mut *tx).await?,
        RetryTarget::AllFailed { event_type } => {
            sqlx::query(RETRY_ALL_FAILED).bind(event_type.as_deref()).fetch_all(&mut *tx).await?
        }
        RetryTarget::Matching(filter) => update_matching(&mut tx, &matching(RETRY_SET, "'failed'", ""), filter).await?,
    };
    bump(&mut tx, rows.len()).await?;
    tx.commit().await?;
    rows.iter().map(|row| clock::uuid(row.try_get("id")?)).collect()
}

async fn bump(conn: &mut SqliteConnection, changed: usize) -> Result<()> {
    if changed > 0 {
        sqlx::query(BUMP_GENERATION).execute(conn).await?;
    }
    Ok(())
}

/// As [`retry`], in one transaction with the bump.
pub(super) async fn cancel(pool: &SqlitePool, target: &CancelTarget) -> Result<Vec<Uuid>> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let rows = match target {
        CancelTarget::Ids(ids) => sqlx::query(CANCEL).bind(id_list(ids)).fetch_all(&mut *tx).await?,
        CancelTarget::Matching(filter) => {
            update_matching(&mut tx, &matching(CANCEL_SET, "'pending', 'failed'", NOT_IN_A_BATCH), filter).await?
        }
    };
    bump(&mut tx, rows.len()).await?;
    tx.commit().await?;
    rows.iter().map(|row| clock::uuid(row.try_get("id")?)).collect()
}

async fn update_matching(
    conn: &mut SqliteConnection,
    sql: &str,
    filter: &EventFilter,
) -> Result<Vec<sqlx::sqlite::SqliteRow>> {
    Ok(bind_filter(sqlx::query(sql), filter).fetch_all(conn).await?)
}
