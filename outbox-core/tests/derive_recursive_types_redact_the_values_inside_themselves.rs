//! A type that holds itself (`children: Vec<Unit>`, `reply_to: Option<Box<Comment>>`) has endless pointers: its
//! derived `Redact` impl redacts the values of the type met inside itself whole when the type has sensitive
//! fields, and adds nothing when nothing in it is sensitive. Before, asking for the pointers overflowed the stack.

use outbox_core::{NewEvent, OutboxEvent, Redact};
use serde::Serialize;

#[derive(Serialize, schemars::JsonSchema, Redact)]
struct Unit {
    name: String,
    #[outbox(sensitive)]
    manager_email: String,
    children: Vec<Self>,
}

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "org.reorganized", aggregate = "org", version = 1)]
struct OrgReorganized {
    #[outbox(aggregate_id)]
    org_id: u64,
    root: Unit,
}

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "comment.posted", aggregate = "thread", version = 1)]
struct CommentPosted {
    #[outbox(aggregate_id)]
    thread_id: u64,
    text: String,
    reply_to: Option<Box<Self>>,
}

fn unit(name: &str, email: &str, children: Vec<Unit>) -> Unit {
    Unit { name: name.to_owned(), manager_email: email.to_owned(), children }
}

#[test]
fn a_recursive_type_with_a_sensitive_field_redacts_its_nested_copies_whole() {
    assert_eq!(<Unit as Redact>::redact_paths(), ["/manager_email", "/children/*"]);
    assert_eq!(OrgReorganized::sensitive_paths(), ["/root/manager_email", "/root/children/*"]);
    let event = OrgReorganized {
        org_id: 7,
        root: unit("board", "ceo@example.com", vec![unit("sales", "vp@example.com", vec![])]),
    };
    let shown = format!("{:?} {}", NewEvent::new(&event).unwrap(), event.redacted());
    assert!(!shown.contains("ceo@example.com") && !shown.contains("vp@example.com"), "{shown}");
    assert!(shown.contains("board"), "the top unit's other fields stay readable: {shown}");
}

#[test]
fn a_recursive_event_with_nothing_sensitive_redacts_nothing_and_has_a_contract() {
    assert!(CommentPosted::sensitive_paths().is_empty());
    let reply = CommentPosted {
        thread_id: 1,
        text: "second".to_owned(),
        reply_to: Some(Box::new(CommentPosted { thread_id: 1, text: "first".to_owned(), reply_to: None })),
    };
    assert!(reply.redacted().to_string().contains("first"));
    outbox_core::schema::event_schema::<CommentPosted>().expect("a contract");
}

#[test]
fn a_recursive_type_gets_a_contract_with_its_sensitive_values_marked() {
    let schema = outbox_core::schema::event_schema::<OrgReorganized>().expect("a contract");
    let text = serde_json::to_string(schema.as_value()).unwrap();
    assert!(text.matches("x-sensitive").count() >= 2, "{text}");
}
