//! The backend-agnostic promises of enqueue, run on PostgreSQL and on SQLite alike.

macro_rules! enqueue_suite {
    ($database:ty, $migrations:literal) => {
        use outbox_core::{Error, Outbox};

        use crate::events::{payment, Measured};

        type Pool = sqlx::Pool<$database>;

        async fn count_events(pool: &Pool) -> i64 {
            sqlx::query_scalar("SELECT count(*) FROM outbox_events").fetch_one(pool).await.unwrap()
        }

        async fn create_payments(pool: &Pool, ids: &[i64]) {
            sqlx::query("CREATE TABLE payments (id BIGINT PRIMARY KEY, status TEXT NOT NULL)")
                .execute(pool)
                .await
                .unwrap();
            for id in ids {
                sqlx::query("INSERT INTO payments (id, status) VALUES ($1, 'pending')")
                    .bind(id)
                    .execute(pool)
                    .await
                    .unwrap();
            }
        }

        async fn payment_status(pool: &Pool, id: i64) -> String {
            sqlx::query_scalar("SELECT status FROM payments WHERE id = $1").bind(id).fetch_one(pool).await.unwrap()
        }

        #[tokio::test]
        async fn committed_event_is_one_pending_row_with_its_metadata() {
            let db = <TestDatabase>::migrated().await;
            let mut tx = db.pool.begin().await.unwrap();
            let id = Outbox::new().enqueue(&mut tx, &payment(7)).await.unwrap();
            tx.commit().await.unwrap();

            let rows: Vec<(String, String, String, String, i64, String, String, String, i64)> = sqlx::query_as(
                "SELECT CAST(id AS TEXT), event_type, aggregate_type, aggregate_id, CAST(schema_version AS BIGINT),
                        CAST(payload AS TEXT), CAST(sensitive_paths AS TEXT), status, CAST(attempts AS BIGINT)
                   FROM outbox_events",
            )
            .fetch_all(&db.pool)
            .await
            .unwrap();
            assert_eq!(rows.len(), 1);
            let (row_id, event_type, aggregate_type, aggregate_id, version, payload, sensitive, status, attempts) =
                rows.into_iter().next().unwrap();
            assert_eq!(row_id, id.to_string());
            assert_eq!(
                (event_type.as_str(), aggregate_type.as_str(), aggregate_id.as_str(), version),
                ("payment.paid", "payment", "7", 2)
            );
            let payload: serde_json::Value = serde_json::from_str(&payload).unwrap();
            assert_eq!(payload, serde_json::json!({"payment_id": 7, "order_id": 70, "payer_email": "payer7@example.com"}));
            let sensitive: serde_json::Value = serde_json::from_str(&sensitive).unwrap();
            assert_eq!(sensitive, serde_json::json!(["/payer_email"]));
            assert_eq!((status.as_str(), attempts), ("pending", 0));
        }

        #[tokio::test]
        async fn rolled_back_or_dropped_transaction_leaves_no_row() {
            let db = <TestDatabase>::migrated().await;
            let mut tx = db.pool.begin().await.unwrap();
            outbox_core::enqueue(&mut tx, &payment(1)).await.unwrap();
            tx.rollback().await.unwrap();
            {
                let mut tx = db.pool.begin().await.unwrap();
                outbox_core::enqueue(&mut tx, &payment(2)).await.unwrap();
            }
            assert_eq!(count_events(&db.pool).await, 0);
        }

        #[tokio::test]
        async fn domain_change_and_event_commit_or_vanish_together() {
            let db = <TestDatabase>::migrated().await;
            create_payments(&db.pool, &[1, 2]).await;
            for (id, commit) in [(1_i64, true), (2, false)] {
                let mut tx = db.pool.begin().await.unwrap();
                sqlx::query("UPDATE payments SET status = 'paid' WHERE id = $1")
                    .bind(id)
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                outbox_core::enqueue(&mut tx, &payment(id)).await.unwrap();
                if commit {
                    tx.commit().await.unwrap();
                } else {
                    tx.rollback().await.unwrap();
                }
            }
            assert_eq!(payment_status(&db.pool, 1).await, "paid");
            assert_eq!(payment_status(&db.pool, 2).await, "pending");
            let aggregates: Vec<String> =
                sqlx::query_scalar("SELECT aggregate_id FROM outbox_events").fetch_all(&db.pool).await.unwrap();
            assert_eq!(aggregates, ["1"]);
        }

        #[tokio::test]
        async fn batch_is_stored_in_order_with_distinct_time_ordered_ids() {
            let db = <TestDatabase>::migrated().await;
            let events: Vec<_> = (0..1000).map(payment).collect();
            let mut tx = db.pool.begin().await.unwrap();
            let ids = Outbox::new().enqueue_all(&mut tx, &events).await.unwrap();
            tx.commit().await.unwrap();

            let mut sorted = ids.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted, ids, "ids are distinct and ascending");
            let stored: Vec<(String, String)> =
                sqlx::query_as("SELECT CAST(id AS TEXT), aggregate_id FROM outbox_events ORDER BY seq")
                    .fetch_all(&db.pool)
                    .await
                    .unwrap();
            let expected: Vec<(String, String)> =
                ids.iter().zip(0..).map(|(id, n)| (id.to_string(), n.to_string())).collect();
            assert_eq!(stored, expected);
        }

        #[tokio::test]
        async fn unrepresentable_payload_is_an_error_and_writes_nothing() {
            let db = <TestDatabase>::migrated().await;
            let mut tx = db.pool.begin().await.unwrap();
            let error =
                outbox_core::enqueue(&mut tx, &Measured { sensor: "s".into(), value: f64::NEG_INFINITY }).await;
            assert!(matches!(error, Err(Error::NonFiniteNumber { .. })), "{error:?}");
            outbox_core::enqueue(&mut tx, &payment(1)).await.unwrap();
            tx.commit().await.unwrap();
            assert_eq!(count_events(&db.pool).await, 1, "only the good event, in the still usable transaction");
        }

        #[tokio::test]
        async fn migrating_twice_is_harmless_and_keeps_the_data() {
            let db = <TestDatabase>::migrated().await;
            let mut tx = db.pool.begin().await.unwrap();
            outbox_core::enqueue(&mut tx, &payment(1)).await.unwrap();
            tx.commit().await.unwrap();
            outbox_core::migrate(&db.pool).await.unwrap();
            outbox_core::migrate(&db.pool).await.unwrap();
            assert_eq!(count_events(&db.pool).await, 1);
            let recorded: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {}", outbox_core::MIGRATIONS_TABLE))
                .fetch_one(&db.pool)
                .await
                .unwrap();
            let known = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../migrations/", $migrations)).unwrap().count();
            assert_eq!(recorded, i64::try_from(known).unwrap(), "each migration recorded once");
        }
    };
}

mod postgres {
    use outbox_tests::pg::TestDatabase;
    enqueue_suite!(sqlx::Postgres, "postgres");
}

mod sqlite {
    use outbox_tests::sqlite::TestDatabase;
    enqueue_suite!(sqlx::Sqlite, "sqlite");
}
