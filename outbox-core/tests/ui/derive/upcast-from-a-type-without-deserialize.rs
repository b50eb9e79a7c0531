use outbox_core::OutboxEvent;
use serde::{Deserialize, Serialize};

// The older version is only ever written, never read: a consumer cannot decode its payloads.
#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "seat.booked", aggregate = "seat", version = 1)]
struct SeatBookedV1 {
    #[outbox(aggregate_id)]
    seat: u32,
}

#[derive(Serialize, Deserialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "seat.booked", aggregate = "seat", version = 2, upcast_from = SeatBookedV1)]
struct SeatBooked {
    #[outbox(aggregate_id)]
    seat: u32,
    row: String,
}

impl From<SeatBookedV1> for SeatBooked {
    fn from(v1: SeatBookedV1) -> Self {
        Self { seat: v1.seat, row: String::new() }
    }
}
fn main() {}
