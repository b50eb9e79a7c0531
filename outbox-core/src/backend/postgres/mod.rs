//! PostgreSQL: every statement the outbox runs on it.

mod admin;
mod backlog;
mod batch;
mod control;
mod fence;
mod inbox;
mod inspect;
mod jit;
mod listen;
mod membership;
mod pending;
mod read;
mod relay_pool;
mod retention;
mod settle;
mod store;
mod wal;
mod wal_close;
mod wal_handover;

use sqlx::migrate::Migrator;
use sqlx::{Connection, Executor, PgConnection, PgPool, Postgres};

use super::{Backend, BoxFuture, Internal};
use crate::error::Result;
use crate::new_event::NewEvent;

static MIGRATOR: Migrator = sqlx::migrate!("../migrations/postgres");

/// All rows of a batch go in one statement: arrays bound once, unnested in order.
///
/// The `pg_current_xact_id()` filter gives the transaction its id before the first row takes its `seq`: the relay
/// reads partitions by `seq` and, from its snapshot, waits for every transaction that was running to finish before
/// it treats a range as complete, which holds only for transactions that had an id when they took a `seq`.
macro_rules! insert_events {
    () => {
        "INSERT INTO outbox_events
    (id, aggregate_type, aggregate_id, event_type, schema_version, payload, headers, sensitive_paths)
SELECT e.id, e.aggregate_type, e.aggregate_id, e.event_type, e.schema_version,
       e.payload::jsonb, e.headers::jsonb, e.sensitive_paths::jsonb
  FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::text[], $5::int4[], $6::text[], $7::text[], $8::text[])
       WITH ORDINALITY
       AS e(id, aggregate_type, aggregate_id, event_type, schema_version, payload, headers, sensitive_paths, n)
 WHERE pg_current_xact_id() IS NOT NULL
 ORDER BY e.n"
    };
}

const INSERT: &str = insert_events!();

/// The same insert, plus one `pg_notify` that PostgreSQL delivers only if the transaction commits.
const INSERT_AND_NOTIFY: &str = concat!(
    "WITH inserted AS (\n",
    insert_events!(),
    "\nRETURNING 1
)
SELECT pg_notify($9, '') FROM (SELECT 1 FROM inserted LIMIT 1) AS any_row"
);

/// The bookkeeping of applied migrations, in [`MIGRATIONS_TABLE`](crate::MIGRATIONS_TABLE).
const CREATE_MIGRATIONS_TABLE: &str = "\
CREATE TABLE IF NOT EXISTS _outbox_migrations (
    version      BIGINT      PRIMARY KEY,
    description  TEXT        NOT NULL,
    checksum     BYTEA       NOT NULL,
    installed_on TIMESTAMPTZ NOT NULL DEFAULT now()
)";
const SELECT_APPLIED: &str = "SELECT version, checksum FROM _outbox_migrations";
const RECORD_APPLIED: &str = "INSERT INTO _outbox_migrations (version, description, checksum) VALUES ($1, $2, $3)";

/// Any constant works, as long as it is the same for every process migrating the same database.
const MIGRATION_LOCK: i64 = 0x6f75_7462_6f78; // "outbox"

impl Backend for Postgres {
    fn insert_events<'c>(
        _: Internal,
        conn: &'c mut PgConnection,
        events: &'c [NewEvent],
        notify: Option<&'c str>,
    ) -> BoxFuture<'c, Result<()>> {
        Box::pin(async move {
            let mut ids = Vec::with_capacity(events.len());
            let mut aggregate_types = Vec::with_capacity(events.len());
            let mut aggregate_ids = Vec::with_capacity(events.len());
            let mut event_types = Vec::with_capacity(events.len());
            let mut versions = Vec::with_capacity(events.len());
            let mut payloads = Vec::with_capacity(events.len());
            let mut headers = Vec::with_capacity(events.len());
            let mut sensitive = Vec::with_capacity(events.len());
            for event in events {
                ids.push(event.id);
                aggregate_types.push(event.aggregate_type);
                aggregate_ids.push(event.aggregate_id.as_str());
                event_types.push(event.event_type);
                versions.push(event.version);
                payloads.push(event.payload.as_str());
                headers.push(super::json_text(&event.headers));
                sensitive.push(super::json_text(&event.sensitive_paths));
            }
            let query = sqlx::query(if notify.is_some() { INSERT_AND_NOTIFY } else { INSERT })
                .bind(ids)
                .bind(aggregate_types)
                .bind(aggregate_ids)
                .bind(event_types)
                .bind(versions)
                .bind(payloads)
                .bind(headers)
                .bind(sensitive);
            let query = match notify {
                Some(channel) => query.bind(channel),
                None => query,
            };
            query.execute(conn).await?;
            Ok(())
        })
    }

    fn inbox_record<'c>(
        _: Internal,
        conn: &'c mut PgConnection,
        consumer: &'c str,
        event_id: uuid::Uuid,
    ) -> BoxFuture<'c, Result<bool>> {
        Box::pin(inbox::record(conn, consumer, event_id))
    }

    fn inbox_purge<'a>(
        _: Internal,
        pool: &'a PgPool,
        consumer: &'a str,
        age: std::time::Duration,
        limit: u32,
    ) -> BoxFuture<'a, Result<u64>> {
        Box::pin(inbox::purge(pool, consumer, age, limit))
    }

    fn migrate(_: Internal, pool: &PgPool) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let mut conn = pool.acquire().await?;
            // Until the lock is released, the connection is closed rather than returned to the pool if this future
            // is dropped (a timeout around `migrate`): a pooled session holding the lock would block every later
            // migration, of every process, for as long as the pool keeps it.
            conn.close_on_drop();
            sqlx::query("SELECT pg_advisory_lock($1)").bind(MIGRATION_LOCK).execute(&mut *conn).await?;
            let applied = apply_pending(&mut conn).await;
            let unlocked = sqlx::query("SELECT pg_advisory_unlock($1)").bind(MIGRATION_LOCK).execute(&mut *conn).await;
            applied?;
            unlocked?;
            Ok(())
        })
    }
}

/// How long a migration's statement waits for a lock before its try gives up: while it waits, every later
/// statement on the table (the application's enqueues) queues behind it.
const MIGRATION_LOCK_TIMEOUT: &str = "SET LOCAL lock_timeout = '500ms'";
/// The wait before the first retry of a migration that could not take its locks, and the longest one.
const MIGRATION_RETRY: (std::time::Duration, std::time::Duration) =
    (std::time::Duration::from_millis(250), std::time::Duration::from_secs(5));
/// How long a migration keeps trying to take its locks.
const MIGRATION_LOCK_BUDGET: std::time::Duration = std::time::Duration::from_secs(300);
/// PostgreSQL's `lock_not_available`.
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// Applies each migration not yet recorded in [`MIGRATIONS_TABLE`](crate::MIGRATIONS_TABLE), each in its own transaction. A recorded
/// migration whose SQL changed since is an error; versions this build does not know (a newer build migrated the
/// database) are left alone, so an older build keeps running during a rolling deploy.
///
/// A migration that rewrites or indexes `outbox_events` locks it until it commits. So that it never waits in the
/// lock queue behind a long transaction, with the application's writes queued behind it, each try waits at most
/// half a second for its locks, and is rolled back and tried again after a growing pause, for up to five minutes
/// ([`Error::MigrationBlocked`](crate::Error::MigrationBlocked)).
async fn apply_pending(conn: &mut PgConnection) -> Result<()> {
    conn.execute(CREATE_MIGRATIONS_TABLE).await?;
    let applied: Vec<(i64, Vec<u8>)> = sqlx::query_as(SELECT_APPLIED).fetch_all(&mut *conn).await?;
    for migration in super::pending_migrations(&MIGRATOR, &applied)? {
        let started = std::time::Instant::now();
        let mut pause = MIGRATION_RETRY.0;
        loop {
            match apply_one(conn, migration).await {
                Err(crate::Error::Database(sqlx::Error::Database(error)))
                    if error.code().as_deref() == Some(LOCK_NOT_AVAILABLE) =>
                {
                    if started.elapsed() >= MIGRATION_LOCK_BUDGET {
                        return Err(crate::Error::MigrationBlocked {
                            version: migration.version,
                            waited: started.elapsed(),
                        });
                    }
                    // Paused on the server: the crate needs no timer of an async runtime. A role's
                    // `statement_timeout` does not cut the pause short.
                    let mut paused = conn.begin().await?;
                    paused.execute("SET LOCAL statement_timeout = 0").await?;
                    sqlx::query("SELECT pg_sleep($1)").bind(pause.as_secs_f64()).execute(&mut *paused).await?;
                    paused.commit().await?;
                    pause = (pause * 2).min(MIGRATION_RETRY.1);
                }
                applied => break applied?,
            }
        }
    }
    Ok(())
}

/// One migration and its record, in one transaction whose statements wait at most [`MIGRATION_LOCK_TIMEOUT`] for
/// a lock.
async fn apply_one(conn: &mut PgConnection, migration: &sqlx::migrate::Migration) -> Result<()> {
    let mut tx = conn.begin().await?;
    tx.execute(MIGRATION_LOCK_TIMEOUT).await?;
    tx.execute(&*migration.sql).await?;
    sqlx::query(RECORD_APPLIED)
        .bind(migration.version)
        .bind(&*migration.description)
        .bind(&*migration.checksum)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
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
