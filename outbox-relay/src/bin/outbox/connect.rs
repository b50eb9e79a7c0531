//! Connecting to the database named by `--database-url` / `DATABASE_URL`: PostgreSQL (`postgres://...`) or
//! SQLite (`sqlite://path`, `sqlite::memory:`).

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use outbox_core::store::{PgStore, SqliteStore, Store};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
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
            Database::Postgres(pool) => Arc::new(PgStore::new(pool.clone())),
            Database::Sqlite(pool) => Arc::new(SqliteStore::new(pool.clone())),
        }
    }

    /// Creates or upgrades the outbox tables.
    pub(crate) async fn migrate(&self) -> Result<(), outbox_core::Error> {
        match self {
            Database::Postgres(pool) => outbox_core::migrate(pool).await,
            Database::Sqlite(pool) => outbox_core::migrate(pool).await,
        }
    }
}

/// Connects, sorting failures into bad input (no URL, a malformed one, a database that does not exist: exit 2)
/// and runtime failures (server unreachable: exit 1).
pub(crate) async fn open(database_url: Option<&str>, max_connections: u32) -> Result<Database, Failure> {
    match options(database_url)? {
        Options::Postgres(options) => PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await
            .map(Database::Postgres)
            .map_err(connect_failure),
        Options::Sqlite(options) => SqlitePoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await
            .map(Database::Sqlite)
            .map_err(connect_failure),
    }
}

fn connect_failure(error: sqlx::Error) -> Failure {
    match &error {
        sqlx::Error::Database(db) if db.code().is_some_and(|code| code == "3D000" || code == "14") => {
            Failure::Usage(format!("missing database: {}", db.message()))
        }
        _ => Failure::Runtime(format!("cannot connect to the database: {error}")),
    }
}

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
