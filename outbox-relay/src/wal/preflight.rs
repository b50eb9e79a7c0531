//! What the WAL source needs of the database, checked before anything is streamed: each missing piece is a
//! one-line error that names it and what to run.

use outbox_core::store::{PgStore, Source, Store};
use sqlx::Row;

use super::replication::PUBLICATION;
use crate::error::{Error, Result};

const CHECKS: &str = "\
SELECT current_setting('wal_level') AS wal_level,
       current_setting('server_version_num')::int4 AS server_version,
       current_user AS role,
       (SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user) AS may_replicate,
       EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1) AS published";

/// Whether the server invalidated the slot (`wal_status = 'lost'`); no row when the slot does not exist.
const SLOT_LOST: &str = "SELECT wal_status = 'lost' FROM pg_replication_slots WHERE slot_name = $1";

/// Checks the server's version (14 or later), `wal_level`, the role's REPLICATION privilege, the publication, the
/// table's source and that the slot, if it exists, is still usable; returns the server's version number (e.g.
/// `150004`).
pub(crate) async fn check(store: &PgStore, slot: &str) -> Result<u32> {
    let row = sqlx::query(CHECKS)
        .bind(PUBLICATION)
        .fetch_one(store.pool())
        .await
        .map_err(|error| Error::from_store(error.into()))?;
    let get = |column: &str| -> Result<_> {
        row.try_get::<Option<String>, _>(column).map_err(|error| Error::from_store(error.into()))
    };
    let wal_level = get("wal_level")?.unwrap_or_default();
    let role = get("role")?.unwrap_or_default();
    let version: i32 = row.try_get("server_version").map_err(|error| Error::from_store(error.into()))?;
    let may_replicate: Option<bool> = row.try_get("may_replicate").map_err(|error| Error::from_store(error.into()))?;
    let published: bool = row.try_get("published").map_err(|error| Error::from_store(error.into()))?;
    if version < 140_000 {
        return Err(Error::WalUnavailable {
            what: format!(
                "PostgreSQL {}.{} cannot stream logical decoding messages, and the WAL source needs 14 or later",
                version / 10_000,
                version % 10_000 / 100
            ),
            fix: "upgrade PostgreSQL, or keep the table source (`outbox relay`)".to_owned(),
        });
    }
    if wal_level != "logical" {
        return Err(Error::WalUnavailable {
            what: format!("wal_level is `{wal_level}`, and the WAL source needs `logical`"),
            fix: "run `ALTER SYSTEM SET wal_level = logical` and restart PostgreSQL (managed services: a \
                  parameter, see the README)"
                .to_owned(),
        });
    }
    if may_replicate != Some(true) {
        return Err(Error::WalUnavailable {
            what: format!("role `{role}` has no REPLICATION privilege"),
            fix: format!(
                "run `ALTER ROLE \"{role}\" REPLICATION` as a superuser (RDS: `GRANT rds_replication TO \"{role}\"`)"
            ),
        });
    }
    if !published {
        return Err(Error::WalUnavailable {
            what: format!("the database has no publication `{PUBLICATION}`"),
            fix: "run `outbox migrate` as a role with the CREATE privilege on the database".to_owned(),
        });
    }
    // Read after a change of source in progress (`outbox wal disable`) commits.
    let source = store.source().await.map_err(Error::from_store)?;
    if source != Source::Wal {
        return Err(wrong_source(source));
    }
    refuse_lost_slot(store, slot).await?;
    Ok(version.unsigned_abs())
}

/// The error of a WAL relay that finds the table source publishing the table.
pub(crate) fn wrong_source(active: Source) -> Error {
    Error::WrongSource { active, hint: "stop the table relays, then run `outbox wal enable` to publish from the WAL" }
}

/// Stops with a one-line error when the server has invalidated `slot`: it fell further behind than
/// `max_slot_wal_keep_size`, the WAL it kept was removed, and it can stream nothing any more. Retrying would never
/// succeed; the rows are still in the table, and a new slot publishes those still pending first.
pub(crate) async fn refuse_lost_slot(store: &PgStore, slot: &str) -> Result<()> {
    let lost: Option<Option<bool>> = sqlx::query_scalar(SLOT_LOST)
        .bind(slot)
        .fetch_optional(store.pool())
        .await
        .map_err(|error| Error::from_store(error.into()))?;
    if lost.flatten() == Some(true) {
        return Err(Error::WalUnavailable {
            what: format!(
                "the replication slot `{slot}` was invalidated (it fell further behind than \
                 max_slot_wal_keep_size) and can stream nothing; message-mode events in the WAL it lost are gone, \
                 table rows are not"
            ),
            fix: "run `outbox wal drop-slot` and start the relay again: it creates a new slot and publishes the \
                  rows still pending first"
                .to_owned(),
        });
    }
    Ok(())
}
