//! Retention: deleting old published and cancelled rows in small batches.

use std::time::Duration;

use sqlx::{PgPool, Row};

use crate::error::Result;

/// One small batch of rows created before the cutoff (`outbox_events_created_at_idx`, a range index: a row finishes
/// after it is created, so every row to delete is among them); row locks only (SKIP LOCKED), never a table lock.
const DELETE_FINISHED: &str = "\
DELETE FROM outbox_events e
 WHERE e.id IN (SELECT x.id FROM outbox_events x
                 WHERE x.created_at < now() - make_interval(secs => $1)
                   AND x.status IN ('published', 'cancelled')
                   AND COALESCE(x.published_at, x.created_at) < now() - make_interval(secs => $1)
                 LIMIT $2
                 FOR UPDATE SKIP LOCKED)
   AND e.status IN ('published', 'cancelled')";

const COUNT_FINISHED: &str = "\
SELECT count(*) AS n FROM outbox_events
 WHERE created_at < now() - make_interval(secs => $1)
   AND status IN ('published', 'cancelled') AND COALESCE(published_at, created_at) < now() - make_interval(secs => $1)";

pub(super) async fn delete_finished(pool: &PgPool, older_than: Duration, limit: u32) -> Result<u64> {
    let done = sqlx::query(DELETE_FINISHED).bind(older_than.as_secs_f64()).bind(i64::from(limit)).execute(pool).await?;
    Ok(done.rows_affected())
}

pub(super) async fn count_finished(pool: &PgPool, older_than: Duration) -> Result<u64> {
    let row = sqlx::query(COUNT_FINISHED).bind(older_than.as_secs_f64()).fetch_one(pool).await?;
    Ok(row.try_get::<i64, _>("n")?.unsigned_abs())
}
