use outbox_core::{OutboxEvent, Redact};
use serde::Serialize;

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "order.placed", aggregate = "order", version = 1, crate = "my app::outbox_core")]
struct OrderPlaced {
    #[outbox(aggregate_id)]
    order_id: u64,
}

#[derive(Serialize, Redact)]
#[outbox(crate = &outbox_core)]
struct Address {
    street: String,
}
fn main() {}
