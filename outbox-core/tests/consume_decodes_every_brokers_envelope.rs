//! A consumer reads a message as `(event id, typed event)` from each broker's envelope as the relay writes it
//! (the headers of `outbox-relay/src/publish/cloudevents.rs` in each binding's spelling, or the structured-mode
//! and webhook bodies), upcasting older versions on the way; bad messages are clear errors; `Inbox::consume`
//! runs the handler once per (consumer, event id) in the consumer's transaction, on a real SQLite database.

use outbox_core::consume::{Metadata, Received};
use outbox_core::inbox::{Handled, Inbox};
use outbox_core::{DecodeError, OutboxEvent};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "payment.paid", aggregate = "payment", version = 1)]
struct PaymentPaidV1 {
    #[outbox(aggregate_id)]
    payment_id: i64,
    amount: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "payment.paid", aggregate = "payment", version = 2, upcast_from = PaymentPaidV1)]
struct PaymentPaid {
    #[outbox(aggregate_id)]
    payment_id: i64,
    amount_cents: i64,
}

impl From<PaymentPaidV1> for PaymentPaid {
    fn from(v1: PaymentPaidV1) -> Self {
        Self { payment_id: v1.payment_id, amount_cents: v1.amount * 100 }
    }
}

/// One event as the relay holds it.
struct Sent {
    id: Uuid,
    version: u32,
    payload: &'static str,
}

const V1: Sent = Sent {
    id: Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0001),
    version: 1,
    payload: r#"{"payment_id":7,"amount":12}"#,
};
const V2: Sent = Sent {
    id: Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0002),
    version: 2,
    payload: r#"{"payment_id":7,"amount_cents":1250}"#,
};

/// The binary-mode attributes the relay writes, unprefixed (`CloudEvents::attributes`).
fn attributes(sent: &Sent) -> Vec<(&'static str, String)> {
    vec![
        ("id", sent.id.to_string()),
        ("source", "outbox".to_owned()),
        ("specversion", "1.0".to_owned()),
        ("type", "payment.paid".to_owned()),
        ("subject", "7".to_owned()),
        ("time", "2026-01-02T03:04:05Z".to_owned()),
        ("schemaversion", sent.version.to_string()),
        ("aggregatetype", "payment".to_owned()),
    ]
}

/// The headers of one broker for `sent`, as its publisher writes them.
fn headers(broker: &str, sent: &Sent) -> Vec<(String, String)> {
    let prefix = match broker {
        "kafka" | "sqs" | "redis" => "ce_",
        "nats" => "ce-",
        "rabbitmq" => "cloudEvents:",
        other => unreachable!("{other}"),
    };
    let mut headers: Vec<(String, String)> =
        attributes(sent).into_iter().map(|(name, value)| (format!("{prefix}{name}"), value)).collect();
    headers.push(("traceparent".to_owned(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_owned()));
    match broker {
        "kafka" | "redis" | "rabbitmq" => headers.push(("content-type".to_owned(), "application/json".to_owned())),
        "nats" => {
            headers.push(("Nats-Msg-Id".to_owned(), sent.id.to_string()));
            headers.push(("content-type".to_owned(), "application/json".to_owned()));
        }
        _ => {}
    }
    headers
}

/// The structured-mode body (`CloudEvents::structured`).
fn structured(sent: &Sent) -> String {
    let mut envelope = serde_json::Map::new();
    for (name, value) in attributes(sent) {
        envelope.insert(name.to_owned(), value.into());
    }
    envelope.insert("datacontenttype".to_owned(), "application/json".into());
    envelope.insert("data".to_owned(), serde_json::from_str(sent.payload).unwrap());
    serde_json::Value::Object(envelope).to_string()
}

fn decode(headers: &[(String, String)], body: &[u8]) -> Result<(Uuid, PaymentPaid), DecodeError> {
    Received::new(body).headers(headers.iter().map(|(n, v)| (n.as_str(), v.as_str()))).decode()
}

#[test]
fn every_brokers_binary_envelope_decodes_to_the_event_id_and_the_typed_event() {
    for broker in ["kafka", "nats", "rabbitmq", "sqs", "redis"] {
        let (id, event) = decode(&headers(broker, &V2), V2.payload.as_bytes()).unwrap();
        assert_eq!((id, event), (V2.id, PaymentPaid { payment_id: 7, amount_cents: 1250 }), "{broker}");
        let (id, event) = decode(&headers(broker, &V1), V1.payload.as_bytes()).unwrap();
        assert_eq!((id, event), (V1.id, PaymentPaid { payment_id: 7, amount_cents: 1200 }), "{broker} upcasts v1");
    }
}

#[test]
fn structured_and_webhook_bodies_decode_without_headers() {
    for broker in ["kafka", "nats", "rabbitmq", "sqs", "redis"] {
        let content_type = [("content-type".to_owned(), "application/cloudevents+json".to_owned())];
        let (id, event) = decode(&content_type, structured(&V1).as_bytes()).unwrap();
        assert_eq!((id, event.amount_cents), (V1.id, 1200), "{broker}");
    }
    let (id, event) = decode(&[], structured(&V2).as_bytes()).unwrap();
    assert_eq!((id, event.amount_cents), (V2.id, 1250), "no content type: the body is the envelope");
    let webhook = format!(
        r#"{{"id":"{}","type":"payment.paid","version":1,"aggregate":{{"type":"payment","id":"7"}},"timestamp":"2026-01-02T03:04:05Z","data":{}}}"#,
        V1.id, V1.payload
    );
    let headers = [("webhook-id".to_owned(), V1.id.to_string())];
    assert_eq!(
        decode(&headers, webhook.as_bytes()).unwrap(),
        (V1.id, PaymentPaid { payment_id: 7, amount_cents: 1200 })
    );
}

#[test]
fn metadata_names_the_event_before_decoding() {
    let headers = headers("kafka", &V1);
    let message = Received::new(V1.payload.as_bytes()).headers(headers.iter().map(|(n, v)| (n.as_str(), v.as_str())));
    let metadata = message.metadata().unwrap();
    assert_eq!((metadata.id, metadata.event_type.as_str(), metadata.version), (V1.id, "payment.paid", 1));
    let _: &Metadata = &metadata;
    assert!(!format!("{message:?}").contains("amount"), "Debug never prints the body: {message:?}");
}

#[test]
fn unknown_types_versions_payloads_and_envelopes_are_clear_errors() {
    let mut other = headers("nats", &V2);
    other.iter_mut().filter(|(n, _)| n == "ce-type").for_each(|(_, v)| *v = "payment.refunded".to_owned());
    assert_eq!(
        decode(&other, V2.payload.as_bytes()).unwrap_err().to_string(),
        "the message is a `payment.refunded` event, not `payment.paid`"
    );
    let newer = Sent { version: 3, ..V2 };
    assert_eq!(
        decode(&headers("kafka", &newer), V2.payload.as_bytes()).unwrap_err(),
        DecodeError::UnknownVersion { event_type: "payment.paid", version: 3, known: vec![2, 1] }
    );
    let wrong = decode(&headers("kafka", &V2), br#"{"payment_id":"seven-secret","amount_cents":1}"#).unwrap_err();
    assert!(matches!(wrong, DecodeError::Payload { version: 2, .. }), "{wrong}");
    assert!(!wrong.to_string().contains("seven-secret"), "{wrong}");
    let mut no_id = headers("kafka", &V2);
    no_id.retain(|(n, _)| n != "ce_id");
    assert!(matches!(decode(&no_id, V2.payload.as_bytes()), Err(DecodeError::Envelope(_))));
    assert!(matches!(decode(&[], b"not json"), Err(DecodeError::Envelope(_))));
}

/// The consumer's effect: one ledger line per processed payment.
fn record<'c>(
    tx: &'c mut sqlx::Transaction<'static, sqlx::Sqlite>,
    event_id: Uuid,
    paid: PaymentPaid,
) -> Handled<'c, i64, outbox_core::Error> {
    Box::pin(async move {
        sqlx::query("INSERT INTO ledger VALUES (?, ?, ?)")
            .bind(event_id.to_string())
            .bind(paid.payment_id)
            .bind(paid.amount_cents)
            .execute(&mut **tx)
            .await?;
        Ok(paid.amount_cents)
    })
}

#[tokio::test]
async fn inbox_consume_runs_the_handler_once_per_consumer_and_event_id() {
    let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await.unwrap();
    outbox_core::migrate(&pool).await.unwrap();
    sqlx::query("CREATE TABLE ledger (event_id TEXT, payment_id INTEGER, amount_cents INTEGER)")
        .execute(&pool)
        .await
        .unwrap();
    let headers = headers("rabbitmq", &V1);
    let message = Received::new(V1.payload.as_bytes()).headers(headers.iter().map(|(n, v)| (n.as_str(), v.as_str())));
    let billing = Inbox::new("billing").unwrap();

    let failed = billing
        .consume(&pool, &message, |_tx, _event_id, _paid: PaymentPaid| {
            Box::pin(async { Err::<(), _>(outbox_core::Error::InvalidConsumer("handler failed".into())) })
        })
        .await;
    assert!(failed.is_err(), "the handler's error is returned");

    assert_eq!(billing.consume(&pool, &message, record).await.unwrap(), Some(1200), "a failed run was rolled back");
    assert_eq!(billing.consume(&pool, &message, record).await.unwrap(), None, "a redelivery is skipped");
    let audit = Inbox::new("audit").unwrap();
    assert_eq!(audit.consume(&pool, &message, record).await.unwrap(), Some(1200), "another consumer runs it");
    let ids: Vec<String> = sqlx::query_scalar("SELECT event_id FROM ledger").fetch_all(&pool).await.unwrap();
    assert_eq!(ids, [V1.id.to_string(), V1.id.to_string()], "one effect per consumer, given the event id");

    let garbage = Received::new(b"{}");
    let error = billing.consume(&pool, &garbage, record).await.unwrap_err();
    assert!(matches!(error, outbox_core::Error::Decode(DecodeError::Envelope(_))), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_consume_and_run_once_run_on_spawned_tasks() {
    let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await.unwrap();
    outbox_core::migrate(&pool).await.unwrap();
    sqlx::query("CREATE TABLE ledger (event_id TEXT, payment_id INTEGER, amount_cents INTEGER)")
        .execute(&pool)
        .await
        .unwrap();
    let inbox = Inbox::new("billing").unwrap();

    // `tokio::spawn` takes only `Send` futures: this compiles only because `consume` and `run_once` are `Send`.
    let consumed = tokio::spawn({
        let (pool, inbox) = (pool.clone(), inbox.clone());
        async move {
            let headers = headers("kafka", &V2);
            let message =
                Received::new(V2.payload.as_bytes()).headers(headers.iter().map(|(n, v)| (n.as_str(), v.as_str())));
            inbox.consume(&pool, &message, record).await
        }
    });
    assert_eq!(consumed.await.unwrap().unwrap(), Some(1250), "the spawned consumer ran the handler");

    let again = tokio::spawn({
        let pool = pool.clone();
        async move {
            inbox
                .run_once(&pool, V2.id, |tx| {
                    Box::pin(async move {
                        sqlx::query("INSERT INTO ledger VALUES (NULL, 0, 0)").execute(&mut **tx).await?;
                        Ok::<_, outbox_core::Error>(())
                    })
                })
                .await
        }
    });
    assert_eq!(again.await.unwrap().unwrap(), None, "run_once on another task sees the event processed");
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM ledger").fetch_one(&pool).await.unwrap();
    assert_eq!(rows, 1, "one effect");
}
