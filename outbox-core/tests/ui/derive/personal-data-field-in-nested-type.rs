use outbox_core::Redact;
use serde::Serialize;

#[derive(Serialize, Redact)]
struct Recipient {
    shipping_address: String,
    passport_number: String,
}
fn main() {}
