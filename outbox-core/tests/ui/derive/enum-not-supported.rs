use outbox_core::OutboxEvent;
use serde::Serialize;

#[derive(Serialize, OutboxEvent)]
#[outbox(event_type = "payment.changed", aggregate = "payment", version = 1)]
enum PaymentChanged {
    Paid { payment_id: u64 },
    Refunded { payment_id: u64 },
}
fn main() {}
