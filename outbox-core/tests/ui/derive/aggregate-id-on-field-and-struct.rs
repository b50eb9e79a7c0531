use outbox_core::OutboxEvent;
use serde::Serialize;

#[derive(Serialize, OutboxEvent)]
#[outbox(event_type = "payment.paid", aggregate = "payment", version = 1, aggregate_id = "order_id")]
struct PaymentPaid {
    #[outbox(aggregate_id)]
    payment_id: u64,
    order_id: u64,
}
fn main() {}
