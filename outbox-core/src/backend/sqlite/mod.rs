//! SQLite: every statement the outbox runs on it.
//!
//! SQLite has no `LISTEN/NOTIFY` and no `SKIP LOCKED`: the relay polls, and one relay per database file does the
//! publishing (SQLite has a single writer anyway). Enqueue notifications are accepted and ignored.

mod admin;
mod backlog;
mod batch;
mod clock;
mod control;
mod fence;
mod inspect;
mod maintenance;
mod membership;
mod read;
mod settle;
mod store;

pub use store::SqliteStore;

use serde::Serialize;
use sqlx::migrate::Migrator;
use sqlx::{Connection, Executor, Sqlite, SqliteConnection, SqlitePool};

use super::{Backend, BoxFuture, Internal};
use crate::error::Result;
use crate::new_event::NewEvent;

static MIGRATOR: Migrator = sqlx::migrate!("../migrations/sqlite");

/// All rows of a batch go in one statement: one JSON array bound once, expanded in order by `json_each`.
const INSERT: &str = "\
INSERT INTO outbox_events
    (id, aggregate_type, aggregate_id, event_type, schema_version, payload, headers, sensitive_paths)
SELECT json_extract(e.value, '$.id'), json_extract(e.value, '$.aggregate_type'),
       json_extract(e.value, '$.aggregate_id'), json_extract(e.value, '$.event_type'),
       json_extract(e.value, '$.schema_version'), json_extract(e.value, '$.payload'),
       json_extract(e.value, '$.headers'), json_extract(e.value, '$.sensitive_paths')
  FROM json_each(?1) AS e
 ORDER BY e.key";

const INBOX_RECORD: &str = "INSERT INTO outbox_inbox (consumer, event_id) VALUES (?1, ?2) ON CONFLICT DO NOTHING";

/// A bounded batch, so a purge never holds the write lock for long.
const INBOX_PURGE: &str = "\
DELETE FROM outbox_inbox
 WHERE rowid IN (SELECT rowid FROM outbox_inbox
                  WHERE consumer = ?1 AND processed_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?2)
                  LIMIT ?3)";

/// The bookkeeping of applied migrations, in [`MIGRATIONS_TABLE`](crate::MIGRATIONS_TABLE).
const CREATE_MIGRATIONS_TABLE: &str = "\
CREATE TABLE IF NOT EXISTS _outbox_migrations (
    version      INTEGER PRIMARY KEY,
    description  TEXT    NOT NULL,
    checksum     BLOB    NOT NULL,
    installed_on TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
)";
const SELECT_APPLIED: &str = "SELECT version, checksum FROM _outbox_migrations";
const RECORD_APPLIED: &str = "INSERT INTO _outbox_migrations (version, description, checksum) VALUES (?1, ?2, ?3)";

/// One row of the batch, as the insert statement reads it.
#[derive(Serialize)]
struct Row<'a> {
    id: String,
    aggregate_type: &'a str,
    aggregate_id: &'a str,
    event_type: &'a str,
    schema_version: i32,
    payload: &'a str,
    headers: String,
    sensitive_paths: String,
}

impl Backend for Sqlite {
    fn insert_events<'c>(
        _: Internal,
        conn: &'c mut SqliteConnection,
        events: &'c [NewEvent],
        _notify: Option<&'c str>,
    ) -> BoxFuture<'c, Result<()>> {
        Box::pin(async move {
            let rows: Vec<Row<'_>> = events
                .iter()
                .map(|event| Row {
                    id: event.id.hyphenated().to_string(),
                    aggregate_type: event.aggregate_type,
                    aggregate_id: &event.aggregate_id,
                    event_type: event.event_type,
                    schema_version: event.version,
                    payload: &event.payload,
                    headers: super::json_text(&event.headers),
                    sensitive_paths: super::json_text(&event.sensitive_paths),
                })
                .collect();
            sqlx::query(INSERT).bind(super::json_text(&rows)).execute(conn).await?;
            Ok(())
        })
    }

    fn inbox_record<'c>(
        _: Internal,
        conn: &'c mut SqliteConnection,
        consumer: &'c str,
        event_id: uuid::Uuid,
    ) -> BoxFuture<'c, Result<bool>> {
        Box::pin(async move {
            let done =
                sqlx::query(INBOX_RECORD).bind(consumer).bind(event_id.hyphenated().to_string()).execute(conn).await?;
            Ok(done.rows_affected() == 1)
        })
    }

    fn inbox_purge<'a>(
        _: Internal,
        pool: &'a SqlitePool,
        consumer: &'a str,
        age: std::time::Duration,
        limit: u32,
    ) -> BoxFuture<'a, Result<u64>> {
        Box::pin(async move {
            let done = sqlx::query(INBOX_PURGE)
                .bind(consumer)
                .bind(format!("-{:.3} seconds", age.as_secs_f64()))
                .bind(i64::from(limit))
                .execute(pool)
                .await?;
            Ok(done.rows_affected())
        })
    }

    fn migrate(_: Internal, pool: &SqlitePool) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let mut conn = pool.acquire().await?;
            apply_pending(&mut conn).await
        })
    }
}

/// Applies each migration not yet recorded, each in its own transaction. SQLite's single writer serializes
/// concurrent callers; a migration another caller applied in the meantime is recorded once.
async fn apply_pending(conn: &mut SqliteConnection) -> Result<()> {
    conn.execute(CREATE_MIGRATIONS_TABLE).await?;
    let applied: Vec<(i64, Vec<u8>)> = sqlx::query_as(SELECT_APPLIED).fetch_all(&mut *conn).await?;
    for migration in super::pending_migrations(&MIGRATOR, &applied)? {
        // Immediate: the check below reads before the migration writes, and a deferred transaction that another
        // connection wrote past in between fails at its first write instead of waiting its turn.
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        let already: Option<i64> = sqlx::query_scalar("SELECT version FROM _outbox_migrations WHERE version = ?1")
            .bind(migration.version)
            .fetch_optional(&mut *tx)
            .await?;
        if already.is_none() {
            tx.execute(&*migration.sql).await?;
            sqlx::query(RECORD_APPLIED)
                .bind(migration.version)
                .bind(&*migration.description)
                .bind(&*migration.checksum)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn bookkeeping_statements_name_the_documented_migrations_table() {
        for sql in [super::CREATE_MIGRATIONS_TABLE, super::SELECT_APPLIED, super::RECORD_APPLIED] {
            assert!(sql.contains(crate::migrate::MIGRATIONS_TABLE), "{sql}");
        }
    }
}
