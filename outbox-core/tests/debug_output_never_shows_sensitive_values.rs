//! The `Debug` output (`{:?}` and `{:#?}`) of every public type that holds a payload masks its sensitive values:
//! an event with `#[derive(RedactedDebug)]`, a nested type with it, `NewEvent`, and what the store gives back
//! (`StoredEvent`, the `ReadRow` and `ReadBatch` of a `Store::read` that carry it, the `PendingById` of the WAL
//! relay's `PgStore::pending_by_id` that carries such rows, `EventDetail`) from a real SQLite database, and what a
//! consumer receives (`consume::Received`, whose body is never printed). `OutboxTransaction`, which holds
//! `NewEvent`s until its commit, needs PostgreSQL: its test is in `tests/tests/foundation`; the relay's `Message`
//! is tested in `outbox-relay/tests/message_debug_output_never_shows_sensitive_values.rs`.

use outbox_core::consume::Received;
use outbox_core::store::{PendingById, ReadRange, ReadRequest, SqliteStore, Store};
use outbox_core::{NewEvent, Outbox, OutboxEvent, Redact, RedactedDebug};
use schemars::JsonSchema;
use serde::Serialize;

const EMAIL: &str = "ana.leak-probe@example.com";
const CARD: &str = "4111-LEAK-PROBE";
const VISIBLE: &str = "visible-plan-name";

#[derive(Serialize, JsonSchema, Redact, RedactedDebug)]
struct Card {
    #[outbox(sensitive)]
    number: String,
    brand: String,
}

#[derive(Serialize, JsonSchema, OutboxEvent, RedactedDebug)]
#[outbox(event_type = "customer.subscribed", aggregate = "customer", version = 1)]
struct CustomerSubscribed {
    #[outbox(aggregate_id)]
    customer_id: u64,
    #[outbox(sensitive)]
    email: String,
    plan: String,
    cards: Vec<Card>,
}

fn event() -> CustomerSubscribed {
    CustomerSubscribed {
        customer_id: 7,
        email: EMAIL.to_owned(),
        plan: VISIBLE.to_owned(),
        cards: vec![Card { number: CARD.to_owned(), brand: "visa".to_owned() }],
    }
}

/// Both forms of `value`'s `Debug` output hide the sensitive values and still show the rest.
#[track_caller]
fn assert_masked(what: &str, value: &impl std::fmt::Debug, visible: &str) {
    for output in [format!("{value:?}"), format!("{value:#?}")] {
        assert!(!output.contains(EMAIL) && !output.contains(CARD), "{what} leaks a sensitive value:\n{output}");
        assert!(output.contains("[REDACTED]"), "{what} shows no redaction mark:\n{output}");
        assert!(output.contains(visible), "{what} hides what is not sensitive ({visible}):\n{output}");
    }
}

#[test]
fn derived_redacted_debug_masks_the_event_and_nested_types() {
    assert_masked("the event", &event(), VISIBLE);
    assert_masked("a nested type", &Card { number: CARD.to_owned(), brand: "visa".to_owned() }, "visa");
    assert_eq!(
        format!("{:?}", Card { number: CARD.to_owned(), brand: "visa".to_owned() }),
        r#"Card { number: "[REDACTED]", brand: "visa" }"#
    );
}

#[test]
fn new_event_debug_masks_the_payload() {
    assert_masked("NewEvent", &NewEvent::new(&event()).unwrap(), VISIBLE);
}

#[test]
fn a_received_message_prints_its_headers_and_the_size_of_its_body_only() {
    let payload = serde_json::to_string(&event()).unwrap();
    assert!(payload.contains(EMAIL) && payload.contains(CARD), "the body is the payload in clear: {payload}");
    let id = uuid::Uuid::now_v7().to_string();
    let binary = Received::new(payload.as_bytes())
        .header("ce_id", &id)
        .header("ce_type", "customer.subscribed")
        .header("ce_schemaversion", "1");
    // A structured-mode message: the whole envelope, with the payload in `data`, is the body.
    let envelope = serde_json::json!({
        "specversion": "1.0",
        "id": id,
        "type": "customer.subscribed",
        "schemaversion": "1",
        "datacontenttype": "application/json",
        "data": serde_json::from_str::<serde_json::Value>(&payload).unwrap(),
    })
    .to_string();
    let structured = Received::new(envelope.as_bytes()).header("content-type", "application/cloudevents+json");
    for (what, message, body, header) in [
        ("a binary-mode Received", &binary, &payload, "customer.subscribed"),
        ("a structured-mode Received", &structured, &envelope, "application/cloudevents+json"),
    ] {
        for output in [format!("{message:?}"), format!("{message:#?}")] {
            assert!(!output.contains(EMAIL) && !output.contains(CARD), "{what} leaks a sensitive value:\n{output}");
            assert!(!output.contains(VISIBLE), "{what} prints its body:\n{output}");
            assert!(output.contains(header), "{what} hides its headers:\n{output}");
            assert!(output.contains(&format!("<{} bytes>", body.len())), "{what} shows no body size:\n{output}");
        }
    }
}

#[tokio::test]
async fn stored_read_and_detailed_events_mask_the_payload_in_debug_output() {
    let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await.unwrap();
    outbox_core::migrate(&pool).await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    Outbox::new().enqueue(&mut tx, &event()).await.unwrap();
    tx.commit().await.unwrap();

    let store = SqliteStore::new(pool);
    let read = store.read(&ReadRequest::new(vec![ReadRange::new(0, 0, 10)])).await.unwrap();
    assert_eq!(read.rows.len(), 1, "the event was enqueued and is read");
    let row = &read.rows[0];
    assert!(row.event.payload.contains(EMAIL), "the stored payload itself is not redacted");
    assert_masked("StoredEvent", &row.event, VISIBLE);
    assert_masked("ReadRow", row, VISIBLE);
    assert_masked("ReadBatch", &read, VISIBLE);
    // The same rows as `PgStore::pending_by_id` hands them to the WAL relay.
    assert_masked("PendingById", &PendingById::Rows(read.rows.clone()), VISIBLE);

    let detail = store.show(row.event.id).await.unwrap().expect("the event is shown");
    assert_masked("EventDetail", &detail, VISIBLE);
}
