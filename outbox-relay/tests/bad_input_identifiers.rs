//! Identifiers taken from configuration are validated before any SQL runs. The only one there is, the NOTIFY
//! channel (`Outbox::with_notify_channel`, `RelayConfig`'s `Wakeup::Notify`, `Store::listen`, `outbox relay
//! --notify`; the table and schema names are fixed), refuses injection strings, quoting, dashes, the empty name,
//! names over 63 bytes, non-ASCII letters, NUL and newlines with a one-line error, and nothing is executed: the
//! outbox table and its rows are still there. Plain names up to 63 characters are accepted.

mod common;

use common::{enqueue, event};
use outbox_core::store::{PgStore, Store};
use outbox_core::Outbox;
use outbox_relay::{RelayConfig, Wakeup};
use outbox_tests::pg::TestDatabase;

/// Names that would need quoting, or could break out of it.
fn hostile() -> Vec<String> {
    [
        "x; DROP TABLE outbox_events",
        "outbox_events; DROP TABLE outbox_events; --",
        "' OR 1=1 --",
        "\"quoted\"",
        "x\"; DROP TABLE outbox_events; --",
        "a-b",
        "",
        "Outbox",
        "1abc",
        "événements",
        "a\0b",
        "a\nb",
        "a b",
    ]
    .into_iter()
    .map(str::to_owned)
    .chain([&"a".repeat(64), &"a".repeat(10_000)].map(String::clone))
    .collect()
}

async fn table_intact(db: &TestDatabase, rows: i64) {
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events").fetch_one(&db.pool).await.expect("table");
    assert_eq!(count, rows, "the outbox table changed");
}

#[tokio::test]
async fn hostile_channel_names_are_refused_with_one_line_before_any_sql_runs() {
    let db = TestDatabase::migrated().await;
    enqueue(&db.pool, &[event("a", 0), event("b", 0)]).await;
    let store = PgStore::new(db.pool.clone());
    for name in hostile() {
        let error = Outbox::new().with_notify_channel(&name).map(|_| ()).expect_err(&format!("{name:?} accepted"));
        let message = error.to_string();
        assert!(message.starts_with("invalid identifier"), "{name:?}: {message}");
        assert!(!message.contains(['\n', '\r', '\0']), "{name:?}: not one printable line: {message:?}");

        let error = RelayConfig::builder().wakeup(Wakeup::Notify { channel: name.clone() }).build().unwrap_err();
        let message = error.to_string();
        assert!(message.contains("`wakeup`"), "{name:?}: {message}");
        assert!(!message.contains(['\n', '\r', '\0']), "{name:?}: not one printable line: {message:?}");

        let refused = store.listen(&name).await.map(|_| ()).expect_err(&format!("LISTEN {name:?} accepted"));
        assert!(matches!(refused, outbox_core::Error::InvalidIdentifier(_)), "{name:?}: {refused}");
    }
    table_intact(&db, 2).await;
    for name in ["outbox_events", "_x", "billing_outbox_2", &"a".repeat(63)] {
        assert!(Outbox::new().with_notify_channel(name).is_ok(), "{name} refused");
        assert!(RelayConfig::builder().wakeup(Wakeup::Notify { channel: name.to_owned() }).build().is_ok());
    }
}

#[tokio::test]
async fn the_cli_refuses_hostile_channel_names_with_exit_2_and_one_line() {
    let db = TestDatabase::migrated().await;
    enqueue(&db.pool, &[event("a", 0), event("b", 0), event("c", 0)]).await;
    // NUL cannot be passed in a process argument; every other name can.
    for name in hostile().into_iter().filter(|name| !name.contains('\0')) {
        let output =
            outbox_tests::outbox!().database(&db.url).run(["relay", "--sink", "stdout", &format!("--notify={name}")]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{name:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{name:?}: not one line: {stderr}");
        assert!(stderr.starts_with("error: ") && stderr.contains("`wakeup`"), "{name:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{name:?}: published something");
    }
    table_intact(&db, 3).await;
    let pending: i64 =
        sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE status = 'pending' AND lease_epoch = 0")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(pending, 3, "an event was claimed");
}
