//! The file sink after a write that fails part way (a full disk, a file size limit): the batch is a transient
//! failure, the file is cut back to where it ended, and the batch written again lands as whole lines, so a reader
//! of the JSON lines never meets a line glued to a fragment.
//!
//! A test binary of its own: it lowers its process's file size limit (`RLIMIT_FSIZE`, with util-linux `prlimit`),
//! which would reach the other tests of a binary run by `cargo test` in one process.

use std::process::Command;

use outbox_relay::{FilePublisher, Message, Outcome, Publisher};
use tokio::signal::unix::{signal, SignalKind};
use uuid::Uuid;

/// SIGXFSZ on Linux.
const SIGXFSZ: i32 = 25;

fn message(n: usize) -> Message {
    let payload = format!(r#"{{"order":"order-{n}","note":"{}"}}"#, "x".repeat(200));
    Message::new(Uuid::now_v7(), "order.placed", "order", format!("order-{n}"), payload)
}

/// This process's soft limit on the size of the files it writes: `limit` (`unlimited`, or bytes).
fn set_file_size_limit(limit: &str) {
    let output = Command::new("prlimit")
        .args(["--pid", &std::process::id().to_string(), &format!("--fsize={limit}:")])
        .output()
        .unwrap_or_else(|e| panic!("run prlimit (Debian package util-linux): {e}"));
    assert!(output.status.success(), "prlimit: {}", String::from_utf8_lossy(&output.stderr));
}

#[tokio::test]
async fn a_write_cut_short_is_cut_back_and_the_retry_writes_whole_lines() {
    // Handled, SIGXFSZ no longer ends the process: a write past the limit fails with EFBIG instead.
    let _handled = signal(SignalKind::from_raw(SIGXFSZ)).expect("handle SIGXFSZ");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let publisher = FilePublisher::open(&path).unwrap();
    let first: Vec<Message> = (0..3).map(message).collect();
    assert!(publisher.publish(&first).await.iter().all(|o| *o == Outcome::Published));
    let end = std::fs::metadata(&path).unwrap().len();

    // Room for about three lines of the next batch's forty: the write stops in the middle of one.
    let batch: Vec<Message> = (3..43).map(message).collect();
    set_file_size_limit(&(end + 1000).to_string());
    let outcomes = publisher.publish(&batch).await;
    set_file_size_limit("unlimited");
    assert!(
        outcomes.iter().all(|o| matches!(o, Outcome::Transient(_))),
        "a failed write is a transient failure of the whole batch: {outcomes:?}"
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), end, "the part written was not cut back");

    assert!(publisher.publish(&batch).await.iter().all(|o| *o == Outcome::Published));
    let lines: Vec<Uuid> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|line| {
            let line: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
            line["id"].as_str().unwrap().parse().unwrap()
        })
        .collect();
    let expected: Vec<Uuid> = first.iter().chain(&batch).map(|m| m.id).collect();
    assert_eq!(lines, expected);
}
