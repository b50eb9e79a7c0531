//! Recording a batch before it is published, so a crash of its relay counts an attempt for its events.

use sqlx::PgPool;
use uuid::Uuid;

use crate::Result;

/// The batch's record, committed without waiting for its WAL flush: a record lost in a server crash only means
/// that crash counts no attempt (the server crashed, not the relay).
const START_BATCH: &str = "\
INSERT INTO outbox_batches (relay_id, batch_id, events)
SELECT $1, $2, $3 FROM (SELECT set_config('synchronous_commit', 'off', true)) AS commit_mode";

pub(super) async fn start_batch(pool: &PgPool, relay: Uuid, batch: Uuid, events: &[Uuid]) -> Result<()> {
    sqlx::query(START_BATCH).bind(relay).bind(batch).bind(events).execute(pool).await?;
    Ok(())
}
