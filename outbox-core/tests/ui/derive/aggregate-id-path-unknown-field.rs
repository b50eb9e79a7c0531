use outbox_core::OutboxEvent;
use serde::Serialize;

#[derive(Serialize, OutboxEvent)]
#[outbox(event_type = "payment.paid", aggregate = "payment", version = 1, aggregate_id = "paymnt.id")]
struct PaymentPaid {
    payment: u64,
}
fn main() {}
