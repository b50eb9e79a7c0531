//! Reading the outbox for operators: status counts, event lists, one event in full.

use std::time::Duration;

use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};
use uuid::Uuid;

use super::jit::without_jit;
use super::pending::pending_rows_now;
use crate::error::Result;
use crate::store::{
    Checked, EventDetail, EventFilter, EventStatus, EventSummary, PendingByType, RelayStatus, StatusReport,
};

/// The backlog by event type, after `pending` ([`pending_rows_now`]).
const PENDING_BY_TYPE: &str = "
SELECT event_type, count(*) AS n, EXTRACT(EPOCH FROM now() - min(created_at))::float8 AS oldest_secs
  FROM pending
 GROUP BY event_type ORDER BY n DESC, event_type";

/// Events published recently are found among those created in the last day (`outbox_events_created_at_idx`, a
/// range index): an event published more than a day after it was written is not counted.
const COUNTS: &str = "\
WITH recent AS (
SELECT published_at FROM outbox_events
 WHERE created_at >= now() - interval '1 day' AND status = 'published' AND published_at >= now() - interval '1 hour'
)
SELECT (SELECT COALESCE(sum(cardinality(events)), 0) FROM outbox_batches)::int8 AS in_flight,
       (SELECT count(*) FROM outbox_events WHERE attempts > 0 AND status = 'failed') AS failed,
       (SELECT count(*) FROM recent WHERE published_at >= now() - interval '1 minute') AS last_minute,
       (SELECT count(*) FROM recent WHERE published_at >= now() - interval '1 hour') AS last_hour,
       COALESCE((SELECT paused FROM outbox_control WHERE id), false) AS paused,
       (SELECT count(*) FROM outbox_partitions) AS partitions,
       (SELECT COALESCE(array_agg(partition ORDER BY partition), '{}') FROM outbox_partitions p
         WHERE p.owner IS NULL
            OR NOT EXISTS (SELECT 1 FROM outbox_relays r WHERE r.relay_id = p.owner AND r.expires_at >= now()))
         AS unowned";

/// Live relays with their partitions, batches in flight, and the backlog of their partitions (from each partition's
/// start, like the backlog gauges), after `pending` ([`pending_rows_now`]).
const RELAYS: &str = "
SELECT r.relay_id, r.host, r.started_at, EXTRACT(EPOCH FROM now() - r.heartbeat_at)::float8 AS heartbeat_secs,
       COALESCE((SELECT array_agg(p.partition ORDER BY p.partition) FROM outbox_partitions p
                  WHERE p.owner = r.relay_id), '{}') AS partitions,
       (SELECT COALESCE(sum(cardinality(b.events)), 0) FROM outbox_batches b WHERE b.relay_id = r.relay_id)::int8
           AS in_flight,
       COALESCE(q.pending, 0) AS pending, COALESCE(q.oldest_secs, 0) AS oldest_secs
  FROM outbox_relays r
  LEFT JOIN (SELECT p.owner, count(*) AS pending,
                    EXTRACT(EPOCH FROM now() - min(e.created_at))::float8 AS oldest_secs
               FROM pending e JOIN outbox_partitions p ON p.partition = e.partition
              GROUP BY p.owner) q ON q.owner = r.relay_id
 WHERE r.expires_at >= now()
 ORDER BY r.relay_id";

pub(super) async fn status(pool: &PgPool) -> Result<StatusReport> {
    let mut report = StatusReport::default();
    let mut tx = without_jit(pool).await?;
    let pending_rows = pending_rows_now(&mut tx).await?;
    let by_type = format!("WITH {pending_rows}{PENDING_BY_TYPE}");
    let pending = sqlx::query(&by_type).persistent(false).fetch_all(&mut *tx).await?;
    let relays = format!("WITH {pending_rows}{RELAYS}");
    let relays = sqlx::query(&relays).persistent(false).fetch_all(&mut *tx).await?;
    tx.commit().await?;
    for row in pending {
        report.pending.push(PendingByType {
            event_type: row.try_get("event_type")?,
            pending: row.try_get::<i64, _>("n")?.unsigned_abs(),
            oldest_age: seconds(row.try_get("oldest_secs")?),
        });
    }
    let row = sqlx::query(COUNTS).fetch_one(pool).await?;
    report.in_flight = row.try_get::<i64, _>("in_flight")?.unsigned_abs();
    report.failed = row.try_get::<i64, _>("failed")?.unsigned_abs();
    report.published_last_minute = row.try_get::<i64, _>("last_minute")?.unsigned_abs();
    report.published_last_hour = row.try_get::<i64, _>("last_hour")?.unsigned_abs();
    report.paused = row.try_get("paused")?;
    report.partitions = u16::try_from(row.try_get::<i64, _>("partitions")?).unwrap_or(u16::MAX);
    report.unowned_partitions = row.try_get::<Vec<i16>, _>("unowned")?.into_iter().map(i16::unsigned_abs).collect();
    for row in relays {
        report.relays.push(RelayStatus {
            relay_id: row.try_get("relay_id")?,
            host: row.try_get("host")?,
            started_at: row.try_get("started_at")?,
            heartbeat_age: seconds(row.try_get("heartbeat_secs")?),
            partitions: row.try_get::<Vec<i16>, _>("partitions")?.into_iter().map(i16::unsigned_abs).collect(),
            in_flight: row.try_get::<i64, _>("in_flight")?.unsigned_abs(),
            pending: row.try_get::<i64, _>("pending")?.unsigned_abs(),
            oldest_pending_age: seconds(row.try_get("oldest_secs")?),
        });
    }
    Ok(report)
}

fn seconds(secs: f64) -> Duration {
    Duration::try_from_secs_f64(secs.max(0.0)).unwrap_or_default()
}

/// `in_flight` is no status of the table: it is a pending row in a batch that a relay is publishing now.
const IN_FLIGHT_STATUS: &str = "(CASE WHEN status = 'pending' AND EXISTS (SELECT 1 FROM outbox_batches b
     WHERE outbox_events.id = ANY(b.events)) THEN 'in_flight' ELSE status END) AS status";

/// The conditions of an [`EventFilter`], on parameters `$1`..`$5` bound by [`bind_filter`] (`$6` is the limit).
/// `in_flight` matches the pending rows of the batches relays are publishing now, and `pending` the others, as
/// [`list`] shows them.
pub(super) const FILTER: &str = "($1::text IS NULL OR (status = $1 AND $1 <> 'pending')
        OR ($1 IN ('pending', 'in_flight') AND status = 'pending'
            AND (id IN (SELECT unnest(events) FROM outbox_batches)) = ($1 = 'in_flight')))
   AND ($2::text IS NULL OR event_type = $2)
   AND ($3::text IS NULL OR aggregate_id = $3)
   AND ($4::float8 IS NULL OR created_at < now() - make_interval(secs => $4))
   AND ($5::uuid IS NULL OR seq > (SELECT after.seq FROM outbox_events after WHERE after.id = $5))";

/// Binds the filter's `$1`..`$5` of [`FILTER`] and the limit (`$6`).
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
    let sql =
        format!("SELECT {SHOW_COLUMNS}, {IN_FLIGHT_STATUS} FROM outbox_events WHERE {FILTER} ORDER BY seq LIMIT $6");
    let rows = bind_filter(sqlx::query(&sql), filter).fetch_all(pool).await?;
    rows.iter().map(summary).collect()
}

pub(super) async fn show(pool: &PgPool, id: Uuid) -> Result<Option<EventDetail>> {
    let sql = format!(
        "SELECT {SHOW_COLUMNS}, {IN_FLIGHT_STATUS}, payload::text AS payload, headers::text AS headers,
                sensitive_paths::text AS sensitive_paths, partition,
                (SELECT b.relay_id FROM outbox_batches b WHERE outbox_events.id = ANY(b.events) LIMIT 1)
                    AS publishing_relay
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
        partition: row.try_get::<i16, _>("partition")?.unsigned_abs(),
        publishing_relay: row.try_get("publishing_relay")?,
    }))
}

/// The summary columns but `status`, which `show` derives.
const SHOW_COLUMNS: &str = "id, seq, event_type, aggregate_type, aggregate_id, schema_version, attempts, \
created_at, next_attempt_at, published_at, last_error";

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
