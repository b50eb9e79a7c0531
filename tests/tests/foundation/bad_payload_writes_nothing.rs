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
