//! Settling a claimed batch: every outcome (published, retry, failed, released) written back in one statement,
//! fenced by the lease owner and epoch.

use sqlx::{PgPool, Row};
use uuid::Uuid;

use crate::store::{SettleOutcome, SettleReport, Settlement};
use crate::Result;

/// The outcomes arrive as parallel arrays. A row changes only if it is still `in_flight` under `$1` with the
/// epoch it was claimed with: a relay whose lease expired and whose rows were claimed again (their epoch grew)
/// cannot touch them. With `$7`, published rows are deleted instead of marked (immediate retention).
const SETTLE: &str = "\
WITH s AS (
SELECT * FROM UNNEST($2::uuid[], $3::int8[], $4::text[], $5::text[], $6::float8[])
    AS s(id, epoch, outcome, error, delay_secs)
),
deleted AS (
DELETE FROM outbox_events e USING s
 WHERE $7 AND s.outcome = 'published'
   AND e.id = s.id AND e.lease_epoch = s.epoch AND e.lease_owner = $1 AND e.status = 'in_flight'
RETURNING s.outcome
),
updated AS (
UPDATE outbox_events e
   SET status = CASE s.outcome WHEN 'published' THEN 'published' WHEN 'failed' THEN 'failed' ELSE 'pending' END,
       published_at = CASE WHEN s.outcome = 'published' THEN now() ELSE e.published_at END,
       attempts = CASE WHEN s.outcome IN ('retry', 'failed') THEN e.attempts + 1 ELSE e.attempts END,
       next_attempt_at = CASE WHEN s.outcome = 'retry' THEN now() + make_interval(secs => s.delay_secs)
                              ELSE e.next_attempt_at END,
       last_error = CASE WHEN s.outcome IN ('retry', 'failed') THEN s.error ELSE e.last_error END,
       lease_owner = NULL,
       lease_expires_at = NULL
  FROM s
 WHERE NOT ($7 AND s.outcome = 'published')
   AND e.id = s.id AND e.lease_epoch = s.epoch AND e.lease_owner = $1 AND e.status = 'in_flight'
RETURNING s.outcome
)
SELECT outcome, count(*) AS n FROM (SELECT outcome FROM deleted UNION ALL SELECT outcome FROM updated) AS done
 GROUP BY outcome";

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
    let mut ids = Vec::with_capacity(settlements.len());
    let mut epochs = Vec::with_capacity(settlements.len());
    let mut outcomes = Vec::with_capacity(settlements.len());
    let mut errors: Vec<Option<String>> = Vec::with_capacity(settlements.len());
    let mut delays = Vec::with_capacity(settlements.len());
    for settlement in settlements {
        ids.push(settlement.id);
        epochs.push(settlement.epoch);
        let (outcome, error, delay) = match &settlement.outcome {
            SettleOutcome::Published => ("published", None, 0.0),
            SettleOutcome::Retry { error, delay } => ("retry", Some(short(error)), delay.as_secs_f64()),
            SettleOutcome::Failed { error } => ("failed", Some(short(error)), 0.0),
            SettleOutcome::Release => ("release", None, 0.0),
        };
        outcomes.push(outcome);
        errors.push(error);
        delays.push(delay);
    }
    let rows = sqlx::query(SETTLE)
        .bind(owner)
        .bind(ids)
        .bind(epochs)
        .bind(outcomes)
        .bind(errors)
        .bind(delays)
        .bind(delete_published)
        .fetch_all(pool)
        .await?;
    let mut report = SettleReport::default();
    let mut applied = 0;
    for row in rows {
        let outcome: String = row.try_get("outcome")?;
        let n = row.try_get::<i64, _>("n")?.unsigned_abs();
        applied += n;
        match outcome.as_str() {
            "published" => report.published = n,
            "retry" => report.retried = n,
            "failed" => report.failed = n,
            _ => report.released = n,
        }
    }
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
