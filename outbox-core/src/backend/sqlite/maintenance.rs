//! Retention on SQLite.

use std::time::Duration;

use sqlx::SqlitePool;

use super::clock::{self, now};
use crate::error::Result;

/// One small batch through the finished-rows index, so the write lock is held briefly.
pub(super) async fn delete_finished(pool: &SqlitePool, older_than: Duration, limit: u32) -> Result<u64> {
    let sql = concat!(
        "DELETE FROM outbox_events WHERE seq IN (
            SELECT seq FROM outbox_events
             WHERE status IN ('published', 'cancelled') AND COALESCE(published_at, created_at) < ",
        now!("?1"),
        " LIMIT ?2)"
    );
    let done = sqlx::query(sql).bind(clock::earlier(older_than)).bind(i64::from(limit)).execute(pool).await?;
    Ok(done.rows_affected())
}

pub(super) async fn count_finished(pool: &SqlitePool, older_than: Duration) -> Result<u64> {
    let sql = concat!(
        "SELECT count(*) FROM outbox_events
          WHERE status IN ('published', 'cancelled') AND COALESCE(published_at, created_at) < ",
        now!("?1")
    );
    let n: i64 = sqlx::query_scalar(sql).bind(clock::earlier(older_than)).fetch_one(pool).await?;
    Ok(n.unsigned_abs())
}
