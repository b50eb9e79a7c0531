//! Maps whose keys are not strings (`BTreeMap<u32, V>`: schemars writes `patternProperties` and closes the object)
//! and maps flattened beside an enum (`unevaluatedProperties`): a change of their values is a finding like any
//! other (before, both sides looked like empty closed objects and the check passed), and the sensitive fields of
//! their values are found when an event's contract is made (before, the export failed).

use std::collections::{BTreeMap, HashMap};

use outbox_core::contracts::{diff_schemas, DiffOptions, Rule};
use outbox_core::schema::event_schema;
use outbox_core::{OutboxEvent, Redact};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

fn schema_of<T: JsonSchema>() -> Value {
    serde_json::to_value(schemars::schema_for!(T)).unwrap()
}

#[allow(dead_code)]
#[derive(JsonSchema)]
struct LineV1 {
    quantity: u32,
}

#[allow(dead_code)]
#[derive(JsonSchema)]
struct LineV2 {
    quantity: u32,
    sku: String,
}

#[allow(dead_code)]
#[derive(JsonSchema)]
struct OrderV1 {
    lines: BTreeMap<u32, LineV1>,
    notes: BTreeMap<u32, String>,
}

#[allow(dead_code)]
#[derive(JsonSchema)]
struct OrderV2 {
    lines: BTreeMap<u32, LineV2>,
    notes: BTreeMap<u32, i64>,
}

#[test]
fn the_values_of_a_map_with_integer_keys_are_compared() {
    let report = diff_schemas(&schema_of::<OrderV1>(), &schema_of::<OrderV2>(), &DiffOptions::default());
    let rules = report.breaking_rules();
    assert!(rules.contains(&Rule::RequiredPropertyAdded), "{report}");
    assert!(rules.contains(&Rule::TypeChanged), "{report}");
    assert!(report.breaking().any(|finding| finding.pointer.contains("/patternProperties/")), "{report}");
}

#[allow(dead_code)]
#[derive(JsonSchema)]
enum Kind {
    Parcel { weight: u32 },
    Letter { pages: u32 },
}

#[allow(dead_code)]
#[derive(JsonSchema)]
struct ShipmentV1 {
    #[serde(flatten)]
    kind: Kind,
    #[serde(flatten)]
    attributes: HashMap<String, String>,
}

#[allow(dead_code)]
#[derive(JsonSchema)]
struct ShipmentV2 {
    #[serde(flatten)]
    kind: Kind,
    #[serde(flatten)]
    attributes: HashMap<String, u32>,
}

#[test]
fn the_values_of_a_map_flattened_beside_an_enum_are_compared() {
    let (old, new) = (schema_of::<ShipmentV1>(), schema_of::<ShipmentV2>());
    let report = diff_schemas(&old, &new, &DiffOptions::default());
    assert!(report.breaking_rules().contains(&Rule::TypeChanged), "{report}\nold: {old}\nnew: {new}");
}

#[derive(Serialize, JsonSchema, Redact)]
struct Card {
    #[outbox(sensitive)]
    number: String,
}

#[derive(Serialize, JsonSchema, OutboxEvent)]
#[outbox(event_type = "wallet.updated", aggregate = "wallet", version = 1)]
struct WalletUpdated {
    #[outbox(aggregate_id)]
    wallet_id: u64,
    cards: HashMap<u64, Card>,
}

#[test]
fn a_sensitive_field_in_the_values_of_a_map_with_integer_keys_is_marked_in_the_contract() {
    assert_eq!(WalletUpdated::sensitive_paths(), ["/cards/*/number"]);
    let schema = event_schema::<WalletUpdated>().expect("the contract is made");
    let text = serde_json::to_string(&schema).unwrap();
    assert!(text.contains("x-sensitive"), "{text}");
}
