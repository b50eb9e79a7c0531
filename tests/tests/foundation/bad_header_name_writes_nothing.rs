use outbox_core::{Error, NewEvent, Outbox};
use outbox_tests::pg::TestDatabase;

use crate::events::{count_events, payment};

#[tokio::test]
async fn a_header_name_no_broker_accepts_is_a_one_line_error_before_any_write() {
    let db = TestDatabase::migrated().await;
    let good = NewEvent::new(&payment(1)).unwrap().with_header("tenant", "acme");
    let bad = NewEvent::new(&payment(2)).unwrap().with_header("correlation-id", "c-1").with_header("Tenant Id", "acme");
    let mut tx = db.pool.begin().await.unwrap();
    let error = Outbox::new().enqueue_events(&mut tx, vec![good.clone(), bad]).await.unwrap_err();
    assert!(matches!(&error, Error::InvalidEvent { event_type, .. } if event_type == "payment.paid"), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("header `Tenant Id`") && message.contains("lowercase"), "{message}");
    assert!(!message.contains('\n') && !message.contains("acme"), "one line, no value: {message}");
    tx.commit().await.unwrap();
    assert_eq!(count_events(&db.pool).await, 0, "nothing of the batch was written");

    let mut tx = db.pool.begin().await.unwrap();
    let ids = Outbox::new().enqueue_events(&mut tx, vec![good]).await.unwrap();
    tx.commit().await.unwrap();
    let headers: serde_json::Value = sqlx::query_scalar("SELECT headers FROM outbox_events WHERE id = $1")
        .bind(ids[0])
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(headers, serde_json::json!({"tenant": "acme"}));
}
