//! One relay reads a slot at a time: the active relay holds a session advisory lock named after the slot, and
//! standbys wait for it. PostgreSQL releases it when the active relay's connection ends, however the relay died.

use std::time::Duration;

use sqlx::{Connection, PgConnection};
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};

/// How often a standby tries to take over.
const STANDBY_POLL: Duration = Duration::from_millis(500);

/// The advisory lock's first key, shared by every slot; the second is the hash of the slot's name.
const LOCK_CLASS: i32 = outbox_core::store::WAL_LEADER_LOCK_CLASS;

/// The lock of the active relay, held while this connection is open.
pub(crate) struct Leader {
    _connection: PgConnection,
}

/// Waits until this relay is the one that reads `slot`; `None` when `shutdown` came first.
pub(crate) async fn acquire(
    options: &sqlx::postgres::PgConnectOptions,
    slot: &str,
    shutdown: &CancellationToken,
) -> Result<Option<Leader>> {
    let mut announced = false;
    loop {
        let attempt = async {
            let mut connection = PgConnection::connect_with(options).await?;
            let held: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1, hashtext($2))")
                .bind(LOCK_CLASS)
                .bind(slot)
                .fetch_one(&mut connection)
                .await?;
            Ok::<_, sqlx::Error>(held.then_some(connection))
        };
        match attempt.await {
            Ok(Some(connection)) => return Ok(Some(Leader { _connection: connection })),
            Ok(None) => {
                if !announced {
                    tracing::info!(slot, "another relay reads the slot; standing by to take over");
                    announced = true;
                }
            }
            Err(error) => {
                let error = Error::from_store(error.into());
                if !error.is_retryable() {
                    return Err(error);
                }
                tracing::warn!(slot, error = %error, "cannot reach the database to lead the slot; retrying");
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return Ok(None),
            () = tokio::time::sleep(STANDBY_POLL) => {}
        }
    }
}
