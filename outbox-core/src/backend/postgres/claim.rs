//! Claiming a batch: one `UPDATE ... FROM (SELECT ... FOR UPDATE SKIP LOCKED)` statement, its own short
//! transaction, that leases due rows to a relay.

use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};
use uuid::Uuid;

use crate::store::{Checked, Claim, ClaimRequest, ClaimedEvent, Ordering, StoredEvent};
use crate::Result;

/// Wraps a claim's `claimed` CTE: leases the picked rows and returns them with the pause flag. The outer
/// `LEFT JOIN` returns one row of NULLs when nothing was claimed, so the caller still learns whether publishing
/// is paused, in the same round trip.
///
/// The claim's own transaction commits without waiting for its WAL flush (`synchronous_commit` off for this
/// statement only): a claim lost in a server crash leaves its rows pending, exactly as an expired lease does,
/// and the batch's settle, which waits for its flush, makes the claim durable with it. This takes one disk flush
/// off the path from commit to publish.
macro_rules! leased {
    ($picked:literal) => {
        concat!(
            "WITH ctl AS (SELECT COALESCE((SELECT paused FROM outbox_control WHERE id), false) AS paused,
                    set_config('synchronous_commit', 'off', true) AS commit_mode),\n",
            $picked,
            ",
claimed AS (
UPDATE outbox_events e
   SET status = 'in_flight',
       lease_owner = $1,
       lease_expires_at = now() + make_interval(secs => $2),
       lease_epoch = e.lease_epoch + 1
 WHERE e.id IN (SELECT id FROM picked)
   AND e.status = 'pending'
RETURNING e.id, e.seq, e.event_type, e.aggregate_type, e.aggregate_id, e.schema_version,
          e.payload::text AS payload, e.headers::text AS headers, e.sensitive_paths::text AS sensitive_paths,
          e.created_at, e.attempts, e.lease_epoch
)
SELECT ctl.paused, c.* FROM ctl LEFT JOIN claimed c ON true"
        )
    };
}

/// Any due pending row, oldest first (the pending partial index, `(next_attempt_at, seq)`).
const CLAIM_UNORDERED: &str = leased!(
    "picked AS (
SELECT e.id FROM outbox_events e
 WHERE e.status = 'pending' AND e.next_attempt_at <= now() AND NOT (SELECT paused FROM ctl)
 ORDER BY e.next_attempt_at, e.seq
 LIMIT $3
 FOR UPDATE OF e SKIP LOCKED
)"
);

/// Heads (due pending rows with no earlier unfinished row of their aggregate: one probe of the per-aggregate
/// partial index each), locked with SKIP LOCKED; then, behind each head, the following rows of its aggregate
/// while they are due and pending (contiguous: the first row that is not stops the run), sharing the room the
/// heads left in the batch evenly (so a batch of many heads reads no followers at all).
///
/// Followers need no row lock of their own to be safe: no other relay can claim them, because their head is
/// unfinished in every snapshot until it is published, and the head is locked by this statement.
const CLAIM_ORDERED: &str = leased!(
    "heads AS (
SELECT e.id, e.aggregate_type, e.aggregate_id, e.seq, row_number() OVER () AS head_rank
  FROM (
    SELECT e.id, e.aggregate_type, e.aggregate_id, e.seq
      FROM outbox_events e
     WHERE e.status = 'pending' AND e.next_attempt_at <= now() AND NOT (SELECT paused FROM ctl)
       AND NOT EXISTS (
           SELECT 1 FROM outbox_events p
            WHERE p.aggregate_type = e.aggregate_type AND p.aggregate_id = e.aggregate_id
              AND p.seq < e.seq AND p.status IN ('pending', 'in_flight', 'failed'))
     ORDER BY e.next_attempt_at, e.seq
     LIMIT $3
     FOR UPDATE OF e SKIP LOCKED
  ) e
),
room AS (
SELECT count(*) AS heads, GREATEST(0, $3 - count(*)) AS free FROM heads
),
followers AS (
SELECT f.id, f.rank, h.head_rank
  FROM heads h
 CROSS JOIN LATERAL (
    SELECT r.id, r.rank FROM (
        SELECT u.id,
               row_number() OVER (ORDER BY u.seq) AS rank,
               bool_and(u.ready) OVER (ORDER BY u.seq) AS contiguous
          FROM (SELECT n.id, n.seq, n.status = 'pending' AND n.next_attempt_at <= now() AS ready
                  FROM outbox_events n
                 WHERE n.aggregate_type = h.aggregate_type AND n.aggregate_id = h.aggregate_id
                   AND n.seq > h.seq AND n.status IN ('pending', 'in_flight', 'failed')
                 ORDER BY n.seq
                 LIMIT (SELECT (free + heads - 1) / GREATEST(heads, 1) FROM room)) u
    ) r
    WHERE r.contiguous
 ) f
),
picked AS (
SELECT id FROM heads
UNION ALL
(SELECT id FROM followers ORDER BY rank, head_rank LIMIT (SELECT free FROM room))
)"
);

pub(super) async fn claim(pool: &PgPool, request: &ClaimRequest) -> Result<Claim> {
    let sql = match request.ordering {
        Ordering::Aggregate => CLAIM_ORDERED,
        Ordering::None => CLAIM_UNORDERED,
    };
    let rows = sqlx::query(sql)
        .bind(request.owner)
        .bind(request.lease.as_secs_f64())
        .bind(i64::from(request.limit))
        .fetch_all(pool)
        .await?;
    let mut claim = Claim::default();
    for row in rows {
        claim.paused = row.try_get("paused")?;
        if let Some(event) = claimed_event(&row)? {
            claim.events.push(event);
        }
    }
    claim.events.sort_by_key(|e| e.event.seq);
    Ok(claim)
}

fn claimed_event(row: &PgRow) -> Result<Option<ClaimedEvent>> {
    let Some(id) = row.try_get::<Option<Uuid>, _>("id")? else {
        return Ok(None);
    };
    let headers: String = row.try_get("headers")?;
    let sensitive: String = row.try_get("sensitive_paths")?;
    let event = StoredEvent {
        id,
        seq: row.try_get("seq")?,
        event_type: row.try_get("event_type")?,
        aggregate_type: row.try_get("aggregate_type")?,
        aggregate_id: row.try_get("aggregate_id")?,
        version: row.try_get::<i32, _>("schema_version")?.unsigned_abs(),
        payload: row.try_get("payload")?,
        headers: Checked::from_json_text(&headers),
        sensitive_paths: Checked::from_json_text(&sensitive),
        created_at: row.try_get("created_at")?,
        attempts: row.try_get::<i32, _>("attempts")?.unsigned_abs(),
    };
    Ok(Some(ClaimedEvent { event, epoch: row.try_get("lease_epoch")? }))
}
