//! One relay reads a slot at a time: the active relay holds a session advisory lock named after the slot, and
//! standbys wait for it. PostgreSQL releases it when the active relay's connection ends, however the relay died.
//! A host that vanishes (a crash, a network cut) closes nothing: the server finds out by the TCP keepalives this
//! connection asks for ([`KEEPALIVES`]), within about 20 s, instead of the system's default of two hours.

use std::time::Duration;

use sqlx::{Connection, PgConnection};
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};

/// How often a standby tries to take over.
const STANDBY_POLL: Duration = Duration::from_millis(500);

/// The advisory lock's first key, shared by every slot; the second is the hash of the slot's name.
const LOCK_CLASS: i32 = outbox_core::store::WAL_LEADER_LOCK_CLASS;

/// The server's side of the leader's connection: a first keepalive after 5 s of silence, then one every 3 s, the
/// peer dead after 3 unanswered (and data unacknowledged for 20 s ends it too). Ignored on a Unix socket, which
/// a vanished host cannot hold. The replication connection asks for the same ([`super::replication`]).
pub(crate) const KEEPALIVES: [(&str, &str); 4] = [
    ("tcp_keepalives_idle", "5"),
    ("tcp_keepalives_interval", "3"),
    ("tcp_keepalives_count", "3"),
    ("tcp_user_timeout", "20000"),
];

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
    let options = options.clone().options(KEEPALIVES);
    loop {
        let attempt = async {
            let mut connection = PgConnection::connect_with(&options).await?;
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
