//! The backlog gauges on SQLite: one statement on the partial indexes of pending and failed rows.

use std::time::Duration;

use sqlx::{Row, SqlitePool};

use super::clock::now;
use crate::error::Result;
use crate::store::{Backlog, FailedByType, PendingByType};

const BACKLOG: &str = concat!(
    "SELECT 'pending' AS kind, event_type, count(*) AS n,
            (julianday(",
    now!(),
    ") - julianday(min(created_at))) * 86400.0 AS oldest_secs
       FROM outbox_events WHERE status = 'pending' GROUP BY event_type
     UNION ALL
     SELECT 'failed', event_type, count(*), NULL
       FROM outbox_events WHERE status = 'failed' GROUP BY event_type
     UNION ALL
     SELECT 'paused', NULL, CASE WHEN paused THEN 1 ELSE 0 END, NULL
       FROM outbox_control WHERE id = 1"
);

pub(super) async fn backlog(pool: &SqlitePool) -> Result<Backlog> {
    let mut backlog = Backlog::default();
    for row in sqlx::query(BACKLOG).fetch_all(pool).await? {
        let kind: String = row.try_get("kind")?;
        let n = row.try_get::<i64, _>("n")?.unsigned_abs();
        match kind.as_str() {
            "pending" => {
                let oldest = row.try_get::<Option<f64>, _>("oldest_secs")?.unwrap_or_default().max(0.0);
                backlog.pending.push(PendingByType {
                    event_type: row.try_get("event_type")?,
                    pending: n,
                    oldest_age: Duration::try_from_secs_f64(oldest).unwrap_or_default(),
                });
            }
            "failed" => backlog.failed.push(FailedByType { event_type: row.try_get("event_type")?, failed: n }),
            _ => backlog.paused = n > 0,
        }
    }
    backlog.sort();
    Ok(backlog)
}
