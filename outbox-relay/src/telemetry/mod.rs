//! Telemetry: the relay's metrics (through the [`metrics`] facade: install any exporter, the `outbox` binary
//! installs a Prometheus one), its `tracing` spans, and readiness.
//!
//! A [`Relay`](crate::Relay) records everything itself: counters and histograms of every publish outcome, the
//! batch sizes, and backlog gauges refreshed every [`BACKLOG_REFRESH`] from
//! [`Store::backlog`](outbox_core::store::Store::backlog), one cheap statement on the partial indexes. Without an
//! installed recorder the metrics cost nothing. [`names`] lists every metric; labels are event types (and the
//! failure kind) only, never ids or payload values, so the number of series stays bounded.
//!
//! Spans: `outbox.read` (`ranges`, `events`, `event_types`; debug level), `outbox.batch` (`events`,
//! `event_types`), `outbox.publish` (`events`, `event_types`; with the `otel` feature
//! linked to the producer span of every event that carries a `traceparent`) and `outbox.mark` (`events`). Per-event
//! lines carry `event_id`, `event_type`, `aggregate_id`, `attempts` and, for failures, a short `error`: never the
//! payload.
//!
//! # Example
//!
//! ```
//! // An exporter can give histograms the relay's suggested buckets:
//! for (name, buckets) in outbox_relay::telemetry::histogram_buckets() {
//!     assert!(name.starts_with("outbox_") && !buckets.is_empty());
//! }
//! outbox_relay::telemetry::describe_metrics(); // HELP texts, for exporters that show them
//! ```
//!
//! Every family is there from the first scrape: [`describe_and_zero`] sets the gauges and registers the counters
//! at zero and the histograms empty for the known event types; the relay calls it with its first backlog read.

mod counters;
mod families;
mod gauges;
mod health;
mod memberships;
pub mod names;
#[cfg(feature = "otel")]
mod trace;

use std::time::Duration;

pub(crate) use counters::{read_span, record_batch, record_corrupted, record_failure, Instrumented};
pub use families::describe_and_zero;
pub(crate) use gauges::{refresh_backlog, set_paused};
pub use health::listeners_connected;
pub(crate) use health::WatchedListener;
pub use memberships::memberships_current;
pub(crate) use memberships::MembershipWatch;

/// How often a running relay refreshes its backlog gauges.
pub const BACKLOG_REFRESH: Duration = Duration::from_secs(5);

/// Registers a description (Prometheus `HELP`) and unit for every metric of [`names`] with the installed
/// recorder. Call it once after installing one; harmless without.
pub fn describe_metrics() {
    for metric in names::ALL {
        match metric.kind {
            names::Kind::Counter => metrics::describe_counter!(metric.name, metric.unit, metric.help),
            names::Kind::Gauge => metrics::describe_gauge!(metric.name, metric.unit, metric.help),
            names::Kind::Histogram => metrics::describe_histogram!(metric.name, metric.unit, metric.help),
        }
    }
}

/// Bucket bounds for the relay's histograms, by metric name (an exporter renders them as true histograms, which
/// aggregate across relays, rather than per-process summaries).
pub fn histogram_buckets() -> impl Iterator<Item = (&'static str, &'static [f64])> {
    names::ALL.iter().filter_map(|metric| metric.buckets.map(|buckets| (metric.name, buckets)))
}
