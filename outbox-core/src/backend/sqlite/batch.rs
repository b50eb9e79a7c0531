//! Recording a batch before it is published, so a crash of its relay counts an attempt for its events.

use sqlx::SqlitePool;
use uuid::Uuid;

use crate::Result;

pub(super) async fn start_batch(pool: &SqlitePool, relay: Uuid, batch: Uuid, events: &[Uuid]) -> Result<()> {
    let events: Vec<String> = events.iter().map(|id| id.hyphenated().to_string()).collect();
    sqlx::query("INSERT INTO outbox_batches (relay_id, batch_id, events) VALUES (?1, ?2, ?3)")
        .bind(relay.hyphenated().to_string())
        .bind(batch.hyphenated().to_string())
        .bind(serde_json::to_string(&events).unwrap_or_else(|_| String::from("[]")))
        .execute(pool)
        .await?;
    Ok(())
}
