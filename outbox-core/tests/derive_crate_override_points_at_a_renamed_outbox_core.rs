//! `#[outbox(crate = "...")]` points the generated code at outbox_core under another name.

extern crate outbox_core as renamed;

use renamed::{OutboxEvent, Redact};

mod reexport {
    pub(crate) use ::outbox_core as outbox;
}

#[derive(serde::Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(crate = "renamed", event_type = "parcel.shipped", aggregate = "parcel", version = 1)]
struct ParcelShipped {
    #[outbox(aggregate_id)]
    parcel_id: u32,
    #[outbox(sensitive)]
    recipient: String,
}

#[derive(serde::Serialize, Redact)]
#[outbox(crate = "crate::reexport::outbox")]
struct Recipient {
    #[outbox(sensitive)]
    name: String,
}

#[test]
fn the_event_derives_through_the_renamed_crate() {
    let event = ParcelShipped { parcel_id: 9, recipient: "Ana".into() };
    assert_eq!(event.aggregate_id(), "9");
    assert_eq!(ParcelShipped::sensitive_paths(), ["/recipient"]);
    assert!(renamed::registry::events().iter().any(|e| e.event_type() == "parcel.shipped"));
}

#[test]
fn a_nested_type_derives_through_a_reexported_path() {
    assert_eq!(<Recipient as Redact>::redact_paths(), ["/name"]);
}
