use outbox_core::OutboxEvent;
use serde::Serialize;

#[derive(Serialize, schemars::JsonSchema)]
struct Order {
    number: u64,
}

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "order.placed", aggregate = "order", version = 1, aggregate_id = "order.order-number")]
struct OrderPlaced {
    order: Order,
}
fn main() {}
