//! The control row: pause and resume publishing for every relay on the database.

use sqlx::{PgPool, Row};

use crate::error::Result;

const SET_PAUSED: &str = "\
INSERT INTO outbox_control (id, paused, changed_at) VALUES (true, $1, now())
ON CONFLICT (id) DO UPDATE SET paused = EXCLUDED.paused, changed_at = now()";

const IS_PAUSED: &str = "SELECT COALESCE((SELECT paused FROM outbox_control WHERE id), false) AS paused";

pub(super) async fn set_paused(pool: &PgPool, paused: bool) -> Result<()> {
    sqlx::query(SET_PAUSED).bind(paused).execute(pool).await?;
    Ok(())
}

pub(super) async fn is_paused(pool: &PgPool) -> Result<bool> {
    Ok(sqlx::query(IS_PAUSED).fetch_one(pool).await?.try_get("paused")?)
}
