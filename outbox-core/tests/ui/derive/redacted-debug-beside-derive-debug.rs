use outbox_core::{Redact, RedactedDebug};
use serde::Serialize;

#[derive(Debug, Serialize, Redact, RedactedDebug)]
struct Card {
    #[outbox(sensitive)]
    number: String,
}
fn main() {}
