//! Quick start: commit a domain change and its event in one transaction, then look at the pending outbox row.
//!
//! Uses the PostgreSQL of `DATABASE_URL` (in a fresh database), or starts a throwaway one on 127.0.0.1.
//!
//! ```text
//! cargo run --example quickstart
//! ```

use outbox_core::{Outbox, OutboxEvent};
use outbox_tests::pg::TestDatabase;
use serde::Serialize;

/// The seed's event: a payment was confirmed.
#[derive(Serialize)]
struct PaymentPaid {
    payment_id: i64,
    order_id: i64,
    amount_cents: i64,
}

impl OutboxEvent for PaymentPaid {
    const EVENT_TYPE: &'static str = "payment.paid";
    const AGGREGATE_TYPE: &'static str = "payment";
    const VERSION: u32 = 1;

    fn aggregate_id(&self) -> String {
        self.payment_id.to_string()
    }
}

/// `POST /payments/:id/confirm`: the update and the event commit together, or neither does.
async fn confirm_payment(pool: &sqlx::PgPool, outbox: &Outbox, payment_id: i64) -> Result<(), outbox_core::Error> {
    let mut tx = pool.begin().await?;
    let (order_id, amount_cents): (i64, i64) = sqlx::query_as(
        "UPDATE payments SET status = 'paid' WHERE id = $1 AND status = 'pending' RETURNING order_id, amount_cents",
    )
    .bind(payment_id)
    .fetch_one(&mut *tx)
    .await?;
    outbox.enqueue(&mut tx, &PaymentPaid { payment_id, order_id, amount_cents }).await?;
    tx.commit().await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let db = TestDatabase::create().await;
    outbox_core::migrate(&db.pool).await?;
    sqlx::raw_sql(
        "CREATE TABLE payments (id BIGINT PRIMARY KEY, order_id BIGINT NOT NULL, amount_cents BIGINT NOT NULL,
                                status TEXT NOT NULL DEFAULT 'pending');
         INSERT INTO payments (id, order_id, amount_cents) VALUES (1, 100, 4990), (2, 200, 1250);",
    )
    .execute(&db.pool)
    .await?;

    let outbox = Outbox::new();
    confirm_payment(&db.pool, &outbox, 1).await?;
    confirm_payment(&db.pool, &outbox, 2).await?;

    let rows: Vec<(String, String, String, i32, String, serde_json::Value)> = sqlx::query_as(
        "SELECT id::text, event_type, aggregate_id, schema_version, status, payload FROM outbox_events ORDER BY seq",
    )
    .fetch_all(&db.pool)
    .await?;
    println!("{} pending event(s) in outbox_events, waiting for the relay:", rows.len());
    for (id, event_type, aggregate_id, version, status, payload) in rows {
        println!("  {id}  {event_type} v{version}  aggregate {aggregate_id}  {status}  {payload}");
    }
    Ok(())
}
