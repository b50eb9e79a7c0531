//! Settling a claimed batch: every outcome (published, retry, failed, released) written back, published events
//! in one statement and the rest in another, fenced by the lease owner and epoch.

use sqlx::{PgPool, Row};
use uuid::Uuid;

use crate::store::{SettleOutcome, SettleReport, Settlement};
use crate::Result;

/// Every statement below changes a row only if it is still `in_flight` under `$1` with the epoch it was claimed
/// with: a relay whose lease expired and whose rows were claimed again (their epoch grew) cannot touch them.
/// Published events, nearly every row of a batch, go through a statement of their own that joins just the ids
/// and epochs; the few other outcomes through a second one. Both are planned at every call with the arrays'
/// real lengths (unnamed statements): a cached generic plan does not know them and joins the in-flight rows
/// with the arrays in a nested loop, a thousand times slower for a batch of 1000 than the hash join the real
/// sizes give.
const MARK_PUBLISHED: &str = "\
UPDATE outbox_events e
   SET status = 'published', published_at = now(), lease_owner = NULL, lease_expires_at = NULL
  FROM UNNEST($2::uuid[], $3::int8[]) AS s(id, epoch)
 WHERE e.id = s.id AND e.lease_epoch = s.epoch AND e.lease_owner = $1 AND e.status = 'in_flight'";

/// Immediate retention: published rows are deleted, so they cost no new row version.
const DELETE_PUBLISHED: &str = "\
DELETE FROM outbox_events e
 USING UNNEST($2::uuid[], $3::int8[]) AS s(id, epoch)
 WHERE e.id = s.id AND e.lease_epoch = s.epoch AND e.lease_owner = $1 AND e.status = 'in_flight'";

/// Retries, failures and releases, as parallel arrays; returns how many rows each outcome changed.
const SETTLE_OTHERS: &str = "\
WITH updated AS (
UPDATE outbox_events e
   SET status = CASE s.outcome WHEN 'failed' THEN 'failed' ELSE 'pending' END,
       attempts = CASE WHEN s.outcome IN ('retry', 'failed') THEN e.attempts + 1 ELSE e.attempts END,
       next_attempt_at = CASE WHEN s.outcome = 'retry' THEN now() + make_interval(secs => s.delay_secs)
                              ELSE e.next_attempt_at END,
       last_error = CASE WHEN s.outcome IN ('retry', 'failed') THEN s.error ELSE e.last_error END,
       lease_owner = NULL,
       lease_expires_at = NULL
  FROM UNNEST($2::uuid[], $3::int8[], $4::text[], $5::text[], $6::float8[])
       AS s(id, epoch, outcome, error, delay_secs)
 WHERE e.id = s.id AND e.lease_epoch = s.epoch AND e.lease_owner = $1 AND e.status = 'in_flight'
RETURNING s.outcome
)
SELECT outcome, count(*) AS n FROM updated GROUP BY outcome";

/// Errors are stored short: enough to diagnose, never a payload dump.
const MAX_ERROR_CHARS: usize = 500;

pub(super) async fn settle(
    pool: &PgPool,
    owner: Uuid,
    settlements: &[Settlement],
    delete_published: bool,
) -> Result<SettleReport> {
    if settlements.is_empty() {
        return Ok(SettleReport::default());
    }
    let mut report = SettleReport::default();
    let (published, others): (Vec<&Settlement>, Vec<&Settlement>) =
        settlements.iter().partition(|s| s.outcome == SettleOutcome::Published);
    if !published.is_empty() {
        let ids: Vec<Uuid> = published.iter().map(|s| s.id).collect();
        let epochs: Vec<i64> = published.iter().map(|s| s.epoch).collect();
        let sql = if delete_published { DELETE_PUBLISHED } else { MARK_PUBLISHED };
        let done = sqlx::query(sql).persistent(false).bind(owner).bind(ids).bind(epochs).execute(pool).await?;
        report.published = done.rows_affected();
    }
    if !others.is_empty() {
        let mut ids = Vec::with_capacity(others.len());
        let mut epochs = Vec::with_capacity(others.len());
        let mut outcomes = Vec::with_capacity(others.len());
        let mut errors: Vec<Option<String>> = Vec::with_capacity(others.len());
        let mut delays = Vec::with_capacity(others.len());
        for settlement in &others {
            ids.push(settlement.id);
            epochs.push(settlement.epoch);
            let (outcome, error, delay) = match &settlement.outcome {
                SettleOutcome::Retry { error, delay } => ("retry", Some(short(error)), delay.as_secs_f64()),
                SettleOutcome::Failed { error } => ("failed", Some(short(error)), 0.0),
                SettleOutcome::Published | SettleOutcome::Release => ("release", None, 0.0),
            };
            outcomes.push(outcome);
            errors.push(error);
            delays.push(delay);
        }
        let rows = sqlx::query(SETTLE_OTHERS)
            .persistent(false)
            .bind(owner)
            .bind(ids)
            .bind(epochs)
            .bind(outcomes)
            .bind(errors)
            .bind(delays)
            .fetch_all(pool)
            .await?;
        for row in rows {
            let outcome: String = row.try_get("outcome")?;
            let n = row.try_get::<i64, _>("n")?.unsigned_abs();
            match outcome.as_str() {
                "retry" => report.retried = n,
                "failed" => report.failed = n,
                _ => report.released = n,
            }
        }
    }
    let applied = report.published + report.retried + report.failed + report.released;
    report.fenced = (settlements.len() as u64).saturating_sub(applied);
    Ok(report)
}

fn short(error: &str) -> String {
    match error.char_indices().nth(MAX_ERROR_CHARS) {
        Some((end, _)) => format!("{}...", &error[..end]),
        None => error.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn long_errors_are_cut_on_a_char_boundary() {
        let long = "é".repeat(600);
        let cut = super::short(&long);
        assert_eq!(cut.chars().count(), super::MAX_ERROR_CHARS + 3);
        assert_eq!(super::short("boom"), "boom");
    }
}
