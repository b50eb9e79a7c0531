//! SQLite for tests: a fresh database file per test, removed when the test is done.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use sqlx::SqlitePool;

/// A fresh SQLite database file with a pool connected to it; the file is deleted on drop.
#[derive(Debug)]
pub struct TestDatabase {
    /// A pool connected to the database.
    pub pool: SqlitePool,
    /// The database's URL (`sqlite://...`), for child processes such as the `outbox` binary.
    pub url: String,
    path: PathBuf,
}

impl TestDatabase {
    /// Creates an empty database file (the outbox tables are not migrated).
    ///
    /// # Panics
    ///
    /// When the file cannot be created.
    pub async fn create() -> Self {
        let path = std::env::temp_dir().join(format!("outbox-test-{}.db", uuid::Uuid::now_v7().simple()));
        let url = format!("sqlite://{}", path.display());
        let options = SqliteConnectOptions::from_str(&url)
            .expect("a valid SQLite URL")
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(10));
        let pool = SqlitePoolOptions::new().max_connections(8).connect_with(options).await.expect("open SQLite");
        Self { pool, url, path }
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

impl Drop for TestDatabase {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut path = self.path.clone().into_os_string();
            path.push(suffix);
            let _ = std::fs::remove_file(path);
        }
    }
}
