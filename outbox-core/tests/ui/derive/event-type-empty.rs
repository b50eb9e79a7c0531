use outbox_core::OutboxEvent;
use serde::Serialize;

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "", aggregate = "payment", version = 1)]
struct PaymentPaid {
    #[outbox(aggregate_id)]
    payment_id: u64,
}
fn main() {}
