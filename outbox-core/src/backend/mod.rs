//! The databases the outbox runs on. Each backend keeps all of its SQL in its own module.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use uuid::Uuid;

use crate::error::{Error, Result};
use crate::new_event::NewEvent;

mod postgres;
mod sqlite;

pub use sqlite::SqliteStore;

/// A boxed, sendable future, as the backends return them.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A database the outbox tables live in: PostgreSQL (production) or SQLite (embedded, one relay per file).
///
/// The trait is sealed, and its methods are the backend's SQL, which only this crate can call (each takes a token
/// only it can make): `insert_events` on a bare connection would write events outside any transaction.
pub trait Backend: sqlx::Database + sealed::Sealed {
    /// Inserts `events` in one statement, in order, and wakes the relay on `notify` when the transaction commits.
    #[doc(hidden)]
    fn insert_events<'c>(
        _: Internal,
        conn: &'c mut Self::Connection,
        events: &'c [NewEvent],
        notify: Option<&'c str>,
    ) -> BoxFuture<'c, Result<()>>;

    /// Inserts `(consumer, event_id)` into the inbox unless it is there; `true` when it was inserted.
    #[doc(hidden)]
    fn inbox_record<'c>(
        _: Internal,
        conn: &'c mut Self::Connection,
        consumer: &'c str,
        event_id: Uuid,
    ) -> BoxFuture<'c, Result<bool>>;

    /// Deletes up to `limit` inbox records of `consumer` older than `age`; returns how many.
    #[doc(hidden)]
    fn inbox_purge<'a>(
        _: Internal,
        pool: &'a sqlx::Pool<Self>,
        consumer: &'a str,
        age: Duration,
        limit: u32,
    ) -> BoxFuture<'a, Result<u64>>;

    /// Applies the outbox migrations that are not applied yet, under a lock so concurrent callers wait.
    #[doc(hidden)]
    fn migrate(_: Internal, pool: &sqlx::Pool<Self>) -> BoxFuture<'_, Result<()>>;
}

pub(crate) use sealed::Internal;

mod sealed {
    pub trait Sealed {}
    impl Sealed for sqlx::Postgres {}
    impl Sealed for sqlx::Sqlite {}

    /// The token every [`Backend`](super::Backend) method takes: nameable outside this crate (the trait is public)
    /// but not constructible there, so the backend's SQL is called only through the typed API.
    #[derive(Debug, Clone, Copy)]
    pub struct Internal(());

    impl Internal {
        pub(crate) const TOKEN: Self = Self(());
    }
}

/// Serializes a map or list of strings, which cannot fail.
pub(crate) fn json_text<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| String::from("null"))
}

/// The up-migrations of `migrator` not in `applied` (`(version, checksum)` rows), in order.
///
/// # Errors
///
/// [`Error::Migrate`](crate::Error::Migrate) when an applied migration's SQL changed since (its checksum differs).
/// Applied versions this build does not know (a newer build migrated the database) are left alone, so an older
/// build keeps running during a rolling deploy.
fn pending_migrations<'m>(
    migrator: &'m sqlx::migrate::Migrator,
    applied: &[(i64, Vec<u8>)],
) -> Result<Vec<&'m sqlx::migrate::Migration>> {
    let mut pending = Vec::new();
    for migration in migrator.iter().filter(|m| !m.migration_type.is_down_migration()) {
        match applied.iter().find(|(version, _)| *version == migration.version) {
            Some((_, checksum)) if *checksum == *migration.checksum => {}
            Some(_) => return Err(Error::Migrate(sqlx::migrate::MigrateError::VersionMismatch(migration.version))),
            None => pending.push(migration),
        }
    }
    Ok(pending)
}
