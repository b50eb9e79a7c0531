//! Running the relay inside your own binary (next to an API server, say), with your own publisher, and
//! stopping it when the rest of the program stops.
//!
//! `DATABASE_URL=postgres://... cargo run -p outbox-relay --example relay_in_your_binary`

use std::time::Duration;

use outbox_core::store::PgStore;
use outbox_relay::{CancellationToken, Message, Outcome, Publisher, Relay, RelayConfig};

/// A publisher that logs each event (never its payload) and accepts it.
struct LogPublisher;

impl Publisher for LogPublisher {
    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        for message in batch {
            println!("{} {} {}/{}", message.id, message.event_type, message.aggregate_type, message.aggregate_id);
        }
        vec![Outcome::Published; batch.len()]
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pool = sqlx::PgPool::connect(&std::env::var("DATABASE_URL")?).await?;
    outbox_core::migrate(&pool).await?;

    let config = RelayConfig::builder().batch_size(500).lease(Duration::from_secs(30)).build()?;
    let relay = Relay::new(PgStore::new(pool), LogPublisher, config);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(relay.run(shutdown.clone()));

    // ... serve your API here; when it stops:
    tokio::signal::ctrl_c().await?;
    shutdown.cancel();
    let summary = running.await??;
    println!("published {} events", summary.published);
    Ok(())
}
