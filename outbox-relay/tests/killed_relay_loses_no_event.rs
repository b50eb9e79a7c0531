//! The real `outbox` binary, killed with SIGKILL in the middle of a backlog and restarted, publishes every event
//! at least once, each aggregate in order; SIGTERM stops it gracefully with exit code 0.

mod common;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use common::{count, enqueue_interleaved, wait_until};
use outbox_tests::pg::TestDatabase;
use outbox_tests::process::OutboxProcess;
use uuid::Uuid;

fn relay(db: &TestDatabase, sink: &Path) -> OutboxProcess {
    let sink = format!("file:{}", sink.display());
    outbox_tests::outbox!().database(&db.url).env("OUTBOX_LOG", "warn").spawn([
        "relay",
        "--batch-size",
        "50",
        "--lease",
        "1s",
        "--poll-interval",
        "10ms",
        "--sink",
        &sink,
    ])
}

fn lines(sink: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(sink)
        .unwrap_or_default()
        .lines()
        .filter(|line| !line.is_empty())
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

#[tokio::test]
async fn killed_relay_loses_no_event_and_terminated_relay_exits_cleanly() {
    let db = TestDatabase::create().await;
    let migrate = outbox_tests::outbox!().database(&db.url).run(["migrate"]);
    assert!(migrate.status.success(), "outbox migrate: {}", String::from_utf8_lossy(&migrate.stderr));
    let ids = enqueue_interleaved(&db.pool, 300, 10).await;
    let dir = tempfile::Builder::new().prefix("outbox-kill-").tempdir().unwrap();
    let sink = dir.path().join("events.jsonl");

    // Kill the first relay once it has published part of the backlog.
    let mut first = relay(&db, &sink);
    wait_until(Duration::from_secs(60), "the first relay publishes some events", || async {
        lines(&sink).len() >= 300
    })
    .await;
    first.kill();
    let published_before_restart = count(&db.pool, "published").await;
    assert!(published_before_restart < 3000, "the relay finished before it was killed: the test shows nothing");

    let mut second = relay(&db, &sink);
    wait_until(Duration::from_secs(90), "every event is published after the restart", || async {
        count(&db.pool, "published").await == 3000
    })
    .await;
    let status = second.terminate().await;
    assert_eq!(status.code(), Some(0), "SIGTERM: {status:?}\n{}", second.stderr());

    let lines = lines(&sink);
    let written: HashSet<Uuid> = lines.iter().map(|line| line["id"].as_str().unwrap().parse().unwrap()).collect();
    let expected: HashSet<Uuid> = ids.iter().copied().collect();
    assert_eq!(written, expected, "some events were never written");
    // Duplicates only from the batch in flight at the kill; first deliveries of each aggregate are in order.
    assert!(lines.len() < 3000 + 2 * 50 * 2, "too many duplicates: {}", lines.len() - 3000);
    let mut firsts: HashMap<String, Vec<u64>> = HashMap::new();
    let mut seen = HashSet::new();
    for line in &lines {
        if seen.insert(line["id"].as_str().unwrap().to_owned()) {
            let aggregate = line["aggregate"]["id"].as_str().unwrap().to_owned();
            firsts.entry(aggregate).or_default().push(line["payload"]["n"].as_u64().unwrap());
        }
        assert_eq!(line["type"], "test.happened");
        assert_eq!(line["version"], 1);
    }
    for (aggregate, order) in firsts {
        assert_eq!(order, (0..10).collect::<Vec<u64>>(), "aggregate {aggregate}");
    }
}
