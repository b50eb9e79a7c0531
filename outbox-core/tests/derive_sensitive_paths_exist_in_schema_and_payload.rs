//! Every sensitive pointer names a value of the serialized payload and a property of the schema (marked
//! `x-sensitive`, nested ones inside `$defs`), and the redacted payload holds none of the sensitive values.

use outbox_core::schema::{self, event_schema};
use outbox_core::{OutboxEvent, Redact};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

#[derive(Serialize, JsonSchema, Redact)]
#[serde(rename_all = "camelCase")]
struct Card {
    #[outbox(sensitive)]
    card_number: String,
    #[outbox(sensitive)]
    #[serde(skip)]
    _never: (),
    brand: String,
}

#[derive(Serialize, JsonSchema, Redact)]
struct Device {
    #[outbox(sensitive)]
    ip: String,
    model: String,
}

#[derive(Serialize, JsonSchema, OutboxEvent)]
#[outbox(event_type = "checkout.completed", aggregate = "checkout", version = 4)]
struct CheckoutCompleted {
    #[outbox(aggregate_id)]
    checkout_id: u64,
    #[outbox(sensitive)]
    #[serde(rename = "email")]
    buyer_email: String,
    #[outbox(sensitive)]
    phone: Option<String>,
    card: Card,
    spare_cards: Vec<Card>,
    fallback: Option<Card>,
    #[serde(flatten)]
    device: Device,
}

fn sample() -> CheckoutCompleted {
    let card = |n: &str| Card { card_number: n.into(), _never: (), brand: "visa".into() };
    CheckoutCompleted {
        checkout_id: 11,
        buyer_email: "buyer@example.com".into(),
        phone: Some("+351910000000".into()),
        card: card("4111111111111111"),
        spare_cards: vec![card("5500000000000004"), card("340000000000009")],
        fallback: Some(card("6011000000000004")),
        device: Device { ip: "203.0.113.7".into(), model: "phone".into() },
    }
}

const SECRETS: [&str; 7] = [
    "buyer@example.com",
    "+351910000000",
    "4111111111111111",
    "5500000000000004",
    "340000000000009",
    "6011000000000004",
    "203.0.113.7",
];

/// The values `pointer` names in `value`, with `*` for every element.
fn values_at<'v>(value: &'v Value, pointer: &str) -> Vec<&'v Value> {
    let mut current = vec![value];
    for segment in pointer.split('/').skip(1) {
        let segment = segment.replace("~1", "/").replace("~0", "~");
        current = current
            .into_iter()
            .flat_map(|v| match (v, segment.as_str()) {
                (Value::Array(items), "*") => items.iter().collect::<Vec<_>>(),
                (Value::Object(map), "*") => map.values().collect(),
                (Value::Object(map), key) => map.get(key).into_iter().collect(),
                _ => Vec::new(),
            })
            .collect();
    }
    current
}

#[test]
fn the_pointers_are_the_expected_ones() {
    assert_eq!(
        CheckoutCompleted::sensitive_paths(),
        ["/email", "/phone", "/card/cardNumber", "/spare_cards/*/cardNumber", "/fallback/cardNumber", "/ip"]
    );
}

#[test]
fn every_sensitive_pointer_names_a_value_of_the_serialized_payload() {
    let payload = serde_json::to_value(sample()).unwrap();
    for pointer in CheckoutCompleted::sensitive_paths() {
        let found = values_at(&payload, &pointer);
        assert!(!found.is_empty(), "{pointer} names nothing in {payload}");
        assert!(found.iter().all(|v| v.is_string()), "{pointer} names {found:?}");
    }
}

#[test]
fn every_sensitive_pointer_names_a_property_marked_in_the_schema() {
    let schema = event_schema::<CheckoutCompleted>().unwrap();
    for pointer in CheckoutCompleted::sensitive_paths() {
        let locations = schema::locate(&schema, &pointer);
        assert!(!locations.is_empty(), "{pointer} is not in the schema");
        for location in locations {
            let property = schema.pointer(&location).unwrap();
            assert_eq!(property.get("x-sensitive"), Some(&Value::Bool(true)), "{pointer} at {location}");
        }
    }
    assert_eq!(schema.pointer("/$defs/Card/properties/cardNumber/x-sensitive"), Some(&Value::Bool(true)));
    assert_eq!(schema.pointer("/$defs/Card/properties/brand/x-sensitive"), None);
    assert_eq!(schema.pointer("/properties/checkout_id/x-sensitive"), None);
}

#[test]
fn the_schema_root_carries_the_event_metadata_in_draft_2020_12() {
    let schema = event_schema::<CheckoutCompleted>().unwrap();
    assert_eq!(schema.get("x-outbox-event-type"), Some(&Value::from("checkout.completed")));
    assert_eq!(schema.get("x-outbox-aggregate"), Some(&Value::from("checkout")));
    assert_eq!(schema.get("x-outbox-version"), Some(&Value::from(4)));
    assert_eq!(schema.get("$schema"), Some(&Value::from("https://json-schema.org/draft/2020-12/schema")));
}

#[test]
fn the_redacted_payload_holds_none_of_the_sensitive_values() {
    let event = sample();
    let raw = serde_json::to_string(&event).unwrap();
    let redacted = serde_json::to_string(&event.redacted()).unwrap();
    for secret in SECRETS {
        assert!(raw.contains(secret), "the sample should hold {secret}");
        assert!(!redacted.contains(secret), "{secret} leaked into {redacted}");
    }
    for kept in ["visa", "phone", "11"] {
        assert!(redacted.contains(kept), "{kept} should stay visible in {redacted}");
    }
}

#[test]
fn the_relay_side_redaction_from_stored_pointers_matches_redacted() {
    let event = sample();
    let stored: Vec<String> = serde_json::from_value(serde_json::json!(CheckoutCompleted::sensitive_paths())).unwrap();
    let mut payload = serde_json::to_value(&event).unwrap();
    outbox_core::redact::redact(&mut payload, &stored);
    assert_eq!(payload, event.redacted());
}
