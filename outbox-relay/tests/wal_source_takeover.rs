//! The WAL source under crashes, as real `outbox` processes on a real PostgreSQL with `wal_level = logical`: the
//! active relay is killed with SIGKILL while events flow, and the standby started on the same slot takes over,
//! within seconds, with nothing lost and the order per aggregate exact.
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
