use std::collections::HashMap;

use outbox_core::{Error, Outbox, OutboxEvent};
use outbox_tests::pg::TestDatabase;
use serde::Serialize;

use crate::events::{count_events, create_payments, payment, payment_status, Measured};

#[derive(Serialize)]
struct Tally {
    counts: HashMap<(u8, u8), u32>,
}

impl OutboxEvent for Tally {
    const EVENT_TYPE: &'static str = "tally.counted";
    const AGGREGATE_TYPE: &'static str = "tally";
    const VERSION: u32 = 1;

    fn aggregate_id(&self) -> String {
        "t".into()
    }
}

#[tokio::test]
async fn nan_payload_is_an_error_and_the_transaction_stays_usable() {
    let db = TestDatabase::migrated().await;
    create_payments(&db.pool, &[1]).await;
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query("UPDATE payments SET status = 'paid' WHERE id = 1").execute(&mut *tx).await.unwrap();
    let error = outbox_core::enqueue(&mut tx, &Measured { sensor: "s".into(), value: f64::NAN }).await.unwrap_err();
    assert!(
        matches!(&error, Error::NonFiniteNumber { event_type: "sensor.measured", path } if path == "/value"),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "event `sensor.measured` has a non-finite number at `/value`: JSON has no NaN or infinity"
    );
    // Nothing reached the database, so the caller's transaction is intact and can still commit.
    tx.commit().await.unwrap();
    assert_eq!(payment_status(&db.pool, 1).await, "paid");
    assert_eq!(count_events(&db.pool).await, 0);
}

#[tokio::test]
async fn map_with_non_string_keys_is_an_error_before_anything_is_written() {
    let db = TestDatabase::migrated().await;
    let mut tx = db.pool.begin().await.unwrap();
    let error = outbox_core::enqueue(&mut tx, &Tally { counts: HashMap::from([((1, 2), 3)]) }).await.unwrap_err();
    assert!(matches!(error, Error::Serialize { event_type: "tally.counted", .. }), "{error:?}");
    tx.commit().await.unwrap();
    assert_eq!(count_events(&db.pool).await, 0);
}

#[tokio::test]
async fn one_bad_event_fails_the_whole_batch_and_writes_none() {
    let db = TestDatabase::migrated().await;
    let events = vec![
        Measured { sensor: "a".into(), value: 1.0 },
        Measured { sensor: "b".into(), value: f64::INFINITY },
        Measured { sensor: "c".into(), value: 3.0 },
    ];
    let mut tx = db.pool.begin().await.unwrap();
    let error = Outbox::new().enqueue_all(&mut tx, &events).await.unwrap_err();
    assert!(matches!(error, Error::NonFiniteNumber { .. }), "{error:?}");
    tx.commit().await.unwrap();
    assert_eq!(count_events(&db.pool).await, 0);
    // The same batch without the bad event goes through.
    let mut tx = db.pool.begin().await.unwrap();
    Outbox::new().enqueue(&mut tx, &payment(1)).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(count_events(&db.pool).await, 1);
}

#[tokio::test]
async fn an_aggregate_id_with_a_nul_character_is_refused_before_anything_is_written() {
    #[derive(Serialize)]
    struct Keyed {
        key: String,
    }
    impl OutboxEvent for Keyed {
        const EVENT_TYPE: &'static str = "keyed.changed";
        const AGGREGATE_TYPE: &'static str = "keyed";
        const VERSION: u32 = 1;
        fn aggregate_id(&self) -> String {
            self.key.clone()
        }
    }
    let db = TestDatabase::migrated().await;
    create_payments(&db.pool, &[1]).await;
    let nul = Keyed { key: "k\0".into() };
    let mut tx = db.pool.begin().await.unwrap();
    let error = outbox_core::enqueue(&mut tx, &nul).await.unwrap_err();
    assert!(matches!(&error, Error::InvalidEvent { event_type, .. } if event_type == "keyed.changed"), "{error:?}");
    tx.commit().await.unwrap();
    // With the commit: refused when buffered, and the rest commits.
    let mut tx = Outbox::new().begin(&db.pool).await.unwrap();
    sqlx::query("UPDATE payments SET status = 'paid' WHERE id = 1").execute(&mut *tx).await.unwrap();
    assert!(tx.enqueue(&nul).is_err());
    tx.enqueue(&payment(1)).unwrap();
    tx.commit().await.unwrap();
    assert_eq!(payment_status(&db.pool, 1).await, "paid");
    assert_eq!(count_events(&db.pool).await, 1);
}

#[tokio::test]
async fn a_payload_string_with_a_nul_character_is_refused_by_its_pointer_before_anything_is_written() {
    #[derive(Serialize)]
    struct Noted {
        id: u32,
        note: String,
    }
    impl OutboxEvent for Noted {
        const EVENT_TYPE: &'static str = "noted.added";
        const AGGREGATE_TYPE: &'static str = "noted";
        const VERSION: u32 = 1;
        fn aggregate_id(&self) -> String {
            self.id.to_string()
        }
    }
    let db = TestDatabase::migrated().await;
    create_payments(&db.pool, &[1]).await;
    let nul = Noted { id: 1, note: "card 4111\0".into() };
    let mut tx = db.pool.begin().await.unwrap();
    let error = outbox_core::enqueue(&mut tx, &nul).await.unwrap_err();
    assert!(matches!(&error, Error::NulCharacter { event_type: "noted.added", path } if path == "/note"), "{error:?}");
    assert!(!error.to_string().contains("4111") && !error.to_string().contains('\n'), "{error}");
    // The transaction is untouched: the domain change still commits.
    sqlx::query("UPDATE payments SET status = 'paid' WHERE id = 1").execute(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(payment_status(&db.pool, 1).await, "paid");
    // With the commit: refused when buffered, and the rest commits.
    let mut tx = Outbox::new().begin(&db.pool).await.unwrap();
    assert!(matches!(tx.enqueue(&nul), Err(Error::NulCharacter { .. })));
    tx.enqueue(&payment(1)).unwrap();
    tx.commit().await.unwrap();
    assert_eq!(count_events(&db.pool).await, 1);
    // The same text without the NUL is stored as it was given.
    let mut tx = db.pool.begin().await.unwrap();
    outbox_core::enqueue(&mut tx, &Noted { id: 2, note: "a \\u0000 that is text".into() }).await.unwrap();
    tx.commit().await.unwrap();
    let note: String = sqlx::query_scalar("SELECT payload->>'note' FROM outbox_events WHERE aggregate_id = '2'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(note, "a \\u0000 that is text");
}
