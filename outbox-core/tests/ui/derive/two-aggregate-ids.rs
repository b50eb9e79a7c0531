use outbox_core::OutboxEvent;
use serde::Serialize;

#[derive(Serialize, OutboxEvent)]
#[outbox(event_type = "payment.paid", aggregate = "payment", version = 1)]
struct PaymentPaid {
    #[outbox(aggregate_id)]
    payment_id: u64,
    #[outbox(aggregate_id)]
    order_id: u64,
}
fn main() {}
