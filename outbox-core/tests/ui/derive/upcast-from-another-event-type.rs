use outbox_core::OutboxEvent;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "seat.released", aggregate = "seat", version = 1)]
struct SeatReleased {
    #[outbox(aggregate_id)]
    seat: u32,
}

#[derive(Serialize, Deserialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "seat.booked", aggregate = "seat", version = 2, upcast_from = SeatReleased)]
struct SeatBooked {
    #[outbox(aggregate_id)]
    seat: u32,
}

impl From<SeatReleased> for SeatBooked {
    fn from(released: SeatReleased) -> Self {
        Self { seat: released.seat }
    }
}
fn main() {}
