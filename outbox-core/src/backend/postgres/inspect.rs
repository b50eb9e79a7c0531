//! Reading the outbox for operators: status counts, event lists, one event in full.

use std::time::Duration;

use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};
use uuid::Uuid;

use crate::store::{Checked, EventDetail, EventFilter, EventStatus, EventSummary, PendingByType, StatusReport};
use crate::Result;

const PENDING_BY_TYPE: &str = "\
SELECT event_type, count(*) AS n, EXTRACT(EPOCH FROM now() - min(created_at))::float8 AS oldest_secs
  FROM outbox_events WHERE status = 'pending'
 GROUP BY event_type ORDER BY n DESC, event_type";

const COUNTS: &str = "\
SELECT (SELECT count(*) FROM outbox_events WHERE status = 'in_flight') AS in_flight,
       (SELECT count(*) FROM outbox_events WHERE status = 'failed') AS failed,
       (SELECT count(*) FROM outbox_events WHERE status = 'published'
           AND COALESCE(published_at, created_at) >= now() - interval '1 minute') AS last_minute,
       (SELECT count(*) FROM outbox_events WHERE status = 'published'
           AND COALESCE(published_at, created_at) >= now() - interval '1 hour') AS last_hour,
       COALESCE((SELECT paused FROM outbox_control WHERE id), false) AS paused";

const SUMMARY_COLUMNS: &str = "id, seq, event_type, aggregate_type, aggregate_id, schema_version, status, attempts, \
created_at, next_attempt_at, published_at, last_error";

pub(super) async fn status(pool: &PgPool) -> Result<StatusReport> {
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
    report.paused = row.try_get("paused")?;
    Ok(report)
}

/// The conditions of an [`EventFilter`], on parameters `$1`..`$5` bound by [`bind_filter`] (`$6` is the limit).
pub(super) const FILTER: &str = "($1::text IS NULL OR status = $1)
   AND ($2::text IS NULL OR event_type = $2)
   AND ($3::text IS NULL OR aggregate_id = $3)
   AND ($4::float8 IS NULL OR created_at < now() - make_interval(secs => $4))
   AND ($5::uuid IS NULL OR seq > (SELECT after.seq FROM outbox_events after WHERE after.id = $5))";

/// Binds the filter's `$1`..`$6` of [`FILTER`] and the limit.
pub(super) fn bind_filter<'q>(
    query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    filter: &'q EventFilter,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    query
        .bind(filter.status.map(EventStatus::as_str))
        .bind(filter.event_type.as_deref())
        .bind(filter.aggregate_id.as_deref())
        .bind(filter.older_than.map(|age| age.as_secs_f64()))
        .bind(filter.after)
        .bind(i64::from(filter.limit))
}

pub(super) async fn list(pool: &PgPool, filter: &EventFilter) -> Result<Vec<EventSummary>> {
    let sql = format!("SELECT {SUMMARY_COLUMNS} FROM outbox_events WHERE {FILTER} ORDER BY seq LIMIT $6");
    let rows = bind_filter(sqlx::query(&sql), filter).fetch_all(pool).await?;
    rows.iter().map(summary).collect()
}

pub(super) async fn show(pool: &PgPool, id: Uuid) -> Result<Option<EventDetail>> {
    let sql = format!(
        "SELECT {SUMMARY_COLUMNS}, payload::text AS payload, headers::text AS headers,
                sensitive_paths::text AS sensitive_paths, lease_owner, lease_expires_at, lease_epoch
           FROM outbox_events WHERE id = $1"
    );
    let Some(row) = sqlx::query(&sql).bind(id).fetch_optional(pool).await? else {
        return Ok(None);
    };
    let payload: String = row.try_get("payload")?;
    let headers: String = row.try_get("headers")?;
    let sensitive: String = row.try_get("sensitive_paths")?;
    Ok(Some(EventDetail {
        summary: summary(&row)?,
        payload: serde_json::from_str(&payload).unwrap_or(serde_json::Value::Null),
        headers: Checked::from_json_text(&headers),
        sensitive_paths: Checked::from_json_text(&sensitive),
        lease_owner: row.try_get("lease_owner")?,
        lease_expires_at: row.try_get("lease_expires_at")?,
        lease_epoch: row.try_get("lease_epoch")?,
    }))
}

fn summary(row: &PgRow) -> Result<EventSummary> {
    let status: String = row.try_get("status")?;
    Ok(EventSummary {
        id: row.try_get("id")?,
        seq: row.try_get("seq")?,
        event_type: row.try_get("event_type")?,
        aggregate_type: row.try_get("aggregate_type")?,
        aggregate_id: row.try_get("aggregate_id")?,
        version: row.try_get::<i32, _>("schema_version")?.unsigned_abs(),
        // The CHECK constraint admits only known statuses.
        status: status.parse().unwrap_or(EventStatus::Pending),
        attempts: row.try_get::<i32, _>("attempts")?.unsigned_abs(),
        created_at: row.try_get("created_at")?,
        next_attempt_at: row.try_get("next_attempt_at")?,
        published_at: row.try_get("published_at")?,
        last_error: row.try_get("last_error")?,
    })
}
