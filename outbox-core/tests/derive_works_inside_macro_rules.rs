//! `#[derive(OutboxEvent)]` expanded from a user's `macro_rules!`: literals passed as `$v:literal` are accepted
//! and the generated code's locals resolve despite the macro's hygiene.

use outbox_core::schemars::JsonSchema;
use outbox_core::OutboxEvent;
use serde::Serialize;

#[derive(Serialize, JsonSchema, outbox_core::Redact)]
#[schemars(crate = "outbox_core::schemars")]
struct Card {
    #[outbox(sensitive)]
    number: String,
}

macro_rules! event {
    ($name:ident, $event_type:literal, $version:literal) => {
        #[derive(Serialize, JsonSchema, OutboxEvent)]
        #[schemars(crate = "outbox_core::schemars")]
        #[outbox(event_type = $event_type, aggregate = "account", version = $version)]
        struct $name {
            #[outbox(aggregate_id)]
            account_id: u64,
            #[outbox(sensitive)]
            email: String,
            card: Card,
        }
    };
}

event!(AccountOpened, "account.opened", 3);

#[test]
fn derive_inside_macro_rules_takes_literal_fragments_and_lists_sensitive_paths() {
    assert_eq!(AccountOpened::EVENT_TYPE, "account.opened");
    assert_eq!(AccountOpened::VERSION, 3);
    assert_eq!(AccountOpened::sensitive_paths(), ["/email", "/card/number"]);
    let event = AccountOpened { account_id: 9, email: "ana@example.com".into(), card: Card { number: "4111".into() } };
    assert_eq!(event.aggregate_id(), "9");
    let redacted = event.redacted().to_string();
    assert!(!redacted.contains("ana@example.com") && !redacted.contains("4111"), "{redacted}");
}

macro_rules! keyed_event {
    ($name:ident, $event_type:literal, $path:literal) => {
        #[derive(Serialize, JsonSchema, OutboxEvent)]
        #[schemars(crate = "outbox_core::schemars")]
        #[outbox(event_type = $event_type, aggregate = "account", version = 1, aggregate_id = $path)]
        struct $name {
            account: Account,
        }
    };
}

#[derive(Serialize, JsonSchema)]
#[schemars(crate = "outbox_core::schemars")]
struct Account {
    number: u64,
}

impl Account {
    fn key(&self) -> String {
        format!("ACC-{}", self.number)
    }
}

keyed_event!(AccountFrozen, "account.frozen", "account.number");
keyed_event!(AccountThawed, "account.thawed", "account.key()");

#[test]
fn derive_inside_macro_rules_takes_the_aggregate_id_path_as_a_literal_fragment() {
    let frozen = AccountFrozen { account: Account { number: 12 } };
    assert_eq!(frozen.aggregate_id(), "12");
    let thawed = AccountThawed { account: Account { number: 12 } };
    assert_eq!(thawed.aggregate_id(), "ACC-12");
}
