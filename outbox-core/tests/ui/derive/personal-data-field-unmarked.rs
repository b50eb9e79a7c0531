use outbox_core::OutboxEvent;
use serde::Serialize;

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "customer.registered", aggregate = "customer", version = 1)]
struct CustomerRegistered {
    #[outbox(aggregate_id)]
    customer_id: u64,
    customer_email: String,
    billingPhone: String,
    #[serde(rename = "dateOfBirth")]
    born_on: String,
    cpf: String,
    // describe the data, not hold it: no error
    emailed_at: String,
    phone_count: u32,
    has_iban: bool,
    // marked: no error
    #[outbox(sensitive)]
    iban: String,
    #[outbox(not_sensitive)]
    support_email: String,
}
fn main() {}
