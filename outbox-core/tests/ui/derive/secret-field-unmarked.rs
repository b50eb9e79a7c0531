use outbox_core::OutboxEvent;
use serde::Serialize;

#[derive(Serialize, OutboxEvent)]
#[outbox(event_type = "user.signed_up", aggregate = "user", version = 1)]
struct UserSignedUp {
    #[outbox(aggregate_id)]
    user_id: u64,
    password_hash: String,
    apiKey: String,
}
fn main() {}
