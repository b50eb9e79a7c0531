//! The consumer inbox on PostgreSQL.

use std::time::Duration;

use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::error::Result;

const RECORD: &str = "INSERT INTO outbox_inbox (consumer, event_id) VALUES ($1, $2) ON CONFLICT DO NOTHING";

/// A bounded batch, so a purge never holds many row locks at once.
const PURGE: &str = "\
DELETE FROM outbox_inbox
 WHERE ctid IN (SELECT ctid FROM outbox_inbox
                 WHERE consumer = $1 AND processed_at < now() - make_interval(secs => $2)
                 LIMIT $3)";

pub(super) async fn record(conn: &mut PgConnection, consumer: &str, event_id: Uuid) -> Result<bool> {
    let done = sqlx::query(RECORD).bind(consumer).bind(event_id).execute(conn).await?;
    Ok(done.rows_affected() == 1)
}

pub(super) async fn purge(pool: &PgPool, consumer: &str, age: Duration, limit: u32) -> Result<u64> {
    let done = sqlx::query(PURGE).bind(consumer).bind(age.as_secs_f64()).bind(i64::from(limit)).execute(pool).await?;
    Ok(done.rows_affected())
}
