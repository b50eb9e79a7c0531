use outbox_core::OutboxEvent;
use serde::Serialize;

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "shape.drawn", aggregate = "shape", version = 1, aggregate_id = "r#self")]
struct ShapeDrawn {
    r#type: String,
}

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "shape.moved", aggregate = "shape", version = 1, aggregate_id = "r#9lives")]
struct ShapeMoved {
    r#type: String,
}
fn main() {}
