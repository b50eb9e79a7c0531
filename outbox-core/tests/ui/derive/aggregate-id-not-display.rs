use outbox_core::OutboxEvent;
use serde::Serialize;

#[derive(Serialize, schemars::JsonSchema)]
struct PaymentKey {
    bank: u32,
}

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "payment.paid", aggregate = "payment", version = 1)]
struct PaymentPaid {
    #[outbox(aggregate_id)]
    key: PaymentKey,
}
fn main() {}
