use outbox_core::{OutboxEvent, Redact, RedactedDebug};
use serde::Serialize;

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "order.placed", aggregate = "order", version = 1, crate = "Self")]
struct OrderPlaced {
    #[outbox(aggregate_id)]
    order_id: u64,
}

#[derive(Serialize, Redact, RedactedDebug)]
#[outbox(crate = "outbox_core<u8>")]
struct Address {
    street: String,
}
fn main() {}
