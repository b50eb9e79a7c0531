//! Derived events are registered at link time; two types with the same event type and version are reported by
//! `registry::check` and make `registry::assert_unique` panic.

use outbox_core::registry::{self, RegistryError};
use outbox_core::OutboxEvent;
use serde::Serialize;

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "invoice.issued", aggregate = "invoice", version = 1)]
struct InvoiceIssued {
    #[outbox(aggregate_id)]
    invoice_id: u64,
    #[outbox(sensitive)]
    tax_number: String,
}

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "invoice.issued", aggregate = "invoice", version = 2)]
struct InvoiceIssuedV2 {
    #[outbox(aggregate_id)]
    invoice_id: u64,
}

mod legacy {
    /// The same event type and version as `InvoiceIssued`: a clash.
    #[derive(serde::Serialize, schemars::JsonSchema, outbox_core::OutboxEvent)]
    #[outbox(event_type = "invoice.issued", aggregate = "invoice", version = 1)]
    pub(crate) struct InvoiceIssued {
        #[outbox(aggregate_id)]
        pub(crate) number: String,
    }
}

/// Generic over a lifetime only: registered (as `NoteAdded<'static>`), so the contract check sees it.
#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "note.added", aggregate = "note", version = 1)]
struct NoteAdded<'a> {
    #[outbox(aggregate_id)]
    note_id: u64,
    text: &'a str,
}

#[test]
fn an_event_generic_over_a_lifetime_only_is_registered_with_its_schema() {
    let note = NoteAdded { note_id: 7, text: "hello" };
    assert_eq!(note.aggregate_id(), "7");
    let events = registry::find("note.added", 1);
    assert_eq!(events.len(), 1, "registered once");
    let properties = events[0].schema().unwrap().get("properties").cloned().unwrap_or_default();
    assert!(properties.get("text").is_some() && properties.get("note_id").is_some(), "{properties}");
}

#[test]
fn registered_events_carry_their_metadata_and_schema() {
    let events = registry::find("invoice.issued", 2);
    assert_eq!(events.len(), 1);
    let v2 = events[0];
    assert_eq!(v2.aggregate_type(), "invoice");
    assert!(v2.type_name().ends_with("::InvoiceIssuedV2"), "{}", v2.type_name());
    assert!(v2.sensitive_paths().is_empty());
    assert_eq!(v2.schema().unwrap().get("x-outbox-version"), Some(&serde_json::json!(2)));

    let v1 = registry::find("invoice.issued", 1);
    assert!(v1
        .iter()
        .all(|e| e.sensitive_paths() == InvoiceIssued::sensitive_paths() || e.sensitive_paths().is_empty()));
    assert!(v1.iter().any(|e| e.sensitive_paths() == ["/tax_number"]));
}

#[test]
fn events_come_sorted_by_type_and_version() {
    let keys: Vec<(&str, u32)> = registry::events().iter().map(|e| (e.event_type(), e.version())).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
}

#[test]
fn check_reports_both_types_of_a_clash() {
    let Err(RegistryError::DuplicateEvents(duplicates)) = registry::check() else {
        panic!("the clash of InvoiceIssued and legacy::InvoiceIssued was not reported");
    };
    assert_eq!(duplicates.len(), 1);
    assert_eq!((duplicates[0].event_type, duplicates[0].version), ("invoice.issued", 1));
    assert_eq!(duplicates[0].type_names.len(), 2);
    let _ = legacy::InvoiceIssued { number: String::new() }.aggregate_id();
}

#[test]
#[should_panic(expected = "`invoice.issued` v1 is declared by")]
fn assert_unique_panics_with_the_report() {
    registry::assert_unique();
}
