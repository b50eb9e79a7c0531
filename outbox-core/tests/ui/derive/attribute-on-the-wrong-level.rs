use outbox_core::OutboxEvent;
use serde::Serialize;

#[derive(Serialize, OutboxEvent)]
#[outbox(event_type = "payment.paid", aggregate = "payment", version = 1, sensitive)]
struct PaymentPaid {
    #[outbox(aggregate_id, version = 2)]
    payment_id: u64,
}
fn main() {}
