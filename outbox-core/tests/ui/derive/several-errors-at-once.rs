use outbox_core::OutboxEvent;
use serde::Serialize;

#[derive(Serialize, OutboxEvent)]
#[outbox(event_type = "Payment..Paid", version = 0, colour = "red")]
struct PaymentPaid {
    payment_id: u64,
    secret: String,
    #[outbox(sensitive, sensitive)]
    payer_email: String,
}
fn main() {}
