//! Property tests of the differ over random schema pairs: it never panics, a schema compared with itself (or with
//! itself under other definition names and annotations) has no finding, and a pair that differs one way differs
//! the other way too.

use outbox_core::contracts::{diff_schemas, ContentModel, DiffOptions, Mode};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

fn leaf() -> impl Strategy<Value = Value> {
    let types = prop::sample::select(vec!["string", "integer", "number", "boolean", "null", "array", "object"]);
    prop_oneof![
        Just(json!(true)),
        Just(json!(false)),
        Just(json!({})),
        types.clone().prop_map(|t| json!({ "type": t })),
        (types.clone(), types).prop_map(|(a, b)| json!({ "type": [a, b] })),
        (0u64..5).prop_map(|n| json!({ "type": "integer", "minimum": n, "format": "uint32" })),
        (1u64..5).prop_map(|n| json!({ "type": "number", "multipleOf": n, "maximum": n * 10 })),
        (0u64..9).prop_map(|n| json!({ "type": "string", "maxLength": n, "pattern": "^a" })),
        prop::collection::vec(prop::sample::select(vec!["a", "b", "c"]), 0..3).prop_map(|v| json!({ "enum": v })),
        prop::sample::select(vec!["x", "y"]).prop_map(|c| json!({ "const": c })),
        Just(json!({ "$ref": "#/$defs/Thing" })),
        Just(json!({ "$ref": "#" })),
        Just(json!({ "$ref": "#/$defs/Missing" })),
        Just(json!({ "x-outbox-recursive": "#" })),
        Just(json!({ "type": "string", "x-sensitive": true })),
    ]
}

fn schema() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 48, 4, |inner| {
        let names = prop::sample::select(vec!["a", "b", "c", "d~/"]);
        prop_oneof![
            (
                prop::collection::btree_map(names.clone(), inner.clone(), 0..4),
                prop::collection::vec(names, 0..3),
                any::<Option<bool>>()
            )
                .prop_map(|(props, required, closed)| {
                    let mut map = Map::new();
                    map.insert("type".into(), json!("object"));
                    map.insert("properties".into(), json!(props));
                    map.insert("required".into(), json!(required));
                    if let Some(closed) = closed {
                        map.insert("additionalProperties".into(), json!(!closed));
                    }
                    Value::Object(map)
                }),
            (inner.clone(), any::<bool>()).prop_map(
                |(items, unique)| json!({ "type": "array", "items": items, "uniqueItems": unique, "minItems": 1 })
            ),
            prop::collection::vec(inner.clone(), 1..4).prop_map(|branches| json!({ "anyOf": branches })),
            prop::collection::vec(inner.clone(), 1..3).prop_map(|branches| json!({ "oneOf": branches })),
            prop::collection::vec(inner.clone(), 1..3).prop_map(|parts| json!({ "allOf": parts })),
            prop::collection::vec(inner.clone(), 1..3)
                .prop_map(|items| json!({ "type": "array", "prefixItems": items })),
            inner.clone().prop_map(|values| json!({ "type": "object", "additionalProperties": values })),
            (inner.clone(), inner).prop_map(|(root, thing)| json!({ "allOf": [root], "$defs": { "Thing": thing } })),
        ]
    })
}

/// Any JSON at all, schema or not.
fn junk() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| json!(f)),
        prop::sample::select(vec!["type", "properties", "$ref", "#", "#/a", "anyOf", "items", "enum"])
            .prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "type",
                    "properties",
                    "required",
                    "items",
                    "anyOf",
                    "oneOf",
                    "enum",
                    "const",
                    "$ref",
                    "additionalProperties",
                    "minimum",
                    "format",
                    "x-sensitive"
                ])
                .prop_map(str::to_owned),
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn options(mode: Mode, content_model: ContentModel) -> DiffOptions {
    let mut options = DiffOptions::default();
    options.mode = mode;
    options.content_model = content_model;
    options
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn a_schema_compared_with_itself_has_no_finding(schema in schema()) {
        for model in [ContentModel::Tolerant, ContentModel::Strict] {
            let report = diff_schemas(&schema, &schema, &options(Mode::Full, model));
            prop_assert!(report.findings.is_empty(), "{}\n{report}", schema);
        }
    }

    #[test]
    fn renaming_definitions_and_changing_annotations_is_no_change(schema in schema()) {
        let text = schema.to_string().replace("#/$defs/Thing", "#/$defs/Renamed").replace("\"Thing\":", "\"Renamed\":");
        let mut renamed: Value = serde_json::from_str(&text).unwrap();
        if let Value::Object(map) = &mut renamed {
            map.insert("description".into(), json!("another description"));
            map.insert("title".into(), json!("RenamedType"));
        }
        for model in [ContentModel::Tolerant, ContentModel::Strict] {
            let report = diff_schemas(&schema, &renamed, &options(Mode::Full, model));
            prop_assert!(report.findings.is_empty(), "{}\n{}\n{report}", schema, renamed);
        }
    }

    #[test]
    fn a_pair_differs_in_both_directions_or_in_neither(old in schema(), new in schema()) {
        for model in [ContentModel::Tolerant, ContentModel::Strict] {
            let forward = diff_schemas(&old, &new, &options(Mode::Full, model));
            let backward = diff_schemas(&new, &old, &options(Mode::Full, model));
            // Every verdict renders, in both forms.
            let _ = (forward.to_string(), forward.to_json(), backward.to_string());
            prop_assert_eq!(forward.findings.is_empty(), backward.findings.is_empty(), "{}\n{}", forward, backward);
        }
    }

    #[test]
    fn junk_never_panics(old in junk(), new in junk()) {
        for model in [ContentModel::Tolerant, ContentModel::Strict] {
            let _ = diff_schemas(&old, &new, &options(Mode::Backward, model)).to_string();
            prop_assert!(diff_schemas(&old, &old, &options(Mode::Full, model)).findings.is_empty());
        }
    }
}
