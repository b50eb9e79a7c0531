//! `#[derive(OutboxEvent)]` expanded from a user's `macro_rules!`: literals passed as `$v:literal`, the previous
//! version passed as `$previous:path` or `$previous:ty` to `upcast_from`, and the path to outbox_core passed as
//! `$krate:path` to `crate` are accepted, and the generated code's locals resolve despite the macro's hygiene.

use outbox_core::schemars::JsonSchema;
use outbox_core::{Decode, OutboxEvent, Redact, RedactedDebug};
use serde::{Deserialize, Serialize};

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

#[derive(Debug, PartialEq, Serialize, Deserialize, JsonSchema, OutboxEvent)]
#[schemars(crate = "outbox_core::schemars")]
#[outbox(event_type = "account.renamed", aggregate = "account", version = 1)]
struct AccountRenamedV1 {
    #[outbox(aggregate_id)]
    account_id: u64,
    label: String,
}

/// The next version of `account.renamed`, replacing `$previous` given as a path.
macro_rules! renamed_after_path {
    ($name:ident, $version:literal, $previous:path) => {
        #[derive(Debug, PartialEq, Serialize, Deserialize, JsonSchema, OutboxEvent)]
        #[schemars(crate = "outbox_core::schemars")]
        #[outbox(event_type = "account.renamed", aggregate = "account", version = $version, upcast_from = $previous)]
        struct $name {
            #[outbox(aggregate_id)]
            account_id: u64,
            labels: Vec<String>,
        }
    };
}

/// The next version of `account.renamed`, replacing `$previous` given as a type.
macro_rules! renamed_after_type {
    ($name:ident, $version:literal, $previous:ty) => {
        #[derive(Debug, PartialEq, Serialize, Deserialize, JsonSchema, OutboxEvent)]
        #[schemars(crate = "outbox_core::schemars")]
        #[outbox(event_type = "account.renamed", aggregate = "account", version = $version, upcast_from = $previous)]
        struct $name {
            #[outbox(aggregate_id)]
            account_id: u64,
            labels: Vec<String>,
            by: String,
        }
    };
}

renamed_after_path!(AccountRenamedV2, 2, crate::AccountRenamedV1);
renamed_after_type!(AccountRenamed, 3, AccountRenamedV2);

impl From<AccountRenamedV1> for AccountRenamedV2 {
    fn from(v1: AccountRenamedV1) -> Self {
        Self { account_id: v1.account_id, labels: vec![v1.label] }
    }
}

impl From<AccountRenamedV2> for AccountRenamed {
    fn from(v2: AccountRenamedV2) -> Self {
        Self { account_id: v2.account_id, labels: v2.labels, by: "unknown".to_owned() }
    }
}

#[test]
fn derive_inside_macro_rules_takes_upcast_from_as_a_path_or_a_type_fragment() {
    assert_eq!(AccountRenamed::versions(), [3, 2, 1]);
    let from_v1 = AccountRenamed::decode(1, r#"{"account_id":4,"label":"savings"}"#).unwrap();
    assert_eq!(from_v1, AccountRenamed { account_id: 4, labels: vec!["savings".into()], by: "unknown".into() });
    let from_v2 = AccountRenamed::decode(2, r#"{"account_id":4,"labels":["a","b"]}"#).unwrap();
    assert_eq!(from_v2.labels, ["a", "b"]);
    let chain: Vec<(u32, Option<u32>)> = outbox_core::registry::versions("account.renamed")
        .iter()
        .map(|event| (event.version(), event.upcasts_from()))
        .collect();
    assert_eq!(chain, [(1, None), (2, Some(1)), (3, Some(2))]);
}

mod reexport {
    pub(crate) use ::outbox_core as outbox;
}

/// An event and a nested type whose generated code names outbox_core through `$krate`.
macro_rules! event_through {
    ($krate:path, $name:ident, $nested:ident) => {
        #[derive(Serialize, JsonSchema, Redact, RedactedDebug)]
        #[schemars(crate = "outbox_core::schemars")]
        #[outbox(crate = $krate)]
        struct $nested {
            #[outbox(sensitive)]
            number: String,
        }

        #[derive(Serialize, JsonSchema, OutboxEvent, RedactedDebug)]
        #[schemars(crate = "outbox_core::schemars")]
        #[outbox(crate = $krate, event_type = "account.closed", aggregate = "account", version = 1)]
        struct $name {
            #[outbox(aggregate_id)]
            account_id: u64,
            #[outbox(sensitive)]
            email: String,
            card: $nested,
        }
    };
}

event_through!(crate::reexport::outbox, AccountClosed, ClosedCard);

#[test]
fn derive_inside_macro_rules_takes_the_crate_as_a_path_fragment() {
    let event =
        AccountClosed { account_id: 3, email: "ana@example.com".into(), card: ClosedCard { number: "4111".into() } };
    assert_eq!(event.aggregate_id(), "3");
    assert_eq!(AccountClosed::sensitive_paths(), ["/email", "/card/number"]);
    assert_eq!(<ClosedCard as Redact>::redact_paths(), ["/number"]);
    let printed = format!("{event:?}");
    assert!(!printed.contains("ana@example.com") && !printed.contains("4111"), "{printed}");
    assert!(outbox_core::registry::events().iter().any(|e| e.event_type() == "account.closed"));
}
