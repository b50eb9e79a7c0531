//! The `outbox` command line: bad input is a one-line error with exit code 2 and writes nothing; every command
//! has help; status, events, pause and resume work on a real database; a second signal while `outbox relay`
//! drains ends it at once (exit 130).

mod common;

use std::process::Output;

use common::{count, enqueue, event, status_of};
use outbox_tests::pg::TestDatabase;
use serde_json::Value;

fn outbox(database_url: Option<&str>, args: &[&str]) -> Output {
    let outbox = outbox_tests::outbox!().env("OUTBOX_LOG", "warn");
    match database_url {
        Some(url) => outbox.database(url).run(args),
        None => outbox.run(args),
    }
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test]
async fn bad_input_is_one_line_naming_the_problem_with_exit_2_and_writes_nothing() {
    let db = TestDatabase::migrated().await;
    let temp = tempfile::Builder::new().prefix("outbox-cli-").tempdir().unwrap();
    // A directory that does not exist: no refused command may create it.
    let dir = temp.path().join("sink");
    let sink = format!("file:{}/events.jsonl", dir.display());
    let missing_db = db.url.replace(&db.name, &format!("{}_missing", db.name));
    let cases: Vec<(Option<&str>, Vec<&str>, &str)> = vec![
        (Some(&db.url), vec!["relay", "--sink", "gopher://broker:70"], "unknown sink scheme `gopher`"),
        (Some(&db.url), vec!["relay", "--sink", "kafka://broker:9092?topic=a b"], "invalid Kafka topic"),
        (Some(&db.url), vec!["relay", "--sink", "http://"], "malformed URL"),
        (Some(&db.url), vec!["relay", "--sink", "stdout", "--lease", "30 parsecs"], "malformed duration"),
        (Some(&db.url), vec!["relay", "--sink", "stdout", "--ordering", "random"], "random"),
        (Some(&db.url), vec!["relay", "--sink", "stdout", "--batch-size", "0"], "batch_size"),
        (Some(&db.url), vec!["events", "list", "--status", "done"], "unknown status `done`"),
        (Some(&db.url), vec!["events", "purge", "--older-than", "soon"], "malformed duration"),
        (None, vec!["relay", "--sink", &sink], "missing database"),
        (None, vec!["status"], "missing database"),
        (Some(&missing_db), vec!["relay", "--sink", &sink], "missing database"),
        (Some("mysql://nowhere"), vec!["pause"], "malformed database URL"),
    ];
    for (url, args, problem) in cases {
        let output = outbox(url, &args);
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: not one line: {err}");
        assert!(err.contains(problem), "{args:?}: `{problem}` not in: {err}");
        assert!(stdout(&output).is_empty(), "{args:?}");
    }
    assert!(!dir.exists(), "the sink's directory or file was created");
    let paused: bool = sqlx::query_scalar("SELECT paused FROM outbox_control").fetch_one(&db.pool).await.unwrap();
    assert!(!paused);
}

#[test]
fn every_command_has_help() {
    for args in [
        vec!["--help"],
        vec!["migrate", "--help"],
        vec!["relay", "--help"],
        vec!["status", "--help"],
        vec!["events", "--help"],
        vec!["events", "list", "--help"],
        vec!["events", "show", "--help"],
        vec!["events", "retry", "--help"],
        vec!["events", "cancel", "--help"],
        vec!["events", "purge", "--help"],
        vec!["pause", "--help"],
        vec!["resume", "--help"],
    ] {
        let output = outbox(None, &args);
        assert_eq!(output.status.code(), Some(0), "{args:?}");
        assert!(stdout(&output).contains("Usage: outbox"), "{args:?}: {}", stdout(&output));
    }
}

#[tokio::test]
async fn operators_inspect_retry_cancel_purge_pause_and_resume() {
    let db = TestDatabase::migrated().await;
    let url = Some(db.url.as_str());
    let ids = enqueue(&db.pool, &[event("a", 0), event("b", 0), event("c", 0), event("d", 0)]).await;
    sqlx::query("UPDATE outbox_events SET status = 'failed', attempts = 3, last_error = 'boom' WHERE id = ANY($1)")
        .bind(&ids[..2])
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE outbox_events SET status = 'published', created_at = now() - interval '11 days',
                published_at = now() - interval '10 days'
          WHERE id = $1",
    )
    .bind(ids[3])
    .execute(&db.pool)
    .await
    .unwrap();

    let status: Value = serde_json::from_str(&stdout(&outbox(url, &["status", "--json"]))).unwrap();
    assert_eq!(status["pending"], 1);
    assert_eq!(status["failed"], 2);
    assert_eq!(status["paused"], false);
    assert_eq!(status["pending_by_type"][0]["event_type"], "test.happened");
    assert!(outbox(url, &["status"]).status.success());

    let listed: Value =
        serde_json::from_str(&stdout(&outbox(url, &["events", "list", "--status", "failed", "--json"]))).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 2);
    assert_eq!(listed[0]["last_error"], "boom");
    let listed: Value = serde_json::from_str(&stdout(&outbox(
        url,
        &["events", "list", "--status", "failed", "--aggregate-id", "b", "--json"],
    )))
    .unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert!(stdout(&outbox(url, &["events", "list", "--status", "pending"])).contains(&ids[2].to_string()));

    // `show` masks the sensitive card number, in both outputs.
    let first = ids[0].to_string();
    for args in [vec!["events", "show", first.as_str()], vec!["events", "show", first.as_str(), "--json"]] {
        let output = outbox(url, &args);
        assert!(output.status.success(), "{}", stderr(&output));
        let shown = stdout(&output);
        assert!(!shown.contains("4111111111111111"), "the card number was shown: {shown}");
        let shown: Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(shown["payload"]["card_number"], "[REDACTED]");
        assert_eq!(shown["payload"]["aggregate"], "a");
    }

    let output = outbox(url, &["events", "retry", &ids[0].to_string()]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(status_of(&db.pool, ids[0]).await, "pending");
    // Retrying an event that is not failed says so and exits 1.
    let output = outbox(url, &["events", "retry", &ids[2].to_string()]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains(&ids[2].to_string()));

    let output = outbox(url, &["events", "cancel", &ids[1].to_string()]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(status_of(&db.pool, ids[1]).await, "cancelled");
    assert!(outbox(url, &["events", "retry", "--all-failed", "--event-type", "test.happened"]).status.success());

    let output = outbox(url, &["events", "purge", "--older-than", "7d"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).contains("purged 1 event(s)"), "{}", stdout(&output));
    assert_eq!(count(&db.pool, "published").await, 0);
    assert_eq!(count(&db.pool, "cancelled").await, 1, "a recent cancelled row was purged");

    assert!(outbox(url, &["pause"]).status.success());
    let status: Value = serde_json::from_str(&stdout(&outbox(url, &["status", "--json"]))).unwrap();
    assert_eq!(status["paused"], true);
    assert!(outbox(url, &["resume"]).status.success());
    let status: Value = serde_json::from_str(&stdout(&outbox(url, &["status", "--json"]))).unwrap();
    assert_eq!(status["paused"], false);
}

/// A webhook receiver on 127.0.0.1 that takes connections and never answers; returns its address and how many
/// connections it took.
async fn silent_receiver() -> (std::net::SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let taken = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = taken.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    (address, taken)
}

#[tokio::test]
async fn a_second_signal_while_the_relay_drains_ends_it_at_once_with_exit_130() {
    use std::time::Duration;

    let db = TestDatabase::migrated().await;
    let ids = enqueue(&db.pool, &[event("a", 0)]).await;
    let (receiver, taken) = silent_receiver().await;
    let sink = format!("http://{receiver}/hook");
    let mut relay = outbox_tests::outbox!()
        .database(&db.url)
        .env("OUTBOX_WEBHOOK_SECRET", "whsec_b3V0Ym94LXRlc3Qtc2VjcmV0LWtleS0zMi1ieXRlcyE=")
        .spawn(["relay", "--sink", &sink, "--poll-interval", "10ms", "--shutdown-timeout", "60s"]);
    common::wait_until(Duration::from_secs(30), "the event's publish is in flight", || async {
        taken.load(std::sync::atomic::Ordering::SeqCst) > 0
    })
    .await;
    // The first signal: a graceful stop, which waits for the publish that the receiver never answers.
    relay.signal("-TERM");
    relay.wait_for_lines("signal received", 1, Duration::from_secs(10)).await;
    // Past the second within which a signal is taken as the first one sent twice (one Ctrl-C through a wrapper).
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(relay.is_running(), "the relay did not wait for its batch in flight: {}", relay.stderr());
    // The second (Ctrl-C): at once.
    let second = tokio::time::Instant::now();
    relay.signal("-INT");
    let status = relay.wait_for_exit(Duration::from_secs(5)).await;
    assert!(second.elapsed() < Duration::from_secs(5));
    let stderr = relay.stderr();
    assert_eq!(status.code(), Some(130), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.starts_with("error: ") && last.contains("second signal"), "{stderr}");
    assert_eq!(status_of(&db.pool, ids[0]).await, "pending", "the event is published again, as after a crash");
}

/// A reader that stops reading (`outbox events list | head -1`) ends a command quietly with exit 0, as it ends other
/// Unix tools: here it is gone before the command writes anything (before, the write panicked: exit 101 and a
/// panic message).
#[tokio::test]
async fn a_reader_that_closes_the_output_early_ends_a_command_quietly() {
    let db = TestDatabase::migrated().await;
    enqueue(&db.pool, &[event("a", 0), event("a", 1)]).await;
    for args in [&["events", "list"][..], &["events", "list", "--json"], &["status"], &["status", "--json"]] {
        let mut command = outbox_tests::outbox!().env("OUTBOX_LOG", "warn").database(&db.url).command(args);
        let mut child = command
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start outbox");
        drop(child.stdout.take());
        let output = tokio::task::spawn_blocking(move || child.wait_with_output()).await.unwrap().unwrap();
        assert_eq!(output.status.code(), Some(0), "{args:?}: {}", stderr(&output));
        assert!(stderr(&output).is_empty(), "{args:?}: {}", stderr(&output));
    }
}
