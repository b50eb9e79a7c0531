//! `outbox relay --sink stdout` whose reader stops reading (a pipe to a consumer that hangs): the write blocks,
//! but on a thread of its own, so the relay's heartbeats go on and it keeps its partitions; nothing is marked
//! published that the pipe did not take.

mod common;

use std::process::Stdio;
use std::time::Duration;

use outbox_tests::pg::TestDatabase;

/// The relay's last heartbeat, as seconds since the epoch.
async fn heartbeat(db: &TestDatabase) -> Option<f64> {
    sqlx::query_scalar("SELECT extract(epoch FROM max(heartbeat_at))::float8 FROM outbox_relays")
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_blocked_stdout_stops_no_heartbeat() {
    let db = TestDatabase::migrated().await;
    let events: Vec<_> = (0..3000).map(|n| common::event(format!("a-{}", n % 50), n / 50)).collect();
    common::enqueue(&db.pool, &events).await;
    let stderr = tempfile::NamedTempFile::new().unwrap();
    let mut relay = outbox_tests::outbox!()
        .database(&db.url)
        .env("OUTBOX_LOG", "warn")
        .command(["relay", "--sink", "stdout", "--batch-size", "50"])
        .stdout(Stdio::piped()) // never read: the pipe fills and the writes block
        .stderr(stderr.reopen().unwrap())
        .spawn()
        .expect("start outbox relay");
    // The pipe holds a few hundred lines: publishing stops well short of the backlog.
    let mut published = -1;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = common::count(&db.pool, "published").await;
        if now == published && now > 0 {
            break;
        }
        published = now;
    }
    assert!(published > 0 && published < events.len() as i64, "the pipe should have filled: {published} published");
    let before = heartbeat(&db).await.expect("the relay is a member");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = heartbeat(&db).await.expect("the relay is still a member");
    let log = std::fs::read_to_string(stderr.path()).unwrap_or_default();
    assert!(after > before + 1.0, "no heartbeat for 3 s while stdout was blocked ({before} -> {after}): {log}");
    assert_eq!(common::count(&db.pool, "published").await, published, "nothing published past the blocked write");
    relay.kill().unwrap();
    relay.wait().unwrap();
}
