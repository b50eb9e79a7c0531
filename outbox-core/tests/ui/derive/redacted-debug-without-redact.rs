use outbox_core::RedactedDebug;
use serde::Serialize;

// Neither `#[derive(OutboxEvent)]` nor `#[derive(Redact)]`: nothing says which fields are sensitive.
#[derive(Serialize, RedactedDebug)]
struct Card {
    number: String,
}
fn main() {}
