//! An upcast chain v1 -> v2 -> v3: every version decodes as the newest type, the registry lists every version
//! with the one it replaces, contracts are exported for each, and the consecutive versions diff as bumps.

use outbox_core::contracts::{diff, Contracts, DiffOptions, Rule};
use outbox_core::{Decode, DecodeError, OutboxEvent};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "parcel.shipped", aggregate = "parcel", version = 1)]
struct ParcelShippedV1 {
    #[outbox(aggregate_id)]
    parcel_id: u64,
    weight_kg: u32,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "parcel.shipped", aggregate = "parcel", version = 2, upcast_from = ParcelShippedV1)]
struct ParcelShippedV2 {
    #[outbox(aggregate_id)]
    parcel_id: u64,
    weight_grams: u32,
}

#[derive(Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "parcel.shipped", aggregate = "parcel", version = 3, upcast_from = crate::ParcelShippedV2)]
struct ParcelShipped {
    #[outbox(aggregate_id)]
    parcel_id: u64,
    weight_grams: u32,
    carrier: String,
}

impl From<ParcelShippedV1> for ParcelShippedV2 {
    fn from(v1: ParcelShippedV1) -> Self {
        Self { parcel_id: v1.parcel_id, weight_grams: v1.weight_kg * 1000 }
    }
}

impl From<ParcelShippedV2> for ParcelShipped {
    fn from(v2: ParcelShippedV2) -> Self {
        Self { parcel_id: v2.parcel_id, weight_grams: v2.weight_grams, carrier: "unknown".to_owned() }
    }
}

#[test]
fn every_version_of_the_chain_decodes_as_the_newest_type() {
    let expected = |grams, carrier: &str| ParcelShipped { parcel_id: 5, weight_grams: grams, carrier: carrier.into() };
    assert_eq!(ParcelShipped::decode(1, r#"{"parcel_id":5,"weight_kg":2}"#).unwrap(), expected(2000, "unknown"));
    assert_eq!(ParcelShipped::decode(2, r#"{"parcel_id":5,"weight_grams":1500}"#).unwrap(), expected(1500, "unknown"));
    assert_eq!(
        ParcelShipped::decode(3, r#"{"parcel_id":5,"weight_grams":900,"carrier":"ctt"}"#).unwrap(),
        expected(900, "ctt")
    );
    assert_eq!(ParcelShipped::versions(), [3, 2, 1]);
    assert_eq!(ParcelShippedV2::versions(), [2, 1]);
}

#[test]
fn unknown_versions_and_mismatched_payloads_are_clear_errors() {
    let newer = ParcelShipped::decode(4, "{}").unwrap_err();
    assert_eq!(newer, DecodeError::UnknownVersion { event_type: "parcel.shipped", version: 4, known: vec![3, 2, 1] });
    assert_eq!(newer.to_string(), "`parcel.shipped` v4 is not a version this consumer reads (it knows v3, v2, v1)");
    assert!(matches!(ParcelShippedV2::decode(3, "{}"), Err(DecodeError::UnknownVersion { version: 3, .. })));
    let mismatch = ParcelShipped::decode(1, r#"{"parcel_id":5,"weight_grams":2}"#).unwrap_err();
    assert_eq!(
        mismatch.to_string(),
        "the payload does not match `parcel.shipped` v1: missing field `weight_kg` at line 1 column 32"
    );
}

#[test]
fn the_registry_knows_every_version_and_what_it_replaces() {
    let chain: Vec<(u32, Option<u32>, &str)> = outbox_core::registry::versions("parcel.shipped")
        .iter()
        .map(|e| (e.version(), e.upcasts_from(), e.type_name().rsplit("::").next().unwrap()))
        .collect();
    assert_eq!(chain, [(1, None, "ParcelShippedV1"), (2, Some(1), "ParcelShippedV2"), (3, Some(2), "ParcelShipped")]);
}

#[test]
fn contracts_are_exported_for_every_version_and_consecutive_versions_diff_as_bumps() {
    let all = Contracts::from_registry().unwrap();
    for version in 1..=3 {
        assert!(all.get("parcel.shipped", version).is_some(), "v{version} exported");
    }
    for newest in 2..=3 {
        let mut old = Contracts::new();
        let mut new = Contracts::new();
        for version in 1..=newest {
            let schema = all.get("parcel.shipped", version).unwrap().clone();
            if version < newest {
                old.insert("parcel.shipped", version, schema.clone());
            }
            new.insert("parcel.shipped", version, schema);
        }
        let report = diff(&old, &new, &DiffOptions::default());
        assert!(report.breaking_rules().is_empty(), "v{newest} is a declared bump: {report}");
        let added: Vec<_> = report.findings.iter().filter(|f| f.rule == Rule::VersionAdded).collect();
        assert_eq!(added.len(), 1, "{report}");
        assert_eq!((added[0].version, added[0].compared_with), (newest, newest - 1), "{report}");
        assert!(report.findings.iter().any(|f| f.rule != Rule::VersionAdded), "v{newest} changed: {report}");
    }
}
