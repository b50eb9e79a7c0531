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
        // The text comparison keeps the index; this one keeps a time set by hand in another format (`2026-12-02
        // 14:59:00` sorts before `2026-12-02T14:00`) from counting as older than it is.
        " AND julianday(COALESCE(published_at, created_at)) < julianday(",
        now!("?1"),
        ") LIMIT ?2)"
    );
    let done = sqlx::query(sql).bind(clock::earlier(older_than)).bind(i64::from(limit)).execute(pool).await?;
    Ok(done.rows_affected())
}

pub(super) async fn count_finished(pool: &SqlitePool, older_than: Duration) -> Result<u64> {
    let sql = concat!(
        "SELECT count(*) FROM outbox_events
          WHERE status IN ('published', 'cancelled') AND COALESCE(published_at, created_at) < ",
        now!("?1"),
        " AND julianday(COALESCE(published_at, created_at)) < julianday(",
        now!("?1"),
        ")"
    );
    let n: i64 = sqlx::query_scalar(sql).bind(clock::earlier(older_than)).fetch_one(pool).await?;
    Ok(n.unsigned_abs())
}
