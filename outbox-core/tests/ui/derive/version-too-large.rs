use outbox_core::OutboxEvent;
use serde::Serialize;

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "payment.paid", aggregate = "payment", version = 3000000000)]
struct PaymentPaid {
    #[outbox(aggregate_id)]
    payment_id: u64,
}
fn main() {}
