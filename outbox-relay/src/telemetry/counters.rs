//! Counters and histograms of publish outcomes: a [`Publisher`] wrapper that the relay puts around every
//! publisher, so each broker module records nothing itself.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use tracing::Instrument;

use outbox_core::store::SettleOutcome;

use super::names;
use crate::publish::{ErasedPublisher, Message, Outcome, Publisher};

/// Wraps the relay's publisher: runs each batch in an `outbox.publish` span, then counts every outcome.
pub(crate) struct Instrumented {
    inner: Arc<dyn ErasedPublisher>,
}

impl Instrumented {
    pub(crate) fn new(inner: Arc<dyn ErasedPublisher>) -> Self {
        Self { inner }
    }
}

impl Publisher for Instrumented {
    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        let span = publish_span(batch);
        let outcomes = self.inner.publish_boxed(batch).instrument(span.clone()).await;
        let _in_span = span.enter();
        record(batch, &outcomes, Instant::now());
        outcomes
    }

    fn keeps_order(&self) -> bool {
        self.inner.keeps_order_erased()
    }
}

/// `outbox.publish` with the batch's size and event types (and, with `otel`, links to the producers' spans).
fn publish_span(batch: &[Message]) -> tracing::Span {
    let types = event_types(batch.iter().map(|message| message.event_type.as_str()));
    let span = tracing::info_span!("outbox.publish", events = batch.len(), event_types = %types);
    #[cfg(feature = "otel")]
    super::trace::link_producers(&span, batch);
    span
}

/// Counts the events one publish call published. Failures are counted where the relay decides what they lead to
/// ([`record_failure`]): a publish that panicked or timed out returns no outcome here, and a transient failure on
/// an event's last attempt sends it to `failed`.
fn record(batch: &[Message], outcomes: &[Outcome], now: Instant) {
    for (index, message) in batch.iter().enumerate() {
        let event_type = message.event_type.clone();
        match outcomes.get(index) {
            Some(Outcome::Published) => {
                let attempts = message.attempts.saturating_add(1);
                tracing::debug!(
                    event_id = %message.id, event_type = %message.event_type, aggregate_id = %message.aggregate_id,
                    attempts, "published"
                );
                metrics::counter!(names::EVENTS_PUBLISHED_TOTAL, names::LABEL_EVENT_TYPE => event_type.clone())
                    .increment(1);
                metrics::histogram!(names::PUBLISH_ATTEMPTS, names::LABEL_EVENT_TYPE => event_type.clone())
                    .record(f64::from(attempts));
                // One monotonic clock: `committed_at` is the database's measure of the commit's age at the read.
                let lag = now.saturating_duration_since(message.committed_at).as_secs_f64();
                metrics::histogram!(names::COMMIT_TO_PUBLISH_SECONDS, names::LABEL_EVENT_TYPE => event_type)
                    .record(lag);
            }
            Some(Outcome::Permanent(_) | Outcome::Transient(_)) | None => {}
        }
    }
}

/// Counts a failed attempt of an event of `event_type` by what it leads to: `transient` when it is retried,
/// `permanent` when it goes to `failed` (a permanent rejection, or a failure on its last attempt).
pub(crate) fn record_failure(event_type: &str, outcome: &SettleOutcome) {
    match outcome {
        SettleOutcome::Retry { .. } => failure(event_type.to_owned(), "transient"),
        SettleOutcome::Failed { .. } => failure(event_type.to_owned(), "permanent"),
        SettleOutcome::Published => {}
    }
}

/// Counts a row read that was failed without being published because it was corrupted by hand: a permanent
/// failure, as the relay treats it.
pub(crate) fn record_corrupted(event_type: &str) {
    failure(event_type.to_owned(), "permanent");
}

fn failure(event_type: String, kind: &'static str) {
    metrics::counter!(names::PUBLISH_FAILURES_TOTAL, names::LABEL_EVENT_TYPE => event_type, names::LABEL_KIND => kind)
        .increment(1);
}

/// The span of one read statement. Debug level: an idle relay reads (and finds nothing) every poll interval.
pub(crate) fn read_span(ranges: usize) -> tracing::Span {
    tracing::debug_span!("outbox.read", ranges, events = tracing::field::Empty, event_types = tracing::field::Empty)
}

/// Records a (non-empty) batch: its size in [`names::BATCH_SIZE`] and on the read span; returns the
/// `outbox.batch` span (events, event types) that its publish and mark spans run in.
pub(crate) fn record_batch<'a>(
    read_span: &tracing::Span,
    types: impl Iterator<Item = &'a str>,
    len: usize,
) -> tracing::Span {
    #[allow(clippy::cast_precision_loss)] // batches hold at most a few thousand events
    metrics::histogram!(names::BATCH_SIZE).record(len as f64);
    let types = event_types(types);
    read_span.record("events", len);
    read_span.record("event_types", types.as_str());
    tracing::info_span!(parent: None, "outbox.batch", events = len, event_types = %types)
}

/// The distinct event types, sorted, comma-separated.
fn event_types<'a>(types: impl Iterator<Item = &'a str>) -> String {
    types.collect::<BTreeSet<&str>>().into_iter().collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use outbox_core::store::SettleOutcome;

    use super::{names, record, record_failure};
    use crate::publish::{Message, Outcome};

    #[test]
    fn published_events_and_decided_failures_are_counted_by_event_type_and_kind() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let first = Message::new(uuid::Uuid::now_v7(), "a.done", "a", "1", "{}");
        let mut retried = Message::new(uuid::Uuid::now_v7(), "a.done", "a", "2", "{}");
        retried.attempts = 2;
        retried.committed_at = first.committed_at;
        let now = first.committed_at + std::time::Duration::from_secs(3);
        let rejected = Message::new(uuid::Uuid::now_v7(), "b.done", "b", "1", "{}");
        let unanswered = Message::new(uuid::Uuid::now_v7(), "b.done", "b", "2", "{}");
        let batch = [first, retried, rejected, unanswered];
        let outcomes = [Outcome::Published, Outcome::Published, Outcome::permanent("no")];
        metrics::with_local_recorder(&recorder, || {
            record(&batch, &outcomes, now);
            // Failures count where the relay decides what they lead to, not here.
            record_failure("b.done", &SettleOutcome::Failed { error: "no".into() });
            record_failure(
                "b.done",
                &SettleOutcome::Retry { error: "timed out".into(), delay: Default::default(), counted: true },
            );
            record_failure("b.done", &SettleOutcome::Published);
        });
        let mut seen = std::collections::BTreeMap::new();
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let labels: Vec<String> = key.key().labels().map(|l| format!("{}={}", l.key(), l.value())).collect();
            let value = match value {
                DebugValue::Counter(n) => format!("{n}"),
                DebugValue::Histogram(values) => {
                    format!("{:?}", values.iter().map(|v| v.into_inner()).collect::<Vec<_>>())
                }
                DebugValue::Gauge(g) => format!("{}", g.into_inner()),
            };
            seen.insert(format!("{}{{{}}}", key.key().name(), labels.join(",")), value);
        }
        assert_eq!(seen[&format!("{}{{event_type=a.done}}", names::EVENTS_PUBLISHED_TOTAL)], "2");
        assert_eq!(seen[&format!("{}{{event_type=a.done}}", names::PUBLISH_ATTEMPTS)], "[1.0, 3.0]");
        assert_eq!(seen[&format!("{}{{event_type=a.done}}", names::COMMIT_TO_PUBLISH_SECONDS)], "[3.0, 3.0]");
        assert_eq!(seen[&format!("{}{{event_type=b.done,kind=permanent}}", names::PUBLISH_FAILURES_TOTAL)], "1");
        assert_eq!(seen[&format!("{}{{event_type=b.done,kind=transient}}", names::PUBLISH_FAILURES_TOTAL)], "1");
        assert!(!seen.keys().any(|key| key.contains("b.done") && !key.contains("kind")), "{seen:?}");
    }
}
