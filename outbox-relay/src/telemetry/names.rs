//! The name, kind, labels and meaning of every metric the relay exports. The Grafana dashboard and the alert
//! rules under `deploy/` use these names only (a test checks it).

/// What kind of metric a name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (Prometheus `counter`).
    Counter,
    /// Set to the current value (Prometheus `gauge`).
    Gauge,
    /// A distribution (Prometheus `histogram`: `_bucket`, `_sum`, `_count`).
    Histogram,
}

/// One exported metric.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Metric {
    /// The name, e.g. `outbox_events_pending`.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: Kind,
    /// Its label names (bounded: event types and the failure kind only).
    pub labels: &'static [&'static str],
    /// The unit.
    pub unit: metrics::Unit,
    /// What it measures.
    pub help: &'static str,
    /// Suggested histogram buckets.
    pub buckets: Option<&'static [f64]>,
}

/// Pending events by event type (gauge, from the partial pending index).
pub const EVENTS_PENDING: &str = "outbox_events_pending";
/// Age in seconds of the oldest pending event by event type (gauge; 0 once the type's backlog is empty).
pub const OLDEST_PENDING_AGE_SECONDS: &str = "outbox_oldest_pending_age_seconds";
/// Dead-lettered (`failed`) events by event type (gauge).
pub const EVENTS_FAILED: &str = "outbox_events_failed";
/// 1 while publishing is paused (`outbox pause`), 0 otherwise (gauge).
pub const RELAY_PAUSED: &str = "outbox_relay_paused";
/// 1 while every `LISTEN` connection of the relays in this process is up (gauge; only with `--notify`).
pub const LISTENER_CONNECTED: &str = "outbox_listener_connected";
/// Events the broker accepted, by event type (counter).
pub const EVENTS_PUBLISHED_TOTAL: &str = "outbox_events_published_total";
/// Failed publish attempts by event type and `kind` (`transient`: retried; `permanent`: dead-lettered) (counter).
pub const PUBLISH_FAILURES_TOTAL: &str = "outbox_publish_failures_total";
/// Attempts an event needed, counted when it is published (histogram by event type; 1 = first try).
pub const PUBLISH_ATTEMPTS: &str = "outbox_publish_attempts";
/// Seconds from the enqueueing commit to the broker's acceptance, by event type (histogram): see
/// [`Message::committed_at`](crate::Message::committed_at).
pub const COMMIT_TO_PUBLISH_SECONDS: &str = "outbox_commit_to_publish_seconds";
/// Events per batch (histogram).
pub const BATCH_SIZE: &str = "outbox_batch_size";
/// WAL source: bytes of write-ahead log between the slot's confirmed position and the server's end of WAL (gauge;
/// the WAL the slot holds on the server's disk): read from the server when a session starts, then following the
/// end of WAL the stream reports and the positions the relay confirms, so it grows while events wait.
pub const WAL_LAG_BYTES: &str = "outbox_wal_lag_bytes";
/// WAL source: how long ago the oldest transaction the slot has not confirmed yet committed (gauge; 0 while the
/// slot is confirmed up to the end of the stream).
pub const WAL_CONFIRMED_AGE_SECONDS: &str = "outbox_wal_confirmed_age_seconds";
/// WAL source: aggregates whose events are published from the table's retry path, not from the stream (gauge).
pub const WAL_HANDED_OVER_AGGREGATES: &str = "outbox_wal_handed_over_aggregates";

/// The `event_type` label.
pub const LABEL_EVENT_TYPE: &str = "event_type";
/// The `kind` label of [`PUBLISH_FAILURES_TOTAL`]: `transient` or `permanent`.
pub const LABEL_KIND: &str = "kind";

const ATTEMPT_BUCKETS: &[f64] = &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 15.0, 20.0, 30.0, 50.0];
const LAG_BUCKETS: &[f64] =
    &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0];
const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0];

const BY_TYPE: &[&str] = &[LABEL_EVENT_TYPE];

/// Every metric the relay exports.
pub const ALL: &[Metric] = &[
    Metric {
        name: EVENTS_PENDING,
        kind: Kind::Gauge,
        labels: BY_TYPE,
        unit: metrics::Unit::Count,
        help: "Pending outbox events by event type.",
        buckets: None,
    },
    Metric {
        name: OLDEST_PENDING_AGE_SECONDS,
        kind: Kind::Gauge,
        labels: BY_TYPE,
        unit: metrics::Unit::Seconds,
        help: "Age of the oldest pending outbox event by event type.",
        buckets: None,
    },
    Metric {
        name: EVENTS_FAILED,
        kind: Kind::Gauge,
        labels: BY_TYPE,
        unit: metrics::Unit::Count,
        help: "Dead-lettered (failed) outbox events by event type.",
        buckets: None,
    },
    Metric {
        name: RELAY_PAUSED,
        kind: Kind::Gauge,
        labels: &[],
        unit: metrics::Unit::Count,
        help: "1 while publishing is paused (outbox pause), 0 otherwise.",
        buckets: None,
    },
    Metric {
        name: LISTENER_CONNECTED,
        kind: Kind::Gauge,
        labels: &[],
        unit: metrics::Unit::Count,
        help: "1 while the relay's LISTEN connection is up (with --notify only).",
        buckets: None,
    },
    Metric {
        name: EVENTS_PUBLISHED_TOTAL,
        kind: Kind::Counter,
        labels: BY_TYPE,
        unit: metrics::Unit::Count,
        help: "Outbox events accepted by the broker, by event type.",
        buckets: None,
    },
    Metric {
        name: PUBLISH_FAILURES_TOTAL,
        kind: Kind::Counter,
        labels: &[LABEL_EVENT_TYPE, LABEL_KIND],
        unit: metrics::Unit::Count,
        help: "Failed publish attempts by event type and kind (transient: retried, permanent: dead-lettered).",
        buckets: None,
    },
    Metric {
        name: PUBLISH_ATTEMPTS,
        kind: Kind::Histogram,
        labels: BY_TYPE,
        unit: metrics::Unit::Count,
        help: "Attempts an outbox event needed until it was published, by event type.",
        buckets: Some(ATTEMPT_BUCKETS),
    },
    Metric {
        name: COMMIT_TO_PUBLISH_SECONDS,
        kind: Kind::Histogram,
        labels: BY_TYPE,
        unit: metrics::Unit::Seconds,
        help: "Seconds from the enqueueing commit to publication, by event type.",
        buckets: Some(LAG_BUCKETS),
    },
    Metric {
        name: BATCH_SIZE,
        kind: Kind::Histogram,
        labels: &[],
        unit: metrics::Unit::Count,
        help: "Events per batch.",
        buckets: Some(BATCH_BUCKETS),
    },
    Metric {
        name: WAL_LAG_BYTES,
        kind: Kind::Gauge,
        labels: &[],
        unit: metrics::Unit::Bytes,
        help: "WAL source: write-ahead log between the slot's confirmed position and the end of WAL.",
        buckets: None,
    },
    Metric {
        name: WAL_CONFIRMED_AGE_SECONDS,
        kind: Kind::Gauge,
        labels: &[],
        unit: metrics::Unit::Seconds,
        help: "WAL source: age of the oldest committed transaction the slot has not confirmed (0: caught up).",
        buckets: None,
    },
    Metric {
        name: WAL_HANDED_OVER_AGGREGATES,
        kind: Kind::Gauge,
        labels: &[],
        unit: metrics::Unit::Count,
        help: "WAL source: aggregates published from the table's retry path instead of the stream.",
        buckets: None,
    },
];
