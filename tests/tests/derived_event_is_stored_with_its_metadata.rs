//! A `#[derive(OutboxEvent)]` event enqueued in a committed transaction is stored with the metadata the derive
//! declared: event type, aggregate type and id, schema version and the pointers of its sensitive values.

use outbox_core::schemars::JsonSchema;
use outbox_core::{Outbox, OutboxEvent, Redact};
use outbox_tests::pg::TestDatabase;
use serde::Serialize;
use uuid::Uuid;

#[derive(Serialize, JsonSchema, Redact)]
#[schemars(crate = "outbox_core::schemars")]
struct Card {
    #[outbox(sensitive)]
    card_number: String,
    brand: String,
}

#[derive(Serialize, JsonSchema, OutboxEvent)]
#[schemars(crate = "outbox_core::schemars")]
#[outbox(event_type = "payment.paid", aggregate = "payment", version = 3)]
#[serde(rename_all = "camelCase")]
struct PaymentPaid {
    #[outbox(aggregate_id)]
    payment_id: Uuid,
    order_id: Uuid,
    #[outbox(sensitive)]
    payer_email: String,
    cards: Vec<Card>,
}

#[tokio::test]
async fn derived_event_is_stored_with_its_metadata() -> Result<(), Box<dyn std::error::Error>> {
    let db = TestDatabase::migrated().await;
    let event = PaymentPaid {
        payment_id: Uuid::now_v7(),
        order_id: Uuid::now_v7(),
        payer_email: "ana@example.com".into(),
        cards: vec![Card { card_number: "4111111111111111".into(), brand: "visa".into() }],
    };

    let mut tx = db.pool.begin().await?;
    let id = Outbox::new().enqueue(&mut tx, &event).await?;
    tx.commit().await?;

    let (event_type, aggregate_type, aggregate_id, version, payload, sensitive): (
        String,
        String,
        String,
        i32,
        serde_json::Value,
        serde_json::Value,
    ) = sqlx::query_as(
        "SELECT event_type, aggregate_type, aggregate_id, schema_version, payload, sensitive_paths
           FROM outbox_events WHERE id = $1",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await?;

    assert_eq!(event_type, "payment.paid");
    assert_eq!(aggregate_type, "payment");
    assert_eq!(aggregate_id, event.payment_id.to_string());
    assert_eq!(version, 3);
    assert_eq!(sensitive, serde_json::json!(["/payerEmail", "/cards/*/card_number"]));
    assert_eq!(payload["payerEmail"], "ana@example.com", "the stored payload is the real one; only views are redacted");

    let stored: Vec<String> = serde_json::from_value(sensitive)?;
    let mut shown = payload;
    outbox_core::redact::redact(&mut shown, &stored);
    let shown = shown.to_string();
    assert!(!shown.contains("ana@example.com") && !shown.contains("4111111111111111"), "{shown}");
    assert!(shown.contains("visa"), "{shown}");
    Ok(())
}
