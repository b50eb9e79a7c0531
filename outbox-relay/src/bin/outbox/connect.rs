//! Connecting to the database named by `--database-url` / `DATABASE_URL`.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

use crate::Failure;

/// Connects, sorting failures into bad input (no URL, a malformed one, a database that does not exist: exit 2)
/// and runtime failures (server unreachable: exit 1).
pub(crate) async fn connect(database_url: Option<&str>, max_connections: u32) -> Result<PgPool, Failure> {
    let options = options(database_url)?;
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(options)
        .await
        .map_err(|error| match &error {
            sqlx::Error::Database(db) if db.code().is_some_and(|code| code == "3D000") => {
                Failure::Usage(format!("missing database: {}", db.message()))
            }
            _ => Failure::Runtime(format!("cannot connect to the database: {error}")),
        })
}

/// Parses the URL without connecting.
pub(crate) fn options(database_url: Option<&str>) -> Result<PgConnectOptions, Failure> {
    let url = database_url
        .filter(|url| !url.is_empty())
        .ok_or_else(|| Failure::Usage("missing database: set DATABASE_URL or pass --database-url".to_owned()))?;
    let scheme = url.split_once("://").map(|(scheme, _)| scheme.to_ascii_lowercase());
    if !matches!(scheme.as_deref(), Some("postgres" | "postgresql")) {
        return Err(Failure::Usage("malformed database URL: expected postgres://USER@HOST/DATABASE".to_owned()));
    }
    url.parse::<PgConnectOptions>().map_err(|error| Failure::Usage(format!("malformed database URL: {error}")))
}
