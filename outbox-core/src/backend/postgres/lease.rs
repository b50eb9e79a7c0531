//! Expired leases: rows of a relay that died or stalled go back to `pending`.

use sqlx::PgPool;

use crate::Result;

/// Small batches, SKIP LOCKED: never waits on a relay that is settling the same rows right now. The epoch grows,
/// so the stalled owner can no longer settle them even before another relay claims them.
const RECLAIM_EXPIRED: &str = "\
UPDATE outbox_events e
   SET status = 'pending', lease_owner = NULL, lease_expires_at = NULL, lease_epoch = e.lease_epoch + 1
 WHERE e.id IN (SELECT x.id FROM outbox_events x
                 WHERE x.status = 'in_flight' AND x.lease_expires_at < now()
                 LIMIT 1000
                 FOR UPDATE SKIP LOCKED)
   AND e.status = 'in_flight'";

pub(super) async fn reclaim_expired(pool: &PgPool) -> Result<u64> {
    Ok(sqlx::query(RECLAIM_EXPIRED).execute(pool).await?.rows_affected())
}
