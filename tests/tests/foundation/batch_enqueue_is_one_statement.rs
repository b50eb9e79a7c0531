use outbox_core::{NewEvent, Outbox};
use outbox_tests::pg::TestDatabase;

use crate::events::{count_events, payment, Measured};

/// Counts INSERT statements on the outbox table, and the rows each one wrote, with a statement-level trigger.
async fn count_insert_statements(pool: &sqlx::PgPool) {
    sqlx::raw_sql(
        "CREATE TABLE insert_statements (rows_inserted BIGINT NOT NULL);
         CREATE FUNCTION count_insert_statement() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             INSERT INTO insert_statements SELECT count(*) FROM new_rows;
             RETURN NULL;
         END $$;
         CREATE TRIGGER count_insert_statements AFTER INSERT ON outbox_events
             REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION count_insert_statement();",
    )
    .execute(pool)
    .await
    .expect("install the statement counter");
}

#[tokio::test]
async fn batch_of_1000_events_is_written_by_one_statement() {
    let db = TestDatabase::migrated().await;
    count_insert_statements(&db.pool).await;
    let events: Vec<_> = (0..1000).map(payment).collect();

    let mut tx = db.pool.begin().await.unwrap();
    let ids = Outbox::new().enqueue_all(&mut tx, &events).await.unwrap();
    tx.commit().await.unwrap();

    let statements: Vec<i64> =
        sqlx::query_scalar("SELECT rows_inserted FROM insert_statements").fetch_all(&db.pool).await.unwrap();
    assert_eq!(statements, [1000], "one INSERT statement wrote all 1000 rows");
    assert_eq!(ids.len(), 1000);
    assert_eq!(count_events(&db.pool).await, 1000);
}

#[tokio::test]
async fn batch_ids_are_distinct_time_ordered_and_follow_insertion_order() {
    let db = TestDatabase::migrated().await;
    let events: Vec<_> = (0..1000).map(payment).collect();
    let mut tx = db.pool.begin().await.unwrap();
    let ids = Outbox::new().enqueue_all(&mut tx, &events).await.unwrap();
    tx.commit().await.unwrap();

    let mut sorted = ids.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, ids, "ids are distinct and ascending (UUID v7)");
    assert!(ids.iter().all(|id| id.get_version_num() == 7));

    let stored: Vec<(uuid::Uuid, String)> =
        sqlx::query_as("SELECT id, aggregate_id FROM outbox_events ORDER BY seq").fetch_all(&db.pool).await.unwrap();
    let stored_ids: Vec<_> = stored.iter().map(|(id, _)| *id).collect();
    assert_eq!(stored_ids, ids, "the sequence follows the order of the batch");
    let aggregates: Vec<_> = stored.iter().map(|(_, aggregate)| aggregate.clone()).collect();
    let expected: Vec<_> = (0..1000).map(|i| i.to_string()).collect();
    assert_eq!(aggregates, expected);
}

#[tokio::test]
async fn events_of_different_types_go_in_one_batch() {
    let db = TestDatabase::migrated().await;
    count_insert_statements(&db.pool).await;
    let batch = vec![
        NewEvent::new(&payment(1)).unwrap(),
        NewEvent::new(&Measured { sensor: "s1".into(), value: 1.5 }).unwrap(),
    ];
    let mut tx = db.pool.begin().await.unwrap();
    Outbox::new().enqueue_events(&mut tx, batch).await.unwrap();
    tx.commit().await.unwrap();
    let types: Vec<String> =
        sqlx::query_scalar("SELECT event_type FROM outbox_events ORDER BY seq").fetch_all(&db.pool).await.unwrap();
    assert_eq!(types, ["payment.paid", "sensor.measured"]);
    let statements: i64 =
        sqlx::query_scalar("SELECT count(*) FROM insert_statements").fetch_one(&db.pool).await.unwrap();
    assert_eq!(statements, 1);
}

#[tokio::test]
async fn empty_batch_writes_nothing() {
    let db = TestDatabase::migrated().await;
    count_insert_statements(&db.pool).await;
    let mut tx = db.pool.begin().await.unwrap();
    let ids = Outbox::new().enqueue_all(&mut tx, &Vec::<crate::events::PaymentPaid>::new()).await.unwrap();
    tx.commit().await.unwrap();
    assert!(ids.is_empty());
    let statements: i64 =
        sqlx::query_scalar("SELECT count(*) FROM insert_statements").fetch_one(&db.pool).await.unwrap();
    assert_eq!(statements, 0);
}
