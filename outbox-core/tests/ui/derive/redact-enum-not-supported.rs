use outbox_core::Redact;
use serde::Serialize;

#[derive(Serialize, Redact)]
enum Contact {
    Email { address: String },
    Phone { number: String },
}
fn main() {}
