use outbox_core::OutboxEvent;
use serde::Serialize;

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "shape.drawn", aggregate = "shape", version = 1, aggregate_id = "r#r#type")]
struct ShapeDrawn {
    r#type: String,
}

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "shape.moved", aggregate = "shape", version = 1, aggregate_id = "r##type")]
struct ShapeMoved {
    r#type: String,
}
fn main() {}
