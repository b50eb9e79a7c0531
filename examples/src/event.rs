//! The event of the Go article's payment service (the reference design): `payment.paid`.

use outbox_core::schemars::JsonSchema;
use outbox_core::OutboxEvent;
use serde::{Deserialize, Serialize};

/// A payment was confirmed. Identifiers and the minimum a consumer needs, nothing secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, OutboxEvent)]
#[schemars(crate = "outbox_core::schemars")]
#[outbox(event_type = "payment.paid", aggregate = "payment", version = 1)]
pub struct PaymentPaid {
    /// The payment.
    #[outbox(aggregate_id)]
    pub payment_id: i64,
    /// The order it pays.
    pub order_id: i64,
    /// The amount, in cents.
    pub amount_cents: i64,
    /// When it was confirmed (RFC 3339).
    pub paid_at: String,
}
