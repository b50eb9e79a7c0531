use outbox_core::OutboxEvent;
use serde::Serialize;

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "clock.ticked", aggregate = "clock", version = 1, aggregate_id = "_")]
struct ClockTicked {
    clock: u64,
}
fn main() {}
