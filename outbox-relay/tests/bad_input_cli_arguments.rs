//! Bad values on every flag of the `outbox` binary that takes a duration, a size, a count or an address: each is
//! refused with exactly one line on stderr starting with `error:`, exit code 2, nothing on stdout, and nothing
//! written: the file sink is never created and the outbox table is exactly as it was.
//!
//! The value parsers themselves are fuzzed in the binary's unit tests (`src/bin/outbox/args.rs`).

mod common;

use std::process::Output;

use common::{enqueue, event};
use outbox_tests::pg::TestDatabase;
use sqlx::PgPool;

fn outbox(database_url: &str, args: &[String]) -> Output {
    outbox_tests::outbox!().database(database_url).run(args)
}

/// Everything about the rows that a command could change.
async fn snapshot(pool: &PgPool) -> Vec<(String, String, i32, Option<String>, i64, bool)> {
    sqlx::query_as(
        "SELECT e.id::text, e.status, e.attempts, e.last_error, e.lease_epoch, c.paused
           FROM outbox_events e CROSS JOIN outbox_control c ORDER BY e.seq",
    )
    .fetch_all(pool)
    .await
    .expect("snapshot")
}

fn args(args: &[&str]) -> Vec<String> {
    args.iter().map(|arg| (*arg).to_owned()).collect()
}

/// Runs each case and checks the one-line error, the exit code and that it names the problem.
fn refuse_all(url: &str, cases: &[(Vec<String>, &str)]) {
    for (args, problem) in cases {
        let output = outbox(url, args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?} exited {:?}: {stderr}", output.status.code());
        assert_eq!(stderr.lines().count(), 1, "{args:?}: not one line: {stderr}");
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
        assert!(stderr.contains(problem), "{args:?}: `{problem}` not in: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}: {}", String::from_utf8_lossy(&output.stdout));
    }
}

#[tokio::test]
async fn invalid_durations_sizes_counts_and_addresses_exit_2_with_one_line_and_write_nothing() {
    let db = TestDatabase::migrated().await;
    enqueue(&db.pool, &[event("a", 0), event("a", 1), event("b", 0)]).await;
    let before = snapshot(&db.pool).await;
    let temp = tempfile::Builder::new().prefix("outbox-bad-args-").tempdir().unwrap();
    // A directory that does not exist: no refused command may create it.
    let dir = temp.path().join("sink");
    let sink = format!("file:{}/events.jsonl", dir.display());
    let relay = |flag: &str, value: &str| args(&["relay", "--sink", &sink, flag, value]);
    let wal = |flag: &str, value: &str| args(&["relay", "--source", "wal", "--sink", &sink, flag, value]);
    let cases: Vec<(Vec<String>, &str)> = vec![
        // Durations: not humantime, negative, overflowing, or out of the setting's range.
        (relay("--lease", "30 parsecs"), "malformed duration"),
        (relay("--lease", ""), "malformed duration"),
        (relay("--lease", "-1s"), "-1"),
        (relay("--lease", "99999999999999999999999s"), "malformed duration"),
        (relay("--lease", "0s"), "`lease`"),
        (relay("--lease", "25h"), "`lease`"),
        (relay("--poll-interval", "soon"), "malformed duration"),
        (relay("--poll-interval", "0s"), "`poll_interval`"),
        (relay("--poll-interval", "2h"), "`poll_interval`"),
        (relay("--backoff-base", "1.5.3s"), "malformed duration"),
        (relay("--backoff-base", "0s"), "backoff"),
        (relay("--backoff-max", "forever"), "malformed duration"),
        (relay("--backoff-max", "1ms"), "backoff"),
        (relay("--retention", "a week"), "malformed duration"),
        (relay("--retention", "200years"), "`retention`"),
        (relay("--shutdown-timeout", "never"), "malformed duration"),
        (relay("--shutdown-timeout", "2h"), "`shutdown_timeout`"),
        // Past what an `Instant` holds (a panic at the first failing publish, before it was bounded), or merely
        // longer than a stream should stand still.
        (wal("--retry-in-place", "300000000000y"), "--retry-in-place"),
        (wal("--retry-in-place", "25h"), "at most 24h"),
        (wal("--retry-in-place", "soon"), "malformed duration"),
        // A value quoted as it was typed (it holds no secret to mask), and the advice with it.
        (args(&["relay", "--sink", "file:"]), "'file:' for '--sink <URL>': `file:` needs a path, e.g. `file:/var/log/"),
        // Refused before the sink is opened; the table source takes neither.
        (wal("--slot", "Bad-Slot!"), "lower-case letters"),
        (wal("--slot", ""), "lower-case letters"),
        (relay("--slot", "orders"), "--slot is for `--source wal`"),
        (relay("--retry-in-place", "1s"), "--retry-in-place is for `--source wal`"),
        // Sizes and counts: not numbers, negative, fractional, too large, or out of range.
        (relay("--batch-size", "0"), "`batch_size`"),
        (relay("--batch-size", "10001"), "`batch_size`"),
        (relay("--batch-size", "ten"), "ten"),
        (relay("--batch-size", "1e3"), "1e3"),
        (relay("--batch-size", "99999999999"), "99999999999"),
        (relay("--concurrency", "0"), "`concurrency`"),
        (relay("--concurrency", "257"), "`concurrency`"),
        (relay("--concurrency", "2.5"), "2.5"),
        (relay("--max-attempts", "0"), "`max_attempts`"),
        (relay("--max-attempts", "1000001"), "`max_attempts`"),
        (relay("--max-attempts", "-3"), "-3"),
        // Addresses and names.
        (relay("--metrics-addr", "localhost"), "localhost"),
        (relay("--metrics-addr", "127.0.0.1:99999"), "127.0.0.1:99999"),
        (relay("--ordering", "sideways"), "sideways"),
        (relay("--log-level", "loud"), "loud"),
        (relay("--log-format", "xml"), "xml"),
        // The other commands' values.
        (args(&["events", "list", "--status", "pending", "--limit", "-1"]), "-1"),
        (args(&["events", "list", "--status", "pending", "--limit", "many"]), "many"),
        (args(&["events", "list", "--status", "pending", "--limit", "4294967296"]), "4294967296"),
        (args(&["events", "purge", "--older-than", ""]), "malformed duration"),
        (args(&["events", "purge", "--older-than", "7 parsecs"]), "malformed duration"),
        // An age the databases cannot count back from now (PostgreSQL errs, SQLite matches nothing).
        (args(&["events", "purge", "--older-than", "10000y"]), "more than 1000 years"),
        (args(&["events", "list", "--older-than", "10000y"]), "more than 1000 years"),
        (args(&["events", "cancel", "--older-than", "1001y"]), "more than 1000 years"),
        (args(&["events", "show", "not-a-uuid"]), "not-a-uuid"),
        (args(&["events", "retry", "12345"]), "12345"),
        (args(&["events", "cancel", ""]), "invalid value"),
    ];
    refuse_all(&db.url, &cases);
    let oldest = outbox(&db.url, &args(&["events", "list", "--older-than", "1000y", "--json"]));
    assert!(oldest.status.success(), "the longest age: {}", String::from_utf8_lossy(&oldest.stderr));
    assert_eq!(String::from_utf8_lossy(&oldest.stdout).trim(), "[]");
    assert!(!dir.exists(), "the file sink's directory was created");
    assert_eq!(snapshot(&db.pool).await, before, "a refused command changed the outbox table");
}
