use outbox_core::{OutboxEvent, Redact};
use serde::Serialize;

#[derive(Serialize, schemars::JsonSchema, Redact)]
struct Envelope<T> {
    #[outbox(sensitive)]
    iban: String,
    body: T,
}

#[derive(Serialize, schemars::JsonSchema)]
struct Money {
    cents: u64,
}

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "payout.sent", aggregate = "payout", version = 1)]
struct PayoutSent {
    #[outbox(aggregate_id)]
    id: u64,
    transfer: Envelope<Money>,
    earlier: Vec<Option<Envelope<Money>>>,
}
fn main() {}
