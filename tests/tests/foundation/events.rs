//! Hand-written events for these tests (the derive has its own tests).

use outbox_core::OutboxEvent;
use serde::Serialize;

/// The event of the Go article's payment service (the reference design).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PaymentPaid {
    pub(crate) payment_id: i64,
    pub(crate) order_id: i64,
    pub(crate) payer_email: String,
}

impl OutboxEvent for PaymentPaid {
    const EVENT_TYPE: &'static str = "payment.paid";
    const AGGREGATE_TYPE: &'static str = "payment";
    const VERSION: u32 = 2;

    fn aggregate_id(&self) -> String {
        self.payment_id.to_string()
    }

    fn sensitive_paths() -> Vec<String> {
        vec!["/payer_email".to_owned()]
    }
}

/// An event whose payload JSON cannot represent.
#[derive(Debug, Serialize)]
pub(crate) struct Measured {
    pub(crate) sensor: String,
    pub(crate) value: f64,
}

impl OutboxEvent for Measured {
    const EVENT_TYPE: &'static str = "sensor.measured";
    const AGGREGATE_TYPE: &'static str = "sensor";
    const VERSION: u32 = 1;

    fn aggregate_id(&self) -> String {
        self.sensor.clone()
    }
}

pub(crate) fn payment(id: i64) -> PaymentPaid {
    PaymentPaid { payment_id: id, order_id: id * 10, payer_email: format!("payer{id}@example.com") }
}

/// Creates the Go article's `payments` table with one pending payment per id.
pub(crate) async fn create_payments(pool: &sqlx::PgPool, ids: &[i64]) {
    sqlx::raw_sql("CREATE TABLE payments (id BIGINT PRIMARY KEY, status TEXT NOT NULL)")
        .execute(pool)
        .await
        .expect("create payments");
    sqlx::query("INSERT INTO payments SELECT id, 'pending' FROM UNNEST($1::bigint[]) AS id")
        .bind(ids)
        .execute(pool)
        .await
        .expect("insert payments");
}

pub(crate) async fn count_events(pool: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM outbox_events").fetch_one(pool).await.expect("count events")
}

pub(crate) async fn payment_status(pool: &sqlx::PgPool, id: i64) -> String {
    sqlx::query_scalar("SELECT status FROM payments WHERE id = $1").bind(id).fetch_one(pool).await.expect("payment")
}
