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
       EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1) AS published,
       (SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE c.oid = to_regclass('outbox_events')) AS outbox_schema";

/// The slot of that name, whatever database it belongs to (slot names are shared by a server's databases): its
/// database (none for a physical slot), its output plugin, and whether the server invalidated it
/// (`wal_status = 'lost'`); no row when the slot does not exist.
const SLOT: &str = "\
SELECT database::text, plugin::text, database = current_database() AS here, wal_status = 'lost' AS lost,
       current_database()::text AS current
  FROM pg_replication_slots
 WHERE slot_name = $1";

/// What the checks found.
pub(crate) struct Checked {
    /// The server's version number (e.g. `150004`).
    pub(crate) server_version: u32,
    /// The slot to read: the one asked for; without one, the slot the table's WAL source records, else the
    /// database's default.
    pub(crate) slot: String,
    /// The schema of the outbox table the relay's statements read (`outbox_events` as their `search_path` finds
    /// it): the stream's inserts into any other table are ignored.
    pub(crate) outbox_schema: String,
}

/// Checks the server's version (14 or later), `wal_level`, the role's REPLICATION privilege, the publication, the
/// table's source and that the slot, if it exists, is a `pgoutput` slot of this database that is still usable.
/// `slot` is the slot asked for (`given`), or the default, which gives way to the slot the table's WAL source
/// records: that is the one producers of message-mode events check, and a relay whose default changed (the
/// default of a database whose name is not a slot name now ends in a hash) keeps reading it.
pub(crate) async fn check(store: &PgStore, slot: &str, given: bool) -> Result<Checked> {
    let row = sqlx::query(CHECKS)
        .bind(PUBLICATION)
        .fetch_one(store.pool())
        .await
        .map_err(|error| Error::from_store(error.into()))?;
    let wal_level = column::<Option<String>>(&row, "wal_level")?.unwrap_or_default();
    let role = column::<Option<String>>(&row, "role")?.unwrap_or_default();
    let version: i32 = column(&row, "server_version")?;
    let may_replicate: Option<bool> = column(&row, "may_replicate")?;
    let published: bool = column(&row, "published")?;
    let outbox_schema: Option<String> = column(&row, "outbox_schema")?;
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
    let Some(outbox_schema) = outbox_schema else {
        return Err(Error::WalUnavailable {
            what: format!("role `{role}` finds no table `outbox_events` on its search_path"),
            fix: "run `outbox migrate`, or connect with the search_path of the outbox's schema".to_owned(),
        });
    };
    let slot = if given {
        slot.to_owned()
    } else {
        let recorded = store.wal_state().await.map_err(Error::from_store)?.slot;
        recorded.unwrap_or_else(|| slot.to_owned())
    };
    refuse_unusable_slot(store, &slot).await?;
    Ok(Checked { server_version: version.unsigned_abs(), slot, outbox_schema })
}

/// The error of a WAL relay that finds the table source publishing the table.
pub(crate) fn wrong_source(active: Source) -> Error {
    Error::WrongSource { active, hint: "stop the table relays, then run `outbox wal enable` to publish from the WAL" }
}

/// Stops with a one-line error when `slot` exists but cannot be this database's WAL slot, which retrying would
/// never change:
///
/// - it belongs to another database of the server (slot names are shared by the server's databases, advisory
///   locks and `outbox_control` are not), or is a physical slot: dropping or reading it would lose the events of
///   whoever reads it, so another name is needed (`--slot NAME`);
/// - it decodes with another plugin than `pgoutput`: it is not a slot of the WAL source;
/// - the server invalidated it: it fell further behind than `max_slot_wal_keep_size`, the WAL it kept was removed,
///   and it can stream nothing any more. The rows are still in the table, and a new slot publishes those still
///   pending first.
pub(crate) async fn refuse_unusable_slot(store: &PgStore, slot: &str) -> Result<()> {
    let row = sqlx::query(SLOT)
        .bind(slot)
        .fetch_optional(store.pool())
        .await
        .map_err(|error| Error::from_store(error.into()))?;
    let Some(row) = row else { return Ok(()) };
    let get = |name: &str| column::<Option<String>>(&row, name);
    let flag = |name: &str| column::<Option<bool>>(&row, name);
    let (database, plugin, current) = (get("database")?, get("plugin")?, get("current")?.unwrap_or_default());
    let pick_another = "start the relay with `--slot NAME`, a slot name that no other database of the server uses";
    if flag("here")? != Some(true) {
        let owner = database.map_or_else(
            || "is a physical slot, not a logical slot of database".to_owned(),
            |db| format!("belongs to database `{db}`, not to"),
        );
        return Err(Error::WalUnavailable {
            what: format!(
                "the replication slot `{slot}` {owner} `{current}` (slot names are shared by the databases of a \
                 server); this relay leaves it alone"
            ),
            fix: pick_another.to_owned(),
        });
    }
    if plugin.as_deref() != Some("pgoutput") {
        let plugin = plugin.unwrap_or_default();
        return Err(Error::WalUnavailable {
            what: format!(
                "the replication slot `{slot}` decodes with `{plugin}`, not `pgoutput`: it is not a slot of the \
                 WAL source; this relay leaves it alone"
            ),
            fix: pick_another.to_owned(),
        });
    }
    if flag("lost")? == Some(true) {
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

/// Column `name` of `row`, a database error otherwise.
fn column<'r, T>(row: &'r sqlx::postgres::PgRow, name: &str) -> Result<T>
where
    T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    row.try_get(name).map_err(|error| Error::from_store(error.into()))
}
