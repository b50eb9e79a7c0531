use outbox_core::OutboxEvent;
use serde::Serialize;

#[derive(Serialize, OutboxEvent)]
#[outbox(event_type = "payment.paid", aggregate = "payment", version = 1)]
struct PaymentPaid(u64, String);
fn main() {}
