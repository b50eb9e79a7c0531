use outbox_core::{Redact, RedactedDebug};
use serde::Serialize;

#[derive(Serialize, RedactedDebug)]
struct Payout {
    #[outbox(sensitive)]
    account: String,
}
impl Redact for Payout {}
fn main() {}
