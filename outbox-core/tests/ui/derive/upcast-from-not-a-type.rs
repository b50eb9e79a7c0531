use outbox_core::OutboxEvent;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "seat.booked", aggregate = "seat", version = 2, upcast_from = 1)]
struct SeatBooked {
    #[outbox(aggregate_id)]
    seat: u32,
}
fn main() {}
