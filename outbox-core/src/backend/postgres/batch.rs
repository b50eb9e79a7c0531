//! Recording a batch before it is published, so a crash of its relay counts an attempt for its events.

use sqlx::PgPool;
use uuid::Uuid;

use crate::Result;

/// The batch's record, written only while the relay holds every partition of the batch at the epoch it read
/// them with. The leases are locked FOR KEY SHARE, like a settle's: a takeover waits for the record to commit
/// (and then finds it), and a record that starts after a takeover writes nothing. Committed without waiting for
/// its WAL flush: a record lost in a server crash only means that crash counts no attempt (the server crashed,
/// not the relay).
const START_BATCH: &str = "\
WITH held AS (
SELECT p.partition FROM outbox_partitions p
  JOIN UNNEST($4::int2[], $5::int8[]) AS h(partition, epoch) ON p.partition = h.partition AND p.epoch = h.epoch
 WHERE p.owner = $1
   FOR KEY SHARE OF p
)
INSERT INTO outbox_batches (relay_id, batch_id, events)
SELECT $1, $2, $3 FROM (SELECT set_config('synchronous_commit', 'off', true)) AS commit_mode
 WHERE (SELECT count(*) FROM held) = cardinality($4::int2[])";

pub(super) async fn start_batch(
    pool: &PgPool,
    relay: Uuid,
    batch: Uuid,
    leases: &[(u16, i64)],
    events: &[Uuid],
) -> Result<bool> {
    let partitions: Vec<i16> = leases.iter().map(|(p, _)| i16::try_from(*p).unwrap_or(i16::MAX)).collect();
    let epochs: Vec<i64> = leases.iter().map(|(_, e)| *e).collect();
    let done = sqlx::query(START_BATCH)
        .bind(relay)
        .bind(batch)
        .bind(events)
        .bind(partitions)
        .bind(epochs)
        .execute(pool)
        .await?;
    Ok(done.rows_affected() == 1)
}
