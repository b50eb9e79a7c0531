use outbox_core::OutboxEvent;
use serde::{Deserialize, Serialize};

macro_rules! event_through {
    ($name:ident, $krate:path) => {
        #[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
        #[outbox(crate = $krate, event_type = "account.opened", aggregate = "account", version = 1)]
        struct $name {
            #[outbox(aggregate_id)]
            account_id: u64,
        }
    };
}

macro_rules! next_version_after_path {
    ($name:ident, $previous:path) => {
        #[derive(Serialize, Deserialize, schemars::JsonSchema, OutboxEvent)]
        #[outbox(event_type = "account.frozen", aggregate = "account", version = 2, upcast_from = $previous)]
        struct $name {
            #[outbox(aggregate_id)]
            account_id: u64,
        }
    };
}

macro_rules! next_version_after_type {
    ($name:ident, $previous:ty) => {
        #[derive(Serialize, Deserialize, schemars::JsonSchema, OutboxEvent)]
        #[outbox(event_type = "account.closed", aggregate = "account", version = 2, upcast_from = $previous)]
        struct $name {
            #[outbox(aggregate_id)]
            account_id: u64,
        }
    };
}

#[derive(Serialize, Deserialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "account.frozen", aggregate = "account", version = 1)]
struct AccountFrozenV1 {
    #[outbox(aggregate_id)]
    account_id: u64,
}

// A path with generic arguments is no module path.
event_through!(AccountOpened, outbox_core::registry<u8>);
// A path to the previous version, but no `From` impl to upcast it.
next_version_after_path!(AccountFrozen, crate::AccountFrozenV1);
// A type that is no path.
next_version_after_type!(AccountClosed, [u8; 4]);
fn main() {}
