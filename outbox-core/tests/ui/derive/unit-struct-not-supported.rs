use outbox_core::OutboxEvent;
use serde::Serialize;

#[derive(Serialize, OutboxEvent)]
#[outbox(event_type = "cache.flushed", aggregate = "cache", version = 1)]
struct CacheFlushed;
fn main() {}
