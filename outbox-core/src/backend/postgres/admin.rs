//! Operator actions: retry failed events, cancel pending or failed ones.

use sqlx::{PgPool, Row};
use uuid::Uuid;

use crate::store::RetryTarget;
use crate::Result;

/// Every change also grows the generation of the partitions it touched, so their owners read them afresh (a
/// retried or cancelled failed event unblocks its aggregate).
macro_rules! bump_generations {
    ($change:literal) => {
        concat!(
            "WITH changed AS (\n",
            $change,
            "\nRETURNING id, partition
),
bumped AS (
UPDATE outbox_partitions SET generation = generation + 1
 WHERE partition IN (SELECT DISTINCT partition FROM changed)
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
 WHERE status = 'failed' AND ($1::text IS NULL OR event_type = $1)"
);

/// Events in a batch being published are left alone.
const CANCEL: &str = bump_generations!(
    "UPDATE outbox_events e SET status = 'cancelled'
 WHERE e.id = ANY($1) AND e.status IN ('pending', 'failed')
   AND NOT EXISTS (SELECT 1 FROM outbox_batches b WHERE e.id = ANY(b.events))"
);

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
