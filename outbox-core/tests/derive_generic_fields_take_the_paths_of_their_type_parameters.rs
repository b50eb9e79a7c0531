//! Generic structs derive too: a field whose type names a type parameter takes that type's sensitive paths
//! through a `Redact` bound, and generic events are not registered.

use outbox_core::{OutboxEvent, Redact};
use serde::Serialize;

#[derive(Serialize, Redact)]
struct Login {
    #[outbox(sensitive)]
    email: String,
}

#[derive(Serialize, OutboxEvent)]
#[outbox(event_type = "audit.recorded", aggregate = "audit", version = 1)]
struct AuditRecorded<T, Id = u64> {
    #[outbox(aggregate_id)]
    audit_id: Id,
    subject: T,
    history: Vec<T>,
    #[outbox(sensitive)]
    raw: T,
}

#[test]
fn a_type_parameter_contributes_its_paths_at_every_use() {
    assert_eq!(AuditRecorded::<Login>::sensitive_paths(), ["/subject/email", "/history/*/email", "/raw"]);
    assert_eq!(AuditRecorded::<String, uuid::Uuid>::sensitive_paths(), ["/raw"]);
}

#[test]
fn a_generic_aggregate_id_is_formatted_with_display() {
    let event = AuditRecorded { audit_id: "a-1".to_owned(), subject: 1_u8, history: vec![], raw: 2_u8 };
    assert_eq!(event.aggregate_id(), "a-1");
    assert_eq!(
        event.redacted(),
        serde_json::json!({"audit_id": "a-1", "subject": 1, "history": [], "raw": "[REDACTED]"})
    );
}

#[test]
fn generic_events_are_not_registered() {
    assert!(outbox_core::registry::events().iter().all(|e| e.event_type() != "audit.recorded"));
}

/// Generic over a lifetime only: registered, so its schema is required as for any event that is not generic.
#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "note.borrowed", aggregate = "note", version = 1)]
struct NoteBorrowed<'a> {
    #[outbox(aggregate_id)]
    note_id: &'a str,
    #[outbox(sensitive)]
    body: &'a str,
}

#[test]
fn a_struct_with_a_lifetime_borrows_its_fields() {
    let body = String::from("dear diary");
    let event = NoteBorrowed { note_id: "n-1", body: &body };
    assert_eq!(event.aggregate_id(), "n-1");
    assert_eq!(NoteBorrowed::sensitive_paths(), ["/body"]);
    assert!(!event.redacted().to_string().contains("diary"));
}

/// A generic type that holds itself: its bounds are on its type parameter, not on the field that names the type
/// again (which would ask the compiler to prove `Tree<Card>: Redact` to prove `Tree<Card>: Redact`).
#[derive(Serialize, schemars::JsonSchema, Redact)]
#[allow(clippy::use_self)] // the type's name spelled out, as users write it
struct Tree<T> {
    value: T,
    children: Vec<Tree<T>>,
}

#[derive(Serialize, schemars::JsonSchema, Redact)]
struct Secret {
    #[outbox(sensitive)]
    pin: String,
}

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "forest.grown", aggregate = "forest", version = 1)]
struct ForestGrown {
    #[outbox(aggregate_id)]
    forest_id: u64,
    tree: Tree<Secret>,
}

#[test]
fn a_generic_type_that_holds_itself_compiles_and_redacts_its_parameter_at_every_level() {
    let paths = ForestGrown::sensitive_paths();
    assert!(paths.iter().any(|path| path == "/tree/value/pin"), "{paths:?}");
    let event = ForestGrown {
        forest_id: 1,
        tree: Tree {
            value: Secret { pin: "1234".into() },
            children: vec![Tree { value: Secret { pin: "5678".into() }, children: Vec::new() }],
        },
    };
    let shown = event.redacted().to_string();
    assert!(!shown.contains("1234") && !shown.contains("5678"), "{shown}");
}
