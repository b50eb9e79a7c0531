//! Nested structs with `#[derive(Redact)]` contribute `/field/...`, `Vec` and maps `/field/*/...`, `Option` and
//! `Box` nothing; `#[outbox(sensitive)]` on a nested, optional or list field redacts the whole value.

use std::collections::BTreeMap;

use outbox_core::{OutboxEvent, Redact};
use serde::Serialize;

#[derive(Serialize, schemars::JsonSchema, Redact)]
struct Card {
    #[outbox(sensitive)]
    number: String,
    brand: String,
    billing: Address,
}

#[derive(Serialize, schemars::JsonSchema, Redact)]
struct Address {
    #[outbox(sensitive)]
    street: String,
    country: String,
}

/// A newtype whose whole value is sensitive: `transparent` makes its pointer the value itself.
#[derive(Serialize, schemars::JsonSchema, Redact)]
#[serde(transparent)]
struct Email {
    #[outbox(sensitive)]
    address: String,
}

/// A nested type with nothing sensitive, declared as such.
#[derive(Serialize, schemars::JsonSchema)]
struct Money {
    cents: i64,
}
impl Redact for Money {}

/// A nested type that does not implement `Redact` at all: taken as opaque.
#[derive(Serialize, schemars::JsonSchema)]
struct Note {
    text: String,
}

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "wallet.updated", aggregate = "wallet", version = 3)]
struct WalletUpdated {
    #[outbox(aggregate_id)]
    wallet_id: u64,
    primary: Card,
    backup: Option<Card>,
    cards: Vec<Card>,
    by_label: BTreeMap<String, Card>,
    boxed: Option<Box<[Card]>>,
    #[outbox(sensitive)]
    hidden_card: Card,
    #[outbox(sensitive)]
    nickname: Option<String>,
    #[outbox(sensitive)]
    recovery_codes: Vec<String>,
    balance: Money,
    note: Note,
    contact: Email,
}

#[test]
fn every_container_shape_prefixes_the_nested_paths() {
    assert_eq!(
        WalletUpdated::sensitive_paths(),
        [
            "/primary/number",
            "/primary/billing/street",
            "/backup/number",
            "/backup/billing/street",
            "/cards/*/number",
            "/cards/*/billing/street",
            "/by_label/*/number",
            "/by_label/*/billing/street",
            "/boxed/*/number",
            "/boxed/*/billing/street",
            "/hidden_card",
            "/nickname",
            "/recovery_codes",
            "/contact",
        ]
    );
}

#[test]
fn a_transparent_newtype_marks_its_whole_value() {
    assert_eq!(<Email as Redact>::redact_paths(), [""]);
}

#[test]
fn redaction_reaches_every_element_and_keeps_the_rest() {
    let card = |n: &str| Card {
        number: n.into(),
        brand: "visa".into(),
        billing: Address { street: format!("street {n}"), country: "PT".into() },
    };
    let event = WalletUpdated {
        wallet_id: 1,
        primary: card("1111"),
        backup: None,
        cards: vec![card("2222"), card("3333")],
        by_label: BTreeMap::from([("work".to_owned(), card("4444"))]),
        boxed: Some(Box::new([card("5555")])),
        hidden_card: card("6666"),
        nickname: Some("wally".into()),
        recovery_codes: vec!["abc".into()],
        balance: Money { cents: 10 },
        note: Note { text: "hi".into() },
        contact: Email { address: "wally@example.com".into() },
    };
    let redacted = event.redacted();
    let text = redacted.to_string();
    for secret in ["1111", "2222", "3333", "4444", "5555", "6666", "wally", "abc", "example.com"] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
    assert_eq!(redacted["cards"][1]["brand"], "visa");
    assert_eq!(redacted["cards"][1]["billing"]["country"], "PT");
    assert_eq!(redacted["hidden_card"], "[REDACTED]");
    assert_eq!(redacted["backup"], serde_json::Value::Null);
    assert_eq!(redacted["note"]["text"], "hi");
}

/// A card ordered by its brand (a heap's elements are ordered).
#[derive(Serialize, schemars::JsonSchema, Redact)]
#[serde(transparent)]
struct Ordered {
    card: Card,
}

impl PartialEq for Ordered {
    fn eq(&self, other: &Self) -> bool {
        self.card.brand == other.card.brand
    }
}
impl Eq for Ordered {}
impl PartialOrd for Ordered {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Ordered {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.card.brand.cmp(&other.card.brand)
    }
}

/// A `Result`, a tuple of more than four, a heap and a wrapper: the nested type's sensitive fields are found through
/// each (before, these types had no `Redact` impl, so the field was taken as holding nothing sensitive and its card
/// number was printed in clear).
#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "payment.attempted", aggregate = "payment", version = 1)]
struct PaymentAttempted {
    #[outbox(aggregate_id)]
    payment_id: u64,
    outcome: Result<Card, String>,
    history: (u8, u8, u8, u8, Card),
    tries: std::collections::BinaryHeap<std::cmp::Reverse<Ordered>>,
}

#[test]
fn sensitive_fields_are_found_through_results_long_tuples_and_lists() {
    let paths = PaymentAttempted::sensitive_paths();
    for expected in ["/outcome/Ok/number", "/history/4/number", "/tries/*/number", "/outcome/Ok/billing/street"] {
        assert!(paths.iter().any(|path| path == expected), "{expected} in {paths:?}");
    }
    let card = || Card {
        number: "4111111111111111".into(),
        brand: "visa".into(),
        billing: Address { street: "Main St 1".into(), country: "NL".into() },
    };
    let event = PaymentAttempted {
        payment_id: 1,
        outcome: Ok(card()),
        history: (1, 2, 3, 4, card()),
        tries: std::iter::once(std::cmp::Reverse(Ordered { card: card() })).collect(),
    };
    let shown = event.redacted().to_string();
    assert!(!shown.contains("4111") && !shown.contains("Main St"), "{shown}");
    assert!(shown.contains("visa"), "{shown}");
}

/// Writes a card as one string, its number in it.
fn card_as_text<S: serde::Serializer>(card: &Card, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&format!("{}|{}", card.number, card.brand))
}

/// A field written by a function of the user's (`serialize_with`, `with`): its type's pointers may name nothing
/// in what the function writes, so the whole value is redacted (before, `/card/number` matched nothing and the
/// number was printed in clear).
#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "card.saved", aggregate = "card", version = 1)]
struct CardSaved {
    #[outbox(aggregate_id)]
    card_id: u64,
    #[serde(serialize_with = "card_as_text")]
    #[schemars(with = "String")]
    card: Card,
    #[serde(serialize_with = "money_as_text")]
    #[schemars(with = "String")]
    price: Money,
}

fn money_as_text<S: serde::Serializer>(money: &Money, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&money.cents.to_string())
}

#[test]
fn a_field_written_by_a_function_of_the_users_is_redacted_whole_when_its_type_has_sensitive_fields() {
    assert_eq!(CardSaved::sensitive_paths(), ["/card"], "nothing sensitive in the price: not redacted");
    let event = CardSaved {
        card_id: 1,
        card: Card {
            number: "4111111111111111".into(),
            brand: "visa".into(),
            billing: Address { street: "Main St 1".into(), country: "NL".into() },
        },
        price: Money { cents: 1250 },
    };
    let shown = event.redacted().to_string();
    assert!(!shown.contains("4111"), "{shown}");
    assert!(shown.contains("1250"), "{shown}");
    outbox_core::schema::event_schema::<CardSaved>().expect("the contract marks the field");
}
