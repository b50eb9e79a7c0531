//! Operator actions: retry failed events, cancel pending or failed ones.

use sqlx::{PgPool, Row};
use uuid::Uuid;

use super::inspect::{bind_filter, FILTER};
use crate::store::{CancelTarget, EventFilter, RetryTarget};
use crate::Result;

const RETRY_IDS: &str = "\
UPDATE outbox_events SET status = 'pending', attempts = 0, next_attempt_at = now()
 WHERE id = ANY($1) AND status = 'failed'
RETURNING id";

const RETRY_ALL_FAILED: &str = "\
UPDATE outbox_events SET status = 'pending', attempts = 0, next_attempt_at = now()
 WHERE status = 'failed' AND ($1::text IS NULL OR event_type = $1)
RETURNING id";

const CANCEL: &str = "\
UPDATE outbox_events SET status = 'cancelled', lease_owner = NULL, lease_expires_at = NULL
 WHERE id = ANY($1) AND status IN ('pending', 'failed')
RETURNING id";

/// `SET` and the statuses it applies to, for the events of a filter: the rows [`list`](super::inspect::list)
/// returns for it, locked (rows another session holds are skipped, as the relay's claim does), oldest first.
fn matching(set: &str, statuses: &str) -> String {
    format!(
        "UPDATE outbox_events SET {set}
          WHERE id IN (SELECT id FROM outbox_events
                        WHERE status IN ({statuses}) AND {FILTER}
                        ORDER BY seq LIMIT $6 FOR UPDATE SKIP LOCKED)
            AND status IN ({statuses})
         RETURNING id"
    )
}

const RETRY_SET: &str = "status = 'pending', attempts = 0, next_attempt_at = now()";
const CANCEL_SET: &str = "status = 'cancelled', lease_owner = NULL, lease_expires_at = NULL";

pub(super) async fn retry(pool: &PgPool, target: &RetryTarget) -> Result<Vec<Uuid>> {
    let rows = match target {
        RetryTarget::Ids(ids) => sqlx::query(RETRY_IDS).bind(ids).fetch_all(pool).await?,
        RetryTarget::AllFailed { event_type } => {
            sqlx::query(RETRY_ALL_FAILED).bind(event_type.as_deref()).fetch_all(pool).await?
        }
        RetryTarget::Matching(filter) => update_matching(pool, &matching(RETRY_SET, "'failed'"), filter).await?,
    };
    rows.iter().map(|row| Ok(row.try_get("id")?)).collect()
}

pub(super) async fn cancel(pool: &PgPool, target: &CancelTarget) -> Result<Vec<Uuid>> {
    let rows = match target {
        CancelTarget::Ids(ids) => sqlx::query(CANCEL).bind(ids).fetch_all(pool).await?,
        CancelTarget::Matching(filter) => {
            update_matching(pool, &matching(CANCEL_SET, "'pending', 'failed'"), filter).await?
        }
    };
    rows.iter().map(|row| Ok(row.try_get("id")?)).collect()
}

async fn update_matching(pool: &PgPool, sql: &str, filter: &EventFilter) -> Result<Vec<sqlx::postgres::PgRow>> {
    Ok(bind_filter(sqlx::query(sql), filter).fetch_all(pool).await?)
}
