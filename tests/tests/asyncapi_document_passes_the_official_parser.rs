//! The AsyncAPI document exported for derived events passes the official parser (`@asyncapi/parser`, run by
//! `tests/asyncapi/validate.mjs`): one channel per event type, one message per version, the aggregate id as the
//! correlation id, every payload's `schemaFormat` (JSON Schema 2020-12) and `x-sensitive` kept on the payload's
//! properties.
//!
//! Needs `node` and the parser installed with `npm ci --prefix tests/asyncapi` (scripts/test-all.sh does it).

use std::collections::BTreeMap;

use outbox_core::contracts::{Contracts, ASYNCAPI_FILE, SCHEMA_FORMAT};
use outbox_core::registry::EventDescriptor;
use outbox_core::schemars::JsonSchema;
use outbox_core::{OutboxEvent, Redact};
use serde::Serialize;
use uuid::Uuid;

#[derive(Serialize, JsonSchema, Redact)]
#[schemars(crate = "outbox_core::schemars")]
struct Card {
    #[outbox(sensitive)]
    number: String,
    brand: String,
}

/// How an order was paid.
#[allow(dead_code)] // only its schema is used
#[derive(Serialize, JsonSchema)]
#[schemars(crate = "outbox_core::schemars")]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Method {
    /// By card.
    Card { last4: String },
    /// In cash.
    Cash,
}

#[derive(Serialize, JsonSchema, OutboxEvent)]
#[schemars(crate = "outbox_core::schemars")]
#[outbox(event_type = "payment.paid", aggregate = "payment", version = 1)]
struct PaymentPaidV1 {
    #[outbox(aggregate_id)]
    payment_id: Uuid,
    #[outbox(sensitive)]
    payer_email: String,
    amount_cents: u64,
}

#[derive(Serialize, JsonSchema, OutboxEvent)]
#[schemars(crate = "outbox_core::schemars")]
#[outbox(event_type = "payment.paid", aggregate = "payment", version = 2)]
struct PaymentPaidV2 {
    #[outbox(aggregate_id)]
    payment_id: Uuid,
    #[outbox(sensitive)]
    payer_email: String,
    amount_cents: u64,
    method: Method,
    card: Option<Card>,
    tags: BTreeMap<String, String>,
}

#[derive(Serialize, JsonSchema, OutboxEvent)]
#[schemars(crate = "outbox_core::schemars")]
#[outbox(event_type = "order.shipped", aggregate = "order", version = 1)]
struct OrderShipped {
    #[outbox(aggregate_id)]
    order_id: u64,
    parcels: Vec<Parcel>,
}

#[derive(Serialize, JsonSchema)]
#[schemars(crate = "outbox_core::schemars")]
struct Parcel {
    tracking: String,
    weight_grams: u32,
}

/// The contracts folder of the events above, in a temporary directory removed when the returned guard is dropped.
fn exported(name: &str) -> tempfile::TempDir {
    let events = [
        EventDescriptor::of::<PaymentPaidV1>("PaymentPaidV1"),
        EventDescriptor::of::<PaymentPaidV2>("PaymentPaidV2"),
        EventDescriptor::of::<OrderShipped>("OrderShipped"),
    ];
    let contracts = Contracts::from_events(&events).expect("contracts");
    let dir = tempfile::Builder::new().prefix(&format!("outbox-asyncapi-{name}-")).tempdir().unwrap();
    contracts.write(dir.path()).expect("write");
    dir
}

#[test]
fn asyncapi_document_passes_the_official_parser() {
    let dir = exported("valid");
    let output = outbox_tests::asyncapi::parse(&dir.path().join(ASYNCAPI_FILE));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the parser rejected the document:\n{stderr}");

    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).expect("summary");
    assert_eq!(summary["version"], "3.0.0");
    let channels: Vec<(&str, Vec<&str>)> = summary["channels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let messages = c["messages"].as_array().unwrap().iter().map(|m| m.as_str().unwrap()).collect();
            (c["address"].as_str().unwrap(), messages)
        })
        .collect();
    assert_eq!(
        channels,
        [("order.shipped", vec!["order.shipped.v1"]), ("payment.paid", vec!["payment.paid.v1", "payment.paid.v2"])]
    );
    assert_eq!(summary["operations"].as_array().unwrap().len(), 2);
    for location in summary["correlationIds"].as_array().unwrap() {
        assert_eq!(location, "$message.header#/ce_subject");
    }
    // Every payload says it is JSON Schema 2020-12: without `schemaFormat` the parser would read it as an
    // AsyncAPI schema (its default), a different dialect.
    let formats = summary["schemaFormats"].as_object().unwrap();
    let mut messages: Vec<&str> = summary["messages"].as_array().unwrap().iter().map(|m| m.as_str().unwrap()).collect();
    messages.sort_unstable();
    assert_eq!(messages, ["order.shipped.v1", "payment.paid.v1", "payment.paid.v2"]);
    for message in &messages {
        assert_eq!(formats.get(*message), Some(&SCHEMA_FORMAT.into()), "the schemaFormat of {message}: {formats:?}");
    }
    let sensitive: Vec<&str> = summary["sensitive"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    assert!(sensitive.contains(&"payment.paid.v1:payer_email"), "{sensitive:?}");
    assert!(sensitive.contains(&"payment.paid.v2:payer_email"), "{sensitive:?}");
    // The nested sensitive field keeps its flag too, in the hoisted definition.
    let document = std::fs::read_to_string(dir.path().join(ASYNCAPI_FILE)).unwrap();
    let document: serde_json::Value = serde_json::from_str(&document).unwrap();
    assert_eq!(
        document.pointer("/components/schemas/payment.paid.v2.Card/properties/number/x-sensitive"),
        Some(&true.into())
    );
}

/// The document of a contracts folder describes the events, not the wire, and says so to whoever opens it.
#[test]
fn the_exported_document_says_it_names_no_broker_and_how_to_get_the_brokers() {
    let dir = exported("broker-free");
    let document = std::fs::read_to_string(dir.path().join(ASYNCAPI_FILE)).unwrap();
    let document: serde_json::Value = serde_json::from_str(&document).unwrap();
    assert!(document.get("servers").is_none(), "a document without a sink names no server: {document}");
    let description = document["info"]["description"].as_str().expect("a description");
    for says in ["names no broker", "address is the event type", "`ce_*`", "outbox contracts asyncapi", "--sink"] {
        assert!(description.contains(says), "the description does not say {says:?}: {description}");
    }
}

#[test]
fn a_broken_document_is_rejected_by_the_validator() {
    let dir = exported("broken");
    let path = dir.path().join("broken.json");
    std::fs::write(
        &path,
        r##"{"asyncapi":"3.0.0","info":{"title":"x"},"channels":{"a":{"messages":{"m":{"$ref":"#/nowhere"}}}}}"##,
    )
    .unwrap();
    let output = outbox_tests::asyncapi::parse(&path);
    assert!(!output.status.success(), "the validator accepted a broken document");
}
