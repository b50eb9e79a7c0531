//! Relay membership and partition leases on PostgreSQL.
//!
//! A heartbeat is three single statements, never a transaction of several: a relay stopped in the middle of one
//! (SIGSTOP, a paused VM) leaves no transaction open and no lease row locked, so the others can take its
//! partitions over. The first renews the membership, removes dead relays and adopts their batches in flight; the
//! second counts the attempt of the adopted batches' events and deletes them; the third takes free partitions.
//! A relay that dies between the first and the second leaves the adopted batches to whoever removes it: each
//! crash is counted once.

use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};
use uuid::Uuid;

use crate::error::Result;
use crate::store::{fair_share, CrashedEvent, Heartbeat, Membership, PartitionLease, PartitionStart, Settlement};

use super::settle;

/// Renews the relay, removes the dead ones (SKIP LOCKED: two relays never remove the same one), hands over the
/// released partitions, adopts the batches of relays that are gone and deletes the relay's batches whose settle
/// failed for good. Returns, one kind per row: the live relays,
/// the partitions still owned, the pending events of the adopted batches (with their attempts), and one row of
/// counts. Every CTE sees the statement's one snapshot, so the rows just renewed, removed or released are
/// accounted for by hand.
const BEAT: &str = "\
WITH renewed AS (
INSERT INTO outbox_relays (relay_id, host, expires_at) VALUES ($1, $2, now() + make_interval(secs => $3))
ON CONFLICT (relay_id) DO UPDATE
   SET heartbeat_at = now(), expires_at = EXCLUDED.expires_at, host = EXCLUDED.host
RETURNING relay_id
),
dead AS (
DELETE FROM outbox_relays
 WHERE relay_id IN (SELECT relay_id FROM outbox_relays WHERE expires_at < now() AND relay_id <> $1
                    FOR UPDATE SKIP LOCKED)
RETURNING relay_id
),
adopted AS (
UPDATE outbox_batches b SET relay_id = $1, crashed = true
 WHERE b.relay_id <> $1
   AND (b.relay_id IN (SELECT relay_id FROM dead)
        OR NOT EXISTS (SELECT 1 FROM outbox_relays r WHERE r.relay_id = b.relay_id))
RETURNING b.batch_id, b.events
),
crashed AS (
SELECT batch_id, events FROM adopted
UNION ALL
SELECT batch_id, events FROM outbox_batches WHERE relay_id = $1 AND crashed
),
released AS (
UPDATE outbox_partitions SET owner = NULL, epoch = epoch + 1, changed_at = now()
 WHERE owner = $1 AND partition = ANY($4)
RETURNING partition
),
-- The relay's own batches whose settle failed for good: their events are read and published again.
forgotten AS (DELETE FROM outbox_batches WHERE relay_id = $1 AND NOT crashed AND batch_id = ANY($5))
SELECT 'relay' AS kind, relay_id AS id, NULL::int2 AS partition, NULL::int8 AS epoch, NULL::int8 AS generation,
       NULL::int8 AS start_seq, NULL::int4 AS attempts, NULL::uuid AS batch_id
  FROM (SELECT relay_id FROM outbox_relays WHERE expires_at >= now() AND relay_id <> $1
        UNION SELECT relay_id FROM renewed) live
UNION ALL
SELECT 'owned', NULL, partition, epoch, generation, start_seq, NULL, NULL
  FROM outbox_partitions WHERE owner = $1 AND partition <> ALL($4)
UNION ALL
SELECT 'crashed', e.id, NULL, NULL, NULL, NULL, e.attempts, c.batch_id
  FROM crashed c JOIN outbox_events e ON e.id = ANY(c.events) AND e.status = 'pending'
UNION ALL
SELECT 'batch', NULL, NULL, NULL, NULL, NULL, NULL, batch_id FROM crashed
UNION ALL
SELECT 'counts', NULL, NULL, (SELECT count(*) FROM outbox_partitions), (SELECT count(*) FROM dead), NULL,
       CASE WHEN COALESCE((SELECT paused FROM outbox_control WHERE id), false) THEN 1 ELSE 0 END, NULL";

/// Free partitions (no owner, or an owner that is not live), lowest first; SKIP LOCKED so two relays that join
/// at once take different ones, and a partition whose settle is in progress (key-share locked) is left for later.
const TAKE: &str = "\
UPDATE outbox_partitions p SET owner = $1, epoch = p.epoch + 1, changed_at = now()
 WHERE p.partition IN (
       SELECT f.partition FROM outbox_partitions f
        WHERE f.owner IS NULL
           OR NOT EXISTS (SELECT 1 FROM outbox_relays r WHERE r.relay_id = f.owner AND r.expires_at >= now())
        ORDER BY f.partition
        LIMIT $2
        FOR UPDATE SKIP LOCKED)
RETURNING p.partition, p.epoch, p.generation, p.start_seq";

const LEAVE: &str = "\
WITH released AS (
UPDATE outbox_partitions SET owner = NULL, epoch = epoch + 1, changed_at = now() WHERE owner = $1
),
batches AS (DELETE FROM outbox_batches WHERE relay_id = $1 AND NOT crashed)
DELETE FROM outbox_relays WHERE relay_id = $1";

pub(super) async fn heartbeat(pool: &PgPool, beat: &Heartbeat<'_>) -> Result<Membership> {
    let release: Vec<i16> = beat.release.iter().map(|&p| i16::try_from(p).unwrap_or(i16::MAX)).collect();
    let rows = sqlx::query(BEAT)
        .bind(beat.relay)
        .bind(beat.host)
        .bind(beat.lease.as_secs_f64())
        .bind(release)
        .bind(beat.forget)
        .fetch_all(pool)
        .await?;
    let mut membership = Membership::default();
    let mut crashed = Vec::new();
    let mut adopted = Vec::new();
    for row in &rows {
        let kind: String = row.try_get("kind")?;
        match kind.as_str() {
            "relay" => membership.relays.push(row.try_get("id")?),
            "owned" => membership.owned.push(lease(row)?),
            "crashed" => crashed.push(CrashedEvent {
                id: row.try_get("id")?,
                attempts: row.try_get::<Option<i32>, _>("attempts")?.unwrap_or(0).unsigned_abs(),
            }),
            "batch" => adopted.push(row.try_get::<Uuid, _>("batch_id")?),
            _ => {
                membership.partitions =
                    u16::try_from(row.try_get::<Option<i64>, _>("epoch")?.unwrap_or(0)).unwrap_or(u16::MAX);
                membership.removed = row.try_get::<Option<i64>, _>("generation")?.unwrap_or(0).unsigned_abs();
                membership.paused = row.try_get::<Option<i32>, _>("attempts")?.unwrap_or(0) != 0;
            }
        }
    }
    membership.relays.sort();
    if !adopted.is_empty() {
        let settlements: Vec<Settlement> =
            crashed.iter().map(|event| Settlement::new(event.id, (beat.on_crash)(event))).collect();
        membership.crashed = settle::apply_adopted(pool, beat.relay, &settlements, &adopted).await?;
    }
    let rank = membership.relays.iter().position(|r| *r == beat.relay).unwrap_or(membership.relays.len());
    membership.share = fair_share(membership.partitions, membership.relays.len().max(rank + 1), rank);
    let missing = usize::from(membership.share).saturating_sub(membership.owned.len());
    if beat.take && missing > 0 {
        let taken = sqlx::query(TAKE).bind(beat.relay).bind(missing as i64).fetch_all(pool).await?;
        for row in &taken {
            membership.owned.push(lease(row)?);
        }
    }
    membership.owned.sort();
    Ok(membership)
}

fn lease(row: &PgRow) -> Result<PartitionLease> {
    Ok(PartitionLease::new(
        row.try_get::<Option<i16>, _>("partition")?.unwrap_or(0).unsigned_abs(),
        row.try_get::<Option<i64>, _>("epoch")?.unwrap_or(0),
        row.try_get::<Option<i64>, _>("generation")?.unwrap_or(0),
    )
    .starting_at(row.try_get::<Option<i64>, _>("start_seq")?.unwrap_or(0)))
}

/// Moves the start of the partitions the relay holds at the given epochs, unless an operator changed their rows
/// since the given generations (a retried row may be pending below the owner's start); never back. Committed
/// without waiting for its WAL flush: a start lost in a server crash is only an older start, from which a new owner
/// reads a little more.
const ADVANCE_STARTS: &str = "\
UPDATE outbox_partitions p SET start_seq = s.start_seq
  FROM UNNEST($2::int2[], $3::int8[], $4::int8[], $5::int8[]) AS s(partition, epoch, generation, start_seq),
       (SELECT set_config('synchronous_commit', 'off', true)) AS commit_mode
 WHERE p.partition = s.partition AND p.epoch = s.epoch AND p.generation = s.generation AND p.owner = $1
   AND p.start_seq < s.start_seq";

pub(super) async fn advance_starts(pool: &PgPool, relay: Uuid, starts: &[PartitionStart]) -> Result<()> {
    if starts.is_empty() {
        return Ok(());
    }
    let partitions: Vec<i16> = starts.iter().map(|s| i16::try_from(s.lease.partition).unwrap_or(i16::MAX)).collect();
    let epochs: Vec<i64> = starts.iter().map(|s| s.lease.epoch).collect();
    let generations: Vec<i64> = starts.iter().map(|s| s.lease.generation).collect();
    let seqs: Vec<i64> = starts.iter().map(|s| s.start_seq).collect();
    sqlx::query(ADVANCE_STARTS)
        .bind(relay)
        .bind(partitions)
        .bind(epochs)
        .bind(generations)
        .bind(seqs)
        .execute(pool)
        .await?;
    Ok(())
}

pub(super) async fn leave(pool: &PgPool, relay: Uuid) -> Result<()> {
    sqlx::query(LEAVE).bind(relay).execute(pool).await?;
    Ok(())
}
