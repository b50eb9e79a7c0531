use outbox_core::Outbox;
use outbox_tests::pg::TestDatabase;
use serde_json::json;
use sqlx::Row;

use crate::events::{count_events, create_payments, payment, payment_status};

#[tokio::test]
async fn committed_transaction_leaves_exactly_one_pending_row_with_the_event() {
    let db = TestDatabase::migrated().await;
    let mut tx = db.pool.begin().await.unwrap();
    let id = Outbox::new().enqueue(&mut tx, &payment(7)).await.unwrap();
    tx.commit().await.unwrap();

    let rows = sqlx::query(
        "SELECT id, event_type, aggregate_type, aggregate_id, schema_version, payload, headers, sensitive_paths,
                status, attempts, published_at IS NULL AS unpublished, next_attempt_at <= now() AS due
           FROM outbox_events",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!(row.get::<uuid::Uuid, _>("id"), id);
    assert_eq!(row.get::<String, _>("event_type"), "payment.paid");
    assert_eq!(row.get::<String, _>("aggregate_type"), "payment");
    assert_eq!(row.get::<String, _>("aggregate_id"), "7");
    assert_eq!(row.get::<i32, _>("schema_version"), 2);
    assert_eq!(
        row.get::<serde_json::Value, _>("payload"),
        json!({"payment_id": 7, "order_id": 70, "payer_email": "payer7@example.com"})
    );
    assert_eq!(row.get::<serde_json::Value, _>("headers"), json!({}));
    assert_eq!(row.get::<serde_json::Value, _>("sensitive_paths"), json!(["/payer_email"]));
    assert_eq!(row.get::<String, _>("status"), "pending");
    assert_eq!(row.get::<i32, _>("attempts"), 0);
    assert!(row.get::<bool, _>("unpublished"));
    assert!(row.get::<bool, _>("due"));
}

#[tokio::test]
async fn explicit_rollback_leaves_no_row() {
    let db = TestDatabase::migrated().await;
    let mut tx = db.pool.begin().await.unwrap();
    outbox_core::enqueue(&mut tx, &payment(1)).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(count_events(&db.pool).await, 0);
}

#[tokio::test]
async fn dropped_transaction_leaves_no_row() {
    let db = TestDatabase::migrated().await;
    {
        let mut tx = db.pool.begin().await.unwrap();
        outbox_core::enqueue(&mut tx, &payment(1)).await.unwrap();
        // Dropped without commit, as when a handler returns early with `?`.
    }
    assert_eq!(count_events(&db.pool).await, 0);
}

#[tokio::test]
async fn domain_update_and_event_commit_together_or_vanish_together() {
    let db = TestDatabase::migrated().await;
    create_payments(&db.pool, &[1, 2]).await;

    // Payment 1: update and event in one transaction, committed.
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query("UPDATE payments SET status = 'paid' WHERE id = $1").bind(1_i64).execute(&mut *tx).await.unwrap();
    outbox_core::enqueue(&mut tx, &payment(1)).await.unwrap();
    tx.commit().await.unwrap();

    // Payment 2: the same, rolled back after both writes.
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query("UPDATE payments SET status = 'paid' WHERE id = $1").bind(2_i64).execute(&mut *tx).await.unwrap();
    outbox_core::enqueue(&mut tx, &payment(2)).await.unwrap();
    tx.rollback().await.unwrap();

    assert_eq!(payment_status(&db.pool, 1).await, "paid");
    assert_eq!(payment_status(&db.pool, 2).await, "pending");
    let aggregates: Vec<String> =
        sqlx::query_scalar("SELECT aggregate_id FROM outbox_events").fetch_all(&db.pool).await.unwrap();
    assert_eq!(aggregates, ["1"]);
}

#[tokio::test]
async fn uncommitted_event_is_invisible_to_other_sessions() {
    let db = TestDatabase::migrated().await;
    let mut tx = db.pool.begin().await.unwrap();
    outbox_core::enqueue(&mut tx, &payment(1)).await.unwrap();
    assert_eq!(count_events(&db.pool).await, 0, "a relay must not see an event before its commit");
    tx.commit().await.unwrap();
    assert_eq!(count_events(&db.pool).await, 1);
}

#[tokio::test]
async fn headers_given_at_enqueue_are_stored_with_the_row() {
    let db = TestDatabase::migrated().await;
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let event = outbox_core::NewEvent::new(&payment(3)).unwrap().with_header("traceparent", traceparent);
    let mut tx = db.pool.begin().await.unwrap();
    Outbox::new().enqueue_events(&mut tx, [event]).await.unwrap();
    tx.commit().await.unwrap();
    let headers: serde_json::Value =
        sqlx::query_scalar("SELECT headers FROM outbox_events").fetch_one(&db.pool).await.unwrap();
    assert_eq!(headers, json!({ "traceparent": traceparent }));
}
