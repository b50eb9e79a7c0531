//! An `OutboxTransaction` whose events have sensitive fields sends them as parameters, then the commit: their
//! values are neither in the statement text sqlx logs (every statement at DEBUG, slow ones at WARN) nor in the one
//! PostgreSQL shows (`pg_stat_activity`, and its log of a failing statement).
//!
//! A test binary of its own: it captures sqlx's log with a subscriber of its thread, which `tracing` may not ask
//! about a statement's log line first registered by a test on another thread of the same process.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox_core::{Outbox, OutboxEvent};
use outbox_tests::pg::TestDatabase;
use tracing_subscriber::util::SubscriberInitExt;

#[derive(serde::Serialize)]
struct SignedUp {
    user_id: i64,
    email: String,
}

impl OutboxEvent for SignedUp {
    const EVENT_TYPE: &'static str = "user.signed_up";
    const AGGREGATE_TYPE: &'static str = "user";
    const VERSION: u32 = 1;

    fn aggregate_id(&self) -> String {
        self.user_id.to_string()
    }

    fn sensitive_paths() -> Vec<String> {
        vec!["/email".to_owned()]
    }
}

const EMAIL: &str = "ada@example.com";

/// What was logged, as text.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Seen while the event's write waits for a lock the test holds.
#[tokio::test]
async fn sensitive_values_never_travel_as_statement_text() {
    let captured = Captured::default();
    let writer = captured.clone();
    let _logs = tracing_subscriber::fmt()
        .with_max_level(tracing_subscriber::filter::LevelFilter::DEBUG)
        .with_writer(move || writer.clone())
        .set_default();
    let db = TestDatabase::migrated().await;
    sqlx::raw_sql("CREATE TABLE users (id BIGINT PRIMARY KEY); INSERT INTO users VALUES (7);")
        .execute(&db.pool)
        .await
        .unwrap();
    let mut lock = db.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE outbox_events IN SHARE MODE").execute(&mut *lock).await.unwrap();
    let mut tx = Outbox::new().begin(&db.pool).await.unwrap();
    let backend: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut *tx).await.unwrap();
    sqlx::query("UPDATE users SET id = 7 WHERE id = 7").execute(&mut *tx).await.unwrap();
    let id = tx.enqueue(&SignedUp { user_id: 7, email: EMAIL.to_owned() }).unwrap();
    let commit = tokio::spawn(tx.commit());
    let deadline = Instant::now() + Duration::from_secs(10);
    let waiting: String = loop {
        let query: Option<String> =
            sqlx::query_scalar("SELECT query FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'")
                .bind(backend)
                .fetch_optional(&db.pool)
                .await
                .unwrap();
        if let Some(query) = query {
            break query;
        }
        assert!(Instant::now() < deadline, "the event's write never waited for the lock");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    lock.rollback().await.unwrap();
    assert_eq!(commit.await.unwrap().unwrap(), [id]);
    assert!(waiting.contains("INSERT INTO outbox_events"), "the write waited: {waiting}");
    assert!(!waiting.contains(EMAIL), "the statement's text holds the sensitive value: {waiting}");
    let logged = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(logged.contains("INSERT INTO outbox_events"), "sqlx's statement log was not captured: {logged}");
    assert!(!logged.contains(EMAIL), "sqlx logged the sensitive value: {logged}");
    let stored: serde_json::Value =
        sqlx::query_scalar("SELECT payload FROM outbox_events").fetch_one(&db.pool).await.unwrap();
    assert_eq!(stored["email"], EMAIL);
}
