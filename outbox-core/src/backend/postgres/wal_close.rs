//! Closing the WAL source's slot to message-mode producers before it is dropped (migrations 8 and 17). A producer's
//! session remembers a check that found the slot for a while (`outbox_wal_check_lifetime()`, one second), so a drop
//! first takes the close lock, which makes every new check fail (a check tries it shared, whatever its snapshot),
//! marks the slot as closing (`wal_closing_at`, for operators to see), and waits until every remembered check has
//! expired. Only then does it take the emit lock and drop the slot: no producer can still write a message for it.

use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, PgPool, Postgres};

use crate::error::Result;
use crate::store::wal_message::WAL_CLOSE_LOCK;

/// Held by this session until it ends or releases it: a mark whose holder died closes nothing.
const HOLD_CLOSE_LOCK: &str = "SELECT pg_advisory_lock($1)";
const RELEASE_CLOSE_LOCK: &str = "SELECT pg_advisory_unlock($1)";
/// Committed on its own, so that every check from now on sees it.
const MARK_CLOSING: &str = "UPDATE outbox_control SET wal_closing_at = clock_timestamp() WHERE id";
const CLEAR_MARK: &str = "UPDATE outbox_control SET wal_closing_at = NULL WHERE id";
/// How long a producer's session remembers a check, in seconds: waited from the mark's commit (a check that missed
/// the mark began its transaction before it). Waited by this client, not by a `pg_sleep` statement, which sqlx would
/// log as a slow statement at every drop.
const CHECK_LIFETIME: &str = "SELECT date_part('epoch', outbox_wal_check_lifetime())::float8";

/// Proof that the slot is closed to producers, for the statements that drop it ([`ClosedToProducers::run`]).
pub(super) struct ProducersShut(());

/// A connection of its own on which the slot is closed to producers; the statements that drop the slot run on it.
/// Whatever happens, the connection is closed when this is dropped, never returned to the pool holding the close
/// lock.
pub(super) struct ClosedToProducers {
    connection: PoolConnection<Postgres>,
}

impl ClosedToProducers {
    /// Closes the slot to producers ([`close`](Self::close)), runs `work` on the connection that holds it closed,
    /// and reopens it ([`reopen`](Self::reopen)) whatever `work` returned.
    pub(super) async fn run<T>(
        pool: &PgPool,
        work: impl AsyncFnOnce(&mut PgConnection, &ProducersShut) -> Result<T>,
    ) -> Result<T> {
        let (mut closed, shut) = Self::close(pool).await?;
        let done = work(&mut closed.connection, &shut).await;
        // Failing, the connection's end releases the close lock all the same.
        closed.reopen().await.ok();
        done
    }

    /// Takes the close lock (waiting for another drop of the slot to finish), marks the slot as closing, and waits
    /// until every check that producers made before the mark has expired.
    async fn close(pool: &PgPool) -> Result<(Self, ProducersShut)> {
        let mut connection = pool.acquire().await?;
        connection.close_on_drop();
        sqlx::query(HOLD_CLOSE_LOCK).bind(WAL_CLOSE_LOCK).execute(&mut *connection).await?;
        sqlx::query(MARK_CLOSING).execute(&mut *connection).await?;
        let lifetime: f64 = sqlx::query_scalar(CHECK_LIFETIME).fetch_one(&mut *connection).await?;
        // The mark's commit came before this answer, so the wait counts from after it.
        tokio::time::sleep(
            std::time::Duration::try_from_secs_f64(lifetime).unwrap_or(std::time::Duration::from_secs(1)),
        )
        .await;
        Ok((Self { connection }, ProducersShut(())))
    }

    /// Clears the mark and releases the close lock: producers check the slot again (and find it gone, or find it
    /// still there when the drop was refused). On an error the connection's end releases the lock, and the mark,
    /// with no holder, closes nothing.
    async fn reopen(mut self) -> Result<()> {
        sqlx::query(CLEAR_MARK).execute(&mut *self.connection).await?;
        sqlx::query(RELEASE_CLOSE_LOCK).bind(WAL_CLOSE_LOCK).execute(&mut *self.connection).await?;
        Ok(())
    }
}
