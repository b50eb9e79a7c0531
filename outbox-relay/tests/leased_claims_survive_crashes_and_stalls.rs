//! Claims are short transactions with leases: nothing stays open while publishing, a dead relay's rows come
//! back, a stalled relay cannot mark rows another relay took over, several relays never share an event.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use common::{count, enqueue, enqueue_interleaved, event, start, wait_until, Recorder};
use outbox_core::store::{ClaimRequest, Ordering, PgStore, Settlement, Store};
use outbox_relay::{Message, Outcome, Publisher};
use outbox_tests::pg::TestDatabase;
use tokio::sync::{Notify, Semaphore};
use uuid::Uuid;

/// A publisher that blocks in `publish` until released, and says when a publish has started.
#[derive(Clone)]
struct Stalling {
    started: Arc<Notify>,
    release: Arc<Semaphore>,
    published: Arc<std::sync::Mutex<Vec<Uuid>>>,
}

impl Default for Stalling {
    fn default() -> Self {
        Self { started: Arc::default(), release: Arc::new(Semaphore::new(0)), published: Arc::default() }
    }
}

impl Publisher for Stalling {
    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        self.started.notify_one();
        let _permit = self.release.acquire().await.expect("semaphore");
        self.published.lock().unwrap().extend(batch.iter().map(|m| m.id));
        vec![Outcome::Published; batch.len()]
    }
}

#[tokio::test]
async fn no_transaction_is_open_while_a_slow_sink_publishes() {
    let db = TestDatabase::migrated().await;
    enqueue(&db.pool, &(0..20).map(|n| event(format!("a{n}"), 0)).collect::<Vec<_>>()).await;
    let sink = Stalling::default();
    let relay = start(&db, sink.clone(), common::config().build().unwrap());

    tokio::time::timeout(Duration::from_secs(10), sink.started.notified()).await.expect("publish started");
    // The publish is in progress now (it waits for the semaphore). The claim must be committed and no session
    // of this database idle in a transaction.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let idle_in_transaction: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
          WHERE datname = current_database() AND pid <> pg_backend_pid()
            AND (state LIKE 'idle in transaction%' OR backend_xid IS NOT NULL)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(idle_in_transaction, 0, "a transaction is open while publishing");
    assert!(count(&db.pool, "in_flight").await > 0, "the claim is not visible: was it committed?");

    sink.release.add_permits(1000);
    wait_until(Duration::from_secs(10), "all 20 are published", || async { count(&db.pool, "published").await == 20 })
        .await;
    relay.stop().await;
}

#[tokio::test]
async fn rows_of_a_dead_relay_are_reclaimed_after_the_lease_expires() {
    let db = TestDatabase::migrated().await;
    let ids = enqueue(&db.pool, &(0..30).map(|n| event("one", n)).collect::<Vec<_>>()).await;
    // A relay claims and then "dies": it never settles.
    let store = PgStore::new(db.pool.clone());
    let dead = Uuid::now_v7();
    let claim = store.claim(&ClaimRequest::new(dead, Duration::from_millis(300), 30, Ordering::None)).await.unwrap();
    assert_eq!(claim.events.len(), 30);

    let recorder = Recorder::new();
    let relay = start(&db, recorder.for_relay(1), common::config().lease(Duration::from_secs(30)).build().unwrap());
    wait_until(Duration::from_secs(20), "the dead relay's rows are published", || async {
        count(&db.pool, "published").await == 30
    })
    .await;
    let summary = relay.stop().await;
    assert_eq!(summary.published, 30);
    let mut seen: Vec<Uuid> = recorder.seen().iter().map(|s| s.id).collect();
    seen.sort();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(seen, expected);
}

#[tokio::test]
async fn fenced_relay_cannot_mark_reclaimed_rows() {
    let db = TestDatabase::migrated().await;
    let store = PgStore::new(db.pool.clone());
    enqueue(&db.pool, &(0..5).map(|n| event("fenced", n)).collect::<Vec<_>>()).await;

    // Relay A claims with a short lease, then stalls past it; relay B reclaims and claims the same rows.
    let a = Uuid::now_v7();
    let b = Uuid::now_v7();
    let stale = store.claim(&ClaimRequest::new(a, Duration::from_millis(200), 5, Ordering::None)).await.unwrap();
    assert_eq!(stale.events.len(), 5);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(store.reclaim_expired().await.unwrap(), 5);
    let fresh = store.claim(&ClaimRequest::new(b, Duration::from_secs(30), 5, Ordering::None)).await.unwrap();
    assert_eq!(fresh.events.len(), 5);
    assert!(fresh.events.iter().zip(&stale.events).all(|(f, s)| f.epoch > s.epoch));

    // A wakes up and tries to mark its (old) claim published: nothing changes.
    let marks: Vec<Settlement> = stale.events.iter().map(Settlement::published).collect();
    let report = store.settle(a, &marks, false).await.unwrap();
    assert_eq!((report.published, report.fenced), (0, 5));
    assert_eq!(count(&db.pool, "in_flight").await, 5, "A's mark changed rows B holds");
    // Even A's own id with B's epoch, or B's id with A's epoch, does not pass.
    let forged: Vec<Settlement> = fresh.events.iter().map(Settlement::published).collect();
    assert_eq!(store.settle(a, &forged, false).await.unwrap().fenced, 5);

    let report = store.settle(b, &forged, false).await.unwrap();
    assert_eq!((report.published, report.fenced), (5, 0));
}

#[tokio::test]
async fn stalled_relay_is_fenced_out_by_the_relay_that_took_over() {
    let db = TestDatabase::migrated().await;
    enqueue(&db.pool, &(0..10).map(|n| event(format!("s{n}"), 0)).collect::<Vec<_>>()).await;

    let stalled = Stalling::default();
    let relay_a = start(&db, stalled.clone(), common::config().lease(Duration::from_millis(300)).build().unwrap());
    tokio::time::timeout(Duration::from_secs(10), stalled.started.notified()).await.expect("A started publishing");
    let held_by_a = count(&db.pool, "in_flight").await;
    assert!(held_by_a > 0);

    // A is stuck in its publish; its lease expires; B takes over and publishes everything.
    let recorder = Recorder::new();
    let relay_b = start(&db, recorder.for_relay(2), common::config().build().unwrap());
    wait_until(Duration::from_secs(20), "B published all 10", || async { count(&db.pool, "published").await == 10 })
        .await;

    // A comes back and finishes its publish: its marks are fenced.
    stalled.release.add_permits(1000);
    let summary_a = relay_a.stop().await;
    let summary_b = relay_b.stop().await;
    assert_eq!(summary_a.published, 0, "the stalled relay marked rows it no longer held");
    assert!(summary_a.fenced >= 1, "{summary_a:?}");
    assert_eq!(summary_b.published, 10);
    assert_eq!(count(&db.pool, "published").await, 10);
}

#[tokio::test]
async fn three_relays_never_publish_an_event_twice() {
    let db = TestDatabase::migrated().await;
    let ids = enqueue_interleaved(&db.pool, 100, 30).await;
    let recorder = Recorder::new();
    let relays: Vec<_> = (0..3)
        .map(|r| {
            let config = common::config().ordering(Ordering::None).batch_size(50).concurrency(2).build().unwrap();
            start(&db, recorder.for_relay(r), config)
        })
        .collect();
    wait_until(Duration::from_secs(60), "all 3000 are published", || async {
        count(&db.pool, "published").await == 3000
    })
    .await;
    let mut total = 0;
    for relay in relays {
        total += relay.stop().await.published;
    }
    assert_eq!(total, 3000);
    let mut times: HashMap<Uuid, usize> = HashMap::new();
    for seen in recorder.seen() {
        *times.entry(seen.id).or_default() += 1;
    }
    assert_eq!(times.len(), ids.len());
    let twice: Vec<_> = times.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "published more than once: {twice:?}");
}

#[tokio::test]
async fn shutdown_releases_batches_that_do_not_finish_in_time() {
    let db = TestDatabase::migrated().await;
    enqueue(&db.pool, &(0..8).map(|n| event(format!("x{n}"), 0)).collect::<Vec<_>>()).await;
    let stalled = Stalling::default();
    let relay =
        start(&db, stalled.clone(), common::config().shutdown_timeout(Duration::from_millis(200)).build().unwrap());
    tokio::time::timeout(Duration::from_secs(10), stalled.started.notified()).await.expect("publish started");
    let summary = relay.stop().await;
    assert_eq!(summary.published, 0);
    assert_eq!(summary.released, 8, "{summary:?}");
    assert_eq!(count(&db.pool, "pending").await, 8);
    assert_eq!(count(&db.pool, "in_flight").await, 0);
}
