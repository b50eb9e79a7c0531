//! The backlog gauges on PostgreSQL: one statement that reads the backlog and the failed rows, not the history, and
//! its counts shared by the relays of the database (`outbox_backlog_counts`, migration 13).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sqlx::{PgConnection, PgPool, Row};

use super::jit::fetch_all_without_jit;
use super::pending::pending_rows_now;
use crate::error::Result;
use crate::store::{Backlog, FailedByType, PendingByType, PgStore, SharedBacklog};

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
                let oldest = row.try_get::<Option<f64>, _>("oldest_secs")?.unwrap_or_default();
                backlog.pending.push(PendingByType {
                    event_type: row.try_get("event_type")?,
                    pending: n,
                    oldest_age: seconds(oldest),
                });
            }
            "failed" => backlog.failed.push(FailedByType { event_type: row.try_get("event_type")?, failed: n }),
            _ => backlog.paused = n > 0,
        }
    }
    backlog.sort();
    Ok(backlog)
}

/// Claims the next count when the stored counts are older than `$1` seconds and no relay claimed one within that
/// time (one `UPDATE`: of relays that call at once, one claims), and reads the stored counts and the pause flag, in
/// one statement. The `SELECT` sees the row as it was before the claim, which changes nothing it reads.
const CLAIM_OR_READ: &str = "
WITH claim AS (
UPDATE outbox_backlog_counts SET claimed_at = now()
 WHERE id AND counted_at < now() - make_interval(secs => $1) AND claimed_at < now() - make_interval(secs => $1)
RETURNING id
)
SELECT EXISTS (SELECT 1 FROM claim) AS claimed,
       -- NULL until a first count is stored.
       CASE WHEN b.counted_at > '-infinity' THEN EXTRACT(EPOCH FROM now() - b.counted_at)::float8 END AS age_secs,
       b.took_secs, b.counts::text AS counts,
       COALESCE((SELECT paused FROM outbox_control WHERE id), false) AS paused
  FROM outbox_backlog_counts b
 WHERE b.id";

/// Stores the counts a relay took (`$2`, [`StoredCount`]s as JSON), `$1` seconds after they were taken.
const STORE: &str = "
UPDATE outbox_backlog_counts
   SET counted_at = now() - make_interval(secs => $1), took_secs = $1, counts = $2::jsonb
 WHERE id";

/// One line of the stored counts.
#[derive(Debug, Serialize, Deserialize)]
struct StoredCount {
    /// `pending` or `failed`.
    kind: String,
    event_type: String,
    n: u64,
    /// Pending rows: the age of the oldest when the counts were taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    oldest_secs: Option<f64>,
}

/// The backlog as the relays share it (see [`Store::shared_backlog`](crate::store::Store::shared_backlog)): the
/// stored counts while they are at most `max_age` old; otherwise, for the relay that claims the next count, a
/// count taken now and stored for the others; `None` while another relay takes the first one. Stored counts that
/// cannot be read (written by hand) count as none: the next claim replaces them. A role that may not write the
/// shared counts (a relay role granted before they were shared: `postgres_relay_role.sql` grants it now) counts
/// for itself at every call, as every relay did before.
pub(super) async fn shared_backlog(pool: &PgPool, max_age: Duration) -> Result<Option<SharedBacklog>> {
    let row = match sqlx::query(CLAIM_OR_READ).bind(max_age.as_secs_f64()).fetch_one(pool).await {
        Ok(row) => row,
        Err(sqlx::Error::Database(error)) if error.code().as_deref() == Some(INSUFFICIENT_PRIVILEGE) => {
            return counted(pool, false).await.map(Some);
        }
        Err(error) => return Err(error.into()),
    };
    if row.try_get("claimed")? {
        return counted(pool, true).await.map(Some);
    }
    let (Some(age), Ok(counts)) = (
        row.try_get::<Option<f64>, _>("age_secs")?,
        serde_json::from_str::<Vec<StoredCount>>(&row.try_get::<String, _>("counts")?),
    ) else {
        return Ok(None);
    };
    let age = seconds(age);
    let mut backlog = Backlog { paused: row.try_get("paused")?, ..Backlog::default() };
    for count in counts {
        if count.kind == "pending" {
            backlog.pending.push(PendingByType {
                event_type: count.event_type,
                pending: count.n,
                oldest_age: seconds(count.oldest_secs.unwrap_or_default()) + age,
            });
        } else {
            backlog.failed.push(FailedByType { event_type: count.event_type, failed: count.n });
        }
    }
    backlog.sort();
    Ok(Some(SharedBacklog { backlog, age, took: seconds(row.try_get("took_secs")?) }))
}

/// SQLSTATE `insufficient_privilege`.
const INSUFFICIENT_PRIVILEGE: &str = "42501";

/// A count taken now, and stored for the other relays when `share`.
async fn counted(pool: &PgPool, share: bool) -> Result<SharedBacklog> {
    let started = Instant::now();
    let backlog = backlog(pool).await?;
    let took = started.elapsed();
    if share {
        sqlx::query(STORE).bind(took.as_secs_f64()).bind(stored_counts(&backlog)).execute(pool).await?;
    }
    Ok(SharedBacklog { backlog, age: Duration::ZERO, took })
}

/// The counts of `backlog` as [`STORE`] writes them.
fn stored_counts(backlog: &Backlog) -> String {
    let pending = backlog.pending.iter().map(|p| StoredCount {
        kind: "pending".to_owned(),
        event_type: p.event_type.clone(),
        n: p.pending,
        oldest_secs: Some(p.oldest_age.as_secs_f64()),
    });
    let failed = backlog.failed.iter().map(|f| StoredCount {
        kind: "failed".to_owned(),
        event_type: f.event_type.clone(),
        n: f.failed,
        oldest_secs: None,
    });
    // Strings and numbers only: serializing cannot fail.
    serde_json::to_string(&pending.chain(failed).collect::<Vec<_>>()).unwrap_or_else(|_| String::from("[]"))
}

/// A duration of `secs` seconds, zero when negative or not a number.
fn seconds(secs: f64) -> Duration {
    Duration::try_from_secs_f64(secs.max(0.0)).unwrap_or_default()
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
