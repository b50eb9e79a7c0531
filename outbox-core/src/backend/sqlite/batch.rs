//! Recording a batch before it is published, so a crash of its relay counts an attempt for its events.

use sqlx::SqlitePool;
use uuid::Uuid;

use crate::Result;

/// Written only while the relay holds partition 0 (SQLite's only one) at the epoch it read with; SQLite runs one
/// write at a time, so a takeover comes wholly before or after it.
const START_BATCH: &str = "\
INSERT INTO outbox_batches (relay_id, batch_id, events)
SELECT ?1, ?2, ?3
 WHERE EXISTS (SELECT 1 FROM outbox_partitions p WHERE p.partition = 0 AND p.owner = ?1 AND p.epoch = ?4)";

pub(super) async fn start_batch(
    pool: &SqlitePool,
    relay: Uuid,
    batch: Uuid,
    leases: &[(u16, i64)],
    events: &[Uuid],
) -> Result<bool> {
    let events: Vec<String> = events.iter().map(|id| id.hyphenated().to_string()).collect();
    let epoch = leases.iter().find(|(p, _)| *p == 0).map_or(-1, |(_, e)| *e);
    let done = sqlx::query(START_BATCH)
        .bind(relay.hyphenated().to_string())
        .bind(batch.hyphenated().to_string())
        .bind(serde_json::to_string(&events).unwrap_or_else(|_| String::from("[]")))
        .bind(epoch)
        .execute(pool)
        .await?;
    Ok(done.rows_affected() == 1)
}
