//! A `#[serde(flatten)]` field's sensitive paths are merged into the parent's, without the field's name.

use outbox_core::{OutboxEvent, Redact};
use serde::Serialize;

#[derive(Serialize, schemars::JsonSchema, Redact)]
struct Contact {
    #[outbox(sensitive)]
    phone: String,
    city: String,
}

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "customer.moved", aggregate = "customer", version = 1)]
struct CustomerMoved {
    #[outbox(aggregate_id)]
    customer_id: u64,
    #[serde(flatten)]
    contact: Contact,
}

#[test]
fn flattened_sensitive_fields_appear_at_the_parents_level() {
    assert_eq!(CustomerMoved::sensitive_paths(), ["/phone"]);
    let event = CustomerMoved { customer_id: 1, contact: Contact { phone: "+351 900".into(), city: "Porto".into() } };
    let redacted = event.redacted();
    assert_eq!(redacted["phone"], "[REDACTED]");
    assert_eq!(redacted["city"], "Porto");
}

#[test]
fn the_flattened_sensitive_field_is_marked_in_the_schema() {
    let schema = outbox_core::schema::event_schema::<CustomerMoved>().unwrap();
    let marked = outbox_core::schema::locate(&schema, "/phone");
    assert!(!marked.is_empty());
    for location in marked {
        assert_eq!(schema.pointer(&format!("{location}/x-sensitive")), Some(&serde_json::json!(true)));
    }
}
