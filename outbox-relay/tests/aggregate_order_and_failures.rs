//! Ordering per aggregate across relays, head-of-line blocking of a failing aggregate only, retries with
//! bounded backoff, and exhausted attempts.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{count, enqueue, enqueue_interleaved, event, start, status_of, wait_until, Recorder};
use outbox_core::store::{CancelTarget, Ordering, PgStore, RetryTarget, Store};
use outbox_tests::pg::TestDatabase;
use time::OffsetDateTime;

#[tokio::test]
async fn three_relays_publish_each_aggregate_in_order() {
    let db = TestDatabase::migrated().await;
    enqueue_interleaved(&db.pool, 200, 50).await;
    let recorder = Recorder::new();
    let relays: Vec<_> = (0..3)
        .map(|r| start(&db, recorder.for_relay(r), common::config().batch_size(100).concurrency(2).build().unwrap()))
        .collect();
    wait_until(Duration::from_secs(120), "all 10000 are published", || async {
        count(&db.pool, "published").await == 10_000
    })
    .await;
    for relay in relays {
        relay.stop().await;
    }
    let mut by_aggregate: HashMap<String, Vec<u32>> = HashMap::new();
    let mut relays_used = std::collections::HashSet::new();
    for seen in recorder.seen() {
        by_aggregate.entry(seen.aggregate).or_default().push(seen.n);
        relays_used.insert(seen.relay);
    }
    assert_eq!(by_aggregate.len(), 200);
    let expected: Vec<u32> = (0..50).collect();
    for (aggregate, order) in &by_aggregate {
        assert_eq!(order, &expected, "aggregate {aggregate} arrived out of order");
    }
    assert!(relays_used.len() > 1, "only one relay did all the work; the test shows nothing about several");
}

#[tokio::test]
async fn unordered_relays_publish_everything_in_large_batches() {
    let db = TestDatabase::migrated().await;
    enqueue_interleaved(&db.pool, 5, 400).await;
    let recorder = Recorder::new();
    let relay =
        start(&db, recorder.for_relay(0), common::config().ordering(Ordering::None).batch_size(200).build().unwrap());
    wait_until(Duration::from_secs(60), "all 2000 are published", || async {
        count(&db.pool, "published").await == 2000
    })
    .await;
    relay.stop().await;
    let calls = recorder.calls.lock().unwrap().clone();
    // The batch size adapts up to its maximum while a backlog exists.
    assert_eq!(calls.iter().max(), Some(&200), "batch sizes: {calls:?}");
}

#[tokio::test]
async fn poison_event_fails_and_only_its_aggregate_waits() {
    let db = TestDatabase::migrated().await;
    let store = PgStore::new(db.pool.clone());
    let mut ids = HashMap::new();
    for n in 0..5 {
        let round: Vec<_> = (0..20).map(|a| event(format!("agg-{a}"), n)).collect();
        for (a, id) in enqueue(&db.pool, &round).await.into_iter().enumerate() {
            ids.insert((a, n), id);
        }
    }
    let poison = ids[&(3, 1)];
    let recorder = Recorder::new();
    recorder.permanent.lock().unwrap().insert(poison);
    let relay = start(&db, recorder.for_relay(0), common::config().build().unwrap());

    wait_until(Duration::from_secs(30), "the 19 healthy aggregates and agg-3's first event are published", || async {
        count(&db.pool, "published").await == 19 * 5 + 1
    })
    .await;
    assert_eq!(status_of(&db.pool, poison).await, "failed");
    let last_error: Option<String> = sqlx::query_scalar("SELECT last_error FROM outbox_events WHERE id = $1")
        .bind(poison)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(last_error.as_deref(), Some("rejected by the test"));
    // Head-of-line: agg-3's later events wait behind the failed one.
    tokio::time::sleep(Duration::from_millis(200)).await;
    for n in 2..5 {
        assert_eq!(status_of(&db.pool, ids[&(3, n)]).await, "pending");
    }

    // Cancelling the poison event unblocks the aggregate.
    assert_eq!(store.cancel(&CancelTarget::Ids(vec![poison])).await.unwrap(), vec![poison]);
    wait_until(Duration::from_secs(30), "agg-3's remaining events are published", || async {
        count(&db.pool, "published").await == 20 * 5 - 1
    })
    .await;
    relay.stop().await;
    let agg3: Vec<u32> = recorder.seen().into_iter().filter(|s| s.aggregate == "agg-3").map(|s| s.n).collect();
    assert_eq!(agg3, [0, 2, 3, 4]);
}

/// A publisher whose error holds a NUL character, which PostgreSQL's `text` refuses.
#[derive(Clone)]
struct NulError;

impl outbox_relay::Publisher for NulError {
    async fn publish(&self, batch: &[outbox_relay::Message]) -> Vec<outbox_relay::Outcome> {
        vec![outbox_relay::Outcome::permanent("refused: bad\0byte"); batch.len()]
    }
}

/// An error with a NUL character is stored with U+FFFD in its place: a settle refused for it would leave the
/// event pending, to be published again for ever.
#[tokio::test]
async fn a_publisher_error_with_a_nul_character_is_stored_and_the_event_fails() {
    let db = TestDatabase::migrated().await;
    let ids = enqueue(&db.pool, &[event("nul", 0)]).await;
    let relay = start(&db, NulError, common::config().build().unwrap());
    wait_until(Duration::from_secs(30), "the event failed", || async { count(&db.pool, "failed").await == 1 }).await;
    relay.stop().await;
    let last_error: Option<String> = sqlx::query_scalar("SELECT last_error FROM outbox_events WHERE id = $1")
        .bind(ids[0])
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(last_error.as_deref(), Some("refused: bad\u{fffd}byte"));
}

#[tokio::test]
async fn retrying_a_failed_event_publishes_it_and_then_its_successors() {
    let db = TestDatabase::migrated().await;
    let store = PgStore::new(db.pool.clone());
    let ids = enqueue(&db.pool, &[event("r", 0), event("r", 1)]).await;
    let recorder = Recorder::new();
    recorder.permanent.lock().unwrap().insert(ids[0]);
    let relay = start(&db, recorder.for_relay(0), common::config().build().unwrap());
    wait_until(Duration::from_secs(20), "the first event fails", || async { count(&db.pool, "failed").await == 1 })
        .await;
    recorder.permanent.lock().unwrap().clear();
    assert_eq!(store.retry(&RetryTarget::AllFailed { event_type: None }).await.unwrap(), vec![ids[0]]);
    wait_until(Duration::from_secs(20), "both are published", || async { count(&db.pool, "published").await == 2 })
        .await;
    relay.stop().await;
    let order: Vec<u32> = recorder.seen().into_iter().map(|s| s.n).collect();
    assert_eq!(order, [0, 1]);
}

/// An event that took its `seq` before its aggregate's next one but commits only after that one failed for good:
/// it comes first in its aggregate's order, so it is published, while the failed event still holds back the events
/// after it.
#[tokio::test]
async fn a_late_commit_below_a_failed_event_is_published_and_the_failed_event_still_holds_the_rest() {
    let db = TestDatabase::migrated().await;
    let mut early = db.pool.begin().await.unwrap();
    let late = outbox_core::Outbox::new().enqueue(&mut early, &event("agg", 0)).await.unwrap();
    let ids = enqueue(&db.pool, &[event("agg", 1), event("agg", 2)]).await;
    let recorder = Recorder::new();
    recorder.permanent.lock().unwrap().insert(ids[0]);
    let relay = start(&db, recorder.for_relay(0), common::config().build().unwrap());
    wait_until(Duration::from_secs(20), "the second event fails", || async { count(&db.pool, "failed").await == 1 })
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    early.commit().await.unwrap();
    wait_until(Duration::from_secs(20), "the late commit is published", || async {
        status_of(&db.pool, late).await == "published"
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(status_of(&db.pool, ids[1]).await, "pending", "the failed event holds back the one after it");
    relay.stop().await;
    let order: Vec<u32> = recorder.seen().into_iter().map(|s| s.n).collect();
    assert_eq!(order, [0]);
}

/// The database's clock.
async fn db_now(db: &TestDatabase) -> OffsetDateTime {
    sqlx::query_scalar("SELECT clock_timestamp()").fetch_one(&db.pool).await.unwrap()
}

async fn schedule(db: &TestDatabase, id: uuid::Uuid) -> (i32, OffsetDateTime, Option<String>) {
    sqlx::query_as("SELECT attempts, next_attempt_at, last_error FROM outbox_events WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn transient_failures_back_off_within_bounds_then_fail_when_attempts_run_out() {
    let db = TestDatabase::migrated().await;
    let id = enqueue(&db.pool, &[event("flaky", 0)]).await[0];
    let recorder = Recorder::new();
    recorder.transient.lock().unwrap().insert(id);
    let base = Duration::from_secs(100);
    let max = Duration::from_secs(150);
    let config = common::config().backoff(base, max).max_attempts(3).build().unwrap();
    let mut relay = start(&db, recorder.for_relay(0), config.clone());
    let (mut retried, mut failed) = (0, 0);

    // Each failure schedules the next attempt at most min(max, base * 2^(attempts - 1)) after it happened.
    for (attempt, ceiling) in [(1, base), (2, max)] {
        let before = db_now(&db).await;
        if attempt > 1 {
            // Skip the wait: make the retry due now. The relay keeps its retry timers in memory, so a relay that
            // takes the partition over reads the new time from the table.
            let summary = relay.stop().await;
            (retried, failed) = (retried + summary.retried, failed + summary.failed);
            sqlx::query("UPDATE outbox_events SET next_attempt_at = now() WHERE id = $1")
                .bind(id)
                .execute(&db.pool)
                .await
                .unwrap();
            relay = start(&db, recorder.for_relay(0), config.clone());
        }
        wait_until(Duration::from_secs(20), "the attempt is recorded", || async {
            schedule(&db, id).await.0 == attempt
        })
        .await;
        let after = db_now(&db).await;
        let (_, next_attempt_at, last_error) = schedule(&db, id).await;
        assert_eq!(status_of(&db.pool, id).await, "pending");
        assert_eq!(last_error.as_deref(), Some("broker unavailable (test)"));
        assert!(next_attempt_at >= before, "attempt {attempt}: next attempt before the failure");
        assert!(
            next_attempt_at <= after + ceiling,
            "attempt {attempt}: next attempt {next_attempt_at} later than {ceiling:?} after {after}"
        );
    }

    // The third failure is the last allowed attempt: failed at once.
    let summary = relay.stop().await;
    (retried, failed) = (retried + summary.retried, failed + summary.failed);
    sqlx::query("UPDATE outbox_events SET next_attempt_at = now() WHERE id = $1")
        .bind(id)
        .execute(&db.pool)
        .await
        .unwrap();
    let relay = start(&db, recorder.for_relay(0), config);
    wait_until(Duration::from_secs(20), "the event is failed", || async { status_of(&db.pool, id).await == "failed" })
        .await;
    let (attempts, _, last_error) = schedule(&db, id).await;
    assert_eq!(attempts, 3);
    assert!(last_error.unwrap().starts_with("gave up after 3 attempts"));
    let summary = relay.stop().await;
    assert_eq!((retried + summary.retried, failed + summary.failed), (2, 1));
}

#[tokio::test]
async fn an_unmigrated_database_is_a_fatal_error_not_retried_forever() {
    let db = TestDatabase::create().await;
    let relay = start(&db, Recorder::new().for_relay(0), common::config().build().unwrap());
    let result = tokio::time::timeout(Duration::from_secs(20), relay.handle)
        .await
        .expect("the relay kept retrying a missing table")
        .expect("relay task panicked");
    match result {
        Err(error @ outbox_relay::Error::Schema { .. }) => {
            assert!(!error.is_retryable());
            assert!(error.to_string().contains("outbox migrate"), "{error}");
        }
        other => panic!("expected a schema error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_failed_event_retried_after_its_partition_start_moved_past_it_is_published() {
    let db = TestDatabase::migrated().await;
    let store = PgStore::new(db.pool.clone());
    // Without ordering, a failed event holds nothing back: its partition's start moves past it.
    let failing = enqueue(&db.pool, &[event("agg-0", 0)]).await[0];
    let recorder = Recorder::new();
    recorder.permanent.lock().unwrap().insert(failing);
    let relay = start(&db, recorder.for_relay(0), common::config().ordering(Ordering::None).build().unwrap());
    wait_until(Duration::from_secs(20), "the event fails", || async { status_of(&db.pool, failing).await == "failed" })
        .await;
    let (partition, seq): (i16, i64) = sqlx::query_as("SELECT partition, seq FROM outbox_events WHERE id = $1")
        .bind(failing)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let start_of = || async {
        sqlx::query_scalar::<_, i64>("SELECT start_seq FROM outbox_partitions WHERE partition = $1")
            .bind(partition)
            .fetch_one(&db.pool)
            .await
            .unwrap()
    };
    // Later events of the same aggregate (and partition) are published, and the start passes the failed one.
    enqueue(&db.pool, &[event("agg-0", 1), event("agg-0", 2)]).await;
    wait_until(Duration::from_secs(20), "the partition's start is past the failed event", || async {
        count(&db.pool, "published").await == 2 && start_of().await > seq
    })
    .await;
    recorder.permanent.lock().unwrap().clear();
    assert_eq!(store.retry(&RetryTarget::Ids(vec![failing])).await.unwrap(), vec![failing]);
    assert!(start_of().await <= seq, "the retry moves the start back to the retried event");
    wait_until(Duration::from_secs(20), "the retried event is published", || async {
        status_of(&db.pool, failing).await == "published"
    })
    .await;
    relay.stop().await;
    assert!(recorder.seen().iter().any(|seen| seen.id == failing));
}

#[tokio::test]
async fn a_relay_that_takes_partitions_over_reads_them_from_their_starts() {
    let db = TestDatabase::migrated().await;
    enqueue_interleaved(&db.pool, 50, 20).await;
    let first = start(&db, Recorder::new().for_relay(0), common::config().build().unwrap());
    wait_until(Duration::from_secs(30), "1000 published and every start written", || async {
        count(&db.pool, "published").await == 1000
            && sqlx::query_scalar::<_, bool>(
                "SELECT bool_and(p.start_seq > (SELECT COALESCE(max(seq), 0) FROM outbox_events e
                                                 WHERE e.partition = p.partition))
                   FROM outbox_partitions p",
            )
            .fetch_one(&db.pool)
            .await
            .unwrap()
    })
    .await;
    first.stop().await;
    // Rows published before a start are never read again: even made pending behind its back (which no relay or
    // operator command does), such a row stays where it is, while new events are published.
    sqlx::query("UPDATE outbox_events SET status = 'pending', published_at = NULL WHERE seq = 1")
        .execute(&db.pool)
        .await
        .unwrap();
    let fresh = enqueue(&db.pool, &[event("agg-new", 0)]).await[0];
    let recorder = Recorder::new();
    let second = start(&db, recorder.for_relay(1), common::config().build().unwrap());
    wait_until(Duration::from_secs(30), "the new event is published", || async {
        recorder.seen().iter().any(|seen| seen.id == fresh)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    second.stop().await;
    assert_eq!(recorder.count(), 1, "the second relay read only what came after the starts");
}
