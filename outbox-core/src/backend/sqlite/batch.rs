//! Recording a batch before it is published, so a crash of its relay counts an attempt for its events.

use sqlx::SqlitePool;
use uuid::Uuid;

use super::fence::{partition_zero_epoch, HELD};
use crate::error::Result;

/// Written only while the relay holds partition 0 at the epoch it read with (the lease fence, as for a settle).
pub(super) async fn start_batch(
    pool: &SqlitePool,
    relay: Uuid,
    batch: Uuid,
    leases: &[(u16, i64)],
    events: &[Uuid],
) -> Result<bool> {
    let events: Vec<String> = events.iter().map(|id| id.hyphenated().to_string()).collect();
    let record = format!("INSERT INTO outbox_batches (relay_id, batch_id, events) SELECT ?2, ?1, ?4 WHERE {HELD}");
    let done = sqlx::query(&record)
        .bind(batch.hyphenated().to_string())
        .bind(relay.hyphenated().to_string())
        .bind(partition_zero_epoch(leases))
        .bind(serde_json::to_string(&events).unwrap_or_else(|_| String::from("[]")))
        .execute(pool)
        .await?;
    Ok(done.rows_affected() == 1)
}
