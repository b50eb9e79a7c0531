//! SQLite for tests: a fresh database file per test, removed when the test is done.

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use sqlx::SqlitePool;

/// A fresh SQLite database file with a pool connected to it; the file (with its `-wal` and `-shm` files) is
/// deleted on drop.
#[derive(Debug)]
pub struct TestDatabase {
    /// A pool connected to the database.
    pub pool: SqlitePool,
    /// The database's URL (`sqlite://...`), for child processes such as the `outbox` binary.
    pub url: String,
    /// The directory of the database file, removed with everything in it on drop.
    _dir: tempfile::TempDir,
}

impl TestDatabase {
    /// Creates an empty database file (the outbox tables are not migrated).
    ///
    /// # Panics
    ///
    /// When the file cannot be created.
    pub async fn create() -> Self {
        let dir = tempfile::Builder::new().prefix("outbox-test-").tempdir().expect("a directory for the database");
        let url = format!("sqlite://{}", dir.path().join("outbox.db").display());
        let options = SqliteConnectOptions::from_str(&url)
            .expect("a valid SQLite URL")
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(10));
        let pool = SqlitePoolOptions::new().max_connections(8).connect_with(options).await.expect("open SQLite");
        Self { pool, url, _dir: dir }
    }

    /// Creates a database with the outbox tables migrated.
    ///
    /// # Panics
    ///
    /// As [`create`](Self::create), and when the migrations fail.
    pub async fn migrated() -> Self {
        let db = Self::create().await;
        outbox_core::migrate(&db.pool).await.expect("outbox migrations");
        db
    }
}
