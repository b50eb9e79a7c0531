//! Reading the outbox for operators on SQLite: status counts, event lists, one event in full.

use std::time::Duration;

use sqlx::sqlite::SqliteRow;
use sqlx::{Row, SqlitePool};
use uuid::Uuid;

use super::clock::{self, now};
use super::control;
use crate::store::{Checked, EventDetail, EventFilter, EventStatus, EventSummary, PendingByType, StatusReport};
use crate::Result;

const PENDING_BY_TYPE: &str = concat!(
    "SELECT event_type, count(*) AS n,
            (julianday(",
    now!(),
    ") - julianday(min(created_at))) * 86400.0 AS oldest_secs
       FROM outbox_events WHERE status = 'pending'
      GROUP BY event_type ORDER BY n DESC, event_type"
);

const COUNTS: &str = concat!(
    "SELECT (SELECT count(*) FROM outbox_events WHERE status = 'in_flight') AS in_flight,
            (SELECT count(*) FROM outbox_events WHERE status = 'failed') AS failed,
            (SELECT count(*) FROM outbox_events WHERE status = 'published'
                AND COALESCE(published_at, created_at) >= ",
    now!("'-1 minute'"),
    ") AS last_minute,
            (SELECT count(*) FROM outbox_events WHERE status = 'published'
                AND COALESCE(published_at, created_at) >= ",
    now!("'-1 hour'"),
    ") AS last_hour"
);

const SUMMARY_COLUMNS: &str = "id, seq, event_type, aggregate_type, aggregate_id, schema_version, status, attempts, \
created_at, next_attempt_at, published_at, last_error";

pub(super) async fn status(pool: &SqlitePool) -> Result<StatusReport> {
    let mut report = StatusReport::default();
    for row in sqlx::query(PENDING_BY_TYPE).fetch_all(pool).await? {
        report.pending.push(PendingByType {
            event_type: row.try_get("event_type")?,
            pending: row.try_get::<i64, _>("n")?.unsigned_abs(),
            oldest_age: Duration::try_from_secs_f64(row.try_get::<f64, _>("oldest_secs")?.max(0.0)).unwrap_or_default(),
        });
    }
    let row = sqlx::query(COUNTS).fetch_one(pool).await?;
    report.in_flight = row.try_get::<i64, _>("in_flight")?.unsigned_abs();
    report.failed = row.try_get::<i64, _>("failed")?.unsigned_abs();
    report.published_last_minute = row.try_get::<i64, _>("last_minute")?.unsigned_abs();
    report.published_last_hour = row.try_get::<i64, _>("last_hour")?.unsigned_abs();
    report.paused = control::is_paused(pool).await?;
    Ok(report)
}

/// The conditions of an [`EventFilter`], on parameters `?1`..`?5` bound by [`bind_filter`] (`?6` is the limit).
/// The age compares stored UTC text with the current time in the same format, moved back by `?4`.
pub(super) const FILTER: &str = concat!(
    "(?1 IS NULL OR status = ?1)
   AND (?2 IS NULL OR event_type = ?2)
   AND (?3 IS NULL OR aggregate_id = ?3)
   AND (?4 IS NULL OR created_at < ",
    now!("?4"),
    ")
   AND (?5 IS NULL OR seq > (SELECT after.seq FROM outbox_events AS after WHERE after.id = ?5))"
);

/// Binds the filter's `?1`..`?5` of [`FILTER`] and the limit (`?6`).
pub(super) fn bind_filter<'q>(
    query: sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>>,
    filter: &'q EventFilter,
) -> sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>> {
    query
        .bind(filter.status.map(EventStatus::as_str))
        .bind(filter.event_type.as_deref())
        .bind(filter.aggregate_id.as_deref())
        .bind(filter.older_than.map(clock::earlier))
        .bind(filter.after.map(|id| id.hyphenated().to_string()))
        .bind(i64::from(filter.limit))
}

pub(super) async fn list(pool: &SqlitePool, filter: &EventFilter) -> Result<Vec<EventSummary>> {
    let sql = format!("SELECT {SUMMARY_COLUMNS} FROM outbox_events WHERE {FILTER} ORDER BY seq LIMIT ?6");
    let rows = bind_filter(sqlx::query(&sql), filter).fetch_all(pool).await?;
    rows.iter().map(summary).collect()
}

pub(super) async fn show(pool: &SqlitePool, id: Uuid) -> Result<Option<EventDetail>> {
    let sql = format!(
        "SELECT {SUMMARY_COLUMNS}, payload, headers, sensitive_paths, lease_owner, lease_expires_at, lease_epoch
           FROM outbox_events WHERE id = ?1"
    );
    let Some(row) = sqlx::query(&sql).bind(id.hyphenated().to_string()).fetch_optional(pool).await? else {
        return Ok(None);
    };
    let payload: String = row.try_get("payload")?;
    let headers: String = row.try_get("headers")?;
    let sensitive: String = row.try_get("sensitive_paths")?;
    let lease_owner: Option<String> = row.try_get("lease_owner")?;
    Ok(Some(EventDetail {
        summary: summary(&row)?,
        payload: serde_json::from_str(&payload).unwrap_or(serde_json::Value::Null),
        headers: Checked::from_json_text(&headers),
        sensitive_paths: Checked::from_json_text(&sensitive),
        lease_owner: lease_owner.as_deref().map(clock::uuid).transpose()?,
        lease_expires_at: clock::parse_optional(row.try_get::<Option<&str>, _>("lease_expires_at")?)?,
        lease_epoch: row.try_get("lease_epoch")?,
    }))
}

fn summary(row: &SqliteRow) -> Result<EventSummary> {
    let status: String = row.try_get("status")?;
    Ok(EventSummary {
        id: clock::uuid(row.try_get("id")?)?,
        seq: row.try_get("seq")?,
        event_type: row.try_get("event_type")?,
        aggregate_type: row.try_get("aggregate_type")?,
        aggregate_id: row.try_get("aggregate_id")?,
        version: row.try_get::<i64, _>("schema_version")?.unsigned_abs().try_into().unwrap_or(u32::MAX),
        // The CHECK constraint admits only known statuses; a row written with it switched off
        // (`PRAGMA ignore_check_constraints`) is reported as unreadable rather than shown as another status.
        status: status
            .parse()
            .map_err(|error| sqlx::Error::ColumnDecode { index: "status".into(), source: Box::new(error) })?,
        attempts: row.try_get::<i64, _>("attempts")?.unsigned_abs().try_into().unwrap_or(u32::MAX),
        created_at: clock::parse(row.try_get("created_at")?)?,
        next_attempt_at: clock::parse(row.try_get("next_attempt_at")?)?,
        published_at: clock::parse_optional(row.try_get::<Option<&str>, _>("published_at")?)?,
        last_error: row.try_get("last_error")?,
    })
}
