//! `OutboxTransaction`: events buffered and written with the `COMMIT`, in one round trip, sharing the domain
//! change's fate whatever happens.

use outbox_core::{NewEvent, Outbox};
use outbox_tests::pg::TestDatabase;
use serde_json::json;
use sqlx::Row;

use crate::events::{count_events, create_payments, payment, payment_status};

#[tokio::test]
async fn commit_writes_the_domain_change_and_every_buffered_event() {
    let db = TestDatabase::migrated().await;
    create_payments(&db.pool, &[1, 2, 3, 7]).await;
    let mut tx = Outbox::new().begin(&db.pool).await.unwrap();
    sqlx::query("UPDATE payments SET status = \'paid\' WHERE id = 7").execute(&mut *tx).await.unwrap();
    let first = tx.enqueue(&payment(7)).unwrap();
    let more = tx.enqueue_all(&[payment(8), payment(9)]).unwrap();
    assert_eq!(tx.buffered(), 3);
    assert_eq!(count_events(&db.pool).await, 0, "nothing is written before the commit");
    let ids = tx.commit().await.unwrap();
    assert_eq!(ids, [vec![first], more].concat());
    assert_eq!(payment_status(&db.pool, 7).await, "paid");
    let rows = sqlx::query(
        "SELECT id, aggregate_id, schema_version, payload, sensitive_paths, status, partition,
                outbox_partition_of(aggregate_type, aggregate_id) AS expected_partition
           FROM outbox_events ORDER BY seq",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(rows.iter().map(|r| r.get::<uuid::Uuid, _>("id")).collect::<Vec<_>>(), ids, "in enqueue order");
    let row = &rows[0];
    assert_eq!(row.get::<String, _>("aggregate_id"), "7");
    assert_eq!(row.get::<i32, _>("schema_version"), 2);
    assert_eq!(
        row.get::<serde_json::Value, _>("payload"),
        json!({"payment_id": 7, "order_id": 70, "payer_email": "payer7@example.com"})
    );
    assert_eq!(row.get::<serde_json::Value, _>("sensitive_paths"), json!(["/payer_email"]));
    assert_eq!(row.get::<String, _>("status"), "pending");
    assert_eq!(row.get::<i16, _>("partition"), row.get::<i16, _>("expected_partition"));
}

#[tokio::test]
async fn its_debug_output_counts_the_buffered_events_and_never_shows_their_payloads() {
    let db = TestDatabase::migrated().await;
    let mut tx = Outbox::new().begin(&db.pool).await.unwrap();
    tx.enqueue_all(&[payment(7), payment(8)]).unwrap();
    for output in [format!("{tx:?}"), format!("{tx:#?}")] {
        assert!(!output.contains("payer7@example.com") && !output.contains("payer8@example.com"), "{output}");
        assert!(!output.contains("order_id"), "the payload is printed: {output}");
        assert!(output.contains("events: 2"), "the buffered events are not counted: {output}");
    }
    tx.rollback().await.unwrap();
}

#[tokio::test]
async fn dropping_it_without_commit_rolls_everything_back() {
    let db = TestDatabase::migrated().await;
    create_payments(&db.pool, &[1, 2, 3, 7]).await;
    {
        let mut tx = Outbox::new().begin(&db.pool).await.unwrap();
        sqlx::query("UPDATE payments SET status = \'paid\' WHERE id = 1").execute(&mut *tx).await.unwrap();
        tx.enqueue(&payment(1)).unwrap();
    }
    assert_eq!(count_events(&db.pool).await, 0);
    assert_eq!(payment_status(&db.pool, 1).await, "pending");
    // The pool hands out no connection left inside the dropped transaction.
    for _ in 0..5 {
        let open: bool = sqlx::query_scalar("SELECT pg_current_xact_id_if_assigned() IS NOT NULL")
            .fetch_one(&db.pool)
            .await
            .unwrap();
        assert!(!open);
    }
}

#[tokio::test]
async fn dropping_it_without_commit_returns_its_connection_to_the_pool_rolled_back() {
    let db = TestDatabase::migrated().await;
    create_payments(&db.pool, &[1]).await;
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(&db.url).await.unwrap();
    let session = || async { sqlx::query_scalar::<_, i32>("SELECT pg_backend_pid()").fetch_one(&pool).await.unwrap() };
    let before = session().await;
    for _ in 0..3 {
        let mut tx = Outbox::new().begin(&pool).await.unwrap();
        sqlx::query("UPDATE payments SET status = 'paid' WHERE id = 1").execute(&mut *tx).await.unwrap();
        tx.enqueue(&payment(1)).unwrap();
        drop(tx);
    }
    // The same session, not a new connection per dropped transaction, and nothing of them committed.
    assert_eq!(session().await, before);
    assert_eq!(payment_status(&pool, 1).await, "pending");
    assert_eq!(count_events(&pool).await, 0);
}

#[tokio::test]
async fn rollback_discards_the_change_and_the_events() {
    let db = TestDatabase::migrated().await;
    create_payments(&db.pool, &[1, 2, 3, 7]).await;
    let mut tx = Outbox::new().begin(&db.pool).await.unwrap();
    sqlx::query("UPDATE payments SET status = \'paid\' WHERE id = 2").execute(&mut *tx).await.unwrap();
    tx.enqueue(&payment(2)).unwrap();
    tx.rollback().await.unwrap();
    assert_eq!((count_events(&db.pool).await, payment_status(&db.pool, 2).await.as_str()), (0, "pending"));
}

#[tokio::test]
async fn a_failing_event_write_rolls_the_domain_change_back() {
    let db = TestDatabase::migrated().await;
    create_payments(&db.pool, &[1, 2, 3, 7]).await;
    sqlx::query("ALTER TABLE outbox_events ADD CONSTRAINT no_payment_3 CHECK (aggregate_id <> '3')")
        .execute(&db.pool)
        .await
        .unwrap();
    let mut tx = Outbox::new().begin(&db.pool).await.unwrap();
    sqlx::query("UPDATE payments SET status = \'paid\' WHERE id = 3").execute(&mut *tx).await.unwrap();
    tx.enqueue(&payment(3)).unwrap();
    let error = tx.commit().await.unwrap_err();
    assert!(error.to_string().contains("no_payment_3"), "{error}");
    assert_eq!((count_events(&db.pool).await, payment_status(&db.pool, 3).await.as_str()), (0, "pending"));
}

/// A commit the server refuses (a deferred constraint checked at `COMMIT`) rolled everything back, and says so: it is
/// a database error, not an unknown outcome.
#[tokio::test]
async fn a_commit_the_server_refuses_rolls_everything_back_and_is_not_reported_as_an_unknown_outcome() {
    let db = TestDatabase::migrated().await;
    create_payments(&db.pool, &[7]).await;
    sqlx::raw_sql("CREATE TABLE receipts (payment_id INT UNIQUE DEFERRABLE INITIALLY DEFERRED)")
        .execute(&db.pool)
        .await
        .unwrap();
    let mut tx = Outbox::new().begin(&db.pool).await.unwrap();
    sqlx::query("UPDATE payments SET status = 'paid' WHERE id = 7").execute(&mut *tx).await.unwrap();
    sqlx::query("INSERT INTO receipts VALUES (7), (7)").execute(&mut *tx).await.unwrap();
    tx.enqueue(&payment(7)).unwrap();
    let error = tx.commit().await.unwrap_err();
    let outbox_core::Error::Database(sqlx::Error::Database(db_error)) = &error else {
        panic!("not the server's refusal: {error:?}")
    };
    assert_eq!(db_error.code().as_deref(), Some("23505"), "{error}");
    assert_eq!((count_events(&db.pool).await, payment_status(&db.pool, 7).await.as_str()), (0, "pending"));
}

/// The connection lost while the `COMMIT` is under way (here the server ends the session while a deferred trigger
/// runs at commit): the transaction may or may not have committed, so the commit says that it cannot tell, with
/// the events' ids to look for, rather than an error a caller would take for a rollback and retry.
#[tokio::test]
async fn a_connection_lost_while_the_commit_is_under_way_reports_an_unknown_outcome_with_the_event_ids() {
    let db = TestDatabase::migrated().await;
    create_payments(&db.pool, &[7]).await;
    sqlx::raw_sql(
        "CREATE TABLE slow_receipts (payment_id INT);
         CREATE FUNCTION slow_receipt() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM pg_sleep(30); RETURN NULL; END $$;
         CREATE CONSTRAINT TRIGGER slow_receipt AFTER INSERT ON slow_receipts DEFERRABLE INITIALLY DEFERRED
            FOR EACH ROW EXECUTE FUNCTION slow_receipt();",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let mut tx = Outbox::new().begin(&db.pool).await.unwrap();
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut *tx).await.unwrap();
    sqlx::query("UPDATE payments SET status = 'paid' WHERE id = 7").execute(&mut *tx).await.unwrap();
    sqlx::query("INSERT INTO slow_receipts VALUES (7)").execute(&mut *tx).await.unwrap();
    let id = tx.enqueue(&payment(7)).unwrap();
    let commit = tokio::spawn(tx.commit());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let waiting: Option<String> = sqlx::query_scalar("SELECT wait_event FROM pg_stat_activity WHERE pid = $1")
            .bind(pid)
            .fetch_one(&db.pool)
            .await
            .unwrap();
        if waiting.as_deref() == Some("PgSleep") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the commit never reached its deferred trigger");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    sqlx::query("SELECT pg_terminate_backend($1)").bind(pid).execute(&db.pool).await.unwrap();
    match commit.await.unwrap() {
        Err(outbox_core::Error::CommitOutcomeUnknown { ids, .. }) => assert_eq!(ids, [id]),
        other => panic!("not an unknown outcome: {other:?}"),
    }
}

/// A domain statement that failed, its error ignored, aborted the transaction: `COMMIT` would roll back and report
/// success, so the commit fails instead, with and without events.
#[tokio::test]
async fn a_commit_after_an_ignored_error_fails_instead_of_rolling_back_quietly() {
    let db = TestDatabase::migrated().await;
    create_payments(&db.pool, &[7]).await;
    for events in [0, 1] {
        let mut tx = Outbox::new().begin(&db.pool).await.unwrap();
        sqlx::query("UPDATE payments SET status = 'paid' WHERE id = 7").execute(&mut *tx).await.unwrap();
        let ignored = sqlx::query("SELECT 1 / 0").execute(&mut *tx).await;
        assert!(ignored.is_err());
        if events == 1 {
            tx.enqueue(&Noted { key: "n".to_owned() }).unwrap();
        }
        let error = tx.commit().await.expect_err("a commit of an aborted transaction reported success");
        assert!(error.to_string().contains("current transaction is aborted"), "{error}");
        assert_eq!(payment_status(&db.pool, 7).await, "pending");
    }
    assert_eq!(count_events(&db.pool).await, 0);
}

/// An event whose aggregate id and payload are one text of the test's choosing.
#[derive(serde::Serialize)]
struct Noted {
    key: String,
}

impl outbox_core::OutboxEvent for Noted {
    const EVENT_TYPE: &'static str = "note.written";
    const AGGREGATE_TYPE: &'static str = "note";
    const VERSION: u32 = 1;
    fn aggregate_id(&self) -> String {
        self.key.clone()
    }
}

/// Quotes of SQL, of dollar quoting and of array literals, a backslash, braces, commas, an unquoted `NULL`, spaces.
const HOSTILE: &str = "$o0$ '); DROP TABLE outbox_events; -- \\ \\\" \"{a,b}\" NULL $$ \u{e9} ";

#[tokio::test]
async fn hostile_values_are_stored_exactly_alone_and_together() {
    let db = TestDatabase::migrated().await;
    let event = NewEvent::new(&payment(4)).unwrap().with_header("x-note", HOSTILE);
    let mut tx = Outbox::new().begin(&db.pool).await.unwrap();
    tx.enqueue_event(event).unwrap();
    tx.commit().await.unwrap();
    let keys = [HOSTILE, "NULL", " ", "\\", "\""];
    let mut tx = Outbox::new().begin(&db.pool).await.unwrap();
    for key in keys {
        tx.enqueue_event(NewEvent::new(&Noted { key: key.to_owned() }).unwrap().with_header("x-note", key)).unwrap();
    }
    tx.commit().await.unwrap();
    let rows = sqlx::query("SELECT aggregate_id, payload, headers FROM outbox_events ORDER BY seq")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows[0].get::<serde_json::Value, _>("headers"), json!({"x-note": HOSTILE}));
    assert_eq!(rows.len(), 1 + keys.len());
    for (row, key) in rows[1..].iter().zip(keys) {
        assert_eq!(row.get::<String, _>("aggregate_id"), key);
        assert_eq!(row.get::<serde_json::Value, _>("payload"), json!({"key": key}));
        assert_eq!(row.get::<serde_json::Value, _>("headers"), json!({"x-note": key}));
    }
}

#[tokio::test]
async fn aggregate_ids_that_end_like_the_quote_tag_are_stored_exactly_alone_and_together() {
    let db = TestDatabase::migrated().await;
    let keys = ["x$o0", "$o1", "y$", "z$o2$o3"];
    let mut tx = Outbox::new().begin(&db.pool).await.unwrap();
    tx.enqueue(&Noted { key: keys[0].to_owned() }).unwrap();
    tx.commit().await.unwrap();
    let mut tx = Outbox::new().begin(&db.pool).await.unwrap();
    tx.enqueue_all(&keys[1..].iter().map(|key| Noted { key: (*key).to_owned() }).collect::<Vec<_>>()).unwrap();
    tx.commit().await.unwrap();
    let stored: Vec<String> =
        sqlx::query_scalar("SELECT aggregate_id FROM outbox_events ORDER BY seq").fetch_all(&db.pool).await.unwrap();
    assert_eq!(stored, keys);
}

#[tokio::test]
async fn an_event_with_a_refused_header_is_not_buffered() {
    let db = TestDatabase::migrated().await;
    let mut tx = Outbox::new().begin(&db.pool).await.unwrap();
    let refused = tx.enqueue_event(NewEvent::new(&payment(5)).unwrap().with_header("Tenant ID", "acme"));
    let error = refused.unwrap_err().to_string();
    assert!(error.contains("header `Tenant ID`") && !error.contains("acme"), "{error}");
    assert_eq!(tx.buffered(), 0);
    tx.commit().await.unwrap();
    assert_eq!(count_events(&db.pool).await, 0);
}

#[tokio::test]
async fn a_notifying_outbox_notifies_at_commit() {
    let db = TestDatabase::migrated().await;
    let mut listener = sqlx::postgres::PgListener::connect_with(&db.pool).await.unwrap();
    listener.listen(outbox_core::DEFAULT_CHANNEL).await.unwrap();
    let mut tx = Outbox::new().with_notify().begin(&db.pool).await.unwrap();
    tx.enqueue(&payment(5)).unwrap();
    tx.commit().await.unwrap();
    let notification = tokio::time::timeout(std::time::Duration::from_secs(5), listener.recv()).await;
    assert!(notification.is_ok(), "no notification after the commit");
}

#[tokio::test]
async fn a_transaction_begun_inside_it_is_a_savepoint_whose_commit_commits_nothing() {
    let db = TestDatabase::migrated().await;
    create_payments(&db.pool, &[7, 8]).await;
    let mut tx = Outbox::new().begin(&db.pool).await.unwrap();
    sqlx::query("UPDATE payments SET status = 'paid' WHERE id = 7").execute(&mut *tx).await.unwrap();
    tx.enqueue(&payment(7)).unwrap();
    // sqlx knows a transaction is open: this one is a savepoint, and its commit releases it.
    let mut inner = sqlx::Connection::begin(&mut *tx).await.unwrap();
    sqlx::query("UPDATE payments SET status = 'paid' WHERE id = 8").execute(&mut *inner).await.unwrap();
    inner.commit().await.unwrap();
    assert_eq!(payment_status(&db.pool, 7).await, "pending", "the inner commit committed the domain change");
    assert_eq!(payment_status(&db.pool, 8).await, "pending");
    drop(tx);
    assert_eq!(payment_status(&db.pool, 7).await, "pending");
    assert_eq!(payment_status(&db.pool, 8).await, "pending");
    assert_eq!(count_events(&db.pool).await, 0);

    // Committed with its events, savepoint included; the connection goes back to the pool fit for use.
    let mut tx = Outbox::new().begin(&db.pool).await.unwrap();
    let mut inner = sqlx::Connection::begin(&mut *tx).await.unwrap();
    sqlx::query("UPDATE payments SET status = 'paid' WHERE id = 8").execute(&mut *inner).await.unwrap();
    inner.commit().await.unwrap();
    tx.enqueue(&payment(8)).unwrap();
    tx.commit().await.unwrap();
    assert_eq!(payment_status(&db.pool, 8).await, "paid");
    assert_eq!(count_events(&db.pool).await, 1);
    for round in 0..3 {
        let mut tx = Outbox::new().begin(&db.pool).await.unwrap();
        sqlx::query("UPDATE payments SET status = 'refunded' WHERE id = 8").execute(&mut *tx).await.unwrap();
        tx.enqueue(&payment(8)).unwrap();
        tx.commit().await.unwrap();
        assert_eq!(count_events(&db.pool).await, 2 + round);
    }
}
