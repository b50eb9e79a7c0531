//! Operator actions on SQLite: retry failed events, cancel pending or failed ones.

use sqlx::{Row, SqlitePool};
use uuid::Uuid;

use super::clock::{self, now};
use super::inspect::{bind_filter, FILTER};
use crate::store::{CancelTarget, EventFilter, RetryTarget};
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

/// `SET` and the statuses it applies to, for the events of a filter: the rows [`list`](super::inspect::list)
/// returns for it, oldest first (one statement: SQLite has one writer at a time).
fn matching(set: &str, statuses: &str) -> String {
    format!(
        "UPDATE outbox_events SET {set}
          WHERE id IN (SELECT id FROM outbox_events
                        WHERE status IN ({statuses}) AND {FILTER}
                        ORDER BY seq LIMIT ?6)
            AND status IN ({statuses})
         RETURNING id"
    )
}

const RETRY_SET: &str = concat!("status = 'pending', attempts = 0, next_attempt_at = ", now!());
const CANCEL_SET: &str = "status = 'cancelled', lease_owner = NULL, lease_expires_at = NULL";

pub(super) async fn retry(pool: &SqlitePool, target: &RetryTarget) -> Result<Vec<Uuid>> {
    let rows = match target {
        RetryTarget::Ids(ids) => sqlx::query(RETRY_IDS).bind(id_list(ids)).fetch_all(pool).await?,
        RetryTarget::AllFailed { event_type } => {
            sqlx::query(RETRY_ALL_FAILED).bind(event_type.as_deref()).fetch_all(pool).await?
        }
        RetryTarget::Matching(filter) => update_matching(pool, &matching(RETRY_SET, "'failed'"), filter).await?,
    };
    rows.iter().map(|row| clock::uuid(row.try_get("id")?)).collect()
}

pub(super) async fn cancel(pool: &SqlitePool, target: &CancelTarget) -> Result<Vec<Uuid>> {
    let rows = match target {
        CancelTarget::Ids(ids) => sqlx::query(CANCEL).bind(id_list(ids)).fetch_all(pool).await?,
        CancelTarget::Matching(filter) => {
            update_matching(pool, &matching(CANCEL_SET, "'pending', 'failed'"), filter).await?
        }
    };
    rows.iter().map(|row| clock::uuid(row.try_get("id")?)).collect()
}

async fn update_matching(pool: &SqlitePool, sql: &str, filter: &EventFilter) -> Result<Vec<sqlx::sqlite::SqliteRow>> {
    Ok(bind_filter(sqlx::query(sql), filter).fetch_all(pool).await?)
}
