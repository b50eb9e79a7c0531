use outbox_core::OutboxEvent;
use serde::Serialize;

#[derive(Serialize, OutboxEvent)]
#[outbox(event_type = "customer.registered", aggregate = "customer", version = 1, aggregate_id = "email")]
struct CustomerRegistered {
    #[outbox(sensitive)]
    email: String,
}
fn main() {}
