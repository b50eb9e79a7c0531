//! The relay on the embedded backend: the same promises as on PostgreSQL (order per aggregate, retries, dead
//! letters, pause, leases and fencing, retention), on a real SQLite file.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_core::store::{
    CancelTarget, CrashedEvent, Heartbeat, ReadRange, ReadRequest, RetryTarget, SettleBatch, SettleOutcome, Settlement,
    SqliteStore, Store,
};
use outbox_core::{Outbox, OutboxEvent};
use outbox_relay::{CancellationToken, Message, Outcome, Publisher, Relay, RelayConfig, Retention};
use outbox_tests::sqlite::TestDatabase;
use serde::{Deserialize, Serialize};
use sqlx::SqlitePool;
use uuid::Uuid;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Step {
    aggregate: String,
    n: u32,
}

impl OutboxEvent for Step {
    const EVENT_TYPE: &'static str = "test.step";
    const AGGREGATE_TYPE: &'static str = "test";
    const VERSION: u32 = 1;

    fn aggregate_id(&self) -> String {
        self.aggregate.clone()
    }
}

/// A sink that records what it received, fails some events transiently (once each) or for good, and reports its
/// destination unreachable while `unreachable` is set (as a broker publisher does without a connection).
#[derive(Clone, Default)]
struct Recorder {
    seen: Arc<Mutex<Vec<(String, u32)>>>,
    fail_once: Arc<Mutex<HashSet<Uuid>>>,
    permanent: Arc<Mutex<HashSet<Uuid>>>,
    unreachable: Arc<std::sync::atomic::AtomicBool>,
}

impl Publisher for Recorder {
    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        if self.unreachable.load(std::sync::atomic::Ordering::SeqCst) {
            return vec![Outcome::unavailable("connection refused (reconnecting)"); batch.len()];
        }
        batch
            .iter()
            .map(|message| {
                if self.permanent.lock().unwrap().contains(&message.id) {
                    return Outcome::permanent("rejected by the test");
                }
                if self.fail_once.lock().unwrap().remove(&message.id) {
                    return Outcome::transient("broker busy");
                }
                let step: Step = serde_json::from_str(&message.payload).unwrap();
                self.seen.lock().unwrap().push((step.aggregate, step.n));
                Outcome::Published
            })
            .collect()
    }
}

async fn enqueue_interleaved(pool: &SqlitePool, aggregates: u32, per_aggregate: u32) -> Vec<Uuid> {
    let mut ids = Vec::new();
    for n in 0..per_aggregate {
        let round: Vec<Step> = (0..aggregates).map(|a| Step { aggregate: format!("agg-{a}"), n }).collect();
        let mut tx = pool.begin().await.unwrap();
        ids.extend(Outbox::new().enqueue_all(&mut tx, &round).await.unwrap());
        tx.commit().await.unwrap();
    }
    ids
}

async fn count(pool: &SqlitePool, status: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE status = ?1")
        .bind(status)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn wait_for(pool: &SqlitePool, status: &str, expected: i64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let now = count(pool, status).await;
        if now == expected {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{now} events {status}, expected {expected} within 60 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn config() -> outbox_relay::RelayConfigBuilder {
    RelayConfig::builder()
        .poll_interval(Duration::from_millis(20))
        .backoff(Duration::from_millis(10), Duration::from_millis(50))
}

fn start(
    db: &TestDatabase,
    recorder: &Recorder,
    config: RelayConfig,
) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let relay = Relay::new(SqliteStore::new(db.pool.clone()), recorder.clone(), config);
    let token = CancellationToken::new();
    let running = token.clone();
    (
        token,
        tokio::spawn(async move {
            relay.run(running).await.unwrap();
        }),
    )
}

#[tokio::test]
async fn sqlite_relay_publishes_every_event_in_aggregate_order() {
    let db = TestDatabase::migrated().await;
    enqueue_interleaved(&db.pool, 20, 25).await;
    let recorder = Recorder::default();
    let (stop, running) = start(&db, &recorder, config().batch_size(50).build().unwrap());
    wait_for(&db.pool, "published", 500).await;
    stop.cancel();
    running.await.unwrap();

    let mut by_aggregate: HashMap<String, Vec<u32>> = HashMap::new();
    for (aggregate, n) in recorder.seen.lock().unwrap().iter() {
        by_aggregate.entry(aggregate.clone()).or_default().push(*n);
    }
    assert_eq!(by_aggregate.len(), 20);
    for (aggregate, order) in by_aggregate {
        assert_eq!(order, (0..25).collect::<Vec<_>>(), "{aggregate} out of order");
    }
}

#[tokio::test]
async fn sqlite_transient_failure_is_retried_and_permanent_failure_blocks_only_its_aggregate() {
    let db = TestDatabase::migrated().await;
    let ids = enqueue_interleaved(&db.pool, 4, 3).await; // round n holds agg-0..agg-3
    let recorder = Recorder::default();
    recorder.fail_once.lock().unwrap().insert(ids[0]); // agg-0 #0 fails once
    recorder.permanent.lock().unwrap().insert(ids[1]); // agg-1 #0 is poison
    let (stop, running) = start(&db, &recorder, config().build().unwrap());
    wait_for(&db.pool, "published", 9).await; // everything but agg-1
    wait_for(&db.pool, "failed", 1).await;
    stop.cancel();
    running.await.unwrap();

    let (attempts, error): (i64, String) =
        sqlx::query_as("SELECT attempts, last_error FROM outbox_events WHERE id = ?1")
            .bind(ids[0].to_string())
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!((attempts, error.as_str()), (1, "broker busy"));
    let pending_behind_poison = count(&db.pool, "pending").await;
    assert_eq!(pending_behind_poison, 2, "agg-1's later events wait behind its failed head");

    // An operator fixes the cause and retries: the aggregate flows again, in order.
    recorder.permanent.lock().unwrap().clear();
    let store = SqliteStore::new(db.pool.clone());
    assert_eq!(store.retry(&RetryTarget::Ids(vec![ids[1]])).await.unwrap(), [ids[1]]);
    let (stop, running) = start(&db, &recorder, config().build().unwrap());
    wait_for(&db.pool, "published", 12).await;
    stop.cancel();
    running.await.unwrap();
    let agg1: Vec<u32> = recorder.seen.lock().unwrap().iter().filter(|(a, _)| a == "agg-1").map(|(_, n)| *n).collect();
    assert_eq!(agg1, [0, 1, 2]);
}

#[tokio::test]
async fn sqlite_an_unreachable_destination_uses_up_no_attempt_and_sends_nothing_to_failed() {
    let db = TestDatabase::migrated().await;
    enqueue_interleaved(&db.pool, 4, 3).await;
    let recorder = Recorder::default();
    recorder.unreachable.store(true, std::sync::atomic::Ordering::SeqCst);
    // One attempt: any counted failure would send the event to `failed` at once.
    let (stop, running) = start(&db, &recorder, config().max_attempts(1).build().unwrap());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let tried: i64 =
            sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE last_error LIKE 'connection refused%'")
                .fetch_one(&db.pool)
                .await
                .unwrap();
        if tried == 4 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{tried} of 4 heads tried within 30 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (failed, attempted): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE status = 'failed'), count(*) FILTER (WHERE attempts > 0) FROM outbox_events",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((failed, attempted), (0, 0), "(failed, attempted) while the destination is unreachable");
    recorder.unreachable.store(false, std::sync::atomic::Ordering::SeqCst);
    wait_for(&db.pool, "published", 12).await;
    stop.cancel();
    running.await.unwrap();
    assert_eq!(recorder.seen.lock().unwrap().len(), 12);
}

#[tokio::test]
async fn sqlite_pause_stops_claiming_until_resumed() {
    let db = TestDatabase::migrated().await;
    let store = SqliteStore::new(db.pool.clone());
    store.set_paused(true).await.unwrap();
    enqueue_interleaved(&db.pool, 3, 3).await;
    let recorder = Recorder::default();
    let (stop, running) = start(&db, &recorder, config().build().unwrap());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(count(&db.pool, "published").await, 0, "a paused outbox publishes nothing");
    assert!(store.status().await.unwrap().paused);
    store.set_paused(false).await.unwrap();
    wait_for(&db.pool, "published", 9).await;
    stop.cancel();
    running.await.unwrap();
}

#[tokio::test]
async fn sqlite_a_batch_whose_settle_failed_is_no_longer_recorded_once_its_events_are_published_again() {
    let db = TestDatabase::migrated().await;
    // Marking an event published fails while the switch is on.
    sqlx::raw_sql(
        "CREATE TABLE settle_switch (refuse INTEGER NOT NULL);
         INSERT INTO settle_switch VALUES (1);
         CREATE TRIGGER refuse_settles BEFORE UPDATE OF status ON outbox_events
           WHEN NEW.status = 'published' AND (SELECT refuse FROM settle_switch)
           BEGIN SELECT RAISE(ABORT, 'settles refused by the test'); END;",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    enqueue_interleaved(&db.pool, 5, 1).await;
    let recorder = Recorder::default();
    let (stop, running) = start(&db, &recorder, config().build().unwrap());
    common::wait_until(Duration::from_secs(30), "a settle failed", || async {
        recorder.seen.lock().unwrap().len() >= 10
    })
    .await;
    sqlx::query("UPDATE settle_switch SET refuse = 0").execute(&db.pool).await.unwrap();
    wait_for(&db.pool, "published", 5).await;
    common::wait_until(Duration::from_secs(10), "no batch is recorded in flight", || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM outbox_batches").fetch_one(&db.pool).await.unwrap() == 0
    })
    .await;
    stop.cancel();
    running.await.unwrap();
}

fn on_crash(event: &CrashedEvent) -> SettleOutcome {
    SettleOutcome::Retry {
        error: format!("relay died (attempt {})", event.attempts + 1),
        delay: Duration::ZERO,
        counted: true,
    }
}

/// An event cancelled between the relay's read and its batch's record is not recorded: the relay reads again.
#[tokio::test]
async fn sqlite_a_cancel_between_the_read_and_the_record_wins() {
    let db = TestDatabase::migrated().await;
    let ids = enqueue_interleaved(&db.pool, 2, 1).await;
    let store = SqliteStore::new(db.pool.clone());
    let relay = Uuid::now_v7();
    let owned = store.heartbeat(&Heartbeat::new(relay, "a", Duration::from_secs(30), &on_crash)).await.unwrap().owned;
    let read = store.read(&ReadRequest::new(vec![ReadRange::new(0, 0, 10)])).await.unwrap();
    assert_eq!(read.rows.len(), 2);
    assert_eq!(store.cancel(&CancelTarget::Ids(vec![ids[0]])).await.unwrap(), [ids[0]]);
    assert!(!store.start_batch(relay, Uuid::now_v7(), &owned, &ids).await.unwrap(), "recorded a cancelled event");
    assert!(store.start_batch(relay, Uuid::now_v7(), &owned, &ids[1..]).await.unwrap(), "the rest is recorded");
    assert!(store.cancel(&CancelTarget::Ids(vec![ids[1]])).await.unwrap().is_empty(), "cancelled an event in flight");
}

#[tokio::test]
async fn sqlite_dead_relay_is_replaced_and_the_stale_owner_can_neither_record_nor_settle() {
    let db = TestDatabase::migrated().await;
    let ids = enqueue_interleaved(&db.pool, 2, 1).await;
    let store = SqliteStore::new(db.pool.clone());
    let (stale, fresh) = (Uuid::now_v7(), Uuid::now_v7());
    let first = store.heartbeat(&Heartbeat::new(stale, "a", Duration::from_millis(100), &on_crash)).await.unwrap();
    assert_eq!((first.partitions, first.owned.len()), (1, 1), "SQLite has one partition");
    let read = store.read(&ReadRequest::new(vec![ReadRange::new(0, 0, 10)])).await.unwrap();
    let read_ids: Vec<Uuid> = read.rows.iter().map(|r| r.event.id).collect();
    assert_eq!(read_ids, ids);
    assert!(store.start_batch(stale, Uuid::now_v7(), &first.owned, &read_ids).await.unwrap(), "recorded while owned");
    let waiting = store.heartbeat(&Heartbeat::new(fresh, "b", Duration::from_secs(30), &on_crash)).await.unwrap();
    assert!(waiting.owned.is_empty(), "a live relay's partition is not taken");

    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = store.heartbeat(&Heartbeat::new(fresh, "b", Duration::from_secs(30), &on_crash)).await.unwrap();
    assert_eq!((second.removed, second.crashed, second.owned.len()), (1, 2, 1));
    assert!(second.owned[0].epoch > first.owned[0].epoch);

    let old = vec![(0, first.owned[0].epoch)];
    let batches = || sqlx::query_scalar::<_, i64>("SELECT count(*) FROM outbox_batches").fetch_one(&db.pool);
    assert_eq!(batches().await.unwrap(), 0, "the dead relay's batch was adopted and counted");
    assert!(!store.start_batch(stale, Uuid::now_v7(), &first.owned, &read_ids).await.unwrap(), "recorded a lost batch");
    assert_eq!(batches().await.unwrap(), 0, "a refused batch left a record");
    let marks: Vec<_> = read_ids.iter().map(|id| Settlement::published(*id)).collect();
    let report = store.settle(&SettleBatch::new(stale, Uuid::now_v7(), old, marks.clone())).await.unwrap();
    assert_eq!((report.published, report.fenced), (0, 2), "the stalled relay cannot mark rows it lost");
    let new = vec![(0, second.owned[0].epoch)];
    let report = store.settle(&SettleBatch::new(fresh, Uuid::now_v7(), new, marks)).await.unwrap();
    assert_eq!((report.published, report.fenced), (2, 0));
    let attempts: Vec<i64> =
        sqlx::query_scalar("SELECT attempts FROM outbox_events").fetch_all(&db.pool).await.unwrap();
    assert_eq!(attempts, [1, 1], "the dead relay's batch counted an attempt");
}

#[tokio::test]
async fn sqlite_retention_deletes_only_old_finished_rows() {
    let db = TestDatabase::migrated().await;
    let ids = enqueue_interleaved(&db.pool, 3, 1).await;
    sqlx::query(
        "UPDATE outbox_events SET status = 'published',
                published_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-2 days') WHERE id = ?1",
    )
    .bind(ids[0].to_string())
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query("UPDATE outbox_events SET status = 'published', published_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = ?1")
        .bind(ids[1].to_string())
        .execute(&db.pool)
        .await
        .unwrap();
    let recorder = Recorder::default();
    let (stop, running) =
        start(&db, &recorder, config().retention(Retention::After(Duration::from_secs(24 * 3600))).build().unwrap());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while count(&db.pool, "published").await != 2 || total(&db.pool).await != 2 {
        assert!(tokio::time::Instant::now() < deadline, "retention did not converge");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.cancel();
    running.await.unwrap();
    let left: Vec<String> =
        sqlx::query_scalar("SELECT id FROM outbox_events ORDER BY seq").fetch_all(&db.pool).await.unwrap();
    assert_eq!(left, [ids[1].to_string(), ids[2].to_string()], "only the two-day-old published row went");
}

async fn total(pool: &SqlitePool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM outbox_events").fetch_one(pool).await.unwrap()
}

/// A retry or cancel commits its change together with the generation's bump that tells the partition's owner to
/// read afresh: a change that committed alone would leave the owner blocked behind a failed head that is pending
/// again, or never told that one was cancelled.
#[tokio::test]
async fn sqlite_a_retry_or_cancel_whose_generation_bump_fails_changes_nothing() {
    let db = TestDatabase::migrated().await;
    let ids = enqueue_interleaved(&db.pool, 2, 1).await;
    sqlx::query("UPDATE outbox_events SET status = 'failed', attempts = 1").execute(&db.pool).await.unwrap();
    sqlx::raw_sql(
        "CREATE TRIGGER refuse_bumps BEFORE UPDATE ON outbox_partitions
           BEGIN SELECT RAISE(ABORT, 'bumps refused by the test'); END;",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let store = SqliteStore::new(db.pool.clone());
    assert!(store.retry(&RetryTarget::Ids(vec![ids[0]])).await.is_err(), "the bump's failure is reported");
    assert!(store.retry(&RetryTarget::AllFailed { event_type: None }).await.is_err());
    assert!(store.cancel(&CancelTarget::Ids(vec![ids[1]])).await.is_err());
    assert_eq!(count(&db.pool, "failed").await, 2, "a change committed without its bump");

    sqlx::raw_sql("DROP TRIGGER refuse_bumps").execute(&db.pool).await.unwrap();
    let generation = || sqlx::query_scalar::<_, i64>("SELECT generation FROM outbox_partitions").fetch_one(&db.pool);
    let before = generation().await.unwrap();
    assert_eq!(store.retry(&RetryTarget::Ids(vec![ids[0]])).await.unwrap(), [ids[0]]);
    assert_eq!(store.cancel(&CancelTarget::Ids(vec![ids[1]])).await.unwrap(), [ids[1]]);
    assert_eq!(generation().await.unwrap(), before + 2, "each change bumped the generation");
}

/// A relay started on a file without the outbox tables stops with the schema error, as on PostgreSQL, instead of
/// retrying a statement that cannot pass.
#[tokio::test]
async fn sqlite_relay_on_a_file_without_the_outbox_tables_stops_with_a_schema_error() {
    let db = TestDatabase::create().await;
    let relay = Relay::new(SqliteStore::new(db.pool.clone()), Recorder::default(), config().build().unwrap());
    let outcome = tokio::time::timeout(Duration::from_secs(20), relay.run(CancellationToken::new()))
        .await
        .expect("the relay kept retrying on a file without the outbox tables");
    let error = outcome.expect_err("the relay ran without its tables");
    assert!(matches!(error, outbox_relay::Error::Schema { .. }), "{error}");
    assert!(!error.is_retryable());
}

/// Migrators of one file, each on its own pool (as separate processes are), all succeed: each migration's
/// transaction takes the write lock before it checks what is applied.
#[tokio::test]
async fn sqlite_concurrent_migrations_from_separate_pools_all_succeed() {
    for _ in 0..10 {
        let db = TestDatabase::create().await;
        let mut runs = Vec::new();
        for _ in 0..4 {
            let options = db.pool.connect_options().as_ref().clone();
            runs.push(tokio::spawn(async move {
                let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect_with(options).await?;
                outbox_core::migrate(&pool).await.map_err(|error| sqlx::Error::Protocol(error.to_string()))
            }));
        }
        for run in runs {
            run.await.unwrap().expect("a concurrent migration failed");
        }
        assert_eq!(count(&db.pool, "pending").await, 0, "the tables are there");
    }
}

/// Times set by hand in another format (`datetime('now')`, no `T` and no zone) or not times at all are read as
/// SQLite reads them, or as now: such a row neither stops the relay's reads nor holds back other aggregates.
#[tokio::test]
async fn sqlite_rows_whose_times_were_set_by_hand_in_another_format_are_published_with_the_rest() {
    let db = TestDatabase::migrated().await;
    let ids = enqueue_interleaved(&db.pool, 3, 2).await;
    for (aggregate, set) in [
        ("agg-0", "created_at = datetime('now'), next_attempt_at = datetime('now')"),
        ("agg-1", "created_at = 'yesterday', next_attempt_at = 'soon'"),
    ] {
        sqlx::query(&format!("UPDATE outbox_events SET {set} WHERE aggregate_id = ?1"))
            .bind(aggregate)
            .execute(&db.pool)
            .await
            .unwrap();
    }
    let recorder = Recorder::default();
    let (stop, running) = start(&db, &recorder, config().build().unwrap());
    wait_for(&db.pool, "published", ids.len() as i64).await;
    stop.cancel();
    running.await.unwrap();
    let agg0: Vec<u32> = recorder.seen.lock().unwrap().iter().filter(|(a, _)| a == "agg-0").map(|(_, n)| *n).collect();
    assert_eq!(agg0, [0, 1]);
    let store = SqliteStore::new(db.pool.clone());
    let listed = store.list(&outbox_core::store::EventFilter::default().status(None)).await.unwrap();
    assert_eq!(listed.len(), ids.len(), "the operator's list shows every row");
    assert!(store.show(ids[0]).await.unwrap().is_some());
}
