use serde::Serialize;

use outbox_core::Redact;

#[derive(Serialize, Redact)]
#[outbox(event_type = "card.added")]
struct Card {
    #[outbox(aggregate_id)]
    number_id: u64,
}
fn main() {}
