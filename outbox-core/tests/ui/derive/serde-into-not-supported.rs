use outbox_core::OutboxEvent;
use serde::Serialize;

#[derive(Serialize)]
struct SignupWire {
    contact: String,
}

impl From<UserSignedUp> for SignupWire {
    fn from(event: UserSignedUp) -> Self {
        Self { contact: event.email }
    }
}

#[derive(Clone, Serialize, OutboxEvent)]
#[serde(into = "SignupWire")]
#[outbox(event_type = "user.signed_up", aggregate = "user", version = 1)]
struct UserSignedUp {
    #[outbox(aggregate_id)]
    user_id: u64,
    #[outbox(sensitive)]
    email: String,
}
fn main() {}
