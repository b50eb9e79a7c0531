//! A struct with many `#[serde(flatten)]` enums: schemars writes `allOf: [{ oneOf: A }, { oneOf: B }, ...]`
//! beside the struct's own properties. Their cross product is too large to compare branch by branch, yet a
//! change in the last enum is found, and reordering its variants is no change.

use outbox_core::contracts::{diff_schemas, DiffOptions, Rule};
use serde_json::{json, Value};

/// Ten flattened enums of four variants each (4^10 combinations), tagged `t0`..`t9`; each variant carries one
/// field. `edit` changes the variants of the last enum.
fn event(edit: impl Fn(&mut Vec<Value>)) -> Value {
    let parts: Vec<Value> = (0..10)
        .map(|e| {
            let mut variants: Vec<Value> = (0..4)
                .map(|v| {
                    json!({
                        "type": "object",
                        "properties": { format!("t{e}"): { "const": v }, format!("f{e}"): { "type": "integer" } },
                        "required": [format!("t{e}"), format!("f{e}")]
                    })
                })
                .collect();
            if e == 9 {
                edit(&mut variants);
            }
            json!({ "oneOf": variants })
        })
        .collect();
    json!({ "type": "object", "properties": { "id": { "type": "integer" } }, "required": ["id"], "allOf": parts })
}

#[test]
fn a_field_changed_in_the_last_of_many_flattened_enums_is_found() {
    let old = event(|_| {});
    let new = event(|variants| variants[3]["properties"]["f9"] = json!({ "type": "string" }));
    let report = diff_schemas(&old, &new, &DiffOptions::default());
    assert_eq!(report.breaking_rules(), [Rule::TypeChanged], "{report}");
    assert!(report.breaking().all(|f| f.pointer == "/properties/f9/type"), "{report}");
}

#[test]
fn reordering_the_variants_of_the_last_of_many_flattened_enums_is_no_change() {
    let report = diff_schemas(&event(|_| {}), &event(|variants| variants.reverse()), &DiffOptions::default());
    assert!(report.findings.is_empty(), "{report}");
}
