//! Recording a batch before it is published, so a crash of its relay counts an attempt for its events.

use sqlx::PgPool;
use uuid::Uuid;

use super::fence::{held_leases, lease_arrays};
use crate::error::Result;

/// The batch's record, written only while the relay holds every partition of the batch at the epoch it read
/// them with (the lease fence, as for a settle: a takeover waits for the record to commit and then finds it).
/// Committed without waiting for its WAL flush: a record lost in a server crash only means that crash counts no
/// attempt (the server crashed, not the relay).
const START_BATCH: &str = concat!(
    held_leases!(),
    "
INSERT INTO outbox_batches (relay_id, batch_id, events)
SELECT $1, $4, $5 FROM (SELECT set_config('synchronous_commit', 'off', true)) AS commit_mode
 WHERE (SELECT whole FROM fence)"
);

pub(super) async fn start_batch(
    pool: &PgPool,
    relay: Uuid,
    batch: Uuid,
    leases: &[(u16, i64)],
    events: &[Uuid],
) -> Result<bool> {
    let (partitions, epochs) = lease_arrays(leases);
    let done = sqlx::query(START_BATCH)
        .bind(relay)
        .bind(partitions)
        .bind(epochs)
        .bind(batch)
        .bind(events)
        .execute(pool)
        .await?;
    Ok(done.rows_affected() == 1)
}
