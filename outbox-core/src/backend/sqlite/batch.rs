//! Recording a batch before it is published, so a crash of its relay counts an attempt for its events.

use sqlx::SqlitePool;
use uuid::Uuid;

use super::fence::{partition_zero_epoch, HELD};
use crate::error::Result;
use crate::store::PartitionLease;

/// Written only while the relay holds partition 0 at the epoch it read with (the lease fence, as for a settle) and
/// every event is still pending: an operator's cancel between the read and the record wins, and the relay reads
/// again. SQLite runs one write at a time, so the record and a cancel (which leaves recorded events alone) never
/// interleave.
pub(super) async fn start_batch(
    pool: &SqlitePool,
    relay: Uuid,
    batch: Uuid,
    leases: &[PartitionLease],
    events: &[Uuid],
) -> Result<bool> {
    let events: Vec<String> = events.iter().map(|id| id.hyphenated().to_string()).collect();
    let record = format!(
        "INSERT INTO outbox_batches (relay_id, batch_id, events) SELECT ?2, ?1, ?4 WHERE {HELD}
            AND NOT EXISTS (SELECT 1 FROM outbox_events
                             WHERE id IN (SELECT value FROM json_each(?4)) AND status <> 'pending')"
    );
    let done = sqlx::query(&record)
        .bind(batch.hyphenated().to_string())
        .bind(relay.hyphenated().to_string())
        .bind(partition_zero_epoch(leases.iter().map(|lease| (lease.partition, lease.epoch))))
        .bind(serde_json::to_string(&events).unwrap_or_else(|_| String::from("[]")))
        .execute(pool)
        .await?;
    Ok(done.rows_affected() == 1)
}
