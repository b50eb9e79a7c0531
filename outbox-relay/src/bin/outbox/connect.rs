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
        sqlx::Error::Database(db) if db.code().is_some_and(|code| code.starts_with("42")) => {
            Failure::Usage(format!("the database refused the connection: {}", db.message()))
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
/// (connection refused or reset, timeout, server starting up, too many connections: [`Error::Unreachable`]) and
/// what cannot (credentials, permissions, a missing database, TLS or settings: [`Error::Refused`]).
///
/// By SQLSTATE: class 28 (authorization: wrong password, no `LOGIN`, no `pg_hba.conf` entry), class 3D (no such
/// database) and class 42 (a role without `CONNECT` on the database gets `42501 permission denied for database`
/// at connect; an unknown setting in `options` gets `42704`) are refusals; the rest is waited for.
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
            if code.starts_with("28") || code == "42501" {
                Err(refused(format!("wrong credentials or no permission: {}", db.message())))
            } else if code.starts_with("42") {
                Err(refused(format!("a setting of the connection is refused: {}", db.message())))
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
            known_parameters_only(url)?;
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

/// The query parameters of a `postgres://` URL that sqlx (0.8) reads: `options[NAME]=VALUE` too (a setting of the
/// session, as `options=-c NAME=VALUE`).
const POSTGRES_PARAMETERS: [&str; 19] = [
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
    "options",
    "options[",
];

/// Refuses a query parameter sqlx does not read, naming it and never its value: sqlx would log the value at WARN
/// and go on without it (`?sslpassword=...` is a secret), and a misspelt one (`?sslmdoe=require`) would silently
/// connect without what it asks for.
fn known_parameters_only(url: &str) -> Result<(), Failure> {
    let Ok(parsed) = url::Url::parse(url) else { return Ok(()) }; // sqlx's parse reports it
    for (key, _) in parsed.query_pairs() {
        let known = match key.strip_prefix("options[") {
            Some(setting) => setting.ends_with(']'),
            None => POSTGRES_PARAMETERS.contains(&key.as_ref()),
        };
        if !known {
            let shown: String = key.chars().take(64).collect::<String>().escape_debug().to_string();
            return Err(Failure::Usage(format!(
                "malformed database URL: unknown parameter `{shown}` (its value is not shown); known: {}",
                POSTGRES_PARAMETERS.map(|name| if name == "options[" { "options[NAME]" } else { name }).join(", ")
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{options, Options};
    use crate::Failure;

    #[test]
    fn every_parameter_sqlx_reads_is_taken_and_any_other_is_refused_by_its_name_only() {
        let base = "postgres://app@127.0.0.1:5432/shop";
        let known = [
            "sslmode=disable",
            "ssl-mode=prefer",
            "sslrootcert=/ca.pem",
            "ssl-root-cert=/ca.pem",
            "ssl-ca=/ca.pem",
            "sslcert=/c.pem",
            "ssl-cert=/c.pem",
            "sslkey=/k.pem",
            "ssl-key=/k.pem",
            "statement-cache-capacity=10",
            "host=/run/postgresql",
            "hostaddr=127.0.0.1",
            "port=5433",
            "dbname=other",
            "user=relay",
            "password=pw",
            "application_name=relay",
            "options=-c%20jit%3Doff",
            "options[lock_timeout]=1s",
        ];
        for query in known {
            assert!(matches!(options(Some(&format!("{base}?{query}"))), Ok(Options::Postgres(_))), "{query}");
        }
        for query in ["sslpassword=hunter2", "sslmdoe=require", "options[x=hunter2", "connect_timeout=hunter2"] {
            match options(Some(&format!("{base}?sslmode=disable&{query}"))) {
                Err(Failure::Usage(message)) => {
                    let key = query.split('=').next().unwrap_or_default();
                    assert!(message.contains(&format!("unknown parameter `{key}`")), "{message}");
                    assert!(!message.contains("hunter2"), "{message}");
                }
                Ok(_) => panic!("{query} was taken"),
                Err(other) => panic!("{query}: {other:?}"),
            }
        }
    }
}
