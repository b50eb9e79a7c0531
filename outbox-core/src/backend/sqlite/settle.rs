//! Settling a claimed batch on SQLite: the outcomes as one JSON array, applied in one transaction, fenced by the
//! lease owner and epoch.

use std::collections::HashMap;

use serde::Serialize;
use sqlx::{Row, SqlitePool};
use uuid::Uuid;

use super::clock::now;
use crate::store::{SettleOutcome, SettleReport, Settlement};
use crate::Result;

/// The settlements, one JSON object each, as a table.
const SETTLEMENTS: &str = "(SELECT json_extract(value, '$.id') AS id, json_extract(value, '$.epoch') AS epoch,
        json_extract(value, '$.outcome') AS outcome, json_extract(value, '$.error') AS error,
        json_extract(value, '$.delay') AS delay
   FROM json_each(?2))";

const DELETE_PUBLISHED: &str = concat!(
    "DELETE FROM outbox_events AS e
      WHERE e.status = 'in_flight' AND e.lease_owner = ?1
        AND EXISTS (SELECT 1 FROM ",
    "(SELECT json_extract(value, '$.id') AS id, json_extract(value, '$.epoch') AS epoch,
             json_extract(value, '$.outcome') AS outcome FROM json_each(?2))",
    " s WHERE s.id = e.id AND s.epoch = e.lease_epoch AND s.outcome = 'published')
      RETURNING id"
);

/// Errors are stored short: enough to diagnose, never a payload dump.
const MAX_ERROR_CHARS: usize = 500;

#[derive(Serialize)]
struct Entry<'a> {
    id: String,
    epoch: i64,
    outcome: &'a str,
    error: Option<String>,
    delay: String,
}

pub(super) async fn settle(
    pool: &SqlitePool,
    owner: Uuid,
    settlements: &[Settlement],
    delete_published: bool,
) -> Result<SettleReport> {
    if settlements.is_empty() {
        return Ok(SettleReport::default());
    }
    let mut outcome_of = HashMap::with_capacity(settlements.len());
    let rows: Vec<Entry<'_>> = settlements
        .iter()
        .map(|settlement| {
            let (outcome, error, delay) = match &settlement.outcome {
                SettleOutcome::Published => ("published", None, 0.0),
                SettleOutcome::Retry { error, delay } => ("retry", Some(short(error)), delay.as_secs_f64()),
                SettleOutcome::Failed { error } => ("failed", Some(short(error)), 0.0),
                SettleOutcome::Release => ("release", None, 0.0),
            };
            let id = settlement.id.hyphenated().to_string();
            outcome_of.insert(id.clone(), outcome);
            Entry { id, epoch: settlement.epoch, outcome, error, delay: format!("+{delay:.3} seconds") }
        })
        .collect();
    let rows = serde_json::to_string(&rows).unwrap_or_else(|_| String::from("[]"));
    let owner = owner.hyphenated().to_string();

    let mut tx = pool.begin().await?;
    let mut applied: Vec<String> = Vec::new();
    if delete_published {
        for row in sqlx::query(DELETE_PUBLISHED).bind(&owner).bind(&rows).fetch_all(&mut *tx).await? {
            applied.push(row.try_get("id")?);
        }
    }
    let update = format!(
        "UPDATE outbox_events AS e
            SET status = CASE s.outcome WHEN 'published' THEN 'published' WHEN 'failed' THEN 'failed' ELSE 'pending' END,
                published_at = CASE WHEN s.outcome = 'published' THEN {now} ELSE e.published_at END,
                attempts = CASE WHEN s.outcome IN ('retry', 'failed') THEN e.attempts + 1 ELSE e.attempts END,
                next_attempt_at = CASE WHEN s.outcome = 'retry' THEN strftime('%Y-%m-%dT%H:%M:%fZ', 'now', s.delay)
                                       ELSE e.next_attempt_at END,
                last_error = CASE WHEN s.outcome IN ('retry', 'failed') THEN s.error ELSE e.last_error END,
                lease_owner = NULL,
                lease_expires_at = NULL
           FROM {SETTLEMENTS} AS s
          WHERE e.id = s.id AND e.lease_epoch = s.epoch AND e.lease_owner = ?1 AND e.status = 'in_flight'
          RETURNING id",
        now = now!(),
    );
    for row in sqlx::query(&update).bind(&owner).bind(&rows).fetch_all(&mut *tx).await? {
        applied.push(row.try_get("id")?);
    }
    tx.commit().await?;

    let mut report = SettleReport::default();
    for id in &applied {
        match outcome_of.get(id.as_str()).copied() {
            Some("published") => report.published += 1,
            Some("retry") => report.retried += 1,
            Some("failed") => report.failed += 1,
            _ => report.released += 1,
        }
    }
    report.fenced = (settlements.len() as u64).saturating_sub(applied.len() as u64);
    Ok(report)
}

fn short(error: &str) -> String {
    match error.char_indices().nth(MAX_ERROR_CHARS) {
        Some((end, _)) => format!("{}...", &error[..end]),
        None => error.to_owned(),
    }
}
