//! Quick start, with no server: a SQLite file, the Go article's `ConfirmPayment` in transactions (one rolled back),
//! and a relay that publishes the committed events to standard output.
//!
//! ```text
//! cargo run --example quickstart
//! ```

use std::time::Duration;

use outbox_core::store::{SqliteStore, Store};
use outbox_core::Outbox;
use outbox_examples::{Confirmation, Database, PaymentPaid};
use outbox_relay::{CancellationToken, Relay, RelayConfig, StdoutPublisher};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let path = std::env::temp_dir().join(format!("outbox-quickstart-{}.db", std::process::id()));
    let db = Database::connect(&format!("sqlite://{}?mode=rwc", path.display())).await?;
    db.migrate().await?;
    println!("database: {} (outbox tables migrated)", path.display());

    let outbox = Outbox::new();
    for (id, amount_cents) in [(1, 4_990), (2, 1_250), (3, 800)] {
        db.add_payment(id, 100 + id, amount_cents).await?;
    }
    for id in [1, 2] {
        if let Confirmation::Paid(event) = db.confirm_payment(&outbox, id).await? {
            println!(
                "committed: payment {id} paid, `payment.paid` enqueued in the same transaction ({} cents)",
                event.amount_cents
            );
        }
    }
    let Database::Sqlite(pool) = &db else { unreachable!("the quick start runs on SQLite") };
    {
        // Payment 3: the update and the event are written, then the handler fails before COMMIT.
        let mut tx = pool.begin().await?;
        sqlx::query("UPDATE payments SET status = 'paid' WHERE id = 3").execute(&mut *tx).await?;
        let event = PaymentPaid { payment_id: 3, order_id: 103, amount_cents: 800, paid_at: "now".into() };
        outbox.enqueue(&mut tx, &event).await?;
        tx.rollback().await?;
        println!("rolled back: payment 3 and its event vanish together");
    }

    println!("relay: publishing to stdout ...");
    let store = SqliteStore::new(pool.clone());
    let config = RelayConfig::builder().poll_interval(Duration::from_millis(10)).build()?;
    let shutdown = CancellationToken::new();
    let relay = tokio::spawn(Relay::new(store.clone(), StdoutPublisher::new(), config).run(shutdown.clone()));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let status = store.status().await?;
        if status.pending.is_empty() && status.in_flight == 0 {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            return Err("the relay did not publish the events within 10 s".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    shutdown.cancel();
    relay.await??;

    let status = store.status().await?;
    println!(
        "done: {} event(s) published, none pending; payment 3 published nothing. Statuses: 1 {}, 2 {}, 3 {}",
        status.published_last_minute,
        db.payment_status(1).await?.unwrap_or_default(),
        db.payment_status(2).await?.unwrap_or_default(),
        db.payment_status(3).await?.unwrap_or_default(),
    );
    drop(db);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    Ok(())
}
