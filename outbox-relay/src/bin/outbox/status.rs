//! `outbox status`.

use outbox_core::store::{PgStore, Store};
use serde_json::json;

use crate::args::StatusArgs;
use crate::{connect, Failure, Outcome};

pub(crate) async fn run(database_url: Option<&str>, args: StatusArgs) -> Outcome {
    let store = PgStore::new(connect::connect(database_url, 2).await?);
    let status = store.status().await.map_err(Failure::runtime)?;
    let pending_total: u64 = status.pending.iter().map(|p| p.pending).sum();
    if args.json {
        let pending: Vec<_> = status
            .pending
            .iter()
            .map(|p| {
                json!({
                    "event_type": p.event_type,
                    "pending": p.pending,
                    "oldest_age_seconds": p.oldest_age.as_secs_f64(),
                })
            })
            .collect();
        let report = json!({
            "paused": status.paused,
            "pending": pending_total,
            "pending_by_type": pending,
            "in_flight": status.in_flight,
            "failed": status.failed,
            "published_last_minute": status.published_last_minute,
            "published_last_hour": status.published_last_hour,
        });
        println!("{report}");
        return Ok(());
    }
    println!("paused:     {}", if status.paused { "yes (`outbox resume` to resume)" } else { "no" });
    println!("pending:    {pending_total}");
    println!("in flight:  {}", status.in_flight);
    println!("failed:     {}", status.failed);
    println!(
        "published:  {} in the last minute, {} in the last hour",
        status.published_last_minute, status.published_last_hour
    );
    if !status.pending.is_empty() {
        let width = status.pending.iter().map(|p| p.event_type.len()).max().unwrap_or(0).max(10);
        println!();
        println!("{:<width$}  {:>9}  OLDEST", "EVENT TYPE", "PENDING");
        for p in &status.pending {
            let age = humantime::format_duration(std::time::Duration::from_secs(p.oldest_age.as_secs()));
            println!("{:<width$}  {:>9}  {age}", p.event_type, p.pending);
        }
    }
    Ok(())
}
