//! Where a drain's time goes on the database side: the write-ahead log each event costs (against the
//! yardstick's bytes per row) and, when `pg_stat_statements` is loaded, the execution time of each statement.

use std::time::Duration;

use outbox_tests::pg::TestDatabase;
use sqlx::{PgPool, Row};

use crate::Report;

/// The server's current WAL position, in bytes.
pub(crate) async fn wal_position(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::int8").fetch_one(pool).await.unwrap_or(0)
}

/// Clears the statement statistics, so the next report covers one drain; false when the extension is missing.
pub(crate) async fn reset(pool: &PgPool) -> bool {
    let created = sqlx::raw_sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements").execute(pool).await.is_ok();
    created && sqlx::query("SELECT pg_stat_statements_reset()").execute(pool).await.is_ok()
}

/// The CPU time this process (the bench, and the library relays it runs) has used so far, from `/proc/self/stat`
/// (user and system, in clock ticks of 10 ms); `None` where there is no such file.
pub(crate) fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name (in parentheses, which may hold spaces): utime and stime are the 12th and
    // 13th of them.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// Which of the relay's statements a query text is.
fn statement_name(query: &str) -> &'static str {
    // The batch record is fenced as the settle is (`held AS`): told apart first.
    if query.contains("pg_current_snapshot()") {
        "read"
    } else if query.contains("INSERT INTO outbox_batches") {
        "batch record"
    } else if query.contains("held AS") {
        "settle"
    } else if query.contains("outbox_relays") || query.contains("outbox_partitions") {
        "membership"
    } else {
        "other"
    }
}

/// Notes the WAL per event and the per-statement split of one drain of `events` that took `elapsed`.
pub(crate) async fn report(
    db: &TestDatabase,
    label: &str,
    events: i64,
    elapsed: Duration,
    wal_bytes: i64,
    report: &mut Report,
) {
    let events_f = events as f64;
    report.note(format!("{label}: {:.0} WAL bytes per event", wal_bytes as f64 / events_f));
    let mut conn = db.connect().await;
    let rows = sqlx::query(
        "SELECT query, calls, total_exec_time, rows, wal_bytes::float8 AS wal_bytes, wal_fpi
           FROM pg_stat_statements
          WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())",
    )
    .fetch_all(&mut conn)
    .await;
    let Ok(rows) = rows else {
        report.note(format!("{label}: no statement profile (pg_stat_statements is not loaded)"));
        return;
    };
    let mut split: Vec<(&'static str, i64, f64, f64, i64)> = Vec::new();
    for row in &rows {
        let name = statement_name(row.try_get::<&str, _>("query").unwrap_or_default());
        let calls: i64 = row.try_get("calls").unwrap_or(0);
        let millis: f64 = row.try_get("total_exec_time").unwrap_or(0.0);
        let wal: f64 = row.try_get("wal_bytes").unwrap_or(0.0);
        let fpi: i64 = row.try_get("wal_fpi").unwrap_or(0);
        match split.iter_mut().find(|entry| entry.0 == name) {
            Some(entry) => {
                entry.1 += calls;
                entry.2 += millis;
                entry.3 += wal;
                entry.4 += fpi;
            }
            None => split.push((name, calls, millis, wal, fpi)),
        }
    }
    split.sort_by(|a, b| b.2.total_cmp(&a.2));
    let wall_ms = elapsed.as_secs_f64() * 1e3;
    let in_database: f64 = split.iter().map(|entry| entry.2).sum();
    let parts: Vec<String> = split
        .iter()
        .map(|(name, calls, millis, wal, fpi)| {
            format!(
                "{name} {calls} calls, {:.1} us/event, {:.0} WAL bytes/event ({fpi} full-page images)",
                millis * 1e3 / events_f,
                wal / events_f
            )
        })
        .collect();
    report.note(format!(
        "{label}: statement execution, summed over the relay's connections, {:.0}% of the wall time (over 100%: \
         batches overlapping in the database); {}",
        100.0 * in_database / wall_ms,
        parts.join("; ")
    ));
}

/// The mean and largest execution time, in milliseconds, of the statements whose text contains `marker`, since
/// the last [`reset`]; `None` without `pg_stat_statements`.
pub(crate) async fn statement_times(pool: &PgPool, marker: &str) -> Option<(f64, f64, i64)> {
    sqlx::query_as::<_, (Option<f64>, Option<f64>, Option<i64>)>(
        "SELECT sum(total_exec_time) / NULLIF(sum(calls), 0), max(max_exec_time), sum(calls)::int8
           FROM pg_stat_statements WHERE query LIKE '%' || $1 || '%'",
    )
    .bind(marker)
    .fetch_one(pool)
    .await
    .ok()
    .and_then(|(mean, max, calls)| Some((mean?, max?, calls?)))
}
