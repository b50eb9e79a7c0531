//! Every metric family from the first scrape: [`describe_and_zero`] registers them all at start, so that alerts
//! and `rate()` see series before the first event moves.

use std::collections::BTreeSet;

use outbox_core::store::Backlog;

use super::{gauges, health, names};

/// The values of the `kind` label of [`names::PUBLISH_FAILURES_TOTAL`].
const FAILURE_KINDS: [&str; 2] = ["transient", "permanent"];

/// Describes every metric of [`names::ALL`] to the installed recorder ([`describe_metrics`](super::describe_metrics))
/// and registers every family, so that an exporter shows each one from its first scrape:
///
/// - the gauges set from `backlog` (pending, oldest pending age and failed per event type, the pause flag), the
///   listener gauge from [`listeners_connected`](super::listeners_connected) and the WAL source's gauges (0 until a
///   WAL relay sets them);
/// - the counters at zero and the histograms empty for every known label value: the event types of `backlog`
///   (pending or failed) and of the events derived in this binary ([`outbox_core::registry::events`]), and both
///   failure kinds.
///
/// A family labelled by event type has no series while no event type is known (an empty outbox in a binary that
/// derives no event). The relay calls this with its first backlog read; call it yourself after installing a
/// recorder to have the families before the relay starts (the `outbox` binary does, before serving `/metrics`).
/// Harmless without a recorder, and when called again.
///
/// # Example
///
/// ```
/// outbox_relay::telemetry::describe_and_zero(&outbox_core::store::Backlog::default());
/// ```
pub fn describe_and_zero(backlog: &Backlog) {
    super::describe_metrics();
    gauges::show_backlog(backlog);
    health::publish_listener_gauge();
    // The WAL source's gauges, at 0 until a WAL relay's session sets them (and for the table source).
    for gauge in [names::WAL_LAG_BYTES, names::WAL_CONFIRMED_AGE_SECONDS, names::WAL_HANDED_OVER_AGGREGATES] {
        metrics::gauge!(gauge).increment(0.0);
    }
    let registered = outbox_core::registry::events().into_iter().map(|event| event.event_type().to_owned());
    let backlog_types = backlog.pending.iter().map(|p| p.event_type.clone());
    let failed_types = backlog.failed.iter().map(|f| f.event_type.clone());
    let event_types: BTreeSet<String> = registered.chain(backlog_types).chain(failed_types).collect();
    // The backlog gauges of a known type without pending or failed events are 0, as they become when it drains.
    for event_type in &event_types {
        let labels = [(names::LABEL_EVENT_TYPE, event_type.clone())];
        if !backlog.pending.iter().any(|p| &p.event_type == event_type) {
            metrics::gauge!(names::EVENTS_PENDING, &labels).set(0.0);
            metrics::gauge!(names::OLDEST_PENDING_AGE_SECONDS, &labels).set(0.0);
        }
        if !backlog.failed.iter().any(|f| &f.event_type == event_type) {
            metrics::gauge!(names::EVENTS_FAILED, &labels).set(0.0);
        }
    }
    for metric in names::ALL {
        match (metric.kind, metric.labels) {
            // Set above from the backlog and the listeners.
            (names::Kind::Gauge, _) => {}
            (names::Kind::Counter | names::Kind::Histogram, []) => register(metric.kind, metric.name, Vec::new()),
            (kind, [names::LABEL_EVENT_TYPE]) => {
                for event_type in &event_types {
                    register(kind, metric.name, vec![(names::LABEL_EVENT_TYPE, event_type.clone())]);
                }
            }
            (kind, [names::LABEL_EVENT_TYPE, names::LABEL_KIND]) => {
                for event_type in &event_types {
                    for failure_kind in FAILURE_KINDS {
                        let labels = vec![
                            (names::LABEL_EVENT_TYPE, event_type.clone()),
                            (names::LABEL_KIND, failure_kind.to_owned()),
                        ];
                        register(kind, metric.name, labels);
                    }
                }
            }
            (_, labels) => {
                debug_assert!(false, "{}: labels {labels:?} have no known values to register", metric.name);
            }
        }
    }
}

/// Registers one series with the installed recorder without moving it: a counter at 0, an empty histogram.
fn register(kind: names::Kind, name: &'static str, labels: Vec<(&'static str, String)>) {
    let labels: Vec<metrics::Label> = labels.into_iter().map(|(key, value)| metrics::Label::new(key, value)).collect();
    match kind {
        names::Kind::Counter => drop(metrics::counter!(name, labels)),
        names::Kind::Histogram => drop(metrics::histogram!(name, labels)),
        names::Kind::Gauge => drop(metrics::gauge!(name, labels)),
    }
}
