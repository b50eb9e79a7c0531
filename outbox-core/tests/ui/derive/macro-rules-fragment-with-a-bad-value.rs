use outbox_core::OutboxEvent;
use serde::Serialize;

macro_rules! event {
    ($name:ident, $event_type:literal, $path:literal) => {
        #[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
        #[outbox(event_type = $event_type, aggregate = "account", version = 1, aggregate_id = $path)]
        struct $name {
            account_id: u64,
        }
    };
}

event!(AccountOpened, "Account.Opened", "account_id");
event!(AccountClosed, "account.closed", "acount_id");
event!(AccountFrozen, "account.frozen", "r#self");
fn main() {}
