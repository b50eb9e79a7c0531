//! Relay membership and partition leases on PostgreSQL: one short transaction per heartbeat.

use sqlx::{PgConnection, PgPool, Row};
use uuid::Uuid;

use crate::store::{fair_share, CrashedEvent, Heartbeat, Membership, PartitionLease, SettleOutcome};
use crate::Result;

use super::settle;

/// Joins or renews: the relay is live until `expires_at`.
const RENEW: &str = "\
INSERT INTO outbox_relays (relay_id, host, expires_at) VALUES ($1, $2, now() + make_interval(secs => $3))
ON CONFLICT (relay_id) DO UPDATE
   SET heartbeat_at = now(), expires_at = EXCLUDED.expires_at, host = EXCLUDED.host";

/// Removes relays whose heartbeat lapsed. SKIP LOCKED: two relays never remove (and account for) the same one.
const REMOVE_DEAD: &str = "\
DELETE FROM outbox_relays
 WHERE relay_id IN (SELECT relay_id FROM outbox_relays WHERE expires_at < now() FOR UPDATE SKIP LOCKED)";

/// The batches of relays that are gone: deleted once (a concurrent delete waits, then finds nothing), returning
/// the still-pending events they held, with their attempts so far.
const ORPHAN_BATCHES: &str = "\
WITH gone AS (
DELETE FROM outbox_batches b
 WHERE NOT EXISTS (SELECT 1 FROM outbox_relays r WHERE r.relay_id = b.relay_id)
RETURNING b.events
)
SELECT e.id, e.attempts
  FROM (SELECT DISTINCT unnest(events) AS id FROM gone) g
  JOIN outbox_events e ON e.id = g.id
 WHERE e.status = 'pending'";

const RELEASE: &str = "\
UPDATE outbox_partitions SET owner = NULL, epoch = epoch + 1, changed_at = now()
 WHERE owner = $1 AND partition = ANY($2)";

const LIVE: &str = "SELECT relay_id FROM outbox_relays WHERE expires_at >= now() ORDER BY relay_id";

const PARTITIONS: &str = "\
SELECT (SELECT count(*) FROM outbox_partitions) AS partitions,
       COALESCE((SELECT paused FROM outbox_control WHERE id), false) AS paused";

const OWNED: &str = "SELECT partition, epoch, generation FROM outbox_partitions WHERE owner = $1 ORDER BY partition";

/// Free partitions (no owner, or an owner that is not live), lowest first; SKIP LOCKED so two relays that join
/// at once take different ones.
const TAKE: &str = "\
UPDATE outbox_partitions p SET owner = $1, epoch = p.epoch + 1, changed_at = now()
 WHERE p.partition IN (
       SELECT f.partition FROM outbox_partitions f
        WHERE f.owner IS NULL
           OR NOT EXISTS (SELECT 1 FROM outbox_relays r WHERE r.relay_id = f.owner AND r.expires_at >= now())
        ORDER BY f.partition
        LIMIT $2
        FOR UPDATE SKIP LOCKED)
RETURNING p.partition, p.epoch, p.generation";

const LEAVE: &str = "\
WITH released AS (
UPDATE outbox_partitions SET owner = NULL, epoch = epoch + 1, changed_at = now() WHERE owner = $1
),
batches AS (DELETE FROM outbox_batches WHERE relay_id = $1)
DELETE FROM outbox_relays WHERE relay_id = $1";

pub(super) async fn heartbeat(pool: &PgPool, beat: &Heartbeat<'_>) -> Result<Membership> {
    let mut tx = pool.begin().await?;
    sqlx::query(RENEW).bind(beat.relay).bind(beat.host).bind(beat.lease.as_secs_f64()).execute(&mut *tx).await?;
    let removed = sqlx::query(REMOVE_DEAD).execute(&mut *tx).await?.rows_affected();
    let crashed = account_crashes(&mut tx, beat.on_crash).await?;
    if !beat.release.is_empty() {
        let release: Vec<i16> = beat.release.iter().map(|&p| i16::try_from(p).unwrap_or(i16::MAX)).collect();
        sqlx::query(RELEASE).bind(beat.relay).bind(release).execute(&mut *tx).await?;
    }
    let relays: Vec<Uuid> = sqlx::query_scalar(LIVE).fetch_all(&mut *tx).await?;
    let row = sqlx::query(PARTITIONS).fetch_one(&mut *tx).await?;
    let partitions = u16::try_from(row.try_get::<i64, _>("partitions")?).unwrap_or(u16::MAX);
    let paused: bool = row.try_get("paused")?;
    let rank = relays.iter().position(|r| *r == beat.relay).unwrap_or(relays.len());
    let share = fair_share(partitions, relays.len().max(rank + 1), rank);
    let mut owned = leases(sqlx::query(OWNED).bind(beat.relay).fetch_all(&mut *tx).await?)?;
    let missing = usize::from(share).saturating_sub(owned.len());
    if beat.take && missing > 0 {
        let taken = sqlx::query(TAKE).bind(beat.relay).bind(missing as i64).fetch_all(&mut *tx).await?;
        owned.extend(leases(taken)?);
        owned.sort();
    }
    tx.commit().await?;
    Ok(Membership { relays, partitions, share, owned, crashed, removed, paused })
}

/// Counts an attempt, as `on_crash` decides, for every still-pending event of the batches of relays that are gone.
async fn account_crashes(
    conn: &mut PgConnection,
    on_crash: &(dyn Fn(&CrashedEvent) -> SettleOutcome + Send + Sync),
) -> Result<u64> {
    let rows = sqlx::query(ORPHAN_BATCHES).fetch_all(&mut *conn).await?;
    if rows.is_empty() {
        return Ok(0);
    }
    let mut settlements = Vec::with_capacity(rows.len());
    for row in rows {
        let event =
            CrashedEvent { id: row.try_get("id")?, attempts: row.try_get::<i32, _>("attempts")?.unsigned_abs() };
        settlements.push(crate::store::Settlement::new(event.id, on_crash(&event)));
    }
    settle::apply_unfenced(conn, &settlements).await
}

fn leases(rows: Vec<sqlx::postgres::PgRow>) -> Result<Vec<PartitionLease>> {
    rows.iter()
        .map(|row| {
            Ok(PartitionLease::new(
                row.try_get::<i16, _>("partition")?.unsigned_abs(),
                row.try_get("epoch")?,
                row.try_get("generation")?,
            ))
        })
        .collect()
}

pub(super) async fn leave(pool: &PgPool, relay: Uuid) -> Result<()> {
    sqlx::query(LEAVE).bind(relay).execute(pool).await?;
    Ok(())
}
