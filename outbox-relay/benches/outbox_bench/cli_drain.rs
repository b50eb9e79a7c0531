//! The drain as a user runs it: release `outbox relay` processes with the CLI's default settings (or the flags a
//! case names), a file sink on memory-backed storage, the clock stopped when nothing is pending. With
//! `OUTBOX_BENCH_PREVIOUS_BIN` naming an `outbox` binary of an earlier version (and `OUTBOX_BENCH_PREVIOUS_NAME`
//! what to call it), every case runs on it too, right after this version's, each on its own schema (its own
//! `outbox migrate`), so the two are measured side by side in one run.

use std::process::Stdio;
use std::time::{Duration, Instant};

use outbox_tests::pg::TestDatabase;
use tokio::process::{Child, Command};

use crate::{fill, Figure, Report, Sizes, Yardstick};

/// The `outbox` binary of this build, when the bench was built with the `cli` feature.
pub(crate) const THIS_DESIGN: Option<&str> = option_env!("CARGO_BIN_EXE_outbox");

/// A relay binary (which migrates the schema it runs on).
#[derive(Clone, Copy)]
struct Design<'a> {
    name: &'a str,
    binary: &'a str,
}

/// One case: its label, the pending rows, their aggregates, relays, and the relay's extra flags.
struct Case {
    label: String,
    events: i64,
    aggregates: i64,
    relays: usize,
    flags: &'static [&'static str],
    target: &'static str,
}

pub(crate) async fn drains(admin: &str, sizes: Sizes, yard: Yardstick, report: &mut Report) {
    let Some(this) = THIS_DESIGN else {
        report.note("cli drain: skipped (build the bench with the `cli` feature for the `outbox` binary)".into());
        return;
    };
    let current = Design { name: "partition leases", binary: this };
    let previous = std::env::var("OUTBOX_BENCH_PREVIOUS_BIN").ok().map(|binary| Design {
        name: Box::leak(
            std::env::var("OUTBOX_BENCH_PREVIOUS_NAME")
                .unwrap_or_else(|_| "previous design".to_owned())
                .into_boxed_str(),
        ),
        binary: Box::leak(binary.into_boxed_str()),
    });
    if previous.is_none() {
        report.note("cli drain: the previous design was not measured (set OUTBOX_BENCH_PREVIOUS_BIN)".into());
    }
    let n = sizes.cli_events;
    let per = |aggregates: i64| format!("{aggregates} aggregates ({} events each)", n / aggregates);
    let cases = [
        Case {
            label: format!("defaults, {}", per(n / 100)),
            events: n,
            aggregates: n / 100,
            relays: 1,
            flags: &[],
            target: ">= 0.6",
        },
        Case {
            label: format!("defaults, {}", per(1_000.min(n))),
            events: n,
            aggregates: 1_000.min(n),
            relays: 1,
            flags: &[],
            target: ">= 0.6",
        },
        Case {
            label: format!("defaults, {}", per(100.min(n))),
            events: n,
            aggregates: 100.min(n),
            relays: 1,
            flags: &[],
            target: ">= 0.6",
        },
        Case {
            label: "--ordering none".into(),
            events: n,
            aggregates: n / 100,
            relays: 1,
            flags: &["--ordering", "none"],
            target: ">= 0.7",
        },
        Case {
            label: "--retention 0s".into(),
            events: n,
            aggregates: n / 100,
            relays: 1,
            flags: &["--retention", "0s"],
            target: ">= 1.0",
        },
        Case {
            label: "defaults, 4 relays".into(),
            events: n,
            aggregates: n / 100,
            relays: 4,
            flags: &[],
            target: ">= the 1-relay figure",
        },
    ];
    // Each case on this design, then on the previous one (if given), one after the other in the same run.
    for case in &cases {
        for design in std::iter::once(current).chain(previous) {
            let rate = drain(admin, design, case, sizes.cli_cap).await;
            add(report, design, case, &rate, yard);
        }
    }
    // The previous design on the cases of its own issue (200k events over 1,000 aggregates), capped: its cliff
    // would take half an hour.
    let c = sizes.cli_compare_events;
    let compare = [
        Case {
            label: "defaults, 1000 aggregates".into(),
            events: c,
            aggregates: 1_000.min(c),
            relays: 1,
            flags: &[],
            target: "(previous design)",
        },
        Case {
            label: "--ordering none --batch-size 1000 --concurrency 2".into(),
            events: c,
            aggregates: 1_000.min(c),
            relays: 1,
            flags: &["--ordering", "none", "--batch-size", "1000", "--concurrency", "2"],
            target: "(previous design)",
        },
        Case {
            label: "--batch-size 1000 --concurrency 2, 1000 aggregates".into(),
            events: c,
            aggregates: 1_000.min(c),
            relays: 1,
            flags: &["--batch-size", "1000", "--concurrency", "2"],
            target: "(previous design)",
        },
        Case {
            label: "--batch-size 1000 --concurrency 2, 1000 aggregates, 2 relays".into(),
            events: c,
            aggregates: 1_000.min(c),
            relays: 2,
            flags: &["--batch-size", "1000", "--concurrency", "2"],
            target: "(previous design)",
        },
    ];
    for case in &compare {
        for design in std::iter::once(current).chain(previous) {
            let rate = drain(admin, design, case, sizes.cli_cap).await;
            add(report, design, case, &rate, yard);
        }
    }
}

/// A drain's result: events/s, and whether it finished within the cap.
struct Drained {
    rate: f64,
    finished: bool,
    published: i64,
}

fn add(report: &mut Report, design: Design<'_>, case: &Case, drained: &Drained, yard: Yardstick) {
    let capped = if drained.finished { String::new() } else { format!(" (capped: {} published)", drained.published) };
    report.add(Figure {
        scenario: "cli drain",
        case: format!("{}: {} pending, {}{}", design.name, case.events, case.label, capped),
        value: drained.rate,
        unit: "events/s",
        ratio: Some(drained.rate / yard.rows_per_sec_100),
        ratio_of: "x plain 100-row INSERT rows/s",
        target: case.target,
    });
}

async fn drain(admin: &str, design: Design<'_>, case: &Case, cap: Duration) -> Drained {
    let db = TestDatabase::create_on(admin).await;
    let url = db.url.clone();
    let migrated = Command::new(design.binary)
        .args(["migrate", "--database-url", &url])
        .stdout(Stdio::null())
        .status()
        .await
        .expect("run outbox migrate");
    assert!(migrated.success(), "{} migrate failed", design.binary);
    // The poll that stops the clock, for the schema this design migrated to: with partition starts, each partition
    // from its start (no index covers `status` there); an earlier schema answers from its partial index of pending
    // rows (row leases also keep events in flight).
    let starts: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM information_schema.columns
                         WHERE table_schema = current_schema() AND table_name = 'outbox_partitions'
                           AND column_name = 'start_seq')",
    )
    .fetch_one(&db.pool)
    .await
    .expect("schema");
    let unfinished = if starts {
        crate::PENDING_LEFT
    } else {
        "SELECT EXISTS (SELECT 1 FROM outbox_events WHERE status IN ('pending', 'in_flight'))"
    };
    fill(&db, case.events, case.aggregates, 0).await;
    let sinks: Vec<String> =
        (0..case.relays).map(|n| format!("/dev/shm/outbox-bench-{}-{n}.jsonl", std::process::id())).collect();
    let started = Instant::now();
    let mut relays: Vec<Child> = sinks
        .iter()
        .map(|sink| {
            Command::new(design.binary)
                .args(["relay", "--database-url", &url, "--sink", &format!("file:{sink}")])
                .args(case.flags)
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .expect("start outbox relay")
        })
        .collect();
    let finished = loop {
        let left: bool = sqlx::query_scalar(unfinished).fetch_one(&db.pool).await.expect("poll");
        if !left {
            break true;
        }
        if started.elapsed() > cap {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let elapsed = started.elapsed().as_secs_f64();
    for relay in &mut relays {
        let _ = relay.start_kill();
        let _ = relay.wait().await;
    }
    for sink in &sinks {
        let _ = std::fs::remove_file(sink);
    }
    let published: i64 = if finished {
        case.events
    } else {
        sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE status = 'published'")
            .fetch_one(&db.pool)
            .await
            .unwrap_or(0)
    };
    db.pool.close().await;
    Drained { rate: published as f64 / elapsed, finished, published }
}
