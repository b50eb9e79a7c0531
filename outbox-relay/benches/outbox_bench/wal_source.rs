//! The WAL source (`outbox relay --source wal`): the drain of a backlog the slot kept while the relay was stopped
//! (rows settled by delete, and table-free messages), commit-to-publish latency at a steady rate in both modes,
//! the message mode's enqueue overhead beside the table row's, and what an idle WAL relay costs the database.

use std::collections::HashMap;
use std::sync::atomic::Ordering as AtomicOrdering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox_core::store::{PgStore, Source, SourceSwitch};
use outbox_core::Outbox;
use outbox_relay::{CancellationToken, RelayConfig, Retention, RunSummary, WalRelay};
use outbox_tests::pg::TestDatabase;
use sqlx::PgPool;
use tokio::task::JoinHandle;

use crate::{
    credit, interleaved_account, mean_times_interleaved, pgbench_floor, profile, BoxFuture, Figure, NoopSink, Produce,
    Report, Sizes, Yardstick,
};

/// How the events reach the write-ahead log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Table rows (`Outbox`), settled by the relay.
    Rows,
    /// Logical decoding messages (`Outbox::new().via_wal()`), no row.
    Messages,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Self::Rows => "row mode",
            Self::Messages => "message mode",
        }
    }
}

pub(crate) async fn scenarios(admin: &str, sizes: Sizes, yard: Yardstick, report: &mut Report) {
    drains(admin, sizes, yard, report).await;
    latencies(admin, sizes, report).await;
    enqueue_overhead(admin, sizes, report).await;
    idle(admin, sizes, report).await;
}

/// The drains of both modes ([`drain`]).
pub(crate) async fn drains(admin: &str, sizes: Sizes, yard: Yardstick, report: &mut Report) {
    for mode in [Mode::Rows, Mode::Messages] {
        drain(admin, sizes, yard, mode, report).await;
    }
}

/// A migrated database whose table the WAL source publishes.
async fn wal_database(admin: &str) -> TestDatabase {
    let db = TestDatabase::create_on(admin).await;
    outbox_core::migrate(&db.pool).await.expect("migrate");
    let switched = PgStore::new(db.pool.clone()).switch_source(Source::Wal).await.expect("wal enable");
    assert!(matches!(switched, SourceSwitch::Switched { .. }), "wal enable: {switched:?}");
    db
}

/// A WAL relay with `config` and the file sink's defaults otherwise, publishing into `sink`.
fn start_relay(
    db: &TestDatabase,
    sink: &NoopSink,
    config: RelayConfig,
    shutdown: &CancellationToken,
) -> JoinHandle<outbox_relay::Result<RunSummary>> {
    let relay = WalRelay::new(db.pool.clone(), &db.url, sink.clone(), config).expect("WAL relay");
    tokio::spawn(relay.run(shutdown.clone()))
}

/// Waits until the relay has created and recorded its slot.
async fn wait_for_the_slot(pool: &PgPool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !sqlx::query_scalar::<_, bool>(
        "SELECT EXISTS (SELECT 1 FROM outbox_control c JOIN pg_replication_slots s ON s.slot_name = c.wal_slot)",
    )
    .fetch_one(pool)
    .await
    .expect("slot query")
    {
        assert!(Instant::now() < deadline, "the WAL relay created no slot within 60 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Drops the database's slot, so the server stops keeping its WAL for the rest of the run. A stopped relay's
/// walsender exits a moment after the relay does, so the slot is dropped once nothing reads it.
async fn drop_the_slot(db: &TestDatabase) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        sqlx::query(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
             WHERE database = current_database() AND NOT active",
        )
        .execute(&db.pool)
        .await
        .expect("drop the slot");
        let left: i64 =
            sqlx::query_scalar("SELECT count(*) FROM pg_replication_slots WHERE database = current_database()")
                .fetch_one(&db.pool)
                .await
                .expect("slot query");
        if left == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the slot was still read 60 s after the relay stopped");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    db.pool.close().await;
}

/// Writes `events` events in transactions of 100 (4 producers), over `events / 100` aggregates.
async fn backlog(pool: &PgPool, mode: Mode, events: i64) {
    let transactions = (events / 100).max(1);
    let aggregates = transactions;
    let producers: i64 = 4;
    let tasks: Vec<_> = (0..producers)
        .map(|producer| {
            let pool = pool.clone();
            tokio::spawn(async move {
                for t in (producer..transactions).step_by(producers as usize) {
                    let mut tx = match mode {
                        Mode::Rows => Outbox::new().begin(&pool).await,
                        Mode::Messages => Outbox::new().via_wal().begin(&pool).await,
                    }
                    .expect("begin");
                    let batch: Vec<_> = (0..100).map(|i| credit((t * 100 + i) % aggregates)).collect();
                    tx.enqueue_all(&batch).expect("enqueue");
                    tx.commit().await.expect("commit");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a backlog producer panicked");
    }
}

/// 1M events (the drain size) written while the WAL relay was stopped, then drained into the no-op sink; rows
/// are settled by delete (`--retention 0s`). The clock runs from the relay's start until the sink has every event
/// and, in row mode, no row is left.
async fn drain(admin: &str, sizes: Sizes, yard: Yardstick, mode: Mode, report: &mut Report) {
    let db = wal_database(admin).await;
    let sink = NoopSink::default();
    let config = || RelayConfig::builder().retention(Retention::Immediately).build().expect("config");
    let shutdown = CancellationToken::new();
    let relay = start_relay(&db, &sink, config(), &shutdown);
    wait_for_the_slot(&db.pool).await;
    shutdown.cancel();
    relay.await.expect("relay task").expect("relay");

    let events = sizes.drain_events;
    let wal_before = profile::wal_position(&db.pool).await;
    backlog(&db.pool, mode, events).await;
    let wal_bytes = profile::wal_position(&db.pool).await - wal_before;
    report.note(format!(
        "wal drain, {}: {:.0} WAL bytes per event enqueued",
        mode.label(),
        wal_bytes as f64 / events as f64
    ));

    let sink = NoopSink::default();
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let relay = start_relay(&db, &sink, config(), &shutdown);
    let deadline = Instant::now() + Duration::from_secs(1_800);
    while (sink.published.load(AtomicOrdering::Relaxed) as i64) < events {
        assert!(Instant::now() < deadline, "the WAL drain did not finish within 30 minutes");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    if mode == Mode::Rows {
        // Published is not done: the clock stops when the last settle (a delete) has committed.
        while sqlx::query_scalar::<_, bool>("SELECT EXISTS (SELECT 1 FROM outbox_events)")
            .fetch_one(&db.pool)
            .await
            .expect("poll")
        {
            assert!(Instant::now() < deadline, "the WAL drain did not finish within 30 minutes");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let rate = events as f64 / started.elapsed().as_secs_f64();
    shutdown.cancel();
    relay.await.expect("relay task").expect("relay");
    let published = sink.published.load(AtomicOrdering::Relaxed) as i64;
    if published != events {
        report.note(format!("wal drain, {}: {published} published for {events} events", mode.label()));
    }
    let settled = match mode {
        Mode::Rows => "rows settled by delete (--retention 0s)",
        Mode::Messages => "no rows (Outbox::new().via_wal())",
    };
    report.add(Figure {
        scenario: "wal",
        case: format!("drain {events} events kept by the slot while the relay was stopped, {settled}, no-op sink"),
        value: rate,
        unit: "events/s",
        ratio: Some(rate / yard.rows_per_sec_100),
        ratio_of: "x plain 100-row INSERT rows/s",
        target: ">= 1.0",
    });
    drop_the_slot(&db).await;
}

/// The commit-to-publish latency of both modes ([`latency`]).
pub(crate) async fn latencies(admin: &str, sizes: Sizes, report: &mut Report) {
    for mode in [Mode::Rows, Mode::Messages] {
        latency(admin, sizes, mode, report).await;
    }
}

/// A running WAL relay (defaults) and 8 producers at the latency rate, each event in its own transaction
/// (`Outbox::enqueue`, or `via_wal().begin(..)` with the commit).
async fn latency(admin: &str, sizes: Sizes, mode: Mode, report: &mut Report) {
    let db = wal_database(admin).await;
    let received = Arc::new(Mutex::new(HashMap::new()));
    let sink = NoopSink { published: Arc::default(), received: Some(received.clone()) };
    let shutdown = CancellationToken::new();
    let relay = start_relay(&db, &sink, RelayConfig::builder().build().expect("config"), &shutdown);
    wait_for_the_slot(&db.pool).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let produce: Produce = Arc::new(move |pool, account| one_event(pool, mode, account));
    let run = crate::produce_at_rate(&db.pool, sizes, produce, &received).await;
    shutdown.cancel();
    relay.await.expect("relay task").expect("relay");
    let label = format!("WAL source, {}", mode.label());
    run.report("wal", &label, sizes, ["<= 2 ms", "<= 10 ms"], &received, report);
    drop_the_slot(&db).await;
}

/// One event in a transaction of its own, sent with the commit.
fn one_event(pool: PgPool, mode: Mode, account: i64) -> BoxFuture<uuid::Uuid> {
    Box::pin(async move {
        let mut tx = match mode {
            Mode::Rows => Outbox::new().begin(&pool).await,
            Mode::Messages => Outbox::new().via_wal().begin(&pool).await,
        }
        .expect("begin");
        let id = tx.enqueue(&credit(account)).expect("enqueue");
        tx.commit().await.expect("commit");
        id
    })
}

/// The bench's domain transaction (one `UPDATE`) without an event, with one message (in the commit's round trip,
/// and in its own), and with one table row in the commit's round trip, at 1 and 8 producers: each producer runs the
/// modes in turn, one transaction each ([`mean_times_interleaved`]), and each overhead is a mode's mean latency over
/// the plain transaction's. The database's own share is measured the same way, with pgbench ([`pgbench_floor`]).
/// The slot exists (so messages may be written) and no relay runs, as in the table's enqueue scenario.
pub(crate) async fn enqueue_overhead(admin: &str, sizes: Sizes, report: &mut Report) {
    let db = wal_database(admin).await;
    let sink = NoopSink::default();
    let shutdown = CancellationToken::new();
    let relay = start_relay(&db, &sink, RelayConfig::builder().build().expect("config"), &shutdown);
    wait_for_the_slot(&db.pool).await;
    shutdown.cancel();
    relay.await.expect("relay task").expect("relay");
    sqlx::raw_sql(
        "CREATE TABLE accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL);
         INSERT INTO accounts SELECT i, 0 FROM generate_series(1, 100000) i;",
    )
    .execute(&db.pool)
    .await
    .expect("accounts");
    const MODES: [&str; 4] =
        ["none", "message with the commit", "message in its own round trip", "row with the commit"];
    for clients in [1, 8] {
        let pool = db.pool.clone();
        let latencies = mean_times_interleaved(clients, sizes.seconds * 2.0, MODES.len(), move |client, call, mode| {
            domain_transaction(pool.clone(), MODES[mode], interleaved_account(client, call))
        })
        .await;
        report.add(Figure {
            scenario: "wal",
            case: format!("domain UPDATE without event, {clients} producer(s)"),
            value: latencies[0],
            unit: "µs per tx",
            ratio: None,
            ratio_of: "",
            target: "",
        });
        for (mode, with) in MODES.iter().zip(&latencies).skip(1) {
            report.add(Figure {
                scenario: "wal",
                case: format!("domain UPDATE + 1 event, {mode}, {clients} producer(s)"),
                value: *with,
                unit: "µs per tx",
                ratio: Some(with / latencies[0]),
                ratio_of: "overhead: latency with / without, interleaved",
                target: if *mode == "message with the commit" { "<= 1.10" } else { "(reported)" },
            });
        }
        let floors = [("without the check", FLOOR_MESSAGE), ("after the check", FLOOR_GUARDED_MESSAGE)];
        let events: Vec<&str> = floors.iter().map(|(_, statement)| *statement).collect();
        match pgbench_floor(&db.pool, clients, sizes.seconds * 2.0, &events).await {
            Some(floor) => {
                for ((label, _), with) in floors.iter().zip(&floor[1..]) {
                    report.add(Figure {
                        scenario: "wal",
                        case: format!(
                            "floor: the same statements sent by pgbench, message with the COMMIT {label}, \
                             {clients} client(s)"
                        ),
                        value: *with,
                        unit: "µs per tx",
                        ratio: Some(with / floor[0]),
                        ratio_of: "overhead: latency with / without, interleaved",
                        target: "(the database's own share)",
                    });
                }
            }
            None => report.note("wal enqueue: no floor measured (pgbench not found, or its run failed)".into()),
        }
    }
    drop_the_slot(&db).await;
}

/// The message-mode event for [`pgbench_floor`]: one message of the size the library writes for the bench's event,
/// written by the SQL call that opens with `$call` (its arguments before the prefix and the content).
macro_rules! floor_message {
    ($call:literal) => {
        concat!(
            "SELECT ",
            $call,
            "'outbox', $o0${\"id\":\"0192f5c2-7a3b-7cc0-9a41-3b2f6d1e8c11\",\
             \"type\":\"account.credited\",\"aggregate_type\":\"account\",\"aggregate_id\":\":id\",\"version\":1,\
             \"payload\":{\"account_id\":1,\"amount_cents\":1250,\"reference\":\"ref-:id\"},\"headers\":{},\
             \"sensitive_paths\":[]}$o0$)"
        )
    };
}

/// The message alone, without the check that a slot keeps it.
const FLOOR_MESSAGE: &str = floor_message!("pg_logical_emit_message(true, ");

/// The message as `OutboxTransaction` writes it: after migration 9's check, in the same call (on a lock key no one
/// holds: the same work as the library's).
const FLOOR_GUARDED_MESSAGE: &str = floor_message!("outbox_wal_emit(0, ");

/// The enqueue scenario's domain transaction, with the event `mode` says.
fn domain_transaction(pool: PgPool, mode: &'static str, account: i64) -> BoxFuture<()> {
    const UPDATE: &str = "UPDATE accounts SET balance = balance + 1 WHERE id = $1";
    Box::pin(async move {
        match mode {
            "message with the commit" | "row with the commit" => {
                let outbox = Outbox::new();
                let mut tx = if mode == "row with the commit" {
                    outbox.begin(&pool).await
                } else {
                    outbox.via_wal().begin(&pool).await
                }
                .expect("begin");
                sqlx::query(UPDATE).bind(account).execute(&mut *tx).await.expect("update");
                tx.enqueue(&credit(account)).expect("enqueue");
                tx.commit().await.expect("commit");
            }
            _ => {
                let mut tx = pool.begin().await.expect("begin");
                sqlx::query(UPDATE).bind(account).execute(&mut *tx).await.expect("update");
                if mode == "message in its own round trip" {
                    Outbox::new().via_wal().enqueue(&mut tx, &credit(account)).await.expect("enqueue");
                }
                tx.commit().await.expect("commit");
            }
        }
    })
}

/// Statements an idle WAL relay (defaults) runs on its database in the bench's measuring time, counted by
/// `pg_stat_statements` (the bench's own reset and count excluded; the replication stream runs no statements).
async fn idle(admin: &str, sizes: Sizes, report: &mut Report) {
    let db = wal_database(admin).await;
    let sink = NoopSink::default();
    let shutdown = CancellationToken::new();
    let relay = start_relay(&db, &sink, RelayConfig::builder().build().expect("config"), &shutdown);
    wait_for_the_slot(&db.pool).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    if !profile::reset(&db.pool).await {
        report.note("wal idle: not measured (pg_stat_statements is not loaded)".into());
    } else {
        let window = Duration::from_secs_f64(sizes.seconds.max(1.0));
        tokio::time::sleep(window).await;
        let statements: i64 = sqlx::query_scalar(
            "SELECT COALESCE(sum(calls), 0)::int8 FROM pg_stat_statements
              WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                AND query NOT LIKE '%pg_stat_statements%'",
        )
        .fetch_one(&db.pool)
        .await
        .expect("statement count");
        report.add(Figure {
            scenario: "wal",
            case: format!("idle WAL relay: statements it ran in {:.0} s", window.as_secs_f64()),
            value: statements as f64,
            unit: "statements",
            ratio: None,
            ratio_of: "",
            target: "0",
        });
    }
    shutdown.cancel();
    relay.await.expect("relay task").expect("relay");
    drop_the_slot(&db).await;
}
