//! Connecting to the database named by `--database-url` / `DATABASE_URL`: PostgreSQL (`postgres://...`) or
//! SQLite (`sqlite://path`, `sqlite::memory:`).

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use outbox_core::store::{PgStore, SqliteStore, Store};
use sqlx::postgres::{PgConnectOptions, PgSslMode};
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
        // A connection kept for good: an in-memory database (`sqlite::memory:`) lives as long as one.
        Options::Sqlite(options) => SqlitePoolOptions::new()
            .max_connections(max_connections)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
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
            let (root_cert, env_mode) = known_parameters_only(url)?;
            let options = url.parse::<PgConnectOptions>().map_err(malformed)?;
            Ok(Options::Postgres(verified_as_libpq(options, root_cert, env_mode)))
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

/// libpq's parameters that sqlx does not read and that only tune the connection: ignored, with a warning naming
/// the parameter (never its value).
const IGNORED_LIBPQ_PARAMETERS: [&str; 14] = [
    "connect_timeout",
    "target_session_attrs",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
    "fallback_application_name",
    "client_encoding",
    "sslsni",
    "sslcompression",
    "load_balance_hosts",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
];

/// libpq's parameters that ask for a protection sqlx does not give: refused, so that the connection is never made
/// without it (`channel_binding=require`, which Neon's URLs carry, is taken as `prefer`: accepted, with a warning).
const UNSUPPORTED_LIBPQ_PARAMETERS: [&str; 8] = [
    "channel_binding",
    "sslpassword",
    "sslcrl",
    "sslcrldir",
    "gssencmode",
    "sslnegotiation",
    "requirepeer",
    "require_auth",
];

/// Checks the query of a `postgres://` URL: a parameter sqlx reads is taken; one of libpq's that only tunes the
/// connection is ignored with a warning; one that asks for a protection sqlx does not give (`sslpassword`,
/// `sslcrl`, `gssencmode=require`, `channel_binding=require`, ...) is refused, as is any other, so that a misspelt
/// `sslmdoe=require` does not connect without what it asks for. Values are never printed (sqlx would log them at
/// WARN, and `sslpassword` is a secret), nor the names of unknown parameters (a value with an unencoded `&` makes
/// its tail a name). Returns whether a root certificate is given (the URL's `sslrootcert`, or `PGSSLROOTCERT`), and
/// `PGSSLMODE`'s mode when the URL gives none.
fn known_parameters_only(url: &str) -> Result<(bool, Option<PgSslMode>), Failure> {
    let Ok(parsed) = url::Url::parse(url) else { return Ok((false, None)) }; // sqlx's parse reports it
    let mut root_cert = std::env::var_os("PGSSLROOTCERT").is_some_and(|value| !value.is_empty());
    let mut ssl_mode_given = false;
    for (position, (key, value)) in parsed.query_pairs().enumerate() {
        let key = key.as_ref();
        if let Some(setting) = key.strip_prefix("options[") {
            if setting.ends_with(']') {
                continue;
            }
        } else if POSTGRES_PARAMETERS.contains(&key) {
            root_cert |= matches!(key, "sslrootcert" | "ssl-root-cert" | "ssl-ca");
            ssl_mode_given |= matches!(key, "sslmode" | "ssl-mode");
            continue;
        } else if IGNORED_LIBPQ_PARAMETERS.contains(&key)
            || (key == "channel_binding" && !value.eq_ignore_ascii_case("require"))
        {
            tracing::warn!(parameter = key, "the database URL's libpq parameter is not supported by sqlx; ignored");
            continue;
        } else if key == "gssencmode" && value.eq_ignore_ascii_case("disable") {
            continue;
        } else if UNSUPPORTED_LIBPQ_PARAMETERS.contains(&key) {
            return Err(Failure::Usage(format!(
                "malformed database URL: libpq's `{key}` asks for what this client does not support (its value is \
                 not shown); remove it, or connect with sslmode=verify-full"
            )));
        }
        return Err(Failure::Usage(format!(
            "malformed database URL: its parameter number {} is unknown (neither its name nor its value is shown; a \
             value holding `&` must be percent-encoded as %26); known: {}",
            position + 1,
            POSTGRES_PARAMETERS.map(|name| if name == "options[" { "options[NAME]" } else { name }).join(", ")
        )));
    }
    let env_mode = match std::env::var("PGSSLMODE") {
        Ok(mode) if !ssl_mode_given => Some(mode.trim().parse::<PgSslMode>().map_err(|_| {
            Failure::Usage(
                "PGSSLMODE is not an sslmode (disable, allow, prefer, require, verify-ca, verify-full)".to_owned(),
            )
        })?),
        _ => None,
    };
    Ok((root_cert, env_mode))
}

/// `PGSSLMODE` as libpq reads it (spaces around it too, where sqlx falls back to `prefer`), and `sslmode=require`
/// with a root certificate checking the server's certificate, as libpq does (sqlx would accept any certificate).
fn verified_as_libpq(options: PgConnectOptions, root_cert: bool, env_mode: Option<PgSslMode>) -> PgConnectOptions {
    let options = match env_mode {
        Some(mode) => options.ssl_mode(mode),
        None => options,
    };
    if root_cert && matches!(options.get_ssl_mode(), PgSslMode::Require) {
        options.ssl_mode(PgSslMode::VerifyCa)
    } else {
        options
    }
}

#[cfg(test)]
mod tests {
    use super::{options, Options};
    use crate::Failure;

    #[test]
    fn parameters_sqlx_reads_are_taken_libpq_tuning_is_ignored_and_the_rest_refused_without_names_or_values() {
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
        // Parameters of libpq that only tune the connection, and a channel binding that may be done without.
        for query in
            ["connect_timeout=10", "target_session_attrs=read-write", "channel_binding=prefer", "gssencmode=disable"]
        {
            assert!(matches!(options(Some(&format!("{base}?{query}"))), Ok(Options::Postgres(_))), "{query}");
        }
        // Neither a value nor the name of an unknown parameter is shown: the name may be a value's tail.
        for (query, shown) in [
            ("sslpassword=hunter2", "libpq's `sslpassword`"),
            ("channel_binding=require", "libpq's `channel_binding`"),
            ("sslmdoe=require", "parameter number 2 is unknown"),
            ("options[x=hunter2", "parameter number 2 is unknown"),
            ("password=ab&hunter2", "parameter number 3 is unknown"),
        ] {
            match options(Some(&format!("{base}?sslmode=disable&{query}"))) {
                Err(Failure::Usage(message)) => {
                    assert!(message.contains(shown), "{message}");
                    assert!(!message.contains("hunter2"), "{message}");
                }
                Ok(_) => panic!("{query} was taken"),
                Err(other) => panic!("{query}: {other:?}"),
            }
        }
        // `require` with a CA checks the certificate, as libpq does.
        match options(Some(&format!("{base}?sslmode=require&sslrootcert=/ca.pem"))) {
            Ok(Options::Postgres(options)) => {
                assert!(matches!(options.get_ssl_mode(), sqlx::postgres::PgSslMode::VerifyCa));
            }
            _ => panic!("not taken"),
        }
    }
}
