//! Poison event: the webhook consumer rejects one event for good (HTTP 422). It goes to `failed` at once, after
//! one attempt, with the reason stored; the later events of its aggregate wait behind it while every other
//! aggregate flows. Once the consumer is fixed, `outbox events retry ID` makes it pending again and it is
//! delivered, followed by the events that waited.

use std::time::Duration;

use outbox_core::Outbox;
use tokio::time::Instant;
use uuid::Uuid;

use crate::audit::run_cli;
use crate::events;
use crate::producers::{self, Plan, Producers, TxOutcome};
use crate::relays::BATCH_SIZE;
use crate::scene::Scene;
use crate::webhook_receiver::{self, SECRET};

const POISONED: &str = "poisoned-order";

async fn status(scene: &Scene, id: Uuid) -> (String, i32, Option<String>) {
    sqlx::query_as("SELECT status, attempts, last_error FROM outbox_events WHERE id = $1")
        .bind(id)
        .fetch_one(scene.pool())
        .await
        .expect("an event's status")
}

pub(crate) async fn poison_event_fails_at_once_and_is_delivered_after_retry() {
    let scene = Scene::new("poison_event", 100).await;
    let (receiver, url) = webhook_receiver::start().await;
    events::add_orders(scene.pool(), &[POISONED.to_owned()]).await;
    let outbox = Outbox::new();
    let poison = producers::transaction(scene.pool(), &outbox, POISONED, 1, false).await;
    let behind = producers::transaction(scene.pool(), &outbox, POISONED, 2, false).await;
    let (TxOutcome::Committed(poison), TxOutcome::Committed(behind)) = (poison, behind) else {
        panic!("the poisoned aggregate's events did not commit");
    };
    let poison_id = poison[0].id;
    receiver.poison(poison_id);

    let spec = scene.relay_spec(&url).option("--lease", "5s").env("OUTBOX_WEBHOOK_SECRET", SECRET);
    let started = Instant::now();
    let (first, _) = scene.start_relay("first", &spec).await;
    let (second, _) = scene.start_relay("second", &spec).await;
    let producers = Producers::start(scene.pool(), Plan::new(2000, 500.0, 100));

    let deadline = started + Duration::from_secs(60);
    let failed_after = loop {
        let (state, attempts, error) = status(&scene, poison_id).await;
        if state == "failed" {
            assert_eq!(attempts, 1, "a permanent failure is not retried");
            let error = error.unwrap_or_default();
            assert!(error.contains("HTTP 422"), "the stored reason: {error}");
            break started.elapsed();
        }
        assert!(Instant::now() < deadline, "the poison event is still `{state}` after {attempts} attempts");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };

    let mut ledger = producers.finish(Duration::from_secs(60)).await;
    let others = ledger.committed.len() as i64;
    let deadline = Instant::now() + Duration::from_secs(120);
    while scene.count("published").await < others {
        assert!(Instant::now() < deadline, "the other aggregates did not flow past the failed event");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(receiver.rejected(), vec![poison_id], "the consumer saw the poison event once");
    for waiting in &behind {
        assert_eq!(status(&scene, waiting.id).await.0, "pending", "an event behind the failed one went ahead");
    }
    let delivered_ids: Vec<Uuid> = receiver.delivered().iter().map(|d| d.id).collect();
    assert!(!delivered_ids.contains(&poison_id) && !behind.iter().any(|w| delivered_ids.contains(&w.id)));
    let failed_list = run_cli(&scene.db.url, &["events", "list", "--status", "failed", "--json"], true);
    assert!(failed_list.contains(&poison_id.to_string()), "{failed_list}");
    let shown = run_cli(&scene.db.url, &["events", "show", &poison_id.to_string(), "--json"], true);
    assert!(shown.contains("[REDACTED]") && shown.contains("HTTP 422"), "{shown}");
    assert!(!shown.contains(events::SENSITIVE_PREFIX), "`outbox events show` printed a sensitive value: {shown}");

    receiver.fix();
    let retried = run_cli(&scene.db.url, &["events", "retry", &poison_id.to_string()], true);
    assert!(retried.contains("retried 1 event(s)"), "{retried}");
    scene.wait_drained(Duration::from_secs(60)).await;
    assert_eq!(status(&scene, poison_id).await.0, "published");

    ledger.committed.extend(poison);
    ledger.committed.extend(behind);
    ledger.transactions += 2;
    assert_eq!(receiver.bad_signatures(), 0, "a webhook signature did not verify");
    let mut audit = Scene::audit(&[SECRET.trim_start_matches("whsec_")]);
    audit.add("outbox events list --status failed --json", failed_list);
    audit.add("outbox events retry", retried);
    let extra = format!("rejected=1 failed_after_relay_start={:.2}s retried=1", failed_after.as_secs_f64());
    let delivered = receiver.delivered();
    // No relay dies here: a duplicate could only come from a webhook request that timed out.
    scene.finish(vec![first, second], &ledger, &[delivered], BATCH_SIZE, &extra, &mut audit).await;
}
