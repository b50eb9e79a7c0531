//! Operator actions on SQLite: retry failed events, cancel pending or failed ones.

use sqlx::{Row, SqlitePool};
use uuid::Uuid;

use super::clock::{self, now};
use crate::store::RetryTarget;
use crate::Result;

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
const BUMP_GENERATION: &str = "UPDATE outbox_partitions SET generation = generation + 1";

fn id_list(ids: &[Uuid]) -> String {
    let ids: Vec<String> = ids.iter().map(|id| id.hyphenated().to_string()).collect();
    serde_json::to_string(&ids).unwrap_or_else(|_| String::from("[]"))
}

pub(super) async fn retry(pool: &SqlitePool, target: &RetryTarget) -> Result<Vec<Uuid>> {
    let rows = match target {
        RetryTarget::Ids(ids) => sqlx::query(RETRY_IDS).bind(id_list(ids)).fetch_all(pool).await?,
        RetryTarget::AllFailed { event_type } => {
            sqlx::query(RETRY_ALL_FAILED).bind(event_type.as_deref()).fetch_all(pool).await?
        }
    };
    bump(pool, rows.len()).await?;
    rows.iter().map(|row| clock::uuid(row.try_get("id")?)).collect()
}

async fn bump(pool: &SqlitePool, changed: usize) -> Result<()> {
    if changed > 0 {
        sqlx::query(BUMP_GENERATION).execute(pool).await?;
    }
    Ok(())
}

pub(super) async fn cancel(pool: &SqlitePool, ids: &[Uuid]) -> Result<Vec<Uuid>> {
    let rows = sqlx::query(CANCEL).bind(id_list(ids)).fetch_all(pool).await?;
    bump(pool, rows.len()).await?;
    rows.iter().map(|row| clock::uuid(row.try_get("id")?)).collect()
}
