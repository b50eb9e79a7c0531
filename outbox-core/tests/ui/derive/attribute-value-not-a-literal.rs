use outbox_core::OutboxEvent;
use serde::Serialize;

const EVENT_TYPE: &str = "payment.paid";

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = EVENT_TYPE, aggregate = "payment", version = 1)]
struct PaymentPaid {
    #[outbox(aggregate_id)]
    payment_id: u64,
}
fn main() {}
