//! A field named with a raw identifier (`r#type`) can be the aggregate id, marked or named by a path, and keeps
//! its JSON name without the `r#`.

use outbox_core::OutboxEvent;
use serde::Serialize;

#[derive(Serialize, schemars::JsonSchema)]
struct Kind {
    r#ref: String,
}

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "shape.drawn", aggregate = "shape", version = 1, aggregate_id = "r#type")]
struct ShapeDrawn {
    r#type: String,
}

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "shape.moved", aggregate = "shape", version = 1, aggregate_id = "r#kind.r#ref")]
struct ShapeMoved {
    r#kind: Kind,
}

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "shape.erased", aggregate = "shape", version = 1)]
struct ShapeErased {
    #[outbox(aggregate_id)]
    r#match: u32,
}

#[test]
fn raw_identifiers_in_an_aggregate_id_path_or_on_a_marked_field_give_the_field_value() {
    assert_eq!(ShapeDrawn { r#type: "circle".into() }.aggregate_id(), "circle");
    assert_eq!(ShapeMoved { r#kind: Kind { r#ref: "k-1".into() } }.aggregate_id(), "k-1");
    let erased = ShapeErased { r#match: 4 };
    assert_eq!(erased.aggregate_id(), "4");
    assert_eq!(erased.redacted(), serde_json::json!({"match": 4}));
}
