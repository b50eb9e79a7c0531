use outbox_core::OutboxEvent;
use serde::Serialize;

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "shape.drawn", aggregate = "shape", version = 1, aggregate_id = "type")]
struct ShapeDrawn {
    r#type: String,
}
fn main() {}
