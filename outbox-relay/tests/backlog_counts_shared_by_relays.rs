//! The backlog gauges' counts, shared by the relays of a database (`Store::shared_backlog`): one relay counts, at
//! most once per refresh interval, and the others read its counts, so N relays cost the database one count.

mod common;

use std::time::Duration;

use common::{enqueue, event, wait_until};
use outbox_core::store::{Backlog, PgStore, Store};
use outbox_tests::pg::TestDatabase;

const MINUTE: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_relay_reads_the_counts_another_took_until_they_are_older_than_it_allows() {
    let db = TestDatabase::migrated().await;
    enqueue(&db.pool, &[event("a", 0), event("a", 1), event("b", 0)]).await;
    let counting = PgStore::new(db.pool.clone());
    let reading = PgStore::new(db.pool.clone());
    let first = counting.shared_backlog(MINUTE).await.unwrap().expect("the first call counts");
    assert_eq!((first.backlog.pending_total(), first.age), (3, Duration::ZERO));

    enqueue(&db.pool, &[event("c", 0)]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let read = reading.shared_backlog(MINUTE).await.unwrap().expect("the stored counts");
    let counts =
        |backlog: &Backlog| backlog.pending.iter().map(|p| (p.event_type.clone(), p.pending)).collect::<Vec<_>>();
    assert_eq!(counts(&read.backlog), counts(&first.backlog), "the counts taken a second ago, not a new count");
    assert_eq!(read.backlog.pending_total(), 3);
    assert!(read.age >= Duration::from_secs(1), "{:?}", read.age);
    assert!(
        read.backlog.oldest_pending_age() >= first.backlog.oldest_pending_age() + Duration::from_millis(900),
        "the oldest event's age is brought up to now: {:?} then {:?}",
        first.backlog.oldest_pending_age(),
        read.backlog.oldest_pending_age()
    );
    assert!(read.took.abs_diff(first.took) < Duration::from_millis(1), "{:?} {:?}", read.took, first.took);
    assert_eq!(reading.backlog().await.unwrap().pending_total(), 4);

    // The pause flag is read at every call, not stored with the counts.
    reading.set_paused(true).await.unwrap();
    assert!(reading.shared_backlog(MINUTE).await.unwrap().expect("the stored counts").backlog.paused);

    // Counts older than the caller allows are taken again, by the caller.
    let recounted = reading.shared_backlog(Duration::from_millis(500)).await.unwrap().expect("a new count");
    assert_eq!((recounted.backlog.pending_total(), recounted.age), (4, Duration::ZERO));
    assert!(recounted.backlog.paused);
}

#[tokio::test]
async fn while_another_relay_takes_the_first_count_there_is_none_until_its_claim_is_as_old_as_counts_may_be() {
    let db = TestDatabase::migrated().await;
    enqueue(&db.pool, &[event("a", 0)]).await;
    // A relay claimed the first count and has not stored it (it is counting, or died counting).
    sqlx::query("UPDATE outbox_backlog_counts SET claimed_at = now()").execute(&db.pool).await.unwrap();
    let store = PgStore::new(db.pool.clone());
    assert_eq!(store.shared_backlog(MINUTE).await.unwrap(), None);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let counted = store.shared_backlog(Duration::from_millis(500)).await.unwrap().expect("the claim expired");
    assert_eq!(counted.backlog.pending_total(), 1);
}

#[tokio::test]
async fn relays_that_ask_at_once_count_the_backlog_once() {
    let db = TestDatabase::migrated().await;
    let events: Vec<_> = (0..2_000).map(|n| event(format!("agg-{}", n % 50), n / 50)).collect();
    enqueue(&db.pool, &events).await;
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(8).connect(&db.url).await.unwrap();
    let asked: Vec<_> = (0..8)
        .map(|_| {
            let store = PgStore::new(pool.clone());
            tokio::spawn(async move { store.shared_backlog(MINUTE).await.unwrap() })
        })
        .collect();
    let mut answered = 0;
    for answer in asked {
        if let Some(shared) = answer.await.unwrap() {
            assert_eq!(shared.backlog.pending_total(), 2_000);
            answered += 1;
        }
    }
    assert!(answered >= 1, "the relay that counted has the counts");
    // The sessions' counts reach the statistics system when they end: one claim and one store, from one relay.
    pool.close().await;
    let updates = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'outbox_backlog_counts'",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap()
    };
    wait_until(Duration::from_secs(30), "the updates are counted", || async { updates().await >= 2 }).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(updates().await, 2, "rows written to the shared counts by 8 relays asking at once");
}

#[tokio::test]
async fn a_relay_role_granted_before_the_counts_were_shared_counts_for_itself() {
    let db = TestDatabase::migrated().await;
    enqueue(&db.pool, &[event("a", 0), event("b", 0)]).await;
    // Roles belong to the whole server: a name of this test's own.
    let role = format!("outbox_relay_{}", uuid::Uuid::now_v7().simple());
    sqlx::raw_sql(&outbox_tests::pg::relay_role_sql(&role)).execute(&db.pool).await.unwrap();
    sqlx::raw_sql(&format!("ALTER ROLE {role} LOGIN")).execute(&db.pool).await.unwrap();
    let options = db.url.parse::<sqlx::postgres::PgConnectOptions>().unwrap().username(&role);
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect_with(options).await.unwrap();
    let relay = PgStore::new(pool.clone());
    // With the role's grants, the count is shared.
    let shared = relay.shared_backlog(Duration::ZERO).await.unwrap().expect("counted");
    assert_eq!(shared.backlog.pending_total(), 2);
    let stored: String =
        sqlx::query_scalar("SELECT counts::text FROM outbox_backlog_counts").fetch_one(&db.pool).await.unwrap();
    assert!(stored.contains("\"n\": 2") || stored.contains("\"n\":2"), "{stored}");
    // Without them, as granted before: counted, not stored.
    sqlx::raw_sql(&format!("REVOKE ALL ON outbox_backlog_counts FROM {role}")).execute(&db.pool).await.unwrap();
    enqueue(&db.pool, &[event("c", 0)]).await;
    let alone = relay.shared_backlog(MINUTE).await.unwrap().expect("counted");
    assert_eq!((alone.backlog.pending_total(), alone.age), (3, Duration::ZERO));
    let stored_after: String =
        sqlx::query_scalar("SELECT counts::text FROM outbox_backlog_counts").fetch_one(&db.pool).await.unwrap();
    assert_eq!(stored_after, stored);
    pool.close().await;
}
