//! Reading the outbox for operators on SQLite: status counts, event lists, one event in full.

use std::time::Duration;

use sqlx::sqlite::SqliteRow;
use sqlx::{Row, SqlitePool};
use uuid::Uuid;

use super::clock::{self, now};
use super::control;
use crate::error::Result;
use crate::store::{
    Checked, EventDetail, EventFilter, EventStatus, EventSummary, PendingByType, RelayStatus, StatusReport,
};

const PENDING_BY_TYPE: &str = concat!(
    "SELECT event_type, count(*) AS n,
            (julianday(",
    now!(),
    ") - julianday(min(created_at))) * 86400.0 AS oldest_secs
       FROM outbox_events WHERE status = 'pending'
      GROUP BY event_type ORDER BY n DESC, event_type"
);

const COUNTS: &str = concat!(
    "SELECT (SELECT COALESCE(sum(json_array_length(events)), 0) FROM outbox_batches) AS in_flight,
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

const RELAYS: &str = concat!(
    "SELECT r.relay_id, r.host, r.started_at,
            (julianday(",
    now!(),
    ") - julianday(r.heartbeat_at)) * 86400.0 AS heartbeat_secs,
            EXISTS (SELECT 1 FROM outbox_partitions p WHERE p.owner = r.relay_id) AS owns,
            (SELECT COALESCE(sum(json_array_length(b.events)), 0) FROM outbox_batches b WHERE b.relay_id = r.relay_id)
                AS in_flight
       FROM outbox_relays r WHERE r.expires_at >= ",
    now!(),
    " ORDER BY r.relay_id"
);

/// A pending row in a batch that a relay is publishing now is `in_flight`. Times come in the tables' one format
/// whatever format a row was set in by hand (`datetime('now')`); one SQLite cannot read at all shows as the Unix
/// epoch, rather than failing the whole list.
const SUMMARY_COLUMNS: &str = "id, seq, event_type, aggregate_type, aggregate_id, schema_version, \
CASE WHEN status = 'pending' AND id IN (SELECT j.value FROM outbox_batches b, json_each(b.events) j) \
THEN 'in_flight' ELSE status END AS status, attempts, \
COALESCE(strftime('%Y-%m-%dT%H:%M:%fZ', created_at), '1970-01-01T00:00:00.000Z') AS created_at, \
COALESCE(strftime('%Y-%m-%dT%H:%M:%fZ', next_attempt_at), '1970-01-01T00:00:00.000Z') AS next_attempt_at, \
strftime('%Y-%m-%dT%H:%M:%fZ', published_at) AS published_at, last_error";

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
    report.partitions = 1;
    let relays = sqlx::query(RELAYS).fetch_all(pool).await?;
    for row in &relays {
        let owns: bool = row.try_get("owns")?;
        report.relays.push(RelayStatus {
            relay_id: clock::uuid(row.try_get("relay_id")?)?,
            host: row.try_get("host")?,
            started_at: clock::parse(row.try_get("started_at")?)?,
            heartbeat_age: Duration::try_from_secs_f64(row.try_get::<f64, _>("heartbeat_secs")?.max(0.0))
                .unwrap_or_default(),
            partitions: if owns { vec![0] } else { Vec::new() },
            in_flight: row.try_get::<i64, _>("in_flight")?.unsigned_abs(),
            pending: if owns { report.pending.iter().map(|p| p.pending).sum() } else { 0 },
            oldest_pending_age: if owns {
                report.pending.iter().map(|p| p.oldest_age).max().unwrap_or_default()
            } else {
                Duration::ZERO
            },
        });
    }
    if !report.relays.iter().any(|relay| relay.partitions.contains(&0)) {
        report.unowned_partitions = vec![0];
    }
    Ok(report)
}

/// The conditions of an [`EventFilter`], on parameters `?1`..`?5` bound by [`bind_filter`] (`?6` is the limit).
/// The age compares the stored time with the current time moved back by `?4`, as times (a time set by hand in
/// another format compares as the time it is); `in_flight`
/// matches the pending rows of the batch the relay is publishing now, and `pending` the others, as [`list`] shows
/// them.
pub(super) const FILTER: &str = concat!(
    "(?1 IS NULL OR (status = ?1 AND ?1 <> 'pending')
        OR (?1 IN ('pending', 'in_flight') AND status = 'pending'
            AND (id IN (SELECT j.value FROM outbox_batches b, json_each(b.events) j)) = (?1 = 'in_flight')))
   AND (?2 IS NULL OR event_type = ?2)
   AND (?3 IS NULL OR aggregate_id = ?3)
   AND (?4 IS NULL OR julianday(created_at) < julianday(",
    now!("?4"),
    "))
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
        "SELECT {SUMMARY_COLUMNS}, payload, headers, sensitive_paths,
                (SELECT b.relay_id FROM outbox_batches b, json_each(b.events) j
                  WHERE j.value = outbox_events.id AND outbox_events.status = 'pending' LIMIT 1) AS publishing_relay
           FROM outbox_events WHERE id = ?1"
    );
    let Some(row) = sqlx::query(&sql).bind(id.hyphenated().to_string()).fetch_optional(pool).await? else {
        return Ok(None);
    };
    let payload: String = row.try_get("payload")?;
    let headers: String = row.try_get("headers")?;
    let sensitive: String = row.try_get("sensitive_paths")?;
    let publishing_relay: Option<String> = row.try_get("publishing_relay")?;
    let mut summary = summary(&row)?;
    if publishing_relay.is_some() {
        summary.status = EventStatus::InFlight;
    }
    Ok(Some(EventDetail {
        summary,
        payload: serde_json::from_str(&payload).unwrap_or(serde_json::Value::Null),
        headers: Checked::from_json_text(&headers),
        sensitive_paths: Checked::from_json_text(&sensitive),
        partition: 0,
        publishing_relay: publishing_relay.as_deref().map(clock::uuid).transpose()?,
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
