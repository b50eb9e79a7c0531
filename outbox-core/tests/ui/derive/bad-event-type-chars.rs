use outbox_core::OutboxEvent;
use serde::Serialize;

#[derive(Serialize, OutboxEvent)]
#[outbox(event_type = "Payment.Paid", aggregate = "payment", version = 1)]
struct PaymentPaid {
    #[outbox(aggregate_id)]
    payment_id: u64,
}
fn main() {}
