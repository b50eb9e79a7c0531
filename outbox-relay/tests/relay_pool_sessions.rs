//! The relay's pool (`PgStore::pool_options`): its sessions run without JIT compilation, which beside a long
//! published history would compile the relay's read with LLVM at every call, and plan without sequential scans, so
//! a plan made while the table was empty does not scan the whole table once a backlog arrives.

mod common;

use std::str::FromStr;
use std::time::Duration;

use common::{count, enqueue, event, wait_until, Recorder};
use outbox_core::store::PgStore;
use outbox_relay::{Relay, Retention};
use outbox_tests::pg::TestDatabase;
use sqlx::postgres::PgConnectOptions;
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn every_session_of_the_relays_pool_has_jit_and_sequential_scans_off() {
    let db = TestDatabase::migrated().await;
    // The server's defaults are on: the pool changes its own sessions only.
    let server_defaults: (String, String) =
        sqlx::query_as("SELECT current_setting('jit'), current_setting('enable_seqscan')")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(server_defaults, ("on".to_owned(), "on".to_owned()));
    let pool = PgStore::pool_options().max_connections(3).connect(&db.url).await.unwrap();
    // Three sessions held at once, so each is a connection of its own.
    let mut sessions = Vec::new();
    for _ in 0..3 {
        sessions.push(pool.acquire().await.unwrap());
    }
    let mut pids = Vec::new();
    for session in &mut sessions {
        let (pid, jit, seqscan): (i32, String, String) =
            sqlx::query_as("SELECT pg_backend_pid(), current_setting('jit'), current_setting('enable_seqscan')")
                .fetch_one(&mut **session)
                .await
                .unwrap();
        assert_eq!((jit.as_str(), seqscan.as_str()), ("off", "off"), "session {pid}");
        pids.push(pid);
    }
    pids.sort_unstable();
    pids.dedup();
    assert_eq!(pids.len(), 3);
    drop(sessions);
    pool.close().await;
}

#[tokio::test]
async fn a_backlog_after_the_relays_statements_were_planned_on_an_empty_table_is_read_and_marked_through_indexes() {
    drain_a_backlog_after_plans_made_on_an_empty_table(Retention::Keep).await;
}

#[tokio::test]
async fn a_backlog_after_the_relays_statements_were_planned_on_an_empty_table_is_read_and_deleted_through_indexes() {
    drain_a_backlog_after_plans_made_on_an_empty_table(Retention::Immediately).await;
}

/// A relay's statements are planned while the table is empty and vacuumed, then a backlog of [`BACKLOG`] events
/// arrives: the relay drains it reading each row about once, never the whole table per read or per settle.
async fn drain_a_backlog_after_plans_made_on_an_empty_table(retention: Retention) {
    const FIRST: u32 = 10;
    const BACKLOG: u32 = 20_000;
    let db = TestDatabase::migrated().await;
    // No `ANALYZE` while the test runs (it would have the statements planned again, for the table as it is then).
    sqlx::query("ALTER TABLE outbox_events SET (autovacuum_enabled = false)").execute(&db.pool).await.unwrap();
    sqlx::query("VACUUM ANALYZE outbox_events").execute(&db.pool).await.unwrap();
    // Each statement is planned at its first call for any parameters, as PostgreSQL plans it after five calls.
    let options = PgConnectOptions::from_str(&db.url).unwrap().options([("plan_cache_mode", "force_generic_plan")]);
    let pool = PgStore::pool_options().max_connections(4).connect_with(options).await.unwrap();
    let recorder = Recorder::new();
    let config = common::config().batch_size(100).retention(retention).build().unwrap();
    let relay = Relay::new(PgStore::new(pool.clone()), recorder.for_relay(0), config);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(relay.run(shutdown.clone()));
    // Events one at a time: a read and a settle each, planned on a table of a page.
    for n in 0..FIRST {
        enqueue(&db.pool, &[event("first", n)]).await;
        let published = usize::try_from(n + 1).unwrap();
        wait_until(Duration::from_secs(30), "the first events are published", || async {
            recorder.count() >= published
        })
        .await;
    }
    let (seq_before, fetched_before) = common::rows_read(&db.pool).await;
    let events: Vec<_> = (0..BACKLOG).map(|n| event(format!("agg-{}", n % 500), n / 500)).collect();
    enqueue(&db.pool, &events).await;
    let all = usize::try_from(FIRST + BACKLOG).unwrap();
    wait_until(Duration::from_secs(300), "the backlog is published", || async { recorder.count() >= all }).await;
    shutdown.cancel();
    running.await.unwrap().unwrap();
    // The sessions' counts reach the statistics system when they end.
    pool.close().await;
    let backlog = i64::from(BACKLOG);
    wait_until(Duration::from_secs(30), "the relay's reads are counted", || async {
        let (seq, fetched) = common::rows_read(&db.pool).await;
        seq > seq_before || fetched - fetched_before >= backlog
    })
    .await;
    let (seq, fetched) = common::rows_read(&db.pool).await;
    let read = (seq - seq_before, fetched - fetched_before);
    assert_eq!(read.0, 0, "the relay read {} rows in sequential scans ({} through indexes)", read.0, read.1);
    // Each row read once through the partitions' index, plus what the backlog gauges count; a plan that scans
    // the table per partition or per batch reads it whole each time.
    assert!(read.1 <= 3 * backlog, "the relay fetched {} rows through indexes for {backlog} events", read.1);
    assert_eq!(count(&db.pool, "pending").await, 0);
    let kept = if retention == Retention::Keep { i64::from(FIRST + BACKLOG) } else { 0 };
    assert_eq!(count(&db.pool, "published").await, kept);
}
