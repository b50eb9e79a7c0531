//! A field serde never writes (`skip`, `skip_serializing`) has no pointer and escapes the secret guard.

use outbox_core::OutboxEvent;
use serde::Serialize;

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "session.opened", aggregate = "session", version = 1)]
struct SessionOpened {
    #[outbox(aggregate_id)]
    #[serde(skip)]
    session_id: u64,
    #[serde(skip_serializing)]
    #[allow(dead_code)]
    token: String,
    #[outbox(sensitive)]
    #[serde(skip)]
    #[allow(dead_code)]
    ip: String,
    #[outbox(sensitive)]
    #[serde(skip_serializing_if = "Option::is_none")]
    user_agent: Option<String>,
}

#[test]
fn skipped_fields_are_left_out_and_skip_serializing_if_is_kept() {
    assert_eq!(SessionOpened::sensitive_paths(), ["/user_agent"]);
}

#[test]
fn a_skipped_field_can_still_be_the_aggregate_id() {
    let event = SessionOpened { session_id: 42, token: "t".into(), ip: "10.0.0.1".into(), user_agent: None };
    assert_eq!(event.aggregate_id(), "42");
    assert_eq!(serde_json::to_value(&event).unwrap(), serde_json::json!({}));
}
