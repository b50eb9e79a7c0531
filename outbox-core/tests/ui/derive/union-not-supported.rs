use outbox_core::OutboxEvent;

#[derive(OutboxEvent)]
#[outbox(event_type = "number.changed", aggregate = "number", version = 1)]
union NumberChanged {
    int: u64,
    float: f64,
}
fn main() {}
