//! The payment service of the Go article (the reference design): an HTTP API that confirms payments and enqueues
//! `payment.paid` in the same transaction, a relay in the same binary that publishes the events as signed
//! webhooks, and a consumer that records one receipt per event with the inbox (cargo feature `service`).
//!
//! ```text
//! cargo run -p outbox-examples --features service --example payments   # SQLite file payments.db, port 3000
//! DATABASE_URL=postgres://localhost/shop cargo run -p outbox-examples --features service --example payments
//! NATS_URL=nats://127.0.0.1:4222 cargo run -p outbox-examples --features nats --example payments  # JetStream
//! curl -X POST localhost:3000/payments/1/confirm
//! ```

use outbox_examples::{Database, Service};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| "sqlite://payments.db?mode=rwc".to_owned());
    let db = Database::connect(&url).await?;
    db.migrate().await?;
    for id in 1..=5 {
        // Demo data; already there on a second run.
        let _ = db.add_payment(id, 100 + id, 1_000 * id).await;
    }
    let address = std::env::var("PAYMENTS_ADDR").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
    let listener = tokio::net::TcpListener::bind(&address).await?;
    println!("payments API on http://{address} (POST /payments/{{id}}/confirm, GET /payments/{{id}}); Ctrl-C stops");
    let shutdown = outbox_relay::CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        stop.cancel();
    });
    let service = Service::new(db);
    #[cfg(feature = "nats")]
    let service = match std::env::var("NATS_URL") {
        Ok(url) => service.over_nats(url.parse()?),
        Err(_) => service,
    };
    service.run(listener, shutdown).await
}
