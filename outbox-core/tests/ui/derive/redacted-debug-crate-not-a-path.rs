use outbox_core::{Redact, RedactedDebug};
use serde::Serialize;

// `Redact` by hand, so that only `RedactedDebug` reads the `crate = ...` below.
#[derive(Serialize, RedactedDebug)]
#[outbox(crate = "my app::outbox_core")]
struct Card {
    number: String,
}

impl Redact for Card {}

#[derive(Serialize, RedactedDebug)]
#[outbox(crate = &outbox_core)]
struct Address {
    street: String,
}

impl Redact for Address {}
fn main() {}
