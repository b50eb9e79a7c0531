use serde::Serialize;

use outbox_core::Redact;

#[derive(Serialize, Redact)]
struct Card {
    card_number: String,
}
fn main() {}
