//! The WAL source under crashes, as real `outbox` processes on a real PostgreSQL with `wal_level = logical`: the
//! active relay is killed with SIGKILL while events flow, and the standby started on the same slot takes over,
//! within seconds, with nothing lost and the order per aggregate exact; killed again and again while 20,000 events
//! of both modes flow, the relays that follow lose nothing and publish every aggregate in order.
#![cfg(feature = "wal")]

mod bad_input_support;
mod common;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use outbox_tests::pg::TestDatabase;
use uuid::Uuid;

fn written(sink: &Path) -> Vec<Uuid> {
    std::fs::read_to_string(sink)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|value| value["id"].as_str().and_then(|id| id.parse().ok()))
        .collect()
}

fn sink(dir: &Path, name: &str) -> (PathBuf, String) {
    let path = dir.join(format!("{name}.jsonl"));
    let url = format!("file:{}", path.display());
    (path, url)
}

#[tokio::test]
async fn a_standby_takes_over_after_sigkill_with_nothing_lost_and_every_aggregate_in_order() {
    const AGGREGATES: u32 = 20;
    const ROUNDS: u32 = 40;
    let db = TestDatabase::migrated().await;
    let enabled = outbox_tests::outbox!().database(&db.url).run(["wal", "enable"]);
    assert!(enabled.status.success(), "{}", String::from_utf8_lossy(&enabled.stderr));
    let dir = std::env::temp_dir().join(format!("outbox-wal-takeover-{}", Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let (first_sink, first_url) = sink(&dir, "first");
    let (second_sink, second_url) = sink(&dir, "second");

    let mut first = bad_input_support::start(&db.url, &["relay", "--source", "wal", "--sink", &first_url], &[]);
    let mut ids = common::enqueue_interleaved(&db.pool, AGGREGATES, 1).await;
    common::wait_until(Duration::from_secs(60), "the first relay published", || async {
        !written(&first_sink).is_empty()
    })
    .await;
    let mut second = bad_input_support::start(&db.url, &["relay", "--source", "wal", "--sink", &second_url], &[]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    for round in 1..ROUNDS / 2 {
        let batch: Vec<_> = (0..AGGREGATES).map(|a| common::event(format!("agg-{a}"), round)).collect();
        ids.extend(common::enqueue(&db.pool, &batch).await);
    }
    first.signal("-KILL");
    let killed_at = Instant::now();
    for round in ROUNDS / 2..ROUNDS {
        let batch: Vec<_> = (0..AGGREGATES).map(|a| common::event(format!("agg-{a}"), round)).collect();
        ids.extend(common::enqueue(&db.pool, &batch).await);
    }
    common::wait_until(Duration::from_secs(60), "the standby published what was left", || async {
        common::count(&db.pool, "published").await == ids.len() as i64
    })
    .await;
    assert!(!written(&second_sink).is_empty(), "the standby published nothing");
    assert!(killed_at.elapsed() < Duration::from_secs(30), "the takeover took {:?}", killed_at.elapsed());

    // Event i is number i / AGGREGATES of aggregate i % AGGREGATES.
    let position: HashMap<Uuid, (usize, usize)> =
        ids.iter().enumerate().map(|(i, id)| (*id, (i % AGGREGATES as usize, i / AGGREGATES as usize))).collect();
    let mut seen = HashSet::new();
    let mut last: HashMap<usize, usize> = HashMap::new();
    for id in written(&first_sink).into_iter().chain(written(&second_sink)) {
        let (aggregate, n) = *position.get(&id).expect("an event that was enqueued");
        if !seen.insert(id) {
            continue; // a duplicate of what was in flight at the kill
        }
        if let Some(previous) = last.insert(aggregate, n) {
            assert!(n > previous, "aggregate {aggregate}: event {n} published after event {previous}");
        }
    }
    assert_eq!(seen.len(), ids.len(), "events lost");
    assert_eq!(second.terminate().await.code(), Some(0));
}

#[tokio::test]
async fn repeated_sigkills_during_20000_events_of_200_aggregates_in_both_modes_lose_nothing_and_keep_order() {
    const AGGREGATES: u32 = 200;
    const ROUNDS: u32 = 100;
    const KILLS: usize = 5;
    let db = TestDatabase::migrated().await;
    let enabled = outbox_tests::outbox!().database(&db.url).run(["wal", "enable"]);
    assert!(enabled.status.success(), "{}", String::from_utf8_lossy(&enabled.stderr));
    let dir = std::env::temp_dir().join(format!("outbox-wal-kills-{}", Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut sinks = Vec::new();
    let start_relay = |sinks: &mut Vec<PathBuf>| {
        let (path, url) = sink(&dir, &format!("relay-{}", sinks.len()));
        sinks.push(path);
        bad_input_support::start(&db.url, &["relay", "--source", "wal", "--sink", &url], &[])
    };
    let mut relay = start_relay(&mut sinks);
    common::wait_until(Duration::from_secs(30), "the WAL relay created its slot", || async {
        sqlx::query_scalar::<_, bool>(
            "SELECT EXISTS (SELECT 1 FROM outbox_control c JOIN pg_replication_slots s ON s.slot_name = c.wal_slot)",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap()
    })
    .await;

    // Round r holds event r of every aggregate, in one transaction: rows in even rounds, logical decoding
    // messages (no row) in odd ones.
    let pool = db.pool.clone();
    let producer = tokio::spawn(async move {
        let mut ids = Vec::with_capacity((AGGREGATES * ROUNDS) as usize);
        for round in 0..ROUNDS {
            let batch: Vec<_> = (0..AGGREGATES).map(|a| common::event(format!("agg-{a}"), round)).collect();
            if round % 2 == 0 {
                ids.extend(common::enqueue(&pool, &batch).await);
            } else {
                let mut tx = pool.begin().await.unwrap();
                ids.extend(outbox_core::Outbox::new().via_wal().enqueue_all(&mut tx, &batch).await.unwrap());
                tx.commit().await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
        ids
    });
    for _ in 0..KILLS {
        tokio::time::sleep(Duration::from_millis(800)).await;
        relay.signal("-KILL");
        relay.wait_for_exit(Duration::from_secs(10)).await;
        relay = start_relay(&mut sinks);
    }
    let ids = producer.await.unwrap();
    assert_eq!(ids.len(), (AGGREGATES * ROUNDS) as usize);
    let all_written = || sinks.iter().flat_map(|sink| written(sink)).collect::<HashSet<Uuid>>();
    common::wait_until(Duration::from_secs(120), "the last relay published every event", || async {
        all_written().len() >= ids.len()
    })
    .await;
    let published_by_the_killed: usize = sinks[..KILLS].iter().map(|sink| written(sink).len()).sum();
    assert!(published_by_the_killed > 0, "the kills came before anything was published: the test proves nothing");

    // Event i is number i / AGGREGATES of aggregate i % AGGREGATES. Each relay publishes every aggregate in
    // order; across relays an event may come again (what a killed relay had in flight), but an event is first
    // published only after every earlier event of its aggregate.
    let position: HashMap<Uuid, (usize, usize)> =
        ids.iter().enumerate().map(|(i, id)| (*id, (i % AGGREGATES as usize, i / AGGREGATES as usize))).collect();
    let mut seen = HashSet::new();
    let mut first_published: HashMap<usize, usize> = HashMap::new();
    for sink in &sinks {
        let mut last: HashMap<usize, usize> = HashMap::new();
        for id in written(sink) {
            let (aggregate, n) = *position.get(&id).expect("an event that was enqueued");
            if let Some(previous) = last.insert(aggregate, n) {
                assert!(n > previous, "aggregate {aggregate}: event {n} published after event {previous} in {sink:?}");
            }
            if seen.insert(id) {
                let count = first_published.entry(aggregate).or_default();
                assert_eq!(n, *count, "aggregate {aggregate}: event {n} first published before event {count}");
                *count += 1;
            }
        }
    }
    assert_eq!(seen.len(), ids.len(), "events lost");
    assert_eq!(common::count(&db.pool, "pending").await, 0, "no row left pending");
    assert_eq!(relay.terminate().await.code(), Some(0));
}
