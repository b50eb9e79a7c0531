//! The control row on SQLite: pause and resume publishing.

use sqlx::SqlitePool;

use super::clock::now;
use crate::error::Result;

pub(super) async fn set_paused(pool: &SqlitePool, paused: bool) -> Result<()> {
    let sql = concat!(
        "INSERT INTO outbox_control (id, paused, changed_at) VALUES (1, ?1, ",
        now!(),
        ") ON CONFLICT (id) DO UPDATE SET paused = excluded.paused, changed_at = excluded.changed_at"
    );
    sqlx::query(sql).bind(paused).execute(pool).await?;
    Ok(())
}

pub(super) async fn is_paused(pool: &SqlitePool) -> Result<bool> {
    let paused: Option<bool> =
        sqlx::query_scalar("SELECT paused FROM outbox_control WHERE id = 1").fetch_optional(pool).await?;
    Ok(paused.unwrap_or(false))
}
