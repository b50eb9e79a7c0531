//! The sensitive pointers name the JSON keys serde writes: `rename`, `rename_all` and `rename(serialize)`.

use outbox_core::{OutboxEvent, Redact};
use serde::Serialize;

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "user.renamed", aggregate = "user", version = 1)]
#[serde(rename_all = "camelCase")]
struct UserRenamed {
    #[outbox(aggregate_id)]
    user_id: u64,
    #[outbox(sensitive)]
    previous_name: String,
    #[outbox(sensitive)]
    #[serde(rename = "new")]
    new_name: String,
    #[outbox(sensitive)]
    #[serde(rename(serialize = "e/mail~", deserialize = "email"))]
    email: String,
}

#[derive(Serialize, Redact)]
#[serde(rename_all = "SCREAMING-KEBAB-CASE")]
struct Screaming {
    #[outbox(sensitive)]
    home_address: String,
}

#[test]
fn rename_all_and_rename_give_the_serialized_keys_with_escaping() {
    assert_eq!(UserRenamed::sensitive_paths(), ["/previousName", "/new", "/e~1mail~0"]);
    let event = UserRenamed { user_id: 1, previous_name: "a".into(), new_name: "b".into(), email: "c".into() };
    let payload = serde_json::to_value(&event).unwrap();
    for path in UserRenamed::sensitive_paths() {
        assert!(payload.pointer(&path).is_some(), "{path} is not in {payload}");
    }
}

#[test]
fn rename_all_rules_other_than_camel_case_are_applied() {
    assert_eq!(<Screaming as Redact>::redact_paths(), ["/HOME-ADDRESS"]);
}
