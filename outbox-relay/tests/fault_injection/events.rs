//! The event every scenario produces, the domain table it commits with, and one producer transaction.
//!
//! Each transaction locks its aggregate's row in `fault_orders` and bumps its `version` by the number of events
//! it writes; the events are numbered with the new versions. So the producers of one aggregate serialize on its
//! row (as an application's do), an aggregate's committed events are numbered 1, 2, 3... in commit order, and a
//! rolled-back transaction takes its numbers back with it.

use outbox_core::{Outbox, OutboxEvent};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;

/// Every sensitive value starts with this: a log, an error, a CLI output or a metric containing it leaks.
pub(crate) const SENSITIVE_PREFIX: &str = "pii-5f3e9c-";
/// Every `note` (a non-sensitive payload field) starts with this: logs and metrics containing it carry payloads.
pub(crate) const PAYLOAD_PREFIX: &str = "body-8a41d7-";

/// An order placed, with the customer's e-mail address as its sensitive value.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, outbox_core::OutboxEvent)]
#[outbox(event_type = "fault.order_placed", aggregate = "fault_order", version = 1)]
pub(crate) struct OrderPlaced {
    #[outbox(aggregate_id)]
    pub(crate) order: String,
    /// The event's number within its aggregate: 1, 2, 3... in commit order.
    pub(crate) n: i64,
    pub(crate) note: String,
    #[outbox(sensitive)]
    pub(crate) customer_email: String,
}

/// The subject the NATS sink publishes the events to.
pub(crate) fn subject() -> String {
    format!("outbox.{}", OrderPlaced::EVENT_TYPE)
}

/// One event as a producer wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Written {
    pub(crate) id: Uuid,
    pub(crate) aggregate: String,
    pub(crate) n: i64,
}

/// Creates the domain table with `aggregates` orders (`order-0`, `order-1`, ...) at version 0.
pub(crate) async fn create_domain(pool: &PgPool, aggregates: u32) {
    sqlx::raw_sql("CREATE TABLE fault_orders (id TEXT PRIMARY KEY, version BIGINT NOT NULL DEFAULT 0)")
        .execute(pool)
        .await
        .expect("create fault_orders");
    add_orders(pool, &(0..aggregates).map(order).collect::<Vec<_>>()).await;
}

/// Adds orders at version 0.
pub(crate) async fn add_orders(pool: &PgPool, ids: &[String]) {
    sqlx::query("INSERT INTO fault_orders (id) SELECT * FROM UNNEST($1::text[])")
        .bind(ids)
        .execute(pool)
        .await
        .expect("insert orders");
}

/// The name of order number `i`.
pub(crate) fn order(i: u32) -> String {
    format!("order-{i}")
}

/// Inside `tx`: locks `aggregate`'s row, bumps its version by `count` and enqueues `count` events numbered with
/// the new versions. The caller commits or rolls back.
///
/// # Errors
///
/// The database's, when the update or the insert fails.
pub(crate) async fn write(
    tx: &mut Transaction<'_, Postgres>,
    outbox: &Outbox,
    aggregate: &str,
    count: u32,
) -> Result<Vec<Written>, outbox_core::Error> {
    let version: i64 =
        sqlx::query_scalar("UPDATE fault_orders SET version = version + $2 WHERE id = $1 RETURNING version")
            .bind(aggregate)
            .bind(i64::from(count))
            .fetch_one(&mut **tx)
            .await?;
    let first = version - i64::from(count) + 1;
    let events: Vec<OrderPlaced> = (first..=version)
        .map(|n| {
            let unique = Uuid::now_v7().simple();
            OrderPlaced {
                order: aggregate.to_owned(),
                n,
                note: format!("{PAYLOAD_PREFIX}{aggregate}-{n}"),
                customer_email: format!("{SENSITIVE_PREFIX}{unique}@example.com"),
            }
        })
        .collect();
    let ids = outbox.enqueue_all(&mut *tx, &events).await?;
    Ok(ids.into_iter().zip(events).map(|(id, event)| Written { id, aggregate: event.order, n: event.n }).collect())
}
