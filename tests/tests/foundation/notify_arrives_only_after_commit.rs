use std::time::Duration;

use outbox_core::{Outbox, DEFAULT_CHANNEL};
use outbox_tests::pg::TestDatabase;
use sqlx::postgres::PgListener;

use crate::events::payment;

/// How long a notification that should not come is waited for.
const SILENCE: Duration = Duration::from_millis(500);

async fn listener(db: &TestDatabase, channel: &str) -> PgListener {
    let mut listener = PgListener::connect(&db.url).await.unwrap();
    listener.listen(channel).await.unwrap();
    listener
}

#[tokio::test]
async fn notification_arrives_after_commit_and_not_before() {
    let db = TestDatabase::migrated().await;
    let mut listener = listener(&db, DEFAULT_CHANNEL).await;
    let outbox = Outbox::new().with_notify();

    let mut tx = db.pool.begin().await.unwrap();
    outbox.enqueue_all(&mut tx, &[payment(1), payment(2)]).await.unwrap();
    assert!(tokio::time::timeout(SILENCE, listener.recv()).await.is_err(), "notified before commit");
    tx.commit().await.unwrap();

    let notification = tokio::time::timeout(Duration::from_secs(10), listener.recv())
        .await
        .expect("no notification within 10 s of the commit")
        .unwrap();
    assert_eq!(notification.channel(), DEFAULT_CHANNEL);
    assert!(tokio::time::timeout(SILENCE, listener.recv()).await.is_err(), "one notification per transaction");
}

#[tokio::test]
async fn rolled_back_transaction_notifies_nobody() {
    let db = TestDatabase::migrated().await;
    let mut listener = listener(&db, DEFAULT_CHANNEL).await;
    let mut tx = db.pool.begin().await.unwrap();
    Outbox::new().with_notify().enqueue(&mut tx, &payment(1)).await.unwrap();
    tx.rollback().await.unwrap();
    assert!(tokio::time::timeout(SILENCE, listener.recv()).await.is_err(), "a rolled back event woke the relay");
}

#[tokio::test]
async fn notifications_are_off_by_default() {
    let db = TestDatabase::migrated().await;
    let mut listener = listener(&db, DEFAULT_CHANNEL).await;
    let mut tx = db.pool.begin().await.unwrap();
    Outbox::new().enqueue(&mut tx, &payment(1)).await.unwrap();
    tx.commit().await.unwrap();
    assert!(tokio::time::timeout(SILENCE, listener.recv()).await.is_err());
}

#[tokio::test]
async fn custom_channel_is_notified_and_unsafe_names_are_refused() {
    let db = TestDatabase::migrated().await;
    let mut listener = listener(&db, "billing_outbox").await;
    let outbox = Outbox::new().with_notify_channel("billing_outbox").unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    outbox.enqueue(&mut tx, &payment(1)).await.unwrap();
    tx.commit().await.unwrap();
    let notification = tokio::time::timeout(Duration::from_secs(10), listener.recv()).await.unwrap().unwrap();
    assert_eq!(notification.channel(), "billing_outbox");

    let error = Outbox::new().with_notify_channel("x; DROP TABLE outbox_events").unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid identifier `x; DROP TABLE outbox_events`: use 1 to 63 characters of [a-z0-9_], starting with a letter or `_`"
    );
}
