//! Settling a published batch on SQLite: the outcomes as one JSON array, applied in one transaction, fenced by the
//! epoch of partition 0.

use std::collections::HashMap;

use serde::Serialize;
use sqlx::{Row, SqliteConnection, SqlitePool};

use super::clock::now;
use super::fence::{partition_zero_epoch, HELD};
use crate::error::Result;
use crate::store::{retry_name, short_error, SettleBatch, SettleOutcome, SettleReport, Settlement};

/// The settlements, one JSON object each, as a table.
const SETTLEMENTS: &str = "(SELECT json_extract(value, '$.id') AS id, json_extract(value, '$.outcome') AS outcome,
        json_extract(value, '$.error') AS error, json_extract(value, '$.delay') AS delay
   FROM json_each(?1))";

#[derive(Serialize)]
struct Entry<'a> {
    id: String,
    outcome: &'a str,
    error: Option<String>,
    delay: String,
}

/// The settlements as the statements read them, and each id's outcome.
fn entries(settlements: &[Settlement]) -> (String, HashMap<String, &'static str>) {
    let mut outcome_of = HashMap::with_capacity(settlements.len());
    let rows: Vec<Entry<'_>> = settlements
        .iter()
        .map(|settlement| {
            let (outcome, error, delay) = match &settlement.outcome {
                SettleOutcome::Published => ("published", None, 0.0),
                SettleOutcome::Retry { error, delay, counted } => {
                    (retry_name(*counted), Some(short_error(error)), delay.as_secs_f64())
                }
                SettleOutcome::Failed { error } => ("failed", Some(short_error(error)), 0.0),
            };
            let id = settlement.id.hyphenated().to_string();
            outcome_of.insert(id.clone(), outcome);
            Entry { id, outcome, error, delay: format!("+{delay:.3} seconds") }
        })
        .collect();
    (serde_json::to_string(&rows).unwrap_or_else(|_| String::from("[]")), outcome_of)
}

fn update(held: &str) -> String {
    format!(
        "UPDATE outbox_events AS e
            SET status = CASE s.outcome WHEN 'published' THEN 'published' WHEN 'failed' THEN 'failed' ELSE 'pending' END,
                published_at = CASE WHEN s.outcome = 'published' THEN {now} ELSE e.published_at END,
                attempts = CASE WHEN s.outcome IN ('retry', 'failed') THEN e.attempts + 1 ELSE e.attempts END,
                next_attempt_at = CASE WHEN s.outcome IN ('retry', 'postponed')
                                       THEN strftime('%Y-%m-%dT%H:%M:%fZ', 'now', s.delay)
                                       ELSE e.next_attempt_at END,
                last_error = CASE WHEN s.outcome IN ('retry', 'postponed', 'failed') THEN s.error ELSE e.last_error END
           FROM {SETTLEMENTS} AS s
          WHERE e.id = s.id AND e.status = 'pending' AND {held}
          RETURNING id",
        now = now!(),
    )
}

pub(super) async fn settle(pool: &SqlitePool, batch: &SettleBatch) -> Result<SettleReport> {
    let (rows, outcome_of) = entries(&batch.settlements);
    let relay = batch.relay.hyphenated().to_string();
    let epoch = partition_zero_epoch(batch.leases.iter().copied());
    let mut tx = pool.begin().await?;
    let mut applied: Vec<String> = Vec::new();
    if batch.delete_published {
        let delete = format!(
            "DELETE FROM outbox_events AS e
              WHERE e.status = 'pending' AND {HELD}
                AND EXISTS (SELECT 1 FROM {SETTLEMENTS} s WHERE s.id = e.id AND s.outcome = 'published')
              RETURNING id"
        );
        for row in sqlx::query(&delete).bind(&rows).bind(&relay).bind(epoch).fetch_all(&mut *tx).await? {
            applied.push(row.try_get("id")?);
        }
    }
    for row in sqlx::query(&update(HELD)).bind(&rows).bind(&relay).bind(epoch).fetch_all(&mut *tx).await? {
        applied.push(row.try_get("id")?);
    }
    sqlx::query("DELETE FROM outbox_batches WHERE relay_id = ?1 AND batch_id = ?2")
        .bind(&relay)
        .bind(batch.batch.hyphenated().to_string())
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    let mut report = SettleReport::default();
    for id in &applied {
        match outcome_of.get(id.as_str()).copied() {
            Some("published") => report.published += 1,
            Some("retry" | "postponed") => report.retried += 1,
            _ => report.failed += 1,
        }
    }
    report.fenced = (batch.settlements.len() as u64).saturating_sub(applied.len() as u64);
    Ok(report)
}

/// Applies retry and failure outcomes without a lease (a dead relay's batches); returns how many rows changed. An
/// event moved to `failed` grows the generation, as on PostgreSQL: an owner that read the partition before reads
/// it afresh and holds the event's aggregate back.
pub(super) async fn apply_unfenced(conn: &mut SqliteConnection, settlements: &[Settlement]) -> Result<u64> {
    let (rows, _) = entries(settlements);
    let sql = update("s.outcome <> 'published'");
    let changed = sqlx::query(&sql).bind(&rows).fetch_all(&mut *conn).await?.len() as u64;
    let failed = settlements.iter().any(|settlement| matches!(settlement.outcome, SettleOutcome::Failed { .. }));
    if changed > 0 && failed {
        sqlx::query(super::admin::BUMP_GENERATION).execute(&mut *conn).await?;
    }
    Ok(changed)
}
