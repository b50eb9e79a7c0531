//! Recording a batch before it is published, so a crash of its relay counts an attempt for its events.

use sqlx::PgPool;
use uuid::Uuid;

use super::fence::{by_partition, held_leases, lease_arrays};
use crate::error::Result;
use crate::store::PartitionLease;

/// The batch's record, written only while the relay holds every partition of the batch at the epoch it read
/// them with (the lease fence, as for a settle: a takeover waits for the record to commit and then finds it), and
/// at the generation it read them at ($6): an operator's cancel locks the partitions of the events it changes
/// before it checks for batches (`super::admin`), so either the record commits first and the cancel leaves its
/// events alone, or the cancel commits first and the record, which waited for its lock, finds the generation grown
/// and is refused (the relay reads the partitions again, without the cancelled events).
/// Committed without waiting for its WAL flush: a record lost in a server crash only means that crash counts no
/// attempt (the server crashed, not the relay).
const START_BATCH: &str = concat!(
    held_leases!("\n   AND p.generation = ($6::int8[])[p.partition + 1]"),
    "
INSERT INTO outbox_batches (relay_id, batch_id, events)
SELECT $1, $4, $5 FROM (SELECT set_config('synchronous_commit', 'off', true)) AS commit_mode
 WHERE (SELECT whole FROM fence)"
);

pub(super) async fn start_batch(
    pool: &PgPool,
    relay: Uuid,
    batch: Uuid,
    leases: &[PartitionLease],
    events: &[Uuid],
) -> Result<bool> {
    let (partitions, epochs) = lease_arrays(leases.iter().map(|lease| (lease.partition, lease.epoch)));
    let generations = by_partition(leases.iter().map(|lease| (lease.partition, lease.generation)));
    let done = sqlx::query(START_BATCH)
        .bind(relay)
        .bind(partitions)
        .bind(epochs)
        .bind(batch)
        .bind(events)
        .bind(generations)
        .execute(pool)
        .await?;
    Ok(done.rows_affected() == 1)
}
