use outbox_core::OutboxEvent;
use serde::Serialize;

#[derive(Serialize, OutboxEvent)]
#[outbox(evnt_type = "payment.paid", aggregate = "payment", version = 1)]
struct PaymentPaid {
    #[outbox(aggregate_id, sensitiv)]
    payment_id: u64,
}
fn main() {}
