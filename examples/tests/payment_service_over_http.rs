//! The payment example driven over real HTTP, on SQLite and on PostgreSQL: confirm payments through the API,
//! the relay in the same process delivers signed webhooks to the consumer, the consumer records each receipt
//! once, even when a delivery is repeated.

use std::time::Duration;

use outbox_examples::{Database, Service};
use outbox_relay::CancellationToken;

const SECRET: &str = "whsec_cGF5bWVudHMtdGVzdC1zZWNyZXQtMTIzNDU=";

struct Running {
    base: String,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

async fn start(db: Database) -> Running {
    db.migrate().await.unwrap();
    for id in 1..=10 {
        db.add_payment(id, 100 + id, 1_000 * id).await.unwrap();
    }
    std::env::set_var("OUTBOX_WEBHOOK_SECRET", SECRET);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let shutdown = CancellationToken::new();
    let service = Service::new(db).poll_interval(Duration::from_millis(20));
    let stop = shutdown.clone();
    let task = tokio::spawn(async move { service.run(listener, stop).await.unwrap() });
    Running { base, shutdown, task }
}

async fn wait_for_receipts(db: &Database, expected: usize) -> Vec<(i64, String)> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let receipts = db.receipts().await.unwrap();
        if receipts.len() == expected {
            return receipts;
        }
        assert!(tokio::time::Instant::now() < deadline, "{} receipts, expected {expected} within 30 s", receipts.len());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends a delivery to the consumer as the relay would, signed with `secret`.
async fn deliver(base: &str, secret: &str, event_id: &str, payment_id: i64) -> reqwest::StatusCode {
    let body = serde_json::json!({
        "id": event_id, "type": "payment.paid", "version": 1,
        "aggregate": {"type": "payment", "id": payment_id.to_string()},
        "timestamp": "2026-01-01T00:00:00Z",
        "data": {"payment_id": payment_id, "order_id": 100 + payment_id, "amount_cents": 1000 * payment_id, "paid_at": "x"},
    })
    .to_string();
    let timestamp = time::OffsetDateTime::now_utc().unix_timestamp();
    let signature = standardwebhooks::Webhook::new(secret).unwrap().sign(event_id, timestamp, body.as_bytes()).unwrap();
    reqwest::Client::new()
        .post(format!("{base}/hooks/payments"))
        .header("webhook-id", event_id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
        .status()
}

async fn confirmed_payments_produce_one_receipt_each(db: Database) {
    let running = start(db.clone()).await;
    let http = reqwest::Client::new();
    let mut event_ids = Vec::new();
    for id in 1..=10 {
        let response = http.post(format!("{}/payments/{id}/confirm", running.base)).send().await.unwrap();
        assert_eq!(response.status(), 200);
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["event"]["payment_id"], id);
        event_ids.push(id);
    }
    let again = http.post(format!("{}/payments/1/confirm", running.base)).send().await.unwrap();
    assert_eq!(again.status(), 409, "a paid payment is not paid twice, and enqueues nothing");
    let unknown = http.post(format!("{}/payments/999/confirm", running.base)).send().await.unwrap();
    assert_eq!(unknown.status(), 404);
    let shown: serde_json::Value =
        http.get(format!("{}/payments/3", running.base)).send().await.unwrap().json().await.unwrap();
    assert_eq!(shown["status"], "paid");

    let receipts = wait_for_receipts(&db, 10).await;
    assert_eq!(receipts.iter().map(|(p, _)| *p).collect::<Vec<_>>(), (1..=10).collect::<Vec<_>>());

    // A repeated delivery of an event already processed changes nothing and is acknowledged.
    let (payment, event_id) = receipts[4].clone();
    assert_eq!(deliver(&running.base, SECRET, &event_id, payment).await, 204);
    assert_eq!(deliver(&running.base, SECRET, &event_id, payment).await, 204);
    // A forged delivery is refused.
    let forged =
        deliver(&running.base, "whsec_d3Jvbmctc2VjcmV0LXdyb25nLXNlY3JldA==", &uuid::Uuid::now_v7().to_string(), 2)
            .await;
    assert_eq!(forged, 401);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(db.receipts().await.unwrap(), receipts, "one receipt per event, whatever was redelivered");

    running.shutdown.cancel();
    running.task.await.unwrap();
}

#[tokio::test]
async fn payment_service_on_sqlite_records_one_receipt_per_confirmed_payment() {
    let db = outbox_tests::sqlite::TestDatabase::create().await;
    confirmed_payments_produce_one_receipt_each(Database::Sqlite(db.pool.clone())).await;
}

#[tokio::test]
async fn payment_service_on_postgres_records_one_receipt_per_confirmed_payment() {
    let db = outbox_tests::pg::TestDatabase::create().await;
    confirmed_payments_produce_one_receipt_each(Database::Postgres(db.pool.clone())).await;
}
