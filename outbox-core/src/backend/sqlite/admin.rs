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

const CANCEL: &str = "\
UPDATE outbox_events SET status = 'cancelled', lease_owner = NULL, lease_expires_at = NULL
 WHERE id IN (SELECT value FROM json_each(?1)) AND status IN ('pending', 'failed')
RETURNING id";

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
    rows.iter().map(|row| clock::uuid(row.try_get("id")?)).collect()
}

pub(super) async fn cancel(pool: &SqlitePool, ids: &[Uuid]) -> Result<Vec<Uuid>> {
    let rows = sqlx::query(CANCEL).bind(id_list(ids)).fetch_all(pool).await?;
    rows.iter().map(|row| clock::uuid(row.try_get("id")?)).collect()
}
