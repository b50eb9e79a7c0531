//! The consumer inbox, on PostgreSQL and on SQLite: each event's effect happens once per consumer, whether the
//! consumer opens the transaction itself (`Inbox::begin`) or hands a received message to `Inbox::consume`.

use outbox_core::OutboxEvent;
use serde::{Deserialize, Serialize};

/// The event `Inbox::consume` decodes from a received message.
#[derive(Serialize, Deserialize, outbox_core::schemars::JsonSchema, OutboxEvent)]
#[schemars(crate = "outbox_core::schemars")]
#[outbox(event_type = "ticket.sold", aggregate = "ticket", version = 1)]
struct TicketSold {
    #[outbox(aggregate_id)]
    ticket: i64,
}

/// A broker message of `TicketSold`, as the relay publishes it to Kafka (binary mode).
fn ticket_sold<'a>(event_id: &'a str, body: &'a str) -> outbox_core::consume::Received<'a> {
    outbox_core::consume::Received::new(body.as_bytes())
        .header("ce_id", event_id)
        .header("ce_type", "ticket.sold")
        .header("ce_schemaversion", "1")
        .header("content-type", "application/json")
}

macro_rules! inbox_suite {
    ($database:ty, $age_two_days:literal) => {
        use std::time::Duration;

        use outbox_core::inbox::Inbox;
        use uuid::Uuid;

        type Pool = sqlx::Pool<$database>;

        /// The consumer's own effect: one ledger line per processed event.
        async fn create_ledger(pool: &Pool) {
            sqlx::query("CREATE TABLE ledger (event_id TEXT NOT NULL, consumer TEXT NOT NULL)")
                .execute(pool)
                .await
                .unwrap();
        }

        async fn ledger_lines(pool: &Pool, event_id: Uuid) -> i64 {
            sqlx::query_scalar("SELECT count(*) FROM ledger WHERE event_id = $1")
                .bind(event_id.to_string())
                .fetch_one(pool)
                .await
                .unwrap()
        }

        /// Processes a delivery: `true` when the effect ran, `false` for a duplicate.
        async fn handle(inbox: &Inbox, pool: &Pool, event_id: Uuid, pause: Duration) -> bool {
            let Some(mut tx) = inbox.begin(pool, event_id).await.unwrap() else {
                return false;
            };
            sqlx::query("INSERT INTO ledger (event_id, consumer) VALUES ($1, $2)")
                .bind(event_id.to_string())
                .bind(inbox.consumer())
                .execute(&mut *tx)
                .await
                .unwrap();
            tokio::time::sleep(pause).await;
            tx.commit().await.unwrap();
            true
        }

        #[tokio::test]
        async fn second_delivery_is_skipped_and_reported_as_a_duplicate() {
            let db = <TestDatabase>::migrated().await;
            create_ledger(&db.pool).await;
            let inbox = Inbox::new("billing").unwrap();
            let event_id = Uuid::now_v7();
            assert_eq!(handle(&inbox, &db.pool, event_id, Duration::ZERO).await, true);
            assert_eq!(handle(&inbox, &db.pool, event_id, Duration::ZERO).await, false);
            assert_eq!(ledger_lines(&db.pool, event_id).await, 1);
        }

        #[tokio::test]
        async fn concurrent_deliveries_of_one_event_have_one_effect() {
            let db = <TestDatabase>::migrated().await;
            create_ledger(&db.pool).await;
            let inbox = Inbox::new("billing").unwrap();
            let event_id = Uuid::now_v7();
            let (first, second) = tokio::join!(
                handle(&inbox, &db.pool, event_id, Duration::from_millis(300)),
                handle(&inbox, &db.pool, event_id, Duration::from_millis(300)),
            );
            let mut outcomes = [first, second];
            outcomes.sort();
            assert_eq!(outcomes, [false, true]);
            assert_eq!(ledger_lines(&db.pool, event_id).await, 1);
        }

        #[tokio::test]
        async fn handler_error_rolls_back_effect_and_record_so_a_retry_runs_again() {
            let db = <TestDatabase>::migrated().await;
            create_ledger(&db.pool).await;
            let inbox = Inbox::new("billing").unwrap();
            let event_id = Uuid::now_v7();
            {
                let mut tx = inbox.begin(&db.pool, event_id).await.unwrap().expect("a first delivery");
                sqlx::query("INSERT INTO ledger (event_id, consumer) VALUES ($1, 'billing')")
                    .bind(event_id.to_string())
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                // The handler fails here: `tx` is dropped without a commit.
            }
            assert_eq!(ledger_lines(&db.pool, event_id).await, 0, "the effect rolled back");
            assert_eq!(handle(&inbox, &db.pool, event_id, Duration::ZERO).await, true);
            assert_eq!(ledger_lines(&db.pool, event_id).await, 1);
        }

        /// `Inbox::consume`'s handler: one ledger line for the decoded ticket, in the inbox's transaction.
        async fn sell(
            tx: &mut sqlx::Transaction<'static, $database>,
            sold: super::TicketSold,
            consumer: &str,
        ) -> Result<i64, outbox_core::Error> {
            sqlx::query("INSERT INTO ledger (event_id, consumer) VALUES ($1, $2)")
                .bind(format!("ticket-{}", sold.ticket))
                .bind(consumer)
                .execute(&mut **tx)
                .await?;
            Ok(sold.ticket)
        }

        async fn ticket_lines(pool: &Pool, ticket: i64) -> i64 {
            sqlx::query_scalar("SELECT count(*) FROM ledger WHERE event_id = $1")
                .bind(format!("ticket-{ticket}"))
                .fetch_one(pool)
                .await
                .unwrap()
        }

        #[tokio::test]
        async fn consume_runs_the_handler_once_per_consumer_and_event_id() {
            let db = <TestDatabase>::migrated().await;
            create_ledger(&db.pool).await;
            let (first, second) = (Uuid::now_v7().to_string(), Uuid::now_v7().to_string());
            let billing = Inbox::new("billing").unwrap();
            let message = super::ticket_sold(&first, r#"{"ticket":7}"#);
            let ran =
                billing.consume(&db.pool, &message, |tx, _event_id, sold| Box::pin(sell(tx, sold, "billing"))).await;
            assert_eq!(ran.unwrap(), Some(7), "the first delivery runs the handler with the decoded event");
            let again =
                billing.consume(&db.pool, &message, |tx, _event_id, sold| Box::pin(sell(tx, sold, "billing"))).await;
            assert_eq!(again.unwrap(), None, "a redelivery of the same event id is skipped");
            assert_eq!(ticket_lines(&db.pool, 7).await, 1);

            let shipping = Inbox::new("shipping").unwrap();
            let ran =
                shipping.consume(&db.pool, &message, |tx, _event_id, sold| Box::pin(sell(tx, sold, "shipping"))).await;
            assert_eq!(ran.unwrap(), Some(7), "another consumer runs its handler for the same event");
            // Another event with the same payload is another delivery to process.
            let other = super::ticket_sold(&second, r#"{"ticket":7}"#);
            let ran =
                billing.consume(&db.pool, &other, |tx, _event_id, sold| Box::pin(sell(tx, sold, "billing"))).await;
            assert_eq!(ran.unwrap(), Some(7), "another event id runs the handler");
            assert_eq!(ticket_lines(&db.pool, 7).await, 3, "one effect per (consumer, event id)");
        }

        #[tokio::test]
        async fn consume_rolls_back_a_failed_handler_so_a_retry_runs_it_again() {
            let db = <TestDatabase>::migrated().await;
            create_ledger(&db.pool).await;
            let event_id = Uuid::now_v7().to_string();
            let billing = Inbox::new("billing").unwrap();
            let message = super::ticket_sold(&event_id, r#"{"ticket":9}"#);
            let failed = billing
                .consume(&db.pool, &message, |tx, _event_id, sold| {
                    Box::pin(async move {
                        sell(tx, sold, "billing").await?;
                        Err::<i64, _>(outbox_core::Error::InvalidConsumer("the handler failed after its write".into()))
                    })
                })
                .await;
            assert!(failed.is_err(), "the handler's error is returned");
            assert_eq!(ticket_lines(&db.pool, 9).await, 0, "the handler's write rolled back");
            let records: i64 =
                sqlx::query_scalar("SELECT count(*) FROM outbox_inbox").fetch_one(&db.pool).await.unwrap();
            assert_eq!(records, 0, "the inbox record rolled back with it");

            let retry =
                billing.consume(&db.pool, &message, |tx, _event_id, sold| Box::pin(sell(tx, sold, "billing"))).await;
            assert_eq!(retry.unwrap(), Some(9), "the redelivery after the failure runs the handler");
            let again =
                billing.consume(&db.pool, &message, |tx, _event_id, sold| Box::pin(sell(tx, sold, "billing"))).await;
            assert_eq!(again.unwrap(), None, "and the one after a success does not");
            assert_eq!(ticket_lines(&db.pool, 9).await, 1);
        }

        #[tokio::test]
        async fn each_consumer_processes_the_event_once() {
            let db = <TestDatabase>::migrated().await;
            create_ledger(&db.pool).await;
            let event_id = Uuid::now_v7();
            for consumer in ["billing", "shipping"] {
                let inbox = Inbox::new(consumer).unwrap();
                assert_eq!(handle(&inbox, &db.pool, event_id, Duration::ZERO).await, true);
                assert_eq!(handle(&inbox, &db.pool, event_id, Duration::ZERO).await, false);
            }
            assert_eq!(ledger_lines(&db.pool, event_id).await, 2);
        }

        #[tokio::test]
        async fn record_in_the_callers_transaction_commits_with_it() {
            let db = <TestDatabase>::migrated().await;
            let inbox = Inbox::new("billing").unwrap();
            let event_id = Uuid::now_v7();
            let mut tx = db.pool.begin().await.unwrap();
            assert!(inbox.record(&mut tx, event_id).await.unwrap());
            tx.rollback().await.unwrap();
            let mut tx = db.pool.begin().await.unwrap();
            assert!(inbox.record(&mut tx, event_id).await.unwrap(), "the rolled back record is gone");
            tx.commit().await.unwrap();
            let mut tx = db.pool.begin().await.unwrap();
            assert!(!inbox.record(&mut tx, event_id).await.unwrap());
        }

        #[tokio::test]
        async fn purge_deletes_only_old_records_of_its_consumer() {
            let db = <TestDatabase>::migrated().await;
            let billing = Inbox::new("billing").unwrap();
            let shipping = Inbox::new("shipping").unwrap();
            let (old, recent, other) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
            let mut tx = db.pool.begin().await.unwrap();
            billing.record(&mut tx, old).await.unwrap();
            billing.record(&mut tx, recent).await.unwrap();
            shipping.record(&mut tx, other).await.unwrap();
            tx.commit().await.unwrap();
            sqlx::query(concat!("UPDATE outbox_inbox SET processed_at = ", $age_two_days, " WHERE event_id <> $1"))
                .bind(<TestDatabase>::id_value(recent))
                .execute(&db.pool)
                .await
                .unwrap();

            let deleted = billing.purge(&db.pool, Duration::from_secs(24 * 3600), 1).await.unwrap();
            assert_eq!(deleted, 1);
            let left: Vec<(String, String)> =
                sqlx::query_as("SELECT consumer, CAST(event_id AS TEXT) FROM outbox_inbox ORDER BY consumer")
                    .fetch_all(&db.pool)
                    .await
                    .unwrap();
            assert_eq!(left, [("billing".to_owned(), recent.to_string()), ("shipping".to_owned(), other.to_string())]);
        }
    };
}

/// How each backend stores an event id in `outbox_inbox`, for hand-written test SQL.
trait IdValue {
    type Value;
    fn id_value(id: uuid::Uuid) -> Self::Value;
}

impl IdValue for outbox_tests::pg::TestDatabase {
    type Value = uuid::Uuid;
    fn id_value(id: uuid::Uuid) -> uuid::Uuid {
        id
    }
}

impl IdValue for outbox_tests::sqlite::TestDatabase {
    type Value = String;
    fn id_value(id: uuid::Uuid) -> String {
        id.to_string()
    }
}

mod postgres {
    use super::IdValue;
    use outbox_tests::pg::TestDatabase;
    inbox_suite!(sqlx::Postgres, "now() - interval '2 days'");
}

mod sqlite {
    use super::IdValue;
    use outbox_tests::sqlite::TestDatabase;
    inbox_suite!(sqlx::Sqlite, "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-2 days')");
}
