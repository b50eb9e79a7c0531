//! The control row pauses claiming; retention deletes only old finished rows; the NOTIFY listener wakes the
//! relay and reconnects after its connection is killed.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{count, enqueue, event, start, wait_until, Recorder};
use outbox_core::store::{CancelTarget, PgStore, Store};
use outbox_core::Outbox;
use outbox_relay::{Retention, Wakeup};
use outbox_tests::pg::TestDatabase;
use uuid::Uuid;

async fn claimed_ids(db: &TestDatabase) -> BTreeSet<Uuid> {
    sqlx::query_scalar::<_, Uuid>("SELECT id FROM outbox_events WHERE lease_epoch > 0")
        .fetch_all(&db.pool)
        .await
        .unwrap()
        .into_iter()
        .collect()
}

#[tokio::test]
async fn pause_stops_claiming_within_one_poll_interval() {
    let db = TestDatabase::migrated().await;
    let store = PgStore::new(db.pool.clone());
    let poll = Duration::from_millis(50);
    let recorder = Recorder::new();
    let relay = start(&db, recorder.for_relay(0), common::config().poll_interval(poll).build().unwrap());

    // A steady stream of events is flowing when the pause comes.
    let producer_db = db.pool.clone();
    let producer = tokio::spawn(async move {
        for n in 0..200 {
            common::enqueue(&producer_db, &[event("stream", n)]).await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    wait_until(Duration::from_secs(20), "some events are published", || async { recorder.count() > 10 }).await;
    store.set_paused(true).await.unwrap();
    assert!(store.is_paused().await.unwrap());
    tokio::time::sleep(poll).await;
    let claimed_after_one_interval = claimed_ids(&db).await;
    tokio::time::sleep(poll * 10).await;
    assert_eq!(claimed_ids(&db).await, claimed_after_one_interval, "events were claimed while paused");
    assert_eq!(count(&db.pool, "in_flight").await, 0, "in-flight work was not finished");
    producer.await.unwrap();
    assert!(count(&db.pool, "pending").await > 0, "the producer finished before the pause: nothing shown");

    store.set_paused(false).await.unwrap();
    wait_until(Duration::from_secs(20), "everything is published after resume", || async {
        count(&db.pool, "published").await == 200
    })
    .await;
    relay.stop().await;
}

/// The relay's last heartbeat, as the database recorded it.
async fn heartbeat_at(db: &TestDatabase) -> Option<String> {
    sqlx::query_scalar("SELECT max(heartbeat_at)::text FROM outbox_relays").fetch_one(&db.pool).await.unwrap()
}

/// A transaction that took its `seq` before a published one commits while publishing is paused, before the relay's
/// heartbeat has seen the pause: the reads that find the pause answer nothing about the range it sits in, so it is
/// published after the resume rather than left below the read's cursor.
#[tokio::test]
async fn a_late_commit_during_a_pause_is_published_after_resume() {
    let db = TestDatabase::migrated().await;
    let store = PgStore::new(db.pool.clone());
    let neighbour: String = sqlx::query_scalar(
        "SELECT 'neighbour-' || n FROM generate_series(1, 100000) n
          WHERE outbox_partition_of('test', 'neighbour-' || n) = outbox_partition_of('test', 'late') LIMIT 1",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let recorder = Recorder::new();
    let relay = start(&db, recorder.for_relay(0), common::config().build().unwrap());
    let mut early = db.pool.begin().await.unwrap();
    let slow = Outbox::new().enqueue(&mut early, &event("late", 0)).await.unwrap();
    let fast = enqueue(&db.pool, &[event(&neighbour, 0)]).await[0];
    wait_until(Duration::from_secs(10), "the later transaction is published", || async {
        recorder.seen().iter().any(|s| s.id == fast)
    })
    .await;
    // Right after a heartbeat: the relay's lanes learn of the pause from their reads until the next one.
    let beat = heartbeat_at(&db).await;
    wait_until(Duration::from_secs(10), "a heartbeat", || async { heartbeat_at(&db).await != beat }).await;
    store.set_paused(true).await.unwrap();
    early.commit().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(recorder.seen().iter().all(|s| s.id != slow), "published while paused");
    store.set_paused(false).await.unwrap();
    wait_until(Duration::from_secs(20), "the late commit is published after resume", || async {
        recorder.seen().iter().any(|s| s.id == slow)
    })
    .await;
    relay.stop().await;
}

#[tokio::test]
async fn retention_deletes_only_old_published_and_cancelled_rows() {
    let db = TestDatabase::migrated().await;
    let store = PgStore::new(db.pool.clone());
    let published = enqueue(&db.pool, &(0..10).map(|n| event(format!("p{n}"), 0)).collect::<Vec<_>>()).await;
    let relay = start(&db, Recorder::new().for_relay(0), common::config().build().unwrap());
    wait_until(Duration::from_secs(20), "10 published", || async { count(&db.pool, "published").await == 10 }).await;
    relay.stop().await;
    let cancelled = enqueue(&db.pool, &[event("c", 0), event("c2", 0)]).await;
    store.cancel(&CancelTarget::Ids(cancelled.clone())).await.unwrap();
    let pending = enqueue(&db.pool, &[event("q", 0)]).await;
    let failed = enqueue(&db.pool, &[event("f", 0)]).await;
    sqlx::query("UPDATE outbox_events SET status = 'failed', attempts = 1 WHERE id = $1")
        .bind(failed[0])
        .execute(&db.pool)
        .await
        .unwrap();
    // Age: 6 of the published rows, one cancelled, and the pending and failed ones are two days old.
    let old: Vec<Uuid> = published[..6].iter().chain(&cancelled[..1]).chain(&pending).chain(&failed).copied().collect();
    sqlx::query(
        "UPDATE outbox_events SET created_at = now() - interval '2 days',
                published_at = CASE WHEN published_at IS NULL THEN NULL ELSE now() - interval '2 days' END
          WHERE id = ANY($1)",
    )
    .bind(&old)
    .execute(&db.pool)
    .await
    .unwrap();

    let relay = start(
        &db,
        Recorder::new().for_relay(0),
        common::config().retention(Retention::After(Duration::from_secs(24 * 3600))).build().unwrap(),
    );
    // 4 recent published rows plus the old pending one, published now.
    wait_until(Duration::from_secs(20), "old finished rows are deleted", || async {
        count(&db.pool, "published").await == 5 && count(&db.pool, "cancelled").await == 1
    })
    .await;
    relay.stop().await;
    let left: BTreeSet<Uuid> = sqlx::query_scalar::<_, Uuid>("SELECT id FROM outbox_events")
        .fetch_all(&db.pool)
        .await
        .unwrap()
        .into_iter()
        .collect();
    let expected: BTreeSet<Uuid> =
        published[6..].iter().chain(&cancelled[1..]).chain(&pending).chain(&failed).copied().collect();
    // The old pending row was published by the second relay meanwhile: it finished just now, so it stays.
    assert_eq!(left, expected);
    assert_eq!(common::status_of(&db.pool, pending[0]).await, "published");
}

/// A pass of retention deletes every row that has come of age, however many: a pass capped at a number of rows
/// fell behind any publish rate above that number per interval (every minute for a retention of 10 minutes or
/// more), and the table grew for good.
#[tokio::test]
async fn retention_deletes_every_row_that_came_of_age_in_one_pass() {
    let db = TestDatabase::migrated().await;
    sqlx::query(
        "INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, status, created_at,
                                    published_at)
         SELECT gen_random_uuid(), 'test', 'old-' || (i % 100), 'test.happened', '{}', 'published',
                now() - interval '8 days', now() - interval '8 days'
           FROM generate_series(1, 30000) i",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let relay = start(
        &db,
        Recorder::new().for_relay(0),
        common::config().retention(Retention::After(Duration::from_secs(7 * 24 * 3600))).build().unwrap(),
    );
    // The first pass runs at start; the next would come a minute later.
    wait_until(Duration::from_secs(30), "every old row is deleted", || async {
        common::counts(&db.pool).await.is_empty()
    })
    .await;
    relay.stop().await;
}

#[tokio::test]
async fn immediate_retention_deletes_rows_as_they_are_published() {
    let db = TestDatabase::migrated().await;
    enqueue(&db.pool, &(0..25).map(|n| event(format!("i{n}"), 0)).collect::<Vec<_>>()).await;
    let recorder = Recorder::new();
    let relay = start(&db, recorder.for_relay(0), common::config().retention(Retention::Immediately).build().unwrap());
    wait_until(Duration::from_secs(20), "the table is empty", || async { common::counts(&db.pool).await.is_empty() })
        .await;
    let summary = relay.stop().await;
    assert_eq!(summary.published, 25);
    assert_eq!(recorder.count(), 25);
}

async fn listener_pid(db: &TestDatabase) -> Option<i32> {
    sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query ILIKE 'LISTEN%' LIMIT 1",
    )
    .fetch_optional(&db.pool)
    .await
    .unwrap()
}

/// A relay woken by notifications and polling every hour (only notifications get events out within a test's
/// time), once it listens and past the reads that follow connecting.
async fn start_listening(db: &TestDatabase, recorder: &std::sync::Arc<Recorder>) -> common::Running {
    let config = common::config()
        .poll_interval(Duration::from_secs(3600))
        .wakeup(Wakeup::Notify { channel: outbox_core::DEFAULT_CHANNEL.to_owned() })
        .build()
        .unwrap();
    let relay = start(db, recorder.for_relay(0), config);
    wait_until(Duration::from_secs(20), "the relay listens", || async { listener_pid(db).await.is_some() }).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    relay
}

#[tokio::test]
async fn notify_wakes_the_relay_and_the_listener_reconnects_after_losing_its_connection() {
    let db = TestDatabase::migrated().await;
    let recorder = Recorder::new();
    let relay = start_listening(&db, &recorder).await;

    let notifying = Outbox::new().with_notify();
    let mut tx = db.pool.begin().await.unwrap();
    notifying.enqueue(&mut tx, &event("n", 0)).await.unwrap();
    tx.commit().await.unwrap();
    wait_until(Duration::from_secs(10), "the notified event is published", || async { recorder.count() == 1 }).await;

    // The database drops the listener's connection (as in a restart).
    let first = listener_pid(&db).await.unwrap();
    sqlx::query("SELECT pg_terminate_backend($1)").bind(first).execute(&db.pool).await.unwrap();
    wait_until(Duration::from_secs(30), "the listener reconnects", || async {
        listener_pid(&db).await.is_some_and(|pid| pid != first)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut tx = db.pool.begin().await.unwrap();
    notifying.enqueue(&mut tx, &event("n", 1)).await.unwrap();
    tx.commit().await.unwrap();
    wait_until(Duration::from_secs(10), "the event after the reconnect is published", || async {
        recorder.count() == 2
    })
    .await;
    relay.stop().await;
}

/// A listener whose connection the database dropped, and which sqlx made again by itself, wakes the relay at once:
/// notifications sent while it was away were lost, and with a long poll interval their events would wait for it.
#[tokio::test]
async fn a_listener_that_reconnects_wakes_the_relay_for_the_notifications_it_missed() {
    let db = TestDatabase::migrated().await;
    let recorder = Recorder::new();
    let relay = start_listening(&db, &recorder).await;
    // Written without a notification, as one sent while the listener was away is lost.
    enqueue(&db.pool, &[event("missed", 0)]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(recorder.count(), 0, "published without a wake-up");
    let first = listener_pid(&db).await.unwrap();
    sqlx::query("SELECT pg_terminate_backend($1)").bind(first).execute(&db.pool).await.unwrap();
    wait_until(Duration::from_secs(20), "the event is published once the listener is back", || async {
        recorder.count() == 1
    })
    .await;
    relay.stop().await;
}
