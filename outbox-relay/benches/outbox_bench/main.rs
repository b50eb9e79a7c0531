//! `outbox-bench`: the outbox's costs, measured against the database's own limit in the same run.
//!
//! ```text
//! cargo bench -p outbox-relay --bench outbox-bench                                             # every scenario
//! cargo bench -p outbox-relay --no-default-features --bench outbox-bench -- drain latency       # some scenarios
//! cargo bench -p outbox-relay --no-default-features --features wal --bench outbox-bench -- wal  # the WAL source
//! cargo bench -p outbox-relay --no-default-features --features wal --bench outbox-bench -- wal-enqueue  # its enqueue
//! cargo bench -p outbox-relay --no-default-features --features wal --bench outbox-bench -- wal-drain    # its drains
//! cargo bench -p outbox-relay --no-default-features --features wal --bench outbox-bench -- wal-latency  # its latency
//! OUTBOX_BENCH_SMOKE=1 cargo test -p outbox-relay --all-features --bench outbox-bench           # tiny sizes
//! OUTBOX_BENCH_DRAIN_EVENTS=200000 cargo bench ... -- drain                                          # smaller drains
//! ```
//!
//! It starts a private PostgreSQL with durable defaults (every commit flushed) on 127.0.0.1, or uses
//! `OUTBOX_BENCH_DATABASE_URL`, and prints a Markdown table and a JSON document (also written to
//! `target/outbox-bench.json`). The broker scenario runs the `outbox` binary (the `cli` feature) into NATS
//! JetStream, a Kafka-protocol broker, RabbitMQ, Redis and SQS on moto started by the test harness (the broker
//! features; the default build has them all); the WAL scenario needs the `wal` feature (the server runs with
//! `wal_level = logical` for every scenario). Every figure is also given as a ratio to the yardstick measured in
//! the same run: a plain 100-row multi-row `INSERT` per transaction (rows/s) and a plain one-row-insert
//! transaction (transactions/s), on a table of the same columns with nothing but a primary key.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox_core::store::{Ordering, PgStore};
use outbox_core::{Outbox, OutboxEvent};
use outbox_relay::{CancellationToken, Message, Outcome, Publisher, Relay, RelayConfig, Retention, Wakeup};
use outbox_tests::pg::{Durability, TestDatabase};
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

mod brokers;
mod cli_drain;
mod profile;
#[cfg(feature = "wal")]
mod wal_source;

/// The sizes of one run.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    seconds: f64,
    drain_events: i64,
    naive_events: i64,
    latency_seconds: f64,
    latency_rate: u32,
    flat_history: i64,
    flat_events: i64,
    broker_events: i64,
    /// Pending rows of the CLI drains of this design.
    cli_events: i64,
    /// Pending rows of the side-by-side drains with the previous design.
    cli_compare_events: i64,
    /// The longest a CLI drain may run.
    cli_cap: Duration,
}

const FULL: Sizes = Sizes {
    seconds: 10.0,
    drain_events: 1_000_000,
    naive_events: 20_000,
    latency_seconds: 30.0,
    latency_rate: 1_000,
    flat_history: 10_000_000,
    flat_events: 200_000,
    broker_events: 100_000,
    cli_events: 1_000_000,
    cli_compare_events: 200_000,
    cli_cap: Duration::from_secs(120),
};

const SMOKE: Sizes = Sizes {
    seconds: 0.5,
    drain_events: 2_000,
    naive_events: 500,
    latency_seconds: 1.0,
    latency_rate: 200,
    flat_history: 5_000,
    flat_events: 1_000,
    broker_events: 500,
    cli_events: 2_000,
    cli_compare_events: 1_000,
    cli_cap: Duration::from_secs(60),
};

/// One measured figure.
#[derive(Debug, Clone, Serialize)]
struct Figure {
    scenario: &'static str,
    case: String,
    value: f64,
    unit: &'static str,
    /// The figure divided by (or, for overheads, into) its yardstick.
    ratio: Option<f64>,
    ratio_of: &'static str,
    target: &'static str,
}

#[derive(Default)]
struct Report {
    figures: Vec<Figure>,
    notes: Vec<String>,
}

impl Report {
    fn add(&mut self, figure: Figure) {
        eprintln!(
            "  {:<10} {:<48} {:>12.1} {:<8} {}",
            figure.scenario,
            figure.case,
            figure.value,
            figure.unit,
            figure.ratio.map(|r| format!("ratio {r:.3}")).unwrap_or_default()
        );
        self.figures.push(figure);
    }

    fn note(&mut self, note: String) {
        eprintln!("  note: {note}");
        self.notes.push(note);
    }
}

/// The bench's event: small, like most domain events.
#[derive(Serialize)]
struct AccountCredited {
    account_id: i64,
    amount_cents: i64,
    reference: String,
}

impl OutboxEvent for AccountCredited {
    const EVENT_TYPE: &'static str = "account.credited";
    const AGGREGATE_TYPE: &'static str = "account";
    const VERSION: u32 = 1;

    fn aggregate_id(&self) -> String {
        self.account_id.to_string()
    }
}

fn credit(account_id: i64) -> AccountCredited {
    AccountCredited { account_id, amount_cents: 1_250, reference: format!("ref-{account_id}") }
}

/// Acknowledges every event at once, counting them; records receive times when asked to.
#[derive(Clone, Default)]
struct NoopSink {
    published: Arc<AtomicU64>,
    received: Option<Arc<Mutex<HashMap<Uuid, Instant>>>>,
}

impl Publisher for NoopSink {
    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        if let Some(received) = &self.received {
            let now = Instant::now();
            let mut received = received.lock().unwrap_or_else(|e| e.into_inner());
            for message in batch {
                received.insert(message.id, now);
            }
        }
        self.published.fetch_add(batch.len() as u64, AtomicOrdering::Relaxed);
        vec![Outcome::Published; batch.len()]
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let smoke = std::env::var_os("OUTBOX_BENCH_SMOKE").is_some() || std::env::args().any(|a| a == "--smoke");
    let mut sizes = if smoke { SMOKE } else { FULL };
    // A quicker look at the drains: fewer pending rows (the figures are ratios, but a smaller table flatters them).
    if let Some(events) = std::env::var("OUTBOX_BENCH_DRAIN_EVENTS").ok().and_then(|n| n.parse().ok()) {
        sizes.drain_events = events;
        sizes.cli_events = events;
    }
    let wanted = |name: &str| args.is_empty() || args.iter().any(|a| a == name || a == "all");

    let admin = match std::env::var("OUTBOX_BENCH_DATABASE_URL") {
        Ok(url) => url,
        Err(_) => outbox_tests::pg::start_server(Durability::Durable).unwrap_or_else(|problem| {
            panic!("no PostgreSQL for the benchmark: {problem}; install the PostgreSQL server (apt-get install postgresql)")
        }),
    };
    eprintln!("outbox-bench ({}), PostgreSQL at {}", if smoke { "smoke sizes" } else { "full sizes" }, mask(&admin));
    let mut report = Report::default();
    let db = TestDatabase::create_on(&admin).await;
    outbox_core::migrate(&db.pool).await.expect("migrate");
    machine_notes(&db.pool, &mut report).await;

    let yard = yardstick(&db.pool, sizes, &mut report).await;
    if wanted("enqueue") {
        enqueue_overhead(&db.pool, sizes, yard, &mut report).await;
    }
    if wanted("drain") {
        drain(&admin, sizes, yard, &mut report).await;
    }
    if wanted("cli") {
        cli_drain::drains(&admin, sizes, yard, &mut report).await;
    }
    if wanted("latency") {
        latency(&admin, sizes, &mut report).await;
    }
    if wanted("flat") {
        flat_cost(&admin, sizes, &mut report).await;
    }
    if wanted("backoff") {
        backoff(&admin, sizes, &mut report).await;
    }
    if wanted("takeover") {
        takeover(&admin, sizes, &mut report).await;
    }
    if wanted("wal") || wanted("wal-drain") || wanted("wal-enqueue") || wanted("wal-latency") {
        #[cfg(feature = "wal")]
        if wanted("wal") {
            wal_source::scenarios(&admin, sizes, yard, &mut report).await;
        } else {
            if wanted("wal-drain") {
                wal_source::drains(&admin, sizes, yard, &mut report).await;
            }
            if wanted("wal-latency") {
                wal_source::latencies(&admin, sizes, &mut report).await;
            }
            if wanted("wal-enqueue") {
                wal_source::enqueue_overhead(&admin, sizes, &mut report).await;
            }
        }
        #[cfg(not(feature = "wal"))]
        report.note("wal: skipped (build the bench with the `wal` feature)".into());
    }
    if wanted("broker") {
        brokers::end_to_end(&admin, sizes, yard, &mut report).await;
    }
    print_report(&report, smoke);
}

/// The yardstick figures of this run.
#[derive(Debug, Clone, Copy)]
struct Yardstick {
    rows_per_sec_100: f64,
    tx_per_sec_1: f64,
}

async fn machine_notes(pool: &PgPool, report: &mut Report) {
    let version: String = sqlx::query_scalar("SHOW server_version").fetch_one(pool).await.unwrap_or_default();
    let mut settings = Vec::new();
    for name in ["fsync", "synchronous_commit", "shared_buffers", "wal_level", "max_connections"] {
        let value: String = sqlx::query_scalar(&format!("SHOW {name}")).fetch_one(pool).await.unwrap_or_default();
        settings.push(format!("{name}={value}"));
    }
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    report.note(format!("PostgreSQL {version} on the same machine ({cores} cores); {}", settings.join(", ")));
}

/// Runs `clients` loops of `work` for `seconds` and returns the completed units per second.
async fn rate<F, Fut>(clients: usize, seconds: f64, per_call: u64, work: F) -> f64
where
    F: Fn(usize, u64) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|client| {
            let work = work.clone();
            let done = done.clone();
            tokio::spawn(async move {
                let mut n = 0;
                while Instant::now() < deadline {
                    work(client, n).await;
                    n += 1;
                    done.fetch_add(per_call, AtomicOrdering::Relaxed);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a bench client panicked");
    }
    done.load(AtomicOrdering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

/// Runs `clients` loops for `seconds`, each calling `work(client, call, kind)` for the `kinds` in turn (`call`
/// counts the client's calls; cycle `n` starts at kind `n % kinds`), and returns each kind's mean time per call in
/// µs. Interleaved call by call, the
/// kinds share the machine's noise, where kinds measured one after the other differ by whatever the machine did
/// in between.
async fn mean_times_interleaved<F, Fut>(clients: usize, seconds: f64, kinds: usize, work: F) -> Vec<f64>
where
    F: Fn(usize, u64, usize) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let tasks: Vec<_> = (0..clients)
        .map(|client| {
            let work = work.clone();
            tokio::spawn(async move {
                let mut spent = vec![(Duration::ZERO, 0_u32); kinds];
                let mut n = 0;
                while Instant::now() < deadline {
                    // Each cycle starts one kind later, so that no kind always follows the same one.
                    for k in 0..kinds {
                        let kind = (k + n as usize) % kinds;
                        let started = Instant::now();
                        work(client, n * kinds as u64 + k as u64, kind).await;
                        spent[kind].0 += started.elapsed();
                        spent[kind].1 += 1;
                    }
                    n += 1;
                }
                spent
            })
        })
        .collect();
    let mut total = vec![(Duration::ZERO, 0_u32); kinds];
    for task in tasks {
        for (total, (time, calls)) in total.iter_mut().zip(task.await.expect("a bench client panicked")) {
            total.0 += time;
            total.1 += calls;
        }
    }
    total.into_iter().map(|(time, calls)| time.as_secs_f64() * 1e6 / f64::from(calls.max(1))).collect()
}

/// The account of a [`mean_times_interleaved`] call: a different one for each transaction of a client, so that
/// no transaction finds its row warmed by the one before it.
fn interleaved_account(client: usize, call: u64) -> i64 {
    ((client as i64) * 10_007 + call as i64 * 7) % 100_000 + 1
}

async fn yardstick(pool: &PgPool, sizes: Sizes, report: &mut Report) -> Yardstick {
    sqlx::raw_sql(
        "CREATE TABLE yardstick (id UUID PRIMARY KEY, aggregate_type TEXT NOT NULL, aggregate_id TEXT NOT NULL,
                                 event_type TEXT NOT NULL, schema_version INT NOT NULL, payload JSONB NOT NULL,
                                 created_at TIMESTAMPTZ NOT NULL DEFAULT now())",
    )
    .execute(pool)
    .await
    .expect("yardstick table");
    let mut best_rows = 0.0_f64;
    let wal_before = profile::wal_position(pool).await;
    for clients in [1, 4] {
        let pool = pool.clone();
        let rows = rate(clients, sizes.seconds, 100, move |client, n| yardstick_rows(pool.clone(), client, n)).await;
        best_rows = best_rows.max(rows);
        report.add(Figure {
            scenario: "yardstick",
            case: format!("plain 100-row INSERT per transaction, {clients} client(s)"),
            value: rows,
            unit: "rows/s",
            ratio: None,
            ratio_of: "",
            target: "",
        });
    }
    let wal_bytes = profile::wal_position(pool).await - wal_before;
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM yardstick").fetch_one(pool).await.unwrap_or(1);
    report.note(format!(
        "yardstick: {:.0} WAL bytes per row of the plain 100-row INSERT",
        wal_bytes as f64 / rows.max(1) as f64
    ));
    let mut best_tx = 0.0_f64;
    for clients in [1, 8] {
        let pool = pool.clone();
        let tx_rate = rate(clients, sizes.seconds, 1, move |_, _| {
            let pool = pool.clone();
            async move {
                let mut tx = pool.begin().await.expect("begin");
                sqlx::query(
                    "INSERT INTO yardstick (id, aggregate_type, aggregate_id, event_type, schema_version, payload)
                     VALUES ($1, 'account', '1', 'account.credited', 1, '{}')",
                )
                .bind(Uuid::now_v7())
                .execute(&mut *tx)
                .await
                .expect("yardstick insert");
                tx.commit().await.expect("commit");
            }
        })
        .await;
        best_tx = best_tx.max(tx_rate);
        report.add(Figure {
            scenario: "yardstick",
            case: format!("plain one-row-insert transaction, {clients} client(s)"),
            value: tx_rate,
            unit: "tx/s",
            ratio: None,
            ratio_of: "",
            target: "",
        });
    }
    sqlx::query("TRUNCATE yardstick").execute(pool).await.expect("truncate");
    Yardstick { rows_per_sec_100: best_rows, tx_per_sec_1: best_tx }
}

/// One transaction of the yardstick's plain 100-row `INSERT` (its `n`th call by `client`), into its table.
async fn yardstick_rows(pool: PgPool, client: usize, n: u64) {
    let ids: Vec<Uuid> = (0..100).map(|_| Uuid::now_v7()).collect();
    let aggregates: Vec<String> = (0..100).map(|i| format!("{}", (client as u64 * 1_000_000 + n * 100 + i))).collect();
    let payloads: Vec<String> = aggregates
        .iter()
        .map(|a| format!(r#"{{"account_id":{a},"amount_cents":1250,"reference":"ref-{a}"}}"#))
        .collect();
    let mut tx = pool.begin().await.expect("begin");
    sqlx::query(
        "INSERT INTO yardstick (id, aggregate_type, aggregate_id, event_type, schema_version, payload)
         SELECT id, 'account', a, 'account.credited', 1, p::jsonb
           FROM UNNEST($1::uuid[], $2::text[], $3::text[]) AS u(id, a, p)",
    )
    .bind(ids)
    .bind(aggregates)
    .bind(payloads)
    .execute(&mut *tx)
    .await
    .expect("yardstick insert");
    tx.commit().await.expect("commit");
}

async fn enqueue_overhead(pool: &PgPool, sizes: Sizes, yard: Yardstick, report: &mut Report) {
    sqlx::raw_sql(
        "CREATE TABLE accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL);
         INSERT INTO accounts SELECT i, 0 FROM generate_series(1, 100000) i;",
    )
    .execute(pool)
    .await
    .expect("accounts");
    const MODES: [&str; 4] = ["none", "event", "event with the commit", "event+notify"];
    for clients in [1, 8] {
        let each = pool.clone();
        // Each producer runs the modes in turn, one transaction each: they share the machine's noise.
        let latencies = mean_times_interleaved(clients, sizes.seconds * 2.0, MODES.len(), move |client, call, mode| {
            let pool = each.clone();
            async move {
                let account = interleaved_account(client, call);
                let outbox = if MODES[mode] == "event+notify" { Outbox::new().with_notify() } else { Outbox::new() };
                const UPDATE: &str = "UPDATE accounts SET balance = balance + 1 WHERE id = $1";
                if MODES[mode] == "event with the commit" {
                    return credit_with_the_commit(pool, outbox, account).await;
                }
                let mut tx = pool.begin().await.expect("begin");
                sqlx::query(UPDATE).bind(account).execute(&mut *tx).await.expect("update");
                if MODES[mode] != "none" {
                    outbox.enqueue(&mut tx, &credit(account)).await.expect("enqueue");
                }
                tx.commit().await.expect("commit");
            }
        })
        .await;
        let [plain, with_event, with_commit, with_notify] = [latencies[0], latencies[1], latencies[2], latencies[3]];
        report.add(Figure {
            scenario: "enqueue",
            case: format!("domain UPDATE without event, {clients} producer(s)"),
            value: plain,
            unit: "µs per tx",
            ratio: Some(clients as f64 * 1e6 / plain / yard.tx_per_sec_1),
            ratio_of: "x one-row-insert tx/s (its producers' rate, among the other modes)",
            target: "",
        });
        for (case, with, target) in [
            (
                "1 event written with the commit (OutboxTransaction)",
                with_commit,
                if clients == 1 { "<= 1.15" } else { "<= 1.40" },
            ),
            ("1 event, enqueue in its own round trip", with_event, "(reported)"),
            ("1 event + NOTIFY", with_notify, "(reported)"),
        ] {
            report.add(Figure {
                scenario: "enqueue",
                case: format!("domain UPDATE + {case}, {clients} producer(s)"),
                value: with,
                unit: "µs per tx",
                ratio: Some(with / plain),
                ratio_of: "overhead: latency with / without, interleaved",
                target,
            });
        }
        if let Some(&[floor_plain, floor_event]) =
            pgbench_floor(pool, clients, sizes.seconds * 2.0, &[FLOOR_ROW]).await.as_deref()
        {
            report.add(Figure {
                scenario: "enqueue",
                case: format!(
                    "floor: the same statements sent by pgbench, the row with the COMMIT, {clients} client(s)"
                ),
                value: floor_event,
                unit: "µs per tx",
                ratio: Some(floor_event / floor_plain),
                ratio_of: "overhead: latency with / without, interleaved",
                target: "(the database's own share)",
            });
        } else {
            report.note("enqueue: no floor measured (pgbench not found, or its run failed)".into());
        }
    }
    sqlx::query("TRUNCATE outbox_events").execute(pool).await.expect("truncate");
    let wal_before = profile::wal_position(pool).await;
    for n in 0..100 {
        batch_with_the_commit(pool.clone(), 900_000_000 + n * 100).await;
    }
    let wal_bytes = profile::wal_position(pool).await - wal_before;
    report.note(format!("enqueue: {:.0} WAL bytes per event of the 100-event batch", wal_bytes as f64 / 10_000.0));
    // The yardstick's clients, each alternating its plain 100-row INSERT with 100 events written with the commit:
    // the two share the machine's noise and the same concurrency.
    for clients in [1, 4] {
        let each = pool.clone();
        let latencies = mean_times_interleaved(clients, sizes.seconds, 2, move |client, call, kind| {
            let pool = each.clone();
            async move {
                if kind == 0 {
                    yardstick_rows(pool, client, call).await;
                } else {
                    batch_with_the_commit(pool, (client as i64) * 1_000_000 + call as i64 * 100).await;
                }
            }
        })
        .await;
        let [plain, batch] = [latencies[0], latencies[1]];
        report.add(Figure {
            scenario: "enqueue",
            case: format!("batch of 100 events per transaction, written with the commit, {clients} producer(s)"),
            value: batch,
            unit: "µs per tx",
            ratio: Some(batch / plain),
            ratio_of: "latency / the plain 100-row INSERT's, interleaved",
            target: "<= 1.5",
        });
        if let Some((yardstick, outbox)) = pgbench_batch_floor(pool, clients, sizes.seconds).await {
            report.add(Figure {
                scenario: "enqueue",
                case: format!(
                    "floor: the same 100-row INSERT sent by pgbench into outbox_events and into the yardstick's \
                     table, {clients} client(s)"
                ),
                value: outbox,
                unit: "µs per tx",
                ratio: Some(outbox / yardstick),
                ratio_of: "latency / the plain 100-row INSERT's, interleaved",
                target: "(the database's own share)",
            });
        } else {
            report.note("enqueue: no batch floor measured (pgbench not found, or its run failed)".into());
        }
    }
    sqlx::query("TRUNCATE outbox_events, yardstick").execute(pool).await.expect("truncate");
}

/// Fills a fresh database with `events` pending rows over `aggregates` aggregates (and `history` published ones).
async fn filled(admin: &str, events: i64, aggregates: i64, history: i64) -> TestDatabase {
    let db = TestDatabase::create_on(admin).await;
    outbox_core::migrate(&db.pool).await.expect("migrate");
    fill(&db, events, aggregates, history).await;
    db
}

/// Adds `events` pending rows over `aggregates` aggregates (and `history` published ones) to a migrated database,
/// with plain SQL (so it fills the previous design's schema too).
async fn fill(db: &TestDatabase, events: i64, aggregates: i64, history: i64) {
    // Ids in insertion order, as the UUID v7 ids of `enqueue` are: new rows land at the right edge of the
    // primary key, not on random pages of it.
    sqlx::raw_sql(
        "CREATE FUNCTION time_ordered_id(n bigint) RETURNS uuid LANGUAGE sql IMMUTABLE AS
         $$ SELECT (lpad(to_hex(n), 12, '0') || '7' || substr(md5(n::text), 1, 19))::uuid $$",
    )
    .execute(&db.pool)
    .await
    .expect("id function");
    if history > 0 {
        sqlx::query(
            "INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, status, published_at)
             SELECT time_ordered_id(i), 'account', (i % 100000)::text, 'account.credited',
                    jsonb_build_object('account_id', i, 'amount_cents', 1250), 'published', now()
               FROM generate_series(1, $1) i",
        )
        .bind(history)
        .execute(&db.pool)
        .await
        .expect("history");
        // Where each partition's unfinished rows begin, as the relays that published the history wrote it (the
        // previous design's schema has no such column).
        let _ = sqlx::query(
            "UPDATE outbox_partitions p SET start_seq = COALESCE(
                 (SELECT max(seq) + 1 FROM outbox_events e WHERE e.partition = p.partition), 0)",
        )
        .execute(&db.pool)
        .await;
    }
    sqlx::query(
        "INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
         SELECT time_ordered_id($3 + i), 'account', (i % $2)::text, 'account.credited',
                jsonb_build_object('account_id', i % $2, 'amount_cents', 1250, 'reference', 'ref-' || i)
           FROM generate_series(1, $1) i",
    )
    .bind(events)
    .bind(aggregates)
    .bind(history)
    .execute(&db.pool)
    .await
    .expect("fill");
    sqlx::raw_sql("VACUUM ANALYZE outbox_events").execute(&db.pool).await.expect("vacuum");
    // Written before the relay starts, and flushed: a drain does not run beside the checkpoint that writing (and
    // vacuuming) millions of rows set off, which would weigh on the 10M-row history of `flat` alone. A role that may
    // not checkpoint (`OUTBOX_BENCH_DATABASE_URL`) drains without it.
    let _ = sqlx::raw_sql("CHECKPOINT").execute(&db.pool).await;
}

/// Whether any event is still pending, on this version's schema: partition by partition from its start, through
/// the `(partition, seq)` index. (A plain `status = 'pending'` has no index to use since settles rewrite rows in
/// place: it would scan the published rows before the first pending one at every poll, a load of the harness's own
/// on the drain it measures.)
pub(crate) const PENDING_LEFT: &str = "SELECT EXISTS (
    SELECT 1 FROM outbox_partitions p
     CROSS JOIN LATERAL (SELECT 1 FROM outbox_events e
                          WHERE e.partition = p.partition AND e.seq >= p.start_seq AND e.status = 'pending'
                          LIMIT 1) x)";

/// Runs `relays` relays with the default settings (but ordering and retention) until no row is pending; returns
/// events/s.
async fn drain_with(db: &TestDatabase, relays: usize, ordering: Ordering, retention: Retention, events: i64) -> f64 {
    let sink = NoopSink::default();
    let shutdown = CancellationToken::new();
    // The relays' own pool, as the README says to make it (and the CLI makes it): sessions without JIT.
    let pool = PgStore::pool_options()
        .max_connections(20)
        .connect_with(db.pool.connect_options().as_ref().clone())
        .await
        .expect("the relays' pool");
    let started = Instant::now();
    let tasks: Vec<_> = (0..relays)
        .map(|_| {
            let config = RelayConfig::builder().ordering(ordering).retention(retention).build().expect("config");
            tokio::spawn(Relay::new(PgStore::new(pool.clone()), sink.clone(), config).run(shutdown.clone()))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(1_800);
    while (sink.published.load(AtomicOrdering::Relaxed) as i64) < events {
        assert!(Instant::now() < deadline, "the drain did not finish within 30 minutes");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Published is not done: the clock stops when the last settle has committed.
    while sqlx::query_scalar::<_, bool>(PENDING_LEFT).fetch_one(&db.pool).await.expect("poll") {
        assert!(Instant::now() < deadline, "the drain did not finish within 30 minutes");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    shutdown.cancel();
    for task in tasks {
        task.await.expect("relay task").expect("relay");
    }
    pool.close().await;
    events as f64 / elapsed
}

/// The Go article's loop (the reference design), as it describes it: select up to 100 due pending rows (`FOR
/// UPDATE SKIP LOCKED`, in a short transaction of its own), then "publish" them one by one, marking each published
/// with an `UPDATE` of its own, one row at a time.
async fn drain_naively(db: &TestDatabase, events: i64) -> f64 {
    let started = Instant::now();
    let mut published = 0;
    while published < events {
        let mut tx = db.pool.begin().await.expect("begin");
        let ids: Vec<Uuid> = sqlx::query_scalar(
            "SELECT id FROM outbox_events WHERE status = 'pending' AND next_attempt_at <= now()
              ORDER BY created_at LIMIT 100 FOR UPDATE SKIP LOCKED",
        )
        .fetch_all(&mut *tx)
        .await
        .expect("select");
        tx.commit().await.expect("commit");
        if ids.is_empty() {
            break;
        }
        for id in ids {
            sqlx::query("UPDATE outbox_events SET status = 'published', published_at = now() WHERE id = $1")
                .bind(id)
                .execute(&db.pool)
                .await
                .expect("update");
            published += 1;
        }
    }
    published as f64 / started.elapsed().as_secs_f64()
}

/// The relay's own statements without the relay: [`PgStore`]'s heartbeat, then read, batch record and settle back
/// to back, one task, nothing published (batches of 1000 over every partition, ordering off).
async fn drain_statements_only(db: &TestDatabase, events: i64) -> f64 {
    use outbox_core::store::{
        CrashedEvent, Heartbeat, ReadRange, ReadRequest, SettleBatch, SettleOutcome, Settlement, Store,
    };
    let store = PgStore::new(db.pool.clone());
    let relay = Uuid::now_v7();
    let on_crash = |_: &CrashedEvent| SettleOutcome::Failed { error: String::new() };
    let membership =
        store.heartbeat(&Heartbeat::new(relay, "bench", Duration::from_secs(30), &on_crash)).await.expect("heartbeat");
    let leases: Vec<(u16, i64)> = membership.owned.iter().map(|l| (l.partition, l.epoch)).collect();
    let mut cursors: Vec<i64> = vec![0; leases.len()];
    let per_partition = (1_000 / leases.len().max(1)).max(1) as u32 * 4;
    let started = Instant::now();
    let mut published = 0;
    while published < events {
        let ranges = leases.iter().zip(&cursors).map(|((p, _), c)| ReadRange::new(*p, *c, per_partition)).collect();
        let read = store.read(&ReadRequest::new(ranges)).await.expect("read");
        if read.rows.is_empty() {
            break;
        }
        for row in &read.rows {
            cursors[row.range] = cursors[row.range].max(row.event.seq);
        }
        let ids: Vec<Uuid> = read.rows.iter().map(|row| row.event.id).collect();
        let batch = Uuid::now_v7();
        let recorded = store.start_batch(relay, batch, &membership.owned, &ids).await.expect("record");
        assert!(recorded, "a lone relay keeps its leases");
        let settlements = ids.iter().map(|id| Settlement::published(*id)).collect();
        let settle = SettleBatch::new(relay, batch, leases.clone(), settlements);
        published += store.settle(&settle).await.expect("settle").published as i64;
    }
    store.leave(relay).await.expect("leave");
    published as f64 / started.elapsed().as_secs_f64()
}

/// The ceiling of a design this crate does not use: a transaction held across the publish, its row locks as the
/// lease (`SELECT ... FOR UPDATE SKIP LOCKED`, then one `UPDATE` to published, then `COMMIT`): one row version per
/// event instead of two, but a stalled relay holds its rows until the server ends its session.
async fn drain_holding_a_transaction(db: &TestDatabase, events: i64) -> f64 {
    let started = Instant::now();
    let mut published = 0;
    while published < events {
        let mut tx = db.pool.begin().await.expect("begin");
        let ids: Vec<Uuid> = sqlx::query_scalar(
            "SELECT id FROM outbox_events WHERE status = 'pending' AND next_attempt_at <= now()
              ORDER BY next_attempt_at, seq LIMIT 1000 FOR UPDATE SKIP LOCKED",
        )
        .fetch_all(&mut *tx)
        .await
        .expect("select");
        if ids.is_empty() {
            break;
        }
        published +=
            sqlx::query("UPDATE outbox_events SET status = 'published', published_at = now() WHERE id = ANY($1)")
                .bind(&ids)
                .execute(&mut *tx)
                .await
                .expect("update")
                .rows_affected() as i64;
        tx.commit().await.expect("commit");
    }
    published as f64 / started.elapsed().as_secs_f64()
}

/// Row writes on the outbox table so far, read after the relays' connections closed (a backend's statistics
/// are complete once it exits).
async fn writes_so_far(db: &TestDatabase) -> (i64, i64, i64) {
    db.pool.close().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut conn = db.connect().await;
    sqlx::query_as("SELECT n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables WHERE relname = 'outbox_events'")
        .fetch_one(&mut conn)
        .await
        .unwrap_or((0, 0, 0))
}

async fn drain(admin: &str, sizes: Sizes, yard: Yardstick, report: &mut Report) {
    let spread = (sizes.drain_events / 100).max(10);
    let aggregates = spread;
    let mut unordered_rate = 0.0;
    for (ordering, relays, retention, aggregates) in [
        (Ordering::Aggregate, 1, Retention::Keep, spread),
        (Ordering::Aggregate, 1, Retention::Keep, 1_000.min(sizes.drain_events)),
        (Ordering::Aggregate, 1, Retention::Keep, 100.min(sizes.drain_events)),
        (Ordering::Aggregate, 4, Retention::Keep, spread),
        (Ordering::None, 1, Retention::Keep, spread),
        (Ordering::None, 4, Retention::Keep, spread),
        (Ordering::Aggregate, 1, Retention::Immediately, spread),
    ] {
        let db = filled(admin, sizes.drain_events, aggregates, 0).await;
        let profiled = ordering == Ordering::Aggregate && relays == 1 && aggregates == spread;
        if profiled {
            profile::reset(&db.pool).await;
        }
        let wal_before = profile::wal_position(&db.pool).await;
        let cpu_before = profile::process_cpu();
        let started = Instant::now();
        let rate = drain_with(&db, relays, ordering, retention, sizes.drain_events).await;
        let elapsed = started.elapsed();
        let relay_cpu = cpu_before.zip(profile::process_cpu()).map(|(before, after)| after.saturating_sub(before));
        let wal_bytes = profile::wal_position(&db.pool).await - wal_before;
        let kept = retention == Retention::Keep;
        if profiled {
            let (_, updates, deletes) = writes_so_far(&db).await;
            let per_event = |n: i64| n as f64 / sizes.drain_events as f64;
            report.note(format!(
                "writes per published event (defaults, retention {}): {:.2} row updates + {:.2} deletes",
                if kept { "keep: the settle marks published" } else { "0s: the settle deletes" },
                per_event(updates),
                per_event(deletes)
            ));
            profile::report(
                &db,
                "drain, defaults, published rows kept",
                sizes.drain_events,
                elapsed,
                wal_bytes,
                report,
            )
            .await;
        }
        if kept && ordering == Ordering::None && relays == 1 {
            unordered_rate = rate;
        }
        let (label, target) = match (ordering, retention, relays) {
            (_, Retention::Immediately, _) => ("defaults, published rows deleted (--retention 0s)", ">= 1.0"),
            (Ordering::None, _, 1) => ("ordering off", ">= 0.7"),
            (Ordering::Aggregate, _, 1) => ("defaults (ordering per aggregate)", ">= 0.6"),
            (Ordering::Aggregate, _, _) => ("defaults (ordering per aggregate)", ">= 1 relay"),
            (Ordering::None, _, _) => ("ordering off", "(reported)"),
        };
        report.add(Figure {
            scenario: "drain",
            case: format!(
                "{} pending over {aggregates} aggregates, {label}, {relays} relay(s), no-op sink",
                sizes.drain_events
            ),
            value: rate,
            unit: "events/s",
            ratio: Some(rate / yard.rows_per_sec_100),
            ratio_of: "x plain 100-row INSERT rows/s",
            target,
        });
        if let Some(cpu) = relay_cpu {
            // On a machine the relay shares with the database, what it uses the database cannot.
            report.note(format!(
                "drain, {label}, {relays} relay(s), {aggregates} aggregates: {} used {:.2} us of CPU per event",
                if relays == 1 { "the relay" } else { "the relays" },
                cpu.as_secs_f64() * 1e6 / sizes.drain_events as f64
            ));
        }
        db.pool.close().await;
    }
    for (case, holding) in [
        ("the relay's read, record and settle statements alone, one task, back to back", false),
        ("a transaction held across the publish, row locks as the lease (not this design)", true),
    ] {
        let db = filled(admin, sizes.drain_events, aggregates, 0).await;
        let rate = if holding {
            drain_holding_a_transaction(&db, sizes.drain_events).await
        } else {
            drain_statements_only(&db, sizes.drain_events).await
        };
        report.add(Figure {
            scenario: "drain",
            case: format!("{} pending, {case}", sizes.drain_events),
            value: rate,
            unit: "events/s",
            ratio: Some(rate / yard.rows_per_sec_100),
            ratio_of: "x plain 100-row INSERT rows/s",
            target: "(reported)",
        });
        db.pool.close().await;
    }
    let db = filled(admin, sizes.naive_events, aggregates, 0).await;
    let naive = drain_naively(&db, sizes.naive_events).await;
    report.add(Figure {
        scenario: "drain",
        case: format!("Go article's naive loop (select 100, then one UPDATE per event), {} events", sizes.naive_events),
        value: naive,
        unit: "events/s",
        ratio: Some(unordered_rate / naive),
        ratio_of: "relay (ordering off, 1 relay) / naive",
        target: ">= 20",
    });
    db.pool.close().await;
}

async fn latency(admin: &str, sizes: Sizes, report: &mut Report) {
    for notify in [false, true] {
        let db = TestDatabase::create_on(admin).await;
        outbox_core::migrate(&db.pool).await.expect("migrate");
        let received = Arc::new(Mutex::new(HashMap::new()));
        let sink = NoopSink { published: Arc::default(), received: Some(received.clone()) };
        let wakeup =
            if notify { Wakeup::Notify { channel: outbox_core::DEFAULT_CHANNEL.to_owned() } } else { Wakeup::Poll };
        let config = RelayConfig::builder().wakeup(wakeup).build().expect("config");
        let shutdown = CancellationToken::new();
        let relay = tokio::spawn(Relay::new(PgStore::new(db.pool.clone()), sink.clone(), config).run(shutdown.clone()));
        tokio::time::sleep(Duration::from_millis(300)).await;

        let outbox = if notify { Outbox::new().with_notify() } else { Outbox::new() };
        let produce: Produce = Arc::new(move |pool, account| {
            let outbox = outbox.clone();
            Box::pin(async move {
                let mut tx = pool.begin().await.expect("begin");
                let id = outbox.enqueue(&mut tx, &credit(account)).await.expect("enqueue");
                tx.commit().await.expect("commit");
                id
            })
        });
        let run = produce_at_rate(&db.pool, sizes, produce, &received).await;
        shutdown.cancel();
        relay.await.expect("relay task").expect("relay");
        let label = if notify { "LISTEN/NOTIFY" } else { "adaptive polling (default)" };
        run.report("latency", label, sizes, ["<= 3 ms", "<= 15 ms"], &received, report);
        db.pool.close().await;
    }
}

/// A future that is `Send`, boxed.
type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

/// Commits one event (of the account given) in a transaction of its own on the pool given; returns its id once
/// the commit returned.
type Produce = Arc<dyn Fn(PgPool, i64) -> BoxFuture<Uuid> + Send + Sync>;

/// What a steady-rate run committed: each event's commit time, and the producers' achieved rate.
struct RateRun {
    committed: HashMap<Uuid, Instant>,
    achieved: f64,
}

/// Runs 8 producers at `sizes.latency_rate` events/s in total for `sizes.latency_seconds`, each event in its own
/// transaction, then waits up to 60 s until the sink has received every one of them.
async fn produce_at_rate(
    pool: &PgPool,
    sizes: Sizes,
    produce: Produce,
    received: &Arc<Mutex<HashMap<Uuid, Instant>>>,
) -> RateRun {
    // The writes of the scenarios before this one are flushed first: a checkpoint they set off (a drain writes
    // gigabytes of WAL) would otherwise flush them while this one runs.
    let _ = sqlx::raw_sql("CHECKPOINT").execute(pool).await;
    let producers = 8_u32;
    let per_producer = sizes.latency_rate / producers;
    let total = (f64::from(sizes.latency_rate) * sizes.latency_seconds) as u64;
    let committed = Arc::new(Mutex::new(HashMap::new()));
    let started = Instant::now();
    let tasks: Vec<_> = (0..producers)
        .map(|p| {
            let pool = pool.clone();
            let committed = committed.clone();
            let produce = produce.clone();
            tokio::spawn(async move {
                let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(per_producer)));
                ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
                for n in 0..(total / u64::from(producers)) {
                    ticker.tick().await;
                    let id = produce(pool.clone(), i64::from(p) * 1_000_000 + n as i64).await;
                    committed.lock().unwrap_or_else(|e| e.into_inner()).insert(id, Instant::now());
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("producer");
    }
    let produced_for = started.elapsed().as_secs_f64();
    let committed = std::mem::take(&mut *committed.lock().unwrap_or_else(|e| e.into_inner()));
    let deadline = Instant::now() + Duration::from_secs(60);
    while received.lock().unwrap_or_else(|e| e.into_inner()).len() < committed.len() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let achieved = committed.len() as f64 / produced_for;
    RateRun { committed, achieved }
}

impl RateRun {
    /// Adds the achieved rate and the commit-to-sink percentiles (`targets`: p50, p99) to `report`.
    fn report(
        &self,
        scenario: &'static str,
        label: &str,
        sizes: Sizes,
        targets: [&'static str; 2],
        received: &Arc<Mutex<HashMap<Uuid, Instant>>>,
        report: &mut Report,
    ) {
        let received = received.lock().unwrap_or_else(|e| e.into_inner());
        let mut latencies: Vec<f64> = self
            .committed
            .iter()
            .filter_map(|(id, at)| received.get(id).map(|got| got.saturating_duration_since(*at).as_secs_f64() * 1e3))
            .collect();
        latencies.sort_by(f64::total_cmp);
        let pick =
            |q: f64| latencies.get(((latencies.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(f64::NAN);
        report.add(Figure {
            scenario,
            case: format!("{label}: producers' achieved rate"),
            value: self.achieved,
            unit: "tx/s",
            ratio: Some(self.achieved / f64::from(sizes.latency_rate)),
            ratio_of: "x requested rate",
            target: "~1.0",
        });
        for (name, q, target) in [("p50", 0.5, targets[0]), ("p99", 0.99, targets[1]), ("max", 1.0, "(reported)")] {
            report.add(Figure {
                scenario,
                case: format!("{label}: commit ack -> sink, {name}"),
                value: pick(q),
                unit: "ms",
                ratio: None,
                ratio_of: "",
                target,
            });
        }
        if latencies.len() != self.committed.len() {
            report.note(format!(
                "{label}: {} of {} events reached the sink within 60 s",
                latencies.len(),
                self.committed.len()
            ));
        }
    }
}

async fn flat_cost(admin: &str, sizes: Sizes, report: &mut Report) {
    let mut rates = Vec::new();
    for history in [0, sizes.flat_history] {
        let db = filled(admin, sizes.flat_events, 1_000, history).await;
        let plan: Vec<String> = sqlx::query_scalar(
            "EXPLAIN SELECT id FROM outbox_events
              WHERE partition = 7 AND status = 'pending' AND seq > (SELECT start_seq FROM outbox_partitions
                                                                     WHERE partition = 7)
              ORDER BY seq LIMIT 1000",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap_or_default();
        let on_index = plan.iter().any(|line| line.contains("outbox_events_partition_seq_idx"));
        let rate = drain_with(&db, 1, Ordering::None, Retention::Keep, sizes.flat_events).await;
        report.add(Figure {
            scenario: "flat",
            case: format!("drain {} events with {history} published rows kept", sizes.flat_events),
            value: rate,
            unit: "events/s",
            ratio: rates.first().map(|empty: &f64| rate / empty),
            ratio_of: "x drain rate on an empty table",
            target: if history > 0 { ">= 0.9" } else { "" },
        });
        report.note(format!(
            "read plan with {history} published rows: {}",
            if on_index { "on outbox_events_partition_seq_idx" } else { "NOT on the partition index" }
        ));
        rates.push(rate);
        db.pool.close().await;
    }
}

fn print_report(report: &Report, smoke: bool) {
    println!("| scenario | case | value | unit | ratio | ratio of | target |");
    println!("| --- | --- | ---: | --- | ---: | --- | --- |");
    for f in &report.figures {
        println!(
            "| {} | {} | {:.1} | {} | {} | {} | {} |",
            f.scenario,
            f.case,
            f.value,
            f.unit,
            f.ratio.map(|r| format!("{r:.3}")).unwrap_or_default(),
            f.ratio_of,
            f.target
        );
    }
    for note in &report.notes {
        println!("\n- {note}");
    }
    let json = serde_json::json!({ "smoke": smoke, "figures": report.figures, "notes": report.notes });
    let text = serde_json::to_string_pretty(&json).unwrap_or_default();
    println!("\n```json\n{text}\n```");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/outbox-bench.json");
    let _ = std::fs::write(path, text);
}

fn mask(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => url.to_owned(),
    }
}

/// Heads in backoff: aggregates whose oldest event is retrying (due in an hour), with every other pending row
/// behind them. The relay reads past them once and holds them back in memory; then each poll costs only what is
/// new. Reports the read statement's mean and largest time after the first pass.
async fn backoff(admin: &str, sizes: Sizes, report: &mut Report) {
    let aggregates = 1_000.min(sizes.flat_events);
    let db = filled(admin, sizes.flat_events, aggregates, 0).await;
    sqlx::query(
        "UPDATE outbox_events SET attempts = 1, next_attempt_at = now() + interval '1 hour'
          WHERE seq IN (SELECT min(seq) FROM outbox_events GROUP BY aggregate_type, aggregate_id)",
    )
    .execute(&db.pool)
    .await
    .expect("heads in backoff");
    let shutdown = CancellationToken::new();
    let relay = tokio::spawn(
        Relay::new(PgStore::new(db.pool.clone()), NoopSink::default(), RelayConfig::builder().build().expect("config"))
            .run(shutdown.clone()),
    );
    // The first pass reads the held-back rows once; then the relay polls.
    tokio::time::sleep(Duration::from_secs_f64(sizes.seconds.max(1.0))).await;
    let profiled = profile::reset(&db.pool).await;
    tokio::time::sleep(Duration::from_secs_f64(sizes.seconds.max(1.0))).await;
    let times = if profiled { profile::statement_times(&db.pool, "pg_current_snapshot()").await } else { None };
    shutdown.cancel();
    relay.await.expect("relay task").expect("relay");
    let published: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE status = 'published'")
        .fetch_one(&db.pool)
        .await
        .unwrap_or(-1);
    match times {
        Some((mean, max, calls)) => {
            for (name, value, target) in [("mean", mean, "<= 10 ms"), ("max", max, "(reported)")] {
                report.add(Figure {
                    scenario: "backoff",
                    case: format!(
                        "{aggregates} heads in backoff, {} pending behind them: one poll, {name} ({calls} polls)",
                        sizes.flat_events
                    ),
                    value,
                    unit: "ms",
                    ratio: None,
                    ratio_of: "",
                    target,
                });
            }
        }
        None => report.note("backoff: no statement times (pg_stat_statements is not loaded)".into()),
    }
    report.note(format!("backoff: {published} events published while every head was in backoff (expected 0)"));
    db.pool.close().await;
}

/// Three relays with a 2s lease share the partitions; one is killed (its task aborted: no heartbeat, no settle, no
/// hand-over). Reports how long until the other two own every partition again, in leases.
async fn takeover(admin: &str, sizes: Sizes, report: &mut Report) {
    let lease = Duration::from_secs(2);
    let db = filled(admin, sizes.flat_events.min(20_000), 1_000, 0).await;
    let config = || RelayConfig::builder().lease(lease).build().expect("config");
    let shutdown = CancellationToken::new();
    let relays: Vec<_> = (0..3)
        .map(|_| {
            let relay = Relay::new(PgStore::new(db.pool.clone()), NoopSink::default(), config());
            (relay.id(), tokio::spawn(relay.run(shutdown.clone())))
        })
        .collect();
    let owners = |pool: PgPool| async move {
        sqlx::query_scalar::<_, i64>("SELECT count(DISTINCT owner) FROM outbox_partitions WHERE owner IS NOT NULL")
            .fetch_one(&pool)
            .await
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while owners(db.pool.clone()).await < 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (victim, handle) = &relays[0];
    handle.abort();
    let killed = Instant::now();
    let taken_over = loop {
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_partitions WHERE owner = $1")
            .bind(victim)
            .fetch_one(&db.pool)
            .await
            .unwrap_or(0);
        if left == 0 {
            break killed.elapsed();
        }
        if Instant::now() > deadline {
            break Duration::from_secs(60);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    shutdown.cancel();
    for (_, handle) in relays.into_iter().skip(1) {
        let _ = handle.await;
    }
    report.add(Figure {
        scenario: "takeover",
        case: "3 relays, one killed: its partitions owned by the others after".into(),
        value: taken_over.as_secs_f64() * 1_000.0,
        unit: "ms",
        ratio: Some(taken_over.as_secs_f64() / lease.as_secs_f64()),
        ratio_of: "x the lease (2s)",
        target: "<= 2.0",
    });
    db.pool.close().await;
}

/// The database's own share of an event's cost: pgbench runs `clients` clients for `seconds`, each transaction the
/// bench's domain transaction (`BEGIN`, the `UPDATE`, `COMMIT`), either plain or with one of `events` (one
/// statement, sent in the same message as the `COMMIT`, as `OutboxTransaction` sends it; `:id` is the account). The
/// kinds are drawn at random for every transaction of one run, so that they share the machine's noise. Returns the
/// mean latency in µs of the plain transaction and of each event's, or `None` without pgbench.
pub(crate) async fn pgbench_floor(pool: &PgPool, clients: usize, seconds: f64, events: &[&str]) -> Option<Vec<f64>> {
    const DOMAIN: &str =
        "\\set id random(1, 100000)\nBEGIN;\nUPDATE accounts SET balance = balance + 1 WHERE id = :id;\n";
    let scripts: Vec<String> = std::iter::once(format!("{DOMAIN}COMMIT;\n"))
        .chain(events.iter().map(|event| format!("{DOMAIN}{event} \\; COMMIT;\n")))
        .collect();
    pgbench_scripts(pool, clients, seconds, &scripts).await
}

/// The 100-event batch's floor: the same 100-row `INSERT ... SELECT` sent by pgbench into the yardstick's table and
/// into `outbox_events` (the columns `OutboxTransaction` writes), one transaction each, drawn at random per
/// transaction. Ids are ordered by time within and across transactions, as UUID v7 ids are; 100 aggregates per
/// transaction, as the bench's batch has. Returns the mean latencies in µs (yardstick, outbox), or `None` without
/// pgbench. What the two differ by is what the outbox table's schema costs the database, nothing of the library.
async fn pgbench_batch_floor(pool: &PgPool, clients: usize, seconds: f64) -> Option<(f64, f64)> {
    const ROWS: &str = "FROM generate_series(1, 100) g, \
         LATERAL (SELECT (lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1e6)::bigint * 256 + g), 16, '0') \
                          || substr(md5(random()::text), 1, 16))::uuid AS id, (:k::bigint * 100 + g)::text AS a) r";
    const PAYLOAD: &str =
        "('{\"account_id\":' || r.a || ',\"amount_cents\":1250,\"reference\":\"ref-' || r.a || '\"}')::jsonb";
    let scripts = [
        format!(
            "\\set k random(1, 1000000000)\nBEGIN;\nINSERT INTO yardstick (id, aggregate_type, aggregate_id, \
             event_type, schema_version, payload) SELECT r.id, 'account', r.a, 'account.credited', 1, {PAYLOAD} \
             {ROWS};\nCOMMIT;\n"
        ),
        format!(
            "\\set k random(1, 1000000000)\nBEGIN;\nINSERT INTO outbox_events (id, aggregate_type, aggregate_id, \
             event_type, schema_version, payload, headers, sensitive_paths) SELECT r.id, 'account', r.a, \
             'account.credited', 1, {PAYLOAD}, '{{}}'::jsonb, '[]'::jsonb {ROWS};\nCOMMIT;\n"
        ),
    ];
    match pgbench_scripts(pool, clients, seconds, &scripts).await?.as_slice() {
        &[yardstick, outbox] => Some((yardstick, outbox)),
        _ => None,
    }
}

/// Runs pgbench (from `PATH` or `/usr/lib/postgresql/*/bin`) on the pool's database: `clients` clients for
/// `seconds`, every transaction one of `scripts` drawn at random with equal weights. Returns each script's mean
/// latency in µs, in the scripts' order, or `None` without pgbench or when its run failed.
async fn pgbench_scripts(pool: &PgPool, clients: usize, seconds: f64, scripts: &[String]) -> Option<Vec<f64>> {
    let pgbench = ["pgbench".to_owned()]
        .into_iter()
        .chain(glob_bin("pgbench"))
        .find(|bin| std::process::Command::new(bin).arg("--version").output().is_ok_and(|o| o.status.success()))?;
    let database: String = sqlx::query_scalar("SELECT current_database()").fetch_one(pool).await.ok()?;
    let options = pool.connect_options();
    let conninfo = format!(
        "host={} port={} user={} dbname={database}",
        options.get_host(),
        options.get_port(),
        options.get_username()
    );
    // Removed when dropped, also on the early returns below.
    let dir = tempfile::Builder::new().prefix("outbox-pgbench-").tempdir().ok()?;
    let mut command = tokio::process::Command::new(&pgbench);
    command.arg("-n");
    for (n, script) in scripts.iter().enumerate() {
        let file = dir.path().join(format!("script-{n}.sql"));
        std::fs::write(&file, script).ok()?;
        // Equal weights: each transaction draws its script.
        command.arg("-f").arg(format!("{}@1", file.display()));
    }
    let clients = clients.to_string();
    let output = command
        .args(["-c", &clients, "-j", &clients, "-T", &format!("{}", seconds.ceil() as u64)])
        .arg(&conninfo)
        .output()
        .await
        .ok()?;
    let latencies = script_latencies(&String::from_utf8_lossy(&output.stdout));
    (latencies.len() == scripts.len()).then_some(latencies)
}

/// The per-script mean latencies (µs) of a pgbench report of several scripts, in the scripts' order (the report's
/// overall latency, printed before the first script, is left out).
fn script_latencies(report: &str) -> Vec<f64> {
    let mut in_script = false;
    let mut latencies = Vec::new();
    for line in report.lines() {
        if line.starts_with("SQL script ") {
            in_script = true;
        } else if let Some(rest) = line.trim_start_matches([' ', '-']).strip_prefix("latency average = ") {
            if in_script {
                latencies
                    .extend(rest.split_whitespace().next().and_then(|ms| ms.parse::<f64>().ok()).map(|ms| ms * 1e3));
            }
        }
    }
    latencies
}

/// The table scenario's event for [`pgbench_floor`]: one outbox row, as `OutboxTransaction` writes it (migration 9's
/// `outbox_insert_event`), its id a literal as the library's is. pgbench has no clock, so the id is drawn at random
/// (18 random digits: no two transactions of a run draw the same) rather than ordered by time; a random key costs
/// the primary key a descent that the library's time-ordered ids skip, so this floor errs high, not low. (An id
/// made by SQL functions costs more: about 30 µs of parsing and planning per statement, measured with pgbench.)
const FLOOR_ROW: &str =
    "\\set a random(100, 999)\n\\set b random(100, 999)\n\\set c random(100000000000, 999999999999)\n\
    SELECT outbox_insert_event('00000000-0000-7:a-8:b-:c', 'account', ':id', 'account.credited', 1, \
    '{\"account_id\":1,\"amount_cents\":1250,\"reference\":\"ref-:id\"}', '{}', '[]')";

/// `name` in the PostgreSQL installations of this machine (`/usr/lib/postgresql/*/bin`).
fn glob_bin(name: &str) -> Vec<String> {
    let Ok(versions) = std::fs::read_dir("/usr/lib/postgresql") else { return Vec::new() };
    versions.flatten().map(|v| v.path().join("bin").join(name).to_string_lossy().into_owned()).collect()
}

/// The bench's domain transaction with its event written with the commit ([`outbox_core::OutboxTransaction`]),
/// boxed as a `Send` future where it is made (the closure that calls it is higher-ranked).
fn credit_with_the_commit(
    pool: PgPool,
    outbox: Outbox,
    account: i64,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    Box::pin(async move {
        let mut tx = outbox.begin(&pool).await.expect("begin");
        sqlx::query("UPDATE accounts SET balance = balance + 1 WHERE id = $1")
            .bind(account)
            .execute(&mut *tx)
            .await
            .expect("update");
        tx.enqueue(&credit(account)).expect("enqueue");
        tx.commit().await.expect("commit");
    })
}

/// A transaction of 100 events written with the commit, boxed as `credit_with_the_commit` is.
fn batch_with_the_commit(pool: PgPool, first: i64) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    Box::pin(async move {
        let mut tx = Outbox::new().begin(&pool).await.expect("begin");
        for i in 0..100 {
            tx.enqueue(&credit(first + i)).expect("enqueue");
        }
        tx.commit().await.expect("commit");
    })
}
