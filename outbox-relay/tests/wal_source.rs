//! The write-ahead-log source (`outbox relay --source wal`), as real `outbox` processes on a real PostgreSQL
//! started with `wal_level = logical`: the rows pending when the slot is created are published first, once; then
//! the stream publishes in commit order; a restarted relay resumes without losing or re-publishing settled events;
//! and a relay of the source that does not publish the table refuses to start with one line.
#![cfg(feature = "wal")]

mod bad_input_support;
mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use outbox_core::Outbox;
use outbox_tests::pg::TestDatabase;
use uuid::Uuid;

/// The ids the file sink wrote, in order.
fn written(sink: &Path) -> Vec<Uuid> {
    std::fs::read_to_string(sink)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            value["id"].as_str().expect("an id").parse().expect("a UUID")
        })
        .collect()
}

fn wait_for_lines(sink: &Path, n: usize) -> Vec<Uuid> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ids = written(sink);
        if ids.len() >= n {
            return ids;
        }
        assert!(Instant::now() < deadline, "the relay wrote {} of {n} events within 60 s", ids.len());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn outbox(url: &str, args: &[&str]) -> std::process::Output {
    outbox_tests::outbox!().database(url).run(args)
}

fn sink_in(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("outbox-wal-{name}-{}", Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("events.jsonl")
}

#[tokio::test]
async fn pending_rows_are_published_first_once_then_the_stream_in_commit_order_and_a_restart_loses_nothing() {
    let db = TestDatabase::migrated().await;
    let before: Vec<Uuid> = common::enqueue(&db.pool, &[common::event("a", 0), common::event("a", 1)]).await;
    let enabled = outbox(&db.url, &["wal", "enable"]);
    assert!(enabled.status.success(), "{}", String::from_utf8_lossy(&enabled.stderr));

    let sink = sink_in("order");
    let sink_url = format!("file:{}", sink.display());
    let args = ["relay", "--source", "wal", "--sink", sink_url.as_str()];
    let mut relay = bad_input_support::start(&db.url, &args, &[]);
    assert_eq!(wait_for_lines(&sink, 2), before, "the rows pending at the slot's creation, in seq order");

    // Two transactions of one aggregate that commit in the reverse of their inserts.
    let mut first = db.pool.begin().await.unwrap();
    let inserted_first = Outbox::new().enqueue(&mut first, &common::event("b", 0)).await.unwrap();
    let mut second = db.pool.begin().await.unwrap();
    let inserted_second = Outbox::new().enqueue(&mut second, &common::event("b", 1)).await.unwrap();
    second.commit().await.unwrap();
    first.commit().await.unwrap();
    let ids = wait_for_lines(&sink, 4);
    assert_eq!(ids[2..], [inserted_second, inserted_first], "published in commit order");

    assert_eq!(relay.terminate().await.code(), Some(0), "SIGTERM stops the WAL relay gracefully");
    let during_stop = common::enqueue(&db.pool, &[common::event("c", 0), common::event("c", 1)]).await;
    let mut relay = bad_input_support::start(&db.url, &args, &[]);
    let ids = wait_for_lines(&sink, 6);
    assert_eq!(ids[4..], during_stop, "the restarted relay resumes the stream where it was acknowledged");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(written(&sink).len(), 6, "nothing published twice: {:?}", written(&sink));
    assert_eq!(common::count(&db.pool, "published").await, 6, "every row settled as published");
    assert_eq!(relay.terminate().await.code(), Some(0));

    let disabled = outbox(&db.url, &["wal", "disable"]);
    assert!(disabled.status.success(), "{}", String::from_utf8_lossy(&disabled.stderr));
    let slots: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_replication_slots WHERE database = current_database()")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(slots, 0, "`outbox wal disable` drops the slot");
}

#[tokio::test]
async fn a_relay_of_the_source_that_does_not_publish_the_table_exits_2_with_one_line_saying_how_to_switch() {
    let db = TestDatabase::migrated().await;
    let wal = outbox(&db.url, &["relay", "--source", "wal", "--sink", "stdout"]);
    assert_eq!(wal.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&wal.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.starts_with("error: ") && last.contains("`outbox wal enable`"), "{stderr}");

    assert!(outbox(&db.url, &["wal", "enable"]).status.success());
    let table = outbox(&db.url, &["relay", "--sink", "stdout"]);
    assert_eq!(table.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&table.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.starts_with("error: ") && last.contains("`outbox wal disable`"), "{stderr}");
}

#[tokio::test]
async fn wal_enable_is_refused_while_a_table_relay_is_live() {
    let db = TestDatabase::migrated().await;
    let mut relay = bad_input_support::start(&db.url, &["relay", "--sink", "stdout"], &[]);
    common::wait_until(Duration::from_secs(30), "the table relay joined", || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM outbox_relays").fetch_one(&db.pool).await.unwrap() > 0
    })
    .await;
    let refused = outbox(&db.url, &["wal", "enable"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("table relay(s) are live"));
    let source: String = sqlx::query_scalar("SELECT source FROM outbox_control").fetch_one(&db.pool).await.unwrap();
    assert_eq!(source, "table", "a refused switch changes nothing");
    assert_eq!(relay.terminate().await.code(), Some(0));
}
