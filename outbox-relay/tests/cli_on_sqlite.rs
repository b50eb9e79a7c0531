//! The `outbox` binary on the embedded backend: migrate, relay to a file sink, status, events and pause work on a
//! `sqlite://` URL as they do on PostgreSQL.
#![cfg(feature = "cli")]

use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use outbox_core::{Outbox, OutboxEvent};
use serde::Serialize;

#[derive(Serialize)]
struct OrderPlaced {
    order_id: u32,
    email: String,
}

impl OutboxEvent for OrderPlaced {
    const EVENT_TYPE: &'static str = "order.placed";
    const AGGREGATE_TYPE: &'static str = "order";
    const VERSION: u32 = 1;

    fn aggregate_id(&self) -> String {
        self.order_id.to_string()
    }

    fn sensitive_paths() -> Vec<String> {
        vec!["/email".to_owned()]
    }
}

fn outbox(url: &str, args: &[&str]) -> Output {
    outbox_tests::outbox!().database(url).run(args)
}

#[tokio::test]
async fn every_command_works_on_a_sqlite_database() {
    let (dir, url, _pool, ids) = backlog("cli-sqlite", 3).await;

    let status = outbox(&url, &["status", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(report["pending"], 3, "{report}");
    assert_eq!(report["pending_by_type"][0]["event_type"], "order.placed", "{report}");

    let shown = outbox(&url, &["events", "show", &ids[0].to_string()]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("[REDACTED]") && !shown.contains("buyer1@example.com"), "{shown}");

    let sink = dir.path().join("events.jsonl");
    let sink_url = format!("file:{}", sink.display());
    let mut relay =
        outbox_tests::outbox!().database(&url).spawn(["relay", "--sink", &sink_url, "--poll-interval", "10ms"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(&sink).map(|s| s.lines().count()).unwrap_or(0) < 3 {
        assert!(Instant::now() < deadline, "the relay did not write 3 events within 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    let exit = relay.terminate().await;
    assert_eq!(exit.code(), Some(0), "SIGTERM stops the relay gracefully");

    let written: Vec<serde_json::Value> =
        std::fs::read_to_string(&sink).unwrap().lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    let written_ids: Vec<String> = written.iter().map(|line| line["id"].as_str().unwrap().to_owned()).collect();
    assert_eq!(written_ids, ids.iter().map(ToString::to_string).collect::<Vec<_>>());

    let listed = outbox(&url, &["events", "list", "--status", "published", "--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed.as_array().map(Vec::len), Some(3), "{listed}");

    assert!(outbox(&url, &["pause"]).status.success());
    let paused: serde_json::Value = serde_json::from_slice(&outbox(&url, &["status", "--json"]).stdout).unwrap();
    assert_eq!(paused["paused"], true);
    assert!(outbox(&url, &["resume"]).status.success());

    let missing = outbox(&format!("sqlite://{}", dir.path().join("nope.db").display()), &["status"]);
    assert_eq!(missing.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("error: missing database"), "{stderr}");
}

/// A migrated SQLite file in a fresh directory with `events` pending `order.placed` events: the directory (removed
/// when dropped), the database URL, a pool on it and the events' ids.
async fn backlog(name: &str, events: u32) -> (tempfile::TempDir, String, sqlx::SqlitePool, Vec<uuid::Uuid>) {
    let dir = tempfile::Builder::new().prefix(&format!("outbox-{name}-")).tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("outbox.db").display());
    let created = outbox(&format!("{url}?mode=rwc"), &["migrate"]);
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let events: Vec<_> =
        (1..=events).map(|order_id| OrderPlaced { order_id, email: format!("buyer{order_id}@example.com") }).collect();
    let mut tx = pool.begin().await.unwrap();
    let ids = Outbox::new().enqueue_all(&mut tx, &events).await.unwrap();
    tx.commit().await.unwrap();
    (dir, url, pool, ids)
}

/// How many events are in each status, and the attempts spent in all.
async fn statuses(pool: &sqlx::SqlitePool) -> (Vec<(String, i64)>, i64) {
    let counts = sqlx::query_as("SELECT status, count(*) FROM outbox_events GROUP BY status ORDER BY status")
        .fetch_all(pool)
        .await
        .unwrap();
    let attempts =
        sqlx::query_scalar("SELECT coalesce(sum(attempts), 0) FROM outbox_events").fetch_one(pool).await.unwrap();
    (counts, attempts)
}

#[tokio::test]
async fn file_sink_on_dev_null_drains_a_backlog() {
    let (_dir, url, pool, _) = backlog("dev-null", 250).await;
    let mut relay = outbox_tests::outbox!().database(&url).spawn([
        "relay",
        "--sink",
        "file:/dev/null",
        "--poll-interval",
        "10ms",
        "--max-attempts",
        "2",
    ]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (counts, _) = statuses(&pool).await;
        if counts == [("published".to_owned(), 250)] {
            break;
        }
        assert!(Instant::now() < deadline, "the backlog did not drain into /dev/null within 30 s: {counts:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let exit = relay.terminate().await;
    assert_eq!(exit.code(), Some(0), "SIGTERM stops the relay gracefully");
    let stderr = relay.stderr();
    assert!(!stderr.contains("Invalid argument") && !stderr.contains("WARN"), "{stderr}");
    let (_, attempts) = statuses(&pool).await;
    assert_eq!(attempts, 0, "no publish failed, so no attempt was spent");
}

#[tokio::test]
async fn file_sink_on_dev_stdout_writes_the_events_to_the_relays_standard_output() {
    let (_dir, url, pool, _) = backlog("dev-stdout", 3).await;
    // Standard output a pipe, as in `outbox relay --sink file:/dev/stdout | consumer`.
    let mut relay = KilledOnDrop(
        outbox_tests::outbox!()
            .database(&url)
            .command(["relay", "--sink", "file:/dev/stdout", "--poll-interval", "10ms"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start outbox relay"),
    );
    let stdout = std::io::BufReader::new(relay.0.stdout.take().unwrap());
    let lines =
        std::thread::spawn(move || std::io::BufRead::lines(stdout).take(3).map(Result::unwrap).collect::<Vec<_>>());
    let deadline = Instant::now() + Duration::from_secs(30);
    while !lines.is_finished() {
        assert!(Instant::now() < deadline, "the relay did not write 3 events to its standard output within 30 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let lines = lines.join().unwrap();
    for line in &lines {
        let event: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(event["type"], "order.placed", "{line}");
    }
    assert!(outbox_tests::process::send_signal(relay.0.id(), "-TERM"));
    assert_eq!(relay.0.wait().unwrap().code(), Some(0));
    assert_eq!(statuses(&pool).await, (vec![("published".to_owned(), 3)], 0));
}

/// A child process killed (if it still runs) when the test ends, also when an assertion fails on the way.
struct KilledOnDrop(std::process::Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        // A child already waited for is not signalled again (its pid may be another process's by now).
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn unwritable_file_sink_stops_the_relay_at_start_with_exit_2_and_one_line() {
    let (dir, url, pool, _) = backlog("unwritable-sink", 3).await;
    let sinks = [
        // A directory, a file in a directory that does not exist, and a path no one may create (sysfs refuses
        // new files, also to root).
        (dir.path().display().to_string(), "Is a directory"),
        (dir.path().join("missing").join("events.jsonl").display().to_string(), "does not exist"),
        ("/sys/outbox-events.jsonl".to_owned(), "ermission denied"),
    ];
    for (path, reason) in sinks {
        let started = Instant::now();
        let output = outbox(&url, &["relay", "--sink", &format!("file:{path}")]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "file:{path}: {stderr}");
        assert!(started.elapsed() < Duration::from_secs(10), "file:{path} was not refused at start");
        assert_eq!(stderr.lines().count(), 1, "one line for file:{path}: {stderr}");
        assert!(stderr.starts_with(&format!("error: cannot open sink `file:{path}`")), "{stderr}");
        assert!(stderr.contains(reason), "file:{path}: {stderr}");
    }
    assert_eq!(statuses(&pool).await, (vec![("pending".to_owned(), 3)], 0), "nothing was claimed");
}

#[tokio::test]
async fn the_wal_source_on_sqlite_is_refused_at_start_before_the_sink_is_opened() {
    let (dir, url, pool, _) = backlog("wal-on-sqlite", 3).await;
    let sink = dir.path().join("events.jsonl");
    let output = outbox(&url, &["relay", "--source", "wal", "--sink", &format!("file:{}", sink.display())]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("--source wal needs PostgreSQL"), "{stderr}");
    assert!(!sink.exists(), "the file sink was created");
    assert_eq!(statuses(&pool).await, (vec![("pending".to_owned(), 3)], 0), "nothing was claimed");
}

/// A row written by plain SQL with an id in another form than lowercase hyphenated UUID text is refused with one
/// line saying the form (before, such a row stopped the relay's reads, or was published and never settled).
#[tokio::test]
async fn rows_written_by_hand_with_ids_the_outbox_cannot_match_are_refused() {
    let (_dir, _url, pool, _) = backlog("ids-by-hand", 0).await;
    let insert = "INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
                  VALUES (?1, 'order', '1', 'order.placed', '{}')";
    let id = uuid::Uuid::now_v7();
    for wrong in [
        id.hyphenated().to_string().to_uppercase(),
        id.simple().to_string(),
        id.braced().to_string(),
        "order-42".to_owned(),
    ] {
        let refused = sqlx::query(insert).bind(&wrong).execute(&pool).await.expect_err(&wrong);
        assert!(refused.to_string().contains("lowercase hyphenated"), "{wrong}: {refused}");
    }
    let refused = sqlx::query(insert).bind(id).execute(&pool).await.expect_err("a uuid bound as a BLOB");
    assert!(refused.to_string().contains("lowercase hyphenated"), "{refused}");
    sqlx::query(insert).bind(id.hyphenated().to_string()).execute(&pool).await.expect("the outbox's own form");
    let renamed = sqlx::query("UPDATE outbox_events SET id = upper(id)").execute(&pool).await;
    assert!(renamed.is_err(), "an id changed to another form is refused too");
}

/// A time set by hand in SQLite's other format (`datetime('now')`: a space, not a `T`) is compared as the time it
/// is: a pending event written 30 s ago is not `--older-than 1m`, and a published one not purged (before, the text
/// comparison took it for older, on the same date: the cancel took an event that was still to be published).
#[tokio::test]
async fn times_set_by_hand_in_another_format_are_compared_as_times_by_older_than() {
    let (_dir, url, pool, ids) = backlog("times-by-hand", 2).await;
    sqlx::query("UPDATE outbox_events SET created_at = datetime('now', '-30 seconds')").execute(&pool).await.unwrap();
    sqlx::query(
        "UPDATE outbox_events SET status = 'published', published_at = datetime('now', '-30 seconds') WHERE id = ?1",
    )
    .bind(ids[1].hyphenated().to_string())
    .execute(&pool)
    .await
    .unwrap();
    let cancelled = outbox(&url, &["events", "cancel", "--status", "pending", "--older-than", "1m", "--yes"]);
    assert!(cancelled.status.success(), "{}", String::from_utf8_lossy(&cancelled.stderr));
    assert_eq!(String::from_utf8_lossy(&cancelled.stdout).trim(), "cancelled 0 event(s)");
    let purged = outbox(&url, &["events", "purge", "--older-than", "1m"]);
    assert!(purged.status.success(), "{}", String::from_utf8_lossy(&purged.stderr));
    assert_eq!(statuses(&pool).await.0, [("pending".to_owned(), 1), ("published".to_owned(), 1)]);
}
