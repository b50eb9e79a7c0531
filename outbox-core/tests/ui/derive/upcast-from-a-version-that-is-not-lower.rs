use outbox_core::OutboxEvent;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "seat.booked", aggregate = "seat", version = 3)]
struct SeatBookedV3 {
    #[outbox(aggregate_id)]
    seat: u32,
}

// Upcasting goes from an older version to a newer one: v2 cannot replace v3.
#[derive(Serialize, Deserialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "seat.booked", aggregate = "seat", version = 2, upcast_from = SeatBookedV3)]
struct SeatBooked {
    #[outbox(aggregate_id)]
    seat: u32,
}

impl From<SeatBookedV3> for SeatBooked {
    fn from(v3: SeatBookedV3) -> Self {
        Self { seat: v3.seat }
    }
}
fn main() {}
