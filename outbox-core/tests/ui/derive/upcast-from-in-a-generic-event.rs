use outbox_core::OutboxEvent;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "seat.booked", aggregate = "seat", version = 1)]
struct SeatBookedV1 {
    #[outbox(aggregate_id)]
    seat: u32,
}

#[derive(Serialize, Deserialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "seat.booked", aggregate = "seat", version = 2, upcast_from = SeatBookedV1)]
struct SeatBooked<T> {
    #[outbox(aggregate_id)]
    seat: u32,
    extra: T,
}
fn main() {}
