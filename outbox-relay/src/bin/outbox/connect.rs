//! Connecting to the database named by `--database-url` / `DATABASE_URL`: PostgreSQL (`postgres://...`) or
//! SQLite (`sqlite://path`, `sqlite::memory:`).

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use outbox_core::store::{PgStore, SqliteStore, Store};
use sqlx::postgres::PgConnectOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use sqlx::{PgPool, SqlitePool};

use crate::Failure;

/// An open outbox database.
#[derive(Debug, Clone)]
pub(crate) enum Database {
    /// PostgreSQL.
    Postgres(PgPool),
    /// SQLite.
    Sqlite(SqlitePool),
}

/// Parsed connection options, before connecting.
pub(crate) enum Options {
    Postgres(PgConnectOptions),
    Sqlite(SqliteConnectOptions),
}

impl Database {
    /// The relay's store on this database.
    pub(crate) fn store(&self) -> Arc<dyn Store> {
        match self {
            Self::Postgres(pool) => Arc::new(PgStore::new(pool.clone())),
            Self::Sqlite(pool) => Arc::new(SqliteStore::new(pool.clone())),
        }
    }

    /// Creates or upgrades the outbox tables.
    pub(crate) async fn migrate(&self) -> Result<(), outbox_core::Error> {
        match self {
            Self::Postgres(pool) => outbox_core::migrate(pool).await,
            Self::Sqlite(pool) => outbox_core::migrate(pool).await,
        }
    }
}

/// Connects, sorting failures into bad input (no URL, a malformed one, a database that does not exist, refused
/// credentials: exit 2) and runtime failures (server unreachable: exit 1).
pub(crate) async fn open(database_url: Option<&str>, max_connections: u32) -> Result<Database, Failure> {
    match options(database_url)? {
        // Every connection without JIT ([`PgStore::pool_options`]).
        Options::Postgres(options) => PgStore::pool_options()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await
            .map(Database::Postgres)
            .map_err(|error| connect_failure(&error)),
        Options::Sqlite(options) => SqlitePoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await
            .map(Database::Sqlite)
            .map_err(|error| connect_failure(&error)),
    }
}

fn connect_failure(error: &sqlx::Error) -> Failure {
    match error {
        sqlx::Error::Database(db) if db.code().is_some_and(|code| code == "3D000" || code == "14") => {
            Failure::Usage(format!("missing database: {}", db.message()))
        }
        sqlx::Error::Database(db) if db.code().is_some_and(|code| code.starts_with("28")) => {
            Failure::Usage(format!("the database refused the credentials: {}", db.message()))
        }
        _ => Failure::Runtime(format!("cannot connect to the database: {error}")),
    }
}

/// The database as logs and errors name it: `the database at URL`, without the password or the query.
pub(crate) fn target(database_url: &str) -> String {
    let without_query = database_url.split_once('?').map_or(database_url, |(url, _)| url);
    format!("the database at {}", outbox_relay::masked_url(without_query))
}

/// One connection attempt to a PostgreSQL database (SQLite needs none: a local file), sorted into what may pass
/// (connection refused or reset, timeout, server starting up: [`Error::Unreachable`]) and what cannot
/// (credentials, permissions, a missing database, TLS or settings: [`Error::Refused`]).
///
/// [`Error::Unreachable`]: outbox_relay::Error::Unreachable
/// [`Error::Refused`]: outbox_relay::Error::Refused
pub(crate) async fn probe(options: &Options, target: &str) -> outbox_relay::Result<()> {
    use sqlx::Connection;
    let Options::Postgres(options) = options else { return Ok(()) };
    let unreachable = |reason: String| outbox_relay::Error::Unreachable { target: target.to_owned(), reason };
    let refused = |reason: String| outbox_relay::Error::Refused { target: target.to_owned(), reason };
    match tokio::time::timeout(PROBE_TIMEOUT, sqlx::PgConnection::connect_with(options)).await {
        Err(_) => Err(unreachable(format!("no answer within {PROBE_TIMEOUT:?}"))),
        Ok(Ok(connection)) => {
            let _ = connection.close().await;
            Ok(())
        }
        Ok(Err(sqlx::Error::Database(db))) => {
            let code = db.code().unwrap_or_default();
            if code.starts_with("28") {
                Err(refused(format!("wrong credentials or no permission: {}", db.message())))
            } else if code.starts_with("3D") {
                Err(refused(format!("missing database: {}", db.message())))
            } else {
                Err(unreachable(db.message().to_owned()))
            }
        }
        Ok(Err(error @ (sqlx::Error::Tls(_) | sqlx::Error::Configuration(_)))) => Err(refused(error.to_string())),
        Ok(Err(error)) => Err(unreachable(error.to_string())),
    }
}

/// How long one connection attempt at start may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Parses the URL without connecting. A SQLite file must exist (create it with `?mode=rwc`).
pub(crate) fn options(database_url: Option<&str>) -> Result<Options, Failure> {
    let url = database_url
        .filter(|url| !url.is_empty())
        .ok_or_else(|| Failure::Usage("missing database: set DATABASE_URL or pass --database-url".to_owned()))?;
    let malformed = |error: sqlx::Error| Failure::Usage(format!("malformed database URL: {error}"));
    let scheme = url.split_once(':').map(|(scheme, _)| scheme.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("postgres" | "postgresql") if url.contains("://") => {
            url.parse::<PgConnectOptions>().map(Options::Postgres).map_err(malformed)
        }
        Some("sqlite") => SqliteConnectOptions::from_str(url)
            .map(|options| {
                Options::Sqlite(options.journal_mode(SqliteJournalMode::Wal).busy_timeout(Duration::from_secs(10)))
            })
            .map_err(malformed),
        _ => Err(Failure::Usage(
            "malformed database URL: expected postgres://USER@HOST/DATABASE or sqlite://PATH".to_owned(),
        )),
    }
}
