//! The backlog gauges on PostgreSQL: one statement that reads the backlog and the failed rows, not the history.

use std::time::Duration;

use sqlx::{PgConnection, PgPool, Row};

use super::jit::fetch_all_without_jit;
use super::pending::pending_rows_now;
use crate::error::Result;
use crate::store::{Backlog, FailedByType, PendingByType, PgStore};

/// After `pending` ([`pending_rows_now`]): pending rows from each partition's start, and failed rows through the
/// index of rows that failed an attempt (`outbox_events_attempted_idx`), so the cost follows the backlog and the
/// dead letters, never the published history. One row per (kind, event type), plus one for the pause flag.
const COUNTS: &str = "
SELECT 'pending' AS kind, event_type, count(*) AS n,
       EXTRACT(EPOCH FROM now() - min(created_at))::float8 AS oldest_secs
  FROM pending GROUP BY event_type
UNION ALL
SELECT 'failed', event_type, count(*), NULL
  FROM outbox_events WHERE attempts > 0 AND status = 'failed' GROUP BY event_type
UNION ALL
SELECT 'paused', NULL, CASE WHEN paused THEN 1 ELSE 0 END, NULL
  FROM outbox_control WHERE id";

/// The gauges' statement as it runs next on `conn`.
async fn statement(conn: &mut PgConnection) -> Result<String> {
    Ok(format!("WITH {}{COUNTS}", pending_rows_now(conn).await?))
}

pub(super) async fn backlog(pool: &PgPool) -> Result<Backlog> {
    let mut backlog = Backlog::default();
    let mut conn = pool.acquire().await?;
    let statement = statement(&mut conn).await?;
    // No transaction spans the two round trips: a relay stopped between them holds none open.
    let rows = fetch_all_without_jit(&mut conn, &statement).await?;
    for row in rows {
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

impl PgStore {
    /// The statement [`Store::backlog`](crate::store::Store::backlog) would run now, for `EXPLAIN`: written at each
    /// refresh from the table's statistics and the partitions' starts, it reads `outbox_events_partition_seq_idx`
    /// from each partition's start (or the whole table in one sequential scan, when most of it is pending) and
    /// `outbox_events_attempted_idx`, not the table's published history.
    ///
    /// # Errors
    ///
    /// [`Error::Database`](crate::Error::Database).
    pub async fn backlog_statement(&self) -> Result<String> {
        let mut conn = self.pool.acquire().await?;
        statement(&mut conn).await
    }
}
