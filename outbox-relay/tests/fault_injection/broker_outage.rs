//! Broker outage: NATS is SIGKILLed for 30 s while producers keep committing, then restarted, the relays running
//! with the CLI's default `--max-attempts` (10). Meanwhile the events' `attempts` do not grow (the broker cannot be
//! reached, which uses up no attempt: only the batches in flight when it died count one), their `next_attempt_at`
//! moves out with the outage's backoff, and the relay's `outbox_oldest_pending_age_seconds` rises; after the restart
//! the backlog drains with nothing lost (no event `failed`) and the gauge falls back to 0.

use std::time::Duration;

use outbox_relay::telemetry::names;
use outbox_tests::brokers::{Broker, Kind};
use tokio::time::Instant;

use crate::events::OrderPlaced;
use crate::nats_stream;
use crate::producers::{Plan, Producers};
use crate::relays::{metric, RelayProcess, BATCH_SIZE};
use crate::scene::Scene;
use outbox_core::OutboxEvent;

const OUTAGE: Duration = Duration::from_secs(30);
const BACKOFF_BASE: Duration = Duration::from_millis(200);

/// The oldest-pending-age gauge of the test events, as `relay` shows it now.
async fn oldest_age(relay: &RelayProcess) -> Option<f64> {
    let text = relay.scrape().await?;
    metric(&text, names::OLDEST_PENDING_AGE_SECONDS, &[("event_type", OrderPlaced::EVENT_TYPE)])
}

/// The most attempts of a pending event, and the furthest retry still scheduled, in seconds from now.
async fn retries(scene: &Scene) -> (i32, f64) {
    sqlx::query_as(
        "SELECT COALESCE(max(attempts), 0),
                COALESCE(max(EXTRACT(EPOCH FROM next_attempt_at - now())), 0)::float8
           FROM outbox_events WHERE status = 'pending'",
    )
    .fetch_one(scene.pool())
    .await
    .expect("read the retries")
}

pub(crate) async fn broker_outage_backs_off_then_drains_the_backlog_with_no_loss() {
    let scene = Scene::new("broker_outage", 100).await;
    let broker = Broker::start(Kind::Nats);
    nats_stream::create(&broker).await;
    let spec = scene
        .relay_spec(&nats_stream::sink(&broker))
        .option("--backoff-base", "200ms")
        .option("--backoff-max", "4s")
        .option("--max-attempts", "10");
    let (watched, _) = scene.start_relay("watched", &spec).await;
    let (other, _) = scene.start_relay("other", &spec).await;
    // About 5 s before the outage, 30 s during it and 5 s after.
    let producers = Producers::start(scene.pool(), Plan::new(6000, 150.0, 100));
    let deadline = Instant::now() + Duration::from_secs(60);
    while scene.count("published").await < 300 {
        assert!(Instant::now() < deadline, "nothing published before the outage");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    broker.kill();
    let outage = Instant::now();
    let mut ages = Vec::new();
    let mut samples = Vec::new();
    while outage.elapsed() < OUTAGE {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let at = outage.elapsed().as_secs_f64();
        if let Some(age) = oldest_age(&watched).await {
            ages.push((at, age));
        }
        samples.push((at, retries(&scene).await));
    }
    broker.restart();
    let restarted = Instant::now();

    let ledger = producers.finish(Duration::from_secs(120)).await;
    scene.wait_drained(Duration::from_secs(120)).await;
    let drained = restarted.elapsed();
    let deadline = Instant::now() + Duration::from_secs(30);
    let after = loop {
        let age = oldest_age(&watched).await;
        if age == Some(0.0) {
            break 0.0;
        }
        assert!(Instant::now() < deadline, "the oldest pending age stays at {age:?} after the drain");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    // The gauge rose during the outage (refreshed every 5 s) and fell after it.
    let peak = ages.iter().map(|(_, age)| *age).fold(0.0, f64::max);
    let early = ages.iter().find(|(at, _)| *at >= 3.0).map(|(_, age)| *age).expect("an early sample");
    assert!(peak >= 20.0, "the oldest pending age peaked at {peak} s during a 30 s outage: {ages:?}");
    assert!(early + 10.0 < peak, "the oldest pending age did not rise: {ages:?}");
    assert!(after < peak);
    // Attempts did not grow with the outage (counted, they would have sent events to `failed` after 10 tries):
    // at most the batches in flight when the broker died count one or two. The retries still back off.
    let (_, (attempts_early, _)) = samples.iter().find(|(at, _)| *at >= 8.0).expect("a sample at 8 s");
    let (_, (attempts_late, _)) = samples.last().expect("a last sample");
    let furthest = samples.iter().map(|(_, (_, delay))| *delay).fold(0.0, f64::max);
    assert!(*attempts_late <= 2, "{attempts_late} attempts counted in a 30 s outage: {samples:?}");
    assert!(attempts_late <= attempts_early, "attempts grew during the outage: {samples:?}");
    assert_eq!(scene.count("failed").await, 0, "an event went to `failed` during the outage");
    assert!(
        furthest > 5.0 * BACKOFF_BASE.as_secs_f64(),
        "no retry was scheduled further than {furthest} s ahead: {samples:?}"
    );
    let failures = watched.scrape().await.expect("a scrape");
    let transient = metric(
        &failures,
        names::PUBLISH_FAILURES_TOTAL,
        &[("event_type", OrderPlaced::EVENT_TYPE), ("kind", "transient")],
    );
    assert!(transient.is_some_and(|n| n > 0.0), "no transient failure counted: {transient:?}");

    let delivered = nats_stream::read_all(&broker).await;
    let mut audit = Scene::audit(&[]);
    let extra = format!(
        "outage={}s peak_age={peak:.0}s max_attempts={attempts_late} furthest_retry={furthest:.1}s drained_in={:.1}s",
        OUTAGE.as_secs(),
        drained.as_secs_f64()
    );
    // Duplicates come only from the batches in flight when the broker died: acknowledged or buffered by the
    // client, then retried. One batch per relay, and its retry.
    scene.finish(vec![watched, other], &ledger, &[delivered], 2 * 2 * BATCH_SIZE, &extra, &mut audit).await;
}
