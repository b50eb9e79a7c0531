//! Operator actions: retry failed events, cancel pending or failed ones.

use sqlx::{PgPool, Row};
use uuid::Uuid;

use crate::store::RetryTarget;
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

pub(super) async fn retry(pool: &PgPool, target: &RetryTarget) -> Result<Vec<Uuid>> {
    let rows = match target {
        RetryTarget::Ids(ids) => sqlx::query(RETRY_IDS).bind(ids).fetch_all(pool).await?,
        RetryTarget::AllFailed { event_type } => {
            sqlx::query(RETRY_ALL_FAILED).bind(event_type.as_deref()).fetch_all(pool).await?
        }
    };
    rows.iter().map(|row| Ok(row.try_get("id")?)).collect()
}

pub(super) async fn cancel(pool: &PgPool, ids: &[Uuid]) -> Result<Vec<Uuid>> {
    let rows = sqlx::query(CANCEL).bind(ids).fetch_all(pool).await?;
    rows.iter().map(|row| Ok(row.try_get("id")?)).collect()
}
