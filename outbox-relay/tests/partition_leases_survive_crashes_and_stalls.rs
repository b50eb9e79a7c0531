//! Partition leases: nothing stays open while publishing, a dead relay's partitions and events come back (with an
//! attempt counted), a relay whose partitions were taken over cannot settle them, a publish longer than the lease
//! keeps its partitions, several relays never share an event, a settle by row version writes only the events it
//! read, a batch whose settle failed is not shown in flight once its events are published again.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use common::{count, enqueue, enqueue_interleaved, event, start, status_of, wait_until, Recorder};
use outbox_core::store::{
    CancelTarget, CrashedEvent, Heartbeat, Ordering, PgStore, ReadRange, ReadRequest, SettleBatch, SettleOutcome,
    Settlement, Store,
};
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
    assert!(batches_in_flight(&db).await > 0, "the batch record is not visible: was it committed?");

    sink.release.add_permits(1000);
    wait_until(Duration::from_secs(10), "all 20 are published", || async { count(&db.pool, "published").await == 20 })
        .await;
    relay.stop().await;
}

/// The batch records of relays publishing now.
async fn batches_in_flight(db: &TestDatabase) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM outbox_batches").fetch_one(&db.pool).await.unwrap()
}

fn on_crash(event: &CrashedEvent) -> SettleOutcome {
    SettleOutcome::Retry {
        error: format!("relay died (attempt {})", event.attempts + 1),
        delay: Duration::ZERO,
        counted: true,
    }
}

/// Every partition of `relay`'s membership, read in full.
async fn read_all(store: &PgStore, owned: &[outbox_core::store::PartitionLease]) -> Vec<Uuid> {
    let ranges = owned.iter().map(|l| ReadRange::new(l.partition, 0, 1000)).collect();
    store.read(&ReadRequest::new(ranges)).await.unwrap().rows.iter().map(|r| r.event.id).collect()
}

#[tokio::test]
async fn a_dead_relays_partitions_are_taken_over_and_its_batch_counts_an_attempt() {
    let db = TestDatabase::migrated().await;
    let ids = enqueue(&db.pool, &(0..30).map(|n| event("one", n)).collect::<Vec<_>>()).await;
    // A relay joins, reads, records its batch and then "dies": no more heartbeats, no settle.
    let store = PgStore::new(db.pool.clone());
    let dead = Uuid::now_v7();
    let lease = Duration::from_millis(300);
    let membership = store.heartbeat(&Heartbeat::new(dead, "test", lease, &on_crash)).await.unwrap();
    assert_eq!(membership.owned.len(), 256, "a lone relay owns every partition");
    let read = read_all(&store, &membership.owned).await;
    assert_eq!(read.len(), 30);
    assert!(store.start_batch(dead, Uuid::now_v7(), &membership.owned, &read).await.unwrap(), "recorded while owned");

    let recorder = Recorder::new();
    let relay = start(&db, recorder.for_relay(1), common::config().lease(Duration::from_secs(30)).build().unwrap());
    wait_until(Duration::from_secs(20), "the dead relay's events are published", || async {
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
    let attempts: Vec<i32> =
        sqlx::query_scalar("SELECT attempts FROM outbox_events").fetch_all(&db.pool).await.unwrap();
    assert!(attempts.iter().all(|&a| a == 1), "the crash counted one attempt for each event: {attempts:?}");
    assert_eq!(batches_in_flight(&db).await, 0);
}

/// `outbox events cancel` of an event a relay has read but not yet recorded as in flight wins: the record is
/// refused (the relay reads the partition again, without the event), so a cancelled event is never published.
/// And a record in progress wins over a cancel that starts meanwhile: the cancel waits for it and then leaves the
/// event, now in flight, alone.
#[tokio::test]
async fn a_cancel_between_the_read_and_the_record_wins_and_a_record_in_progress_wins_over_a_cancel() {
    let db = TestDatabase::migrated().await;
    let store = PgStore::new(db.pool.clone());
    let ids = enqueue(&db.pool, &[event("c", 0), event("d", 0)]).await;
    let relay = Uuid::now_v7();
    let membership = store.heartbeat(&Heartbeat::new(relay, "r", Duration::from_secs(30), &on_crash)).await.unwrap();
    assert_eq!(read_all(&store, &membership.owned).await.len(), 2);
    let cancelled = store.cancel(&CancelTarget::Ids(vec![ids[0]])).await.unwrap();
    assert_eq!(cancelled, [ids[0]], "not in flight yet: cancelled");
    assert!(
        !store.start_batch(relay, Uuid::now_v7(), &membership.owned, &ids).await.unwrap(),
        "a batch read before the cancel was recorded, so the cancelled event would be published"
    );
    assert_eq!(batches_in_flight(&db).await, 0);
    let membership = store.heartbeat(&Heartbeat::new(relay, "r", Duration::from_secs(30), &on_crash)).await.unwrap();
    assert_eq!(read_all(&store, &membership.owned).await, [ids[1]], "read again, without the cancelled event");
    assert!(store.start_batch(relay, Uuid::now_v7(), &membership.owned, &ids[1..]).await.unwrap());

    // A record of the next event in progress (its transaction open, its partition locked as the record locks it).
    let next = enqueue(&db.pool, &[event("e", 0)]).await[0];
    let mut recording = db.pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM outbox_partitions WHERE partition = outbox_partition_of('test', 'e') FOR KEY SHARE")
        .execute(&mut *recording)
        .await
        .unwrap();
    sqlx::query("INSERT INTO outbox_batches (relay_id, batch_id, events) VALUES ($1, $2, $3)")
        .bind(relay)
        .bind(Uuid::now_v7())
        .bind(vec![next])
        .execute(&mut *recording)
        .await
        .unwrap();
    let cancel = tokio::spawn({
        let store = store.clone();
        async move { store.cancel(&CancelTarget::Ids(vec![next])).await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!cancel.is_finished(), "the cancel did not wait for the record in progress");
    recording.commit().await.unwrap();
    assert_eq!(cancel.await.unwrap(), Vec::<Uuid>::new(), "an event in flight was cancelled");
    assert_eq!(status_of(&db.pool, next).await, "pending");
}

#[tokio::test]
async fn a_relay_whose_partitions_were_taken_over_can_neither_record_nor_settle_a_batch_of_them() {
    let db = TestDatabase::migrated().await;
    let store = PgStore::new(db.pool.clone());
    enqueue(&db.pool, &(0..5).map(|n| event("fenced", n)).collect::<Vec<_>>()).await;

    // Relay A owns everything, reads, then stalls past its lease; relay B removes it and takes the partitions.
    let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
    let stale = store.heartbeat(&Heartbeat::new(a, "a", Duration::from_millis(200), &on_crash)).await.unwrap();
    let stale_ids = read_all(&store, &stale.owned).await;
    assert_eq!(stale_ids.len(), 5);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let fresh = store.heartbeat(&Heartbeat::new(b, "b", Duration::from_secs(30), &on_crash)).await.unwrap();
    assert_eq!((fresh.removed, fresh.owned.len()), (1, 256));
    assert!(fresh.owned.iter().zip(&stale.owned).all(|(f, s)| f.partition == s.partition && f.epoch > s.epoch));

    // A wakes up and records a batch of what it read at its old epochs: refused, so it publishes nothing.
    let (stale_leases, fresh_leases) = (&stale.owned, &fresh.owned);
    assert!(!store.start_batch(a, Uuid::now_v7(), stale_leases, &stale_ids).await.unwrap(), "A recorded a lost batch");
    assert!(!store.start_batch(a, Uuid::now_v7(), fresh_leases, &stale_ids).await.unwrap(), "A recorded at B's epochs");
    assert!(!store.start_batch(b, Uuid::now_v7(), stale_leases, &stale_ids).await.unwrap(), "B recorded at old epochs");
    assert_eq!(batches_in_flight(&db).await, 0, "a refused batch left a record");
    assert!(store.start_batch(b, Uuid::now_v7(), &fresh_leases[..1], &stale_ids).await.unwrap(), "the owner records");
    let old: Vec<(u16, i64)> = stale.owned.iter().map(|l| (l.partition, l.epoch)).collect();
    let new: Vec<(u16, i64)> = fresh.owned.iter().map(|l| (l.partition, l.epoch)).collect();
    assert_eq!(batches_in_flight(&db).await, 1);

    // Nor can it settle them: nothing changes.
    let marks: Vec<Settlement> = stale_ids.iter().map(|id| Settlement::published(*id)).collect();
    let report = store.settle(&SettleBatch::new(a, Uuid::now_v7(), old.clone(), marks.clone())).await.unwrap();
    assert_eq!((report.published, report.fenced), (0, 5));
    assert_eq!(count(&db.pool, "pending").await, 5, "A's settle changed rows B owns");
    // Nor does A with B's epochs, or B with A's.
    let forged = store.settle(&SettleBatch::new(a, Uuid::now_v7(), new.clone(), marks.clone())).await.unwrap();
    assert_eq!(forged.fenced, 5);
    let stale_epochs = store.settle(&SettleBatch::new(b, Uuid::now_v7(), old, marks.clone())).await.unwrap();
    assert_eq!(stale_epochs.fenced, 5);

    let report = store.settle(&SettleBatch::new(b, Uuid::now_v7(), new, marks)).await.unwrap();
    assert_eq!((report.published, report.fenced), (5, 0));
}

#[tokio::test]
async fn a_settle_by_row_version_writes_only_the_events_it_read_still_pending() {
    let db = TestDatabase::migrated().await;
    let store = PgStore::new(db.pool.clone());
    // One aggregate: one partition, rows side by side on the first page.
    enqueue(&db.pool, &(0..4).map(|n| event("located", n)).collect::<Vec<_>>()).await;
    let relay = Uuid::now_v7();
    let held = store.heartbeat(&Heartbeat::new(relay, "a", Duration::from_secs(30), &on_crash)).await.unwrap();
    let leases: Vec<(u16, i64)> = held.owned.iter().map(|l| (l.partition, l.epoch)).collect();
    let ranges = held.owned.iter().map(|l| ReadRange::new(l.partition, 0, 1000)).collect();
    let rows = store.read(&ReadRequest::new(ranges)).await.unwrap().rows;
    assert_eq!(rows.len(), 4);
    assert!(rows.iter().all(|row| row.version.is_some()), "PostgreSQL reads give every row its version");
    let (gone, cancelled) = (rows[1].event.id, rows[2].event.id);

    // While the batch is out: one event is deleted and vacuumed away, and a new event takes its row's slot; an
    // operator cancels another; a third gets an attempt counted (as for a dead relay's batch) and moves.
    sqlx::query("DELETE FROM outbox_events WHERE id = $1").bind(gone).execute(&db.pool).await.unwrap();
    sqlx::query("VACUUM outbox_events").execute(&db.pool).await.unwrap();
    let newcomer = enqueue(&db.pool, &[event("located", 9)]).await[0];
    let slot: String = sqlx::query_scalar("SELECT ctid::text FROM outbox_events WHERE id = $1")
        .bind(newcomer)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(slot, rows[1].version.as_ref().unwrap().to_string(), "the new event did not reuse the slot");
    let moved = common::cancel_one_and_move_another(&db.pool, cancelled, rows[3].event.id).await;
    assert_ne!(moved, rows[3].version.as_ref().unwrap().to_string(), "the counted attempt did not move the row");

    let marks: Vec<Settlement> =
        rows.iter().map(|row| Settlement::published(row.event.id).at(row.version.clone())).collect();
    // At an epoch the relay does not hold, the versions settle nothing.
    let stale: Vec<(u16, i64)> = leases.iter().map(|&(partition, epoch)| (partition, epoch - 1)).collect();
    let fenced = store.settle(&SettleBatch::new(relay, Uuid::now_v7(), stale, marks.clone())).await.unwrap();
    assert_eq!((fenced.published, fenced.fenced), (0, 4));
    assert_eq!(status_of(&db.pool, rows[0].event.id).await, "pending");
    let report = store.settle(&SettleBatch::new(relay, Uuid::now_v7(), leases, marks)).await.unwrap();
    assert_eq!((report.published, report.fenced), (2, 2));
    assert_eq!(status_of(&db.pool, rows[0].event.id).await, "published");
    assert_eq!(status_of(&db.pool, rows[3].event.id).await, "published", "a row that moved was not settled");
    assert_eq!(status_of(&db.pool, newcomer).await, "pending", "the settle marked an event it never read");
    assert_eq!(status_of(&db.pool, cancelled).await, "cancelled", "the settle overwrote an operator's cancel");
}

#[tokio::test]
async fn a_takeover_never_slips_into_a_settle_in_progress() {
    let db = TestDatabase::migrated().await;
    let store = PgStore::new(db.pool.clone());
    let ids = enqueue(&db.pool, &(0..3).map(|n| event("slow", n)).collect::<Vec<_>>()).await;
    let a = Uuid::now_v7();
    let held = store.heartbeat(&Heartbeat::new(a, "a", Duration::from_millis(200), &on_crash)).await.unwrap();
    // A's settle is in progress: the FOR KEY SHARE lock its statement takes, in a transaction that stays open.
    let mut settling = db.pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM outbox_partitions WHERE owner = $1 FOR KEY SHARE")
        .bind(a)
        .execute(&mut *settling)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A's lease has expired: B removes it, but takes none of the partitions being settled.
    let b = Uuid::now_v7();
    let during = store.heartbeat(&Heartbeat::new(b, "b", Duration::from_secs(30), &on_crash)).await.unwrap();
    assert_eq!((during.removed, during.owned.len()), (1, 0), "a takeover slipped into a settle in progress");
    // A's settle goes through at its epochs; then B takes every partition, at new epochs.
    let marks = ids.iter().map(|id| Settlement::published(*id)).collect();
    let leases = held.owned.iter().map(|l| (l.partition, l.epoch)).collect();
    let report = store.settle(&SettleBatch::new(a, Uuid::now_v7(), leases, marks)).await.unwrap();
    settling.commit().await.unwrap();
    assert_eq!(report.published, 3);
    let after = store.heartbeat(&Heartbeat::new(b, "b", Duration::from_secs(30), &on_crash)).await.unwrap();
    assert_eq!(after.owned.len(), 256);
    assert!(after.owned.iter().zip(&held.owned).all(|(n, o)| n.epoch > o.epoch));
}

#[tokio::test]
async fn a_publish_longer_than_the_lease_keeps_its_partitions() {
    let db = TestDatabase::migrated().await;
    enqueue(&db.pool, &(0..40).map(|n| event(format!("s{n}"), 0)).collect::<Vec<_>>()).await;
    let stalled = Stalling::default();
    let lease = Duration::from_millis(500);
    let relay_a = start(&db, stalled.clone(), common::config().lease(lease).build().unwrap());
    tokio::time::timeout(Duration::from_secs(10), stalled.started.notified()).await.expect("A started publishing");
    // A's publish lasts four leases; its heartbeat keeps it a member, and a second relay joins meanwhile.
    let recorder = Recorder::new();
    let relay_b = start(&db, recorder.for_relay(2), common::config().lease(lease).build().unwrap());
    tokio::time::sleep(lease * 4).await;
    let owners: Vec<Option<Uuid>> =
        sqlx::query_scalar("SELECT DISTINCT owner FROM outbox_partitions").fetch_all(&db.pool).await.unwrap();
    assert_eq!(owners.len(), 2, "both relays own partitions: {owners:?}");
    stalled.release.add_permits(1000);
    wait_until(Duration::from_secs(20), "all 40 are published", || async { count(&db.pool, "published").await == 40 })
        .await;
    let summary_a = relay_a.stop().await;
    let summary_b = relay_b.stop().await;
    assert!(summary_a.published > 0, "A lost the partitions of its long publish: {summary_a:?}");
    assert_eq!(summary_a.fenced, 0, "{summary_a:?}");
    assert_eq!(summary_a.published + summary_b.published, 40);
    let mut times: HashMap<Uuid, usize> = HashMap::new();
    for id in stalled.published.lock().unwrap().iter().chain(recorder.seen().iter().map(|s| &s.id)) {
        *times.entry(*id).or_default() += 1;
    }
    assert!(times.values().all(|&n| n == 1), "an event was published twice");
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

/// A relay told to stop goes on renewing its membership while its batches in flight finish: a drain longer than
/// the lease does not get it taken for dead, its batch counted as crashed and published again by another relay.
#[tokio::test]
async fn a_stopping_relay_whose_drain_outlasts_the_lease_keeps_its_batches() {
    let db = TestDatabase::migrated().await;
    let ids = enqueue(&db.pool, &(0..8).map(|n| event(format!("d{n}"), 0)).collect::<Vec<_>>()).await;
    let stalled = Stalling::default();
    let lease = Duration::from_millis(500);
    let relay_a = start(&db, stalled.clone(), common::config().lease(lease).build().unwrap());
    tokio::time::timeout(Duration::from_secs(10), stalled.started.notified()).await.expect("A started publishing");
    let recorder = Recorder::new();
    let relay_b = start(&db, recorder.for_relay(2), common::config().lease(lease).build().unwrap());
    // A is told to stop in the middle of its publish, which lasts four leases more.
    relay_a.shutdown.cancel();
    tokio::time::sleep(lease * 4).await;
    // Meanwhile A has handed over every partition but those of its batch in flight (8 events).
    let most_kept: i64 = sqlx::query_scalar(
        "SELECT COALESCE(min(n), 0) FROM (SELECT count(*) AS n FROM outbox_partitions
                                            WHERE owner IS NOT NULL GROUP BY owner) owners",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(most_kept <= 8, "the stopping relay kept {most_kept} partitions while it drained");
    stalled.release.add_permits(1000);
    let summary_a = tokio::time::timeout(Duration::from_secs(30), relay_a.handle)
        .await
        .expect("A did not stop")
        .expect("A's task")
        .expect("A failed");
    wait_until(Duration::from_secs(20), "all 8 are published", || async { count(&db.pool, "published").await == 8 })
        .await;
    relay_b.stop().await;
    assert_eq!(summary_a.fenced, 0, "A's settle was fenced: its partitions were taken while it drained");
    let attempts: i64 =
        sqlx::query_scalar("SELECT sum(attempts) FROM outbox_events").fetch_one(&db.pool).await.unwrap();
    assert_eq!(attempts, 0, "a crash was counted for a relay that was stopping");
    let mut times: HashMap<Uuid, usize> = HashMap::new();
    for id in stalled.published.lock().unwrap().iter().chain(recorder.seen().iter().map(|s| &s.id)) {
        *times.entry(*id).or_default() += 1;
    }
    assert_eq!(times.len(), ids.len());
    assert!(times.values().all(|&n| n == 1), "an event was published twice: {times:?}");
}

#[tokio::test]
async fn shutdown_abandons_batches_that_do_not_finish_in_time_and_hands_the_partitions_over() {
    let db = TestDatabase::migrated().await;
    enqueue(&db.pool, &(0..8).map(|n| event(format!("x{n}"), 0)).collect::<Vec<_>>()).await;
    let stalled = Stalling::default();
    let relay =
        start(&db, stalled.clone(), common::config().shutdown_timeout(Duration::from_millis(200)).build().unwrap());
    tokio::time::timeout(Duration::from_secs(10), stalled.started.notified()).await.expect("publish started");
    let summary = relay.stop().await;
    assert_eq!(summary.published, 0);
    assert_eq!(count(&db.pool, "pending").await, 8);
    assert_eq!(batches_in_flight(&db).await, 0, "the abandoned batch is still recorded as in flight");
    let owned: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_partitions WHERE owner IS NOT NULL")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(owned, 0, "the partitions were not handed over");
    let attempts: i64 =
        sqlx::query_scalar("SELECT sum(attempts) FROM outbox_events").fetch_one(&db.pool).await.unwrap();
    assert_eq!(attempts, 0, "a graceful stop counts no attempt");
}

#[tokio::test]
async fn a_read_says_how_long_a_head_in_backoff_waits_and_how_long_ago_each_event_committed() {
    let db = TestDatabase::migrated().await;
    let store = PgStore::new(db.pool.clone());
    let ids = enqueue(&db.pool, &[event("backoff", 0), event("retried", 0), event("fresh", 0)]).await;
    // A head in backoff for 30 s more; an event retried once, due, enqueued a minute ago; one just committed.
    sqlx::query("UPDATE outbox_events SET attempts = 1, next_attempt_at = now() + interval '30 s' WHERE id = $1")
        .bind(ids[0])
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE outbox_events SET attempts = 1, next_attempt_at = now() - interval '1 s',
                created_at = now() - interval '60 s' WHERE id = $1",
    )
    .bind(ids[1])
    .execute(&db.pool)
    .await
    .unwrap();
    let relay = Uuid::now_v7();
    let held = store.heartbeat(&Heartbeat::new(relay, "a", Duration::from_secs(30), &on_crash)).await.unwrap();
    let ranges = held.owned.iter().map(|l| ReadRange::new(l.partition, 0, 1000)).collect();
    let rows = store.read(&ReadRequest::new(ranges)).await.unwrap().rows;
    let row = |id: Uuid| rows.iter().find(|row| row.event.id == id).expect("read");

    let (backoff, retried, fresh) = (row(ids[0]), row(ids[1]), row(ids[2]));
    assert!(
        backoff.wait > Duration::from_secs(25) && backoff.wait <= Duration::from_secs(30),
        "the head in backoff waits {:?}",
        backoff.wait
    );
    assert_eq!(retried.wait, Duration::ZERO, "a due event does not wait");
    assert_eq!(fresh.wait, Duration::ZERO, "a new event does not wait");
    // A retried event's age comes from `created_at`; a new one's from its commit (`track_commit_timestamp` is on in
    // the test server).
    assert!(
        retried.since_commit >= Duration::from_secs(60) && retried.since_commit < Duration::from_secs(70),
        "the retried event was enqueued {:?} ago",
        retried.since_commit
    );
    assert!(fresh.since_commit < Duration::from_secs(10), "the new event committed {:?} ago", fresh.since_commit);
}

/// A settle that fails for good leaves its events pending: they are read and published again, and the failed
/// batch's record goes with the next heartbeat, so `outbox status` and `--status in_flight` do not show it as being
/// published any more, and no attempt is counted for it later.
#[tokio::test]
async fn a_batch_whose_settle_failed_is_no_longer_recorded_in_flight_once_its_events_are_published_again() {
    let db = TestDatabase::migrated().await;
    // Marking an event published fails while the switch is on (an error no retry gets past).
    sqlx::raw_sql(
        "CREATE TABLE settle_switch (refuse boolean NOT NULL);
         INSERT INTO settle_switch VALUES (true);
         CREATE FUNCTION refuse_settles() RETURNS trigger LANGUAGE plpgsql AS
           'BEGIN IF NEW.status = ''published'' AND (SELECT refuse FROM settle_switch) THEN
                    RAISE EXCEPTION ''settles refused by the test'';
                  END IF; RETURN NEW; END';
         CREATE TRIGGER refuse_settles BEFORE UPDATE ON outbox_events
           FOR EACH ROW EXECUTE FUNCTION refuse_settles();",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let ids = enqueue(&db.pool, &(0..5).map(|n| event(format!("s{n}"), 0)).collect::<Vec<_>>()).await;
    let recorder = Recorder::new();
    let relay = start(&db, recorder.for_relay(0), common::config().build().unwrap());
    wait_until(Duration::from_secs(20), "a settle failed", || async { recorder.count() >= ids.len() * 2 }).await;
    sqlx::query("UPDATE settle_switch SET refuse = false").execute(&db.pool).await.unwrap();
    wait_until(Duration::from_secs(20), "every event is published", || async {
        count(&db.pool, "published").await == ids.len() as i64
    })
    .await;
    wait_until(Duration::from_secs(10), "no batch is recorded in flight", || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM outbox_batches").fetch_one(&db.pool).await.unwrap() == 0
    })
    .await;
    relay.stop().await;
    for id in ids {
        assert_eq!(status_of(&db.pool, id).await, "published");
    }
}
