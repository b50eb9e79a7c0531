//! The real `outbox relay --metrics-addr` binary: `/metrics` counts what it published and what failed (by kind),
//! its backlog gauges and `outbox status` show the same numbers from a statement on the partial indexes, logs
//! never carry a sensitive value even at trace level, the commit-to-publish lag counts from the commit,
//! `/readyz` turns unready when the database stops or the relay's heartbeat cannot get through, `/healthz`
//! answers and `/readyz` says what the relay waits for during its start-up waits, and the WAL source's slot gauges
//! grow while events wait and fall back once they are published.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use common::{enqueue, event, wait_until, TestEvent};
use outbox_core::store::{PgStore, Store};
use outbox_core::OutboxEvent;
use outbox_relay::telemetry::names;
use outbox_tests::pg::{PrivateServer, TestDatabase};
use outbox_tests::process::{free_addr, OutboxProcess};
use serde_json::Value;

/// The sensitive value every test event carries (`/card_number`).
const CARD_NUMBER: &str = "4111111111111111";
/// The webhook signing secret: as sensitive as a payload value.
const WEBHOOK_SECRET: &str = "whsec_b3V0Ym94LXRlc3Qtc2VjcmV0LWtleS0zMi1ieXRlcyE=";

/// A running `outbox relay` serving `--metrics-addr`, killed when dropped.
struct ServingRelay {
    process: OutboxProcess,
    metrics: SocketAddr,
}

impl ServingRelay {
    fn start(database_url: &str, sink: &str, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let metrics = free_addr();
        let mut outbox = outbox_tests::outbox!().database(database_url);
        for (name, value) in env {
            outbox = outbox.env(name, value);
        }
        let metrics_addr = metrics.to_string();
        let args =
            [&["relay", "--poll-interval", "10ms", "--sink", sink, "--metrics-addr", &metrics_addr], extra].concat();
        Self { process: outbox.spawn(args), metrics }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.metrics)
    }

    /// Everything the process wrote to stdout and stderr so far.
    fn output(&self) -> String {
        self.process.output()
    }

    async fn get(&self, path: &str) -> Option<(u16, String)> {
        let response = reqwest::get(self.url(path)).await.ok()?;
        let status = response.status().as_u16();
        Some((status, response.text().await.ok()?))
    }

    /// Waits until `/healthz` answers (the endpoints are served from the start, through the start-up waits).
    async fn wait_until_answering(&mut self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while self.get("/healthz").await.is_none() {
            if let Some(status) = self.process.exit_status() {
                panic!("the relay exited with {status}: {}", self.output());
            }
            assert!(tokio::time::Instant::now() < deadline, "no /healthz after 30s: {}", self.output());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the relay is past its start-up waits (`/readyz` no longer says it starts): every metric family
    /// is registered from then on.
    async fn wait_until_serving(&mut self) {
        self.wait_until_answering().await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while self.get("/readyz").await.is_none_or(|(_, reason)| reason.contains("starting")) {
            if let Some(status) = self.process.exit_status() {
                panic!("the relay exited with {status}: {}", self.output());
            }
            assert!(tokio::time::Instant::now() < deadline, "still starting after 30s: {}", self.output());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn scrape(&self) -> Scrape {
        let (status, text) = self.get("/metrics").await.expect("GET /metrics");
        assert_eq!(status, 200);
        Scrape::parse(&text)
    }

    /// Scrapes until `condition` holds on a scrape (for at most 30s) and returns that scrape.
    async fn scrape_until(&self, what: &str, condition: impl Fn(&Scrape) -> bool) -> Scrape {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let scrape = self.scrape().await;
            if condition(&scrape) {
                return scrape;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting until {what}; last scrape:\n{}\nlogs:\n{}",
                scrape.text,
                self.output()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// One `/metrics` scrape: every sample by name and labels.
struct Scrape {
    text: String,
    samples: Vec<(String, BTreeMap<String, String>, f64)>,
}

impl Scrape {
    fn parse(text: &str) -> Self {
        let mut samples = Vec::new();
        for line in text.lines().filter(|line| !line.starts_with('#') && !line.trim().is_empty()) {
            let (series, value) = line.rsplit_once(' ').expect("`series value`");
            let value: f64 = value.parse().unwrap_or(f64::NAN);
            let (name, labels) = match series.split_once('{') {
                None => (series.to_owned(), BTreeMap::new()),
                Some((name, labels)) => {
                    let labels = labels.trim_end_matches('}');
                    let labels = labels
                        .split(',')
                        .filter(|pair| !pair.is_empty())
                        .map(|pair| {
                            let (key, value) = pair.split_once('=').expect("label=value");
                            (key.to_owned(), value.trim_matches('"').to_owned())
                        })
                        .collect();
                    (name.to_owned(), labels)
                }
            };
            samples.push((name, labels, value));
        }
        Self { text: text.to_owned(), samples }
    }

    /// The value of the series `name` whose labels include `labels`.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples
            .iter()
            .find(|(n, l, _)| n == name && labels.iter().all(|(k, v)| l.get(*k).is_some_and(|value| value == v)))
            .map(|(_, _, value)| *value)
    }

    /// The value of `name` for the test events' type.
    fn by_type(&self, name: &str) -> Option<f64> {
        self.get(name, &[("event_type", TestEvent::EVENT_TYPE)])
    }
}

fn outbox_status(database_url: &str) -> Value {
    let output = outbox_tests::outbox!().database(database_url).env("OUTBOX_LOG", "warn").run(["status", "--json"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("status JSON")
}

fn assert_never_sensitive(output: &str, what: &str) {
    assert!(!output.contains(CARD_NUMBER), "{what}: a sensitive value reached the logs:\n{output}");
    let secret = WEBHOOK_SECRET.trim_start_matches("whsec_");
    assert!(!output.contains(secret), "{what}: the webhook secret reached the logs:\n{output}");
}

#[tokio::test]
async fn metrics_count_published_events_and_the_gauges_match_outbox_status() {
    let db = TestDatabase::migrated().await;
    let store = PgStore::new(db.pool.clone());
    store.set_paused(true).await.unwrap();
    let ids = enqueue(&db.pool, &(0..6).map(|n| event(format!("agg-{}", n % 3), n)).collect::<Vec<_>>()).await;
    // One dead letter, so the failed gauge has something to show.
    sqlx::query("UPDATE outbox_events SET status = 'failed', attempts = 3, last_error = 'boom' WHERE id = $1")
        .bind(ids[5])
        .execute(&db.pool)
        .await
        .unwrap();
    let dir = tempfile::Builder::new().prefix("outbox-metrics-sink-").tempdir().unwrap();
    let sink = format!("file:{}", dir.path().join("events.jsonl").display());
    let mut relay = ServingRelay::start(&db.url, &sink, &[], &[("RUST_LOG", "trace")]);
    relay.wait_until_serving().await;

    // Paused: the backlog is visible in the gauges, readiness says why, and `outbox status` agrees.
    let scrape = relay
        .scrape_until("the paused backlog is shown", |s| {
            s.by_type(names::EVENTS_PENDING) == Some(5.0) && s.get(names::RELAY_PAUSED, &[]) == Some(1.0)
        })
        .await;
    assert_eq!(scrape.by_type(names::EVENTS_FAILED), Some(1.0));
    let oldest = scrape.by_type(names::OLDEST_PENDING_AGE_SECONDS).unwrap();
    assert!(oldest > 0.0 && oldest < 120.0, "{oldest}");
    let status = outbox_status(&db.url);
    assert_eq!(status["pending"], 5);
    assert_eq!(status["pending_by_type"][0]["event_type"], "test.happened");
    assert_eq!(status["pending_by_type"][0]["pending"], 5);
    assert_eq!(status["failed"], 1);
    assert_eq!(status["failed_by_type"][0]["failed"], 1);
    assert_eq!(status["paused"], true);
    let (code, reason) = relay.get("/readyz").await.unwrap();
    assert_eq!(code, 503, "{reason}");
    assert!(reason.contains("paused"), "{reason}");
    assert_eq!(relay.get("/healthz").await.unwrap().0, 200);

    // Resumed: five events published, first try, with their commit-to-publish lag; the backlog drains to 0.
    store.set_paused(false).await.unwrap();
    let scrape = relay
        .scrape_until("five events are published and the gauges refreshed", |s| {
            s.by_type(names::EVENTS_PUBLISHED_TOTAL) == Some(5.0)
                && s.by_type(names::EVENTS_PENDING) == Some(0.0)
                && s.get(names::RELAY_PAUSED, &[]) == Some(0.0)
        })
        .await;
    let attempts = format!("{}_bucket", names::PUBLISH_ATTEMPTS);
    assert_eq!(scrape.get(&attempts, &[("event_type", "test.happened"), ("le", "1")]), Some(5.0), "{}", scrape.text);
    assert_eq!(scrape.by_type(&format!("{}_count", names::PUBLISH_ATTEMPTS)), Some(5.0));
    assert_eq!(scrape.by_type(&format!("{}_sum", names::PUBLISH_ATTEMPTS)), Some(5.0));
    let lag_count = format!("{}_count", names::COMMIT_TO_PUBLISH_SECONDS);
    assert_eq!(scrape.by_type(&lag_count), Some(5.0));
    let lag_sum = scrape.by_type(&format!("{}_sum", names::COMMIT_TO_PUBLISH_SECONDS)).unwrap();
    assert!(lag_sum > 0.0 && lag_sum < 5.0 * 120.0, "{lag_sum}");
    assert_eq!(scrape.get(&format!("{}_sum", names::BATCH_SIZE), &[]), Some(5.0));
    assert!(scrape.get(&format!("{}_count", names::BATCH_SIZE), &[]).unwrap() >= 1.0);
    assert_eq!(scrape.by_type(names::OLDEST_PENDING_AGE_SECONDS), Some(0.0));
    for kind in ["transient", "permanent"] {
        let failures = scrape.get(names::PUBLISH_FAILURES_TOTAL, &[("event_type", "test.happened"), ("kind", kind)]);
        assert_eq!(failures, Some(0.0), "nothing failed ({kind}): {}", scrape.text);
    }
    assert!(scrape.text.contains("# HELP outbox_events_pending"), "{}", scrape.text);
    assert!(scrape.text.contains("# TYPE outbox_commit_to_publish_seconds histogram"), "{}", scrape.text);
    let status = outbox_status(&db.url);
    assert_eq!(status["pending"], 0);
    assert_eq!(status["failed"], 1);
    wait_until(Duration::from_secs(10), "/readyz says ready", || async {
        relay.get("/readyz").await.is_some_and(|(code, _)| code == 200)
    })
    .await;

    // Labels carry event types only: no ids, no aggregate ids, no payload values.
    for (name, labels, _) in &scrape.samples {
        assert!(name.starts_with("outbox_"), "{name}");
        for (key, value) in labels {
            assert!(["event_type", "kind", "le"].contains(&key.as_str()), "label {key}={value} on {name}");
        }
    }
    for id in &ids {
        assert!(!scrape.text.contains(&id.to_string()));
    }
    assert!(!scrape.text.contains("agg-") && !scrape.text.contains(CARD_NUMBER));

    // Everything the process logged at trace level: never the sensitive value.
    assert_never_sensitive(&relay.output(), "RUST_LOG=trace, text logs");
}

#[tokio::test]
async fn a_scrape_right_after_start_lists_every_metric_family() {
    let db = TestDatabase::migrated().await;
    let store = PgStore::new(db.pool.clone());
    // Paused, so nothing moves: what the scrape shows was registered at start, not recorded by activity.
    store.set_paused(true).await.unwrap();
    enqueue(&db.pool, &[event("agg-1", 1), event("agg-2", 1)]).await;
    let mut relay = ServingRelay::start(&db.url, "file:/dev/null", &[], &[]);
    relay.wait_until_serving().await;
    let scrape = relay.scrape().await;
    let families: std::collections::BTreeSet<&str> = scrape
        .samples
        .iter()
        .map(|(name, _, _)| {
            let family = ["_bucket", "_sum", "_count"].iter().find_map(|suffix| name.strip_suffix(suffix));
            family.filter(|family| names::ALL.iter().any(|m| m.name == *family)).unwrap_or(name)
        })
        .collect();
    for metric in names::ALL {
        assert!(families.contains(metric.name), "{} is missing from the first scrape:\n{}", metric.name, scrape.text);
        assert!(scrape.text.contains(&format!("# HELP {} ", metric.name)), "no HELP for {}", metric.name);
    }
    assert_eq!(scrape.by_type(names::EVENTS_PENDING), Some(2.0), "{}", scrape.text);
    assert_eq!(scrape.get(names::RELAY_PAUSED, &[]), Some(1.0), "{}", scrape.text);
    assert_eq!(scrape.by_type(names::EVENTS_PUBLISHED_TOTAL), Some(0.0), "{}", scrape.text);
    for kind in ["transient", "permanent"] {
        let failures = scrape.get(names::PUBLISH_FAILURES_TOTAL, &[("event_type", "test.happened"), ("kind", kind)]);
        assert_eq!(failures, Some(0.0), "{kind} failures at zero: {}", scrape.text);
    }
    assert_eq!(scrape.by_type(&format!("{}_count", names::COMMIT_TO_PUBLISH_SECONDS)), Some(0.0), "{}", scrape.text);
}

/// Answers 500 to events of aggregate `flaky-aggregate` (transient) and 400 to those of `poison-aggregate`
/// (permanent), 200 otherwise.
async fn fussy_webhook() -> SocketAddr {
    use axum::http::StatusCode;
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(|body: String| async move {
            if body.contains("flaky-aggregate") {
                StatusCode::INTERNAL_SERVER_ERROR
            } else if body.contains("poison-aggregate") {
                StatusCode::BAD_REQUEST
            } else {
                StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

#[tokio::test]
async fn failures_are_counted_by_kind_and_json_logs_name_the_event_but_never_its_sensitive_values() {
    let db = TestDatabase::migrated().await;
    let hook = fussy_webhook().await;
    enqueue(&db.pool, &[event("fine", 0), event("flaky-aggregate", 0), event("poison-aggregate", 0)]).await;
    let sink = format!("http://{hook}/hook");
    let args = ["--max-attempts", "2", "--backoff-base", "10ms", "--backoff-max", "20ms", "--log-format", "json"];
    let env = [("RUST_LOG", "trace"), ("OUTBOX_WEBHOOK_SECRET", WEBHOOK_SECRET)];
    let mut relay = ServingRelay::start(&db.url, &sink, &args, &env);
    relay.wait_until_serving().await;
    let failures = names::PUBLISH_FAILURES_TOTAL;
    let scrape = relay
        // Failures count by what they lead to: the flaky event's first attempt is retried (transient), its second
        // and last sends it to `failed` as the poison event's only one does (permanent: two dead letters).
        .scrape_until("two permanent failures (two dead letters) and one transient", |s| {
            s.get(failures, &[("event_type", "test.happened"), ("kind", "permanent")]) == Some(2.0)
                && s.get(failures, &[("event_type", "test.happened"), ("kind", "transient")]) == Some(1.0)
                && s.by_type(names::EVENTS_FAILED) == Some(2.0)
        })
        .await;
    assert_eq!(scrape.by_type(names::EVENTS_PUBLISHED_TOTAL), Some(1.0));

    let output = relay.output();
    assert_never_sensitive(&output, "RUST_LOG=trace, JSON logs");
    let lines: Vec<Value> = output
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|error| panic!("not JSON ({error}): {line}")))
        .collect();
    let about = |aggregate: &str| -> Vec<&Value> {
        lines.iter().filter(|line| line["aggregate_id"] == aggregate && line["event_id"].is_string()).collect()
    };
    let poison = about("poison-aggregate");
    let failed = poison.iter().find(|line| line["level"] == "ERROR").expect("an error line about the poison event");
    assert_eq!(failed["event_type"], "test.happened");
    assert_eq!(failed["attempts"], 1);
    assert!(failed["error"].as_str().unwrap().contains("HTTP 400"), "{failed}");
    let flaky = about("flaky-aggregate");
    assert!(flaky.iter().any(|line| line["level"] == "WARN" && line["error"].as_str().unwrap().contains("HTTP 500")));
    assert!(about("fine").iter().any(|line| line["message"] == "published"));
    assert!(
        lines.iter().any(|line| line["span"]["name"] == "outbox.publish"),
        "per-event lines are logged inside the publish span"
    );
}

#[tokio::test]
async fn readyz_turns_unready_while_the_database_is_stopped() {
    let server = PrivateServer::start().unwrap_or_else(|problem| panic!("no private PostgreSQL: {problem}"));
    let db = TestDatabase::create_on(&server.url).await;
    outbox_core::migrate(&db.pool).await.unwrap();
    let dir = tempfile::Builder::new().prefix("outbox-ready-sink-").tempdir().unwrap();
    let sink = format!("file:{}", dir.path().join("events.jsonl").display());
    // With --notify, readiness also needs the LISTEN connection.
    let mut relay = ServingRelay::start(&db.url, &sink, &["--notify"], &[("OUTBOX_LOG", "warn")]);
    relay.wait_until_serving().await;
    let ready = |want: u16| {
        let relay = &relay;
        move || async move { relay.get("/readyz").await.is_some_and(|(code, _)| code == want) }
    };
    wait_until(Duration::from_secs(20), "/readyz is 200", ready(200)).await;
    relay.scrape_until("the listener is connected", |s| s.get(names::LISTENER_CONNECTED, &[]) == Some(1.0)).await;
    db.pool.close().await;
    server.stop().unwrap();
    wait_until(Duration::from_secs(20), "/readyz is 503 with the database stopped", ready(503)).await;
    let (_, reason) = relay.get("/readyz").await.unwrap();
    assert!(reason.contains("database"), "{reason}");
    assert_eq!(relay.get("/healthz").await.unwrap().0, 200, "the process is alive");
    server.start_again().unwrap();
    // The listener reconnects with backoff (at most 30s between tries).
    wait_until(Duration::from_secs(60), "/readyz is 200 again", ready(200)).await;
}

#[tokio::test]
async fn readyz_turns_unready_while_the_relays_heartbeat_cannot_get_through_though_the_database_answers() {
    let db = TestDatabase::migrated().await;
    let dir = tempfile::Builder::new().prefix("outbox-ready-beat-sink-").tempdir().unwrap();
    let sink = format!("file:{}", dir.path().join("events.jsonl").display());
    let mut relay = ServingRelay::start(&db.url, &sink, &["--lease", "1s"], &[("OUTBOX_LOG", "warn")]);
    relay.wait_until_serving().await;
    let ready = |want: u16| {
        let relay = &relay;
        move || async move { relay.get("/readyz").await.is_some_and(|(code, _)| code == want) }
    };
    wait_until(Duration::from_secs(20), "/readyz is 200", ready(200)).await;
    // The heartbeat writes `outbox_relays`; this lock holds it back while every other statement goes on (the
    // pause flag `/readyz` reads included).
    let mut lock = db.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE outbox_relays IN EXCLUSIVE MODE").execute(&mut *lock).await.unwrap();
    wait_until(Duration::from_secs(20), "/readyz is 503 while no heartbeat gets through", ready(503)).await;
    let (_, reason) = relay.get("/readyz").await.unwrap();
    assert!(reason.contains("heartbeat"), "{reason}");
    assert_eq!(relay.get("/healthz").await.unwrap().0, 200, "the process is alive");
    lock.commit().await.unwrap();
    wait_until(Duration::from_secs(20), "/readyz is 200 again once a heartbeat got through", ready(200)).await;
    assert!(relay.process.is_running(), "{}", relay.output());
}

#[tokio::test]
async fn healthz_answers_and_readyz_says_starting_while_the_relay_waits_for_its_database_or_its_sink() {
    // A database that is not there: nothing listens on its port.
    let nowhere = format!("postgres://app@127.0.0.1:{}/shop", outbox_tests::process::free_port());
    let mut relay = ServingRelay::start(&nowhere, "stdout", &[], &[]);
    relay.process.wait_for_lines("cannot reach the database", 1, Duration::from_secs(30)).await;
    relay.wait_until_answering().await;
    assert_eq!(relay.get("/healthz").await, Some((200, "ok\n".to_owned())), "{}", relay.output());
    let (code, reason) = relay.get("/readyz").await.expect("GET /readyz");
    assert_eq!(code, 503, "{reason}");
    assert_eq!(reason, "not ready: starting: waiting for the database\n");
    assert!(relay.process.is_running(), "the relay still waits: {}", relay.output());
    assert_eq!(relay.process.terminate().await.code(), Some(0), "{}", relay.output());

    // The database answers, the sink's broker does not.
    let db = TestDatabase::migrated().await;
    let broker = format!("amqp://relay:secret@127.0.0.1:{}/%2f?exchange=outbox", outbox_tests::process::free_port());
    let mut relay = ServingRelay::start(&db.url, &broker, &[], &[]);
    relay.process.wait_for_lines("cannot reach the sink", 1, Duration::from_secs(30)).await;
    relay.wait_until_answering().await;
    assert_eq!(relay.get("/healthz").await.map(|(code, _)| code), Some(200));
    let (code, reason) = relay.get("/readyz").await.expect("GET /readyz");
    assert_eq!(code, 503, "{reason}");
    assert_eq!(reason, "not ready: starting: waiting for the sink\n");
    assert_eq!(relay.process.terminate().await.code(), Some(0), "{}", relay.output());
}

/// `EXPLAIN ANALYZE` of the backlog gauges' statement as it would run now.
async fn backlog_plan(db: &TestDatabase) -> String {
    let statement = PgStore::new(db.pool.clone()).backlog_statement().await.unwrap();
    let plan: Vec<String> =
        sqlx::query_scalar(&format!("EXPLAIN ANALYZE {statement}")).fetch_all(&db.pool).await.unwrap();
    plan.join("\n")
}

#[tokio::test]
async fn the_backlog_statement_reads_the_backlog_not_the_published_history() {
    let db = TestDatabase::migrated().await;
    // A long published history, a small backlog and a few dead letters: what a production table looks like.
    sqlx::query(
        "INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, status, attempts,
                                    published_at)
         SELECT gen_random_uuid(), 'order', (n % 1000)::text, 'order.placed', '{}'::jsonb,
                CASE WHEN n <= 495000 OR n % 500 <> 0 THEN 'published' WHEN n % 1000 = 0 THEN 'failed'
                     ELSE 'pending' END,
                CASE WHEN n > 495000 AND n % 1000 = 0 THEN 2 ELSE 0 END,
                CASE WHEN n <= 495000 OR n % 500 <> 0 THEN now() END
           FROM generate_series(1, 500000) AS n",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    // Where each partition's unfinished rows begin, as the relays that published the history wrote it.
    sqlx::query(
        "UPDATE outbox_partitions p SET start_seq = COALESCE(
             (SELECT min(seq) FROM outbox_events e WHERE e.partition = p.partition AND e.status <> 'published'),
             (SELECT max(seq) + 1 FROM outbox_events e WHERE e.partition = p.partition), 0)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query("VACUUM ANALYZE outbox_events").execute(&db.pool).await.unwrap();
    let plan = backlog_plan(&db).await;
    // The partitions' ranges, each from its start, in one bitmap scan; no sequential scan of the table.
    assert!(plan.contains("BitmapOr"), "{plan}");
    let walk = plan.lines().find(|line| line.contains("outbox_events_partition_seq_idx")).expect(&plan);
    assert!(!walk.contains("never executed"), "{plan}");
    assert!(plan.contains("outbox_events_attempted_idx"), "{plan}");
    assert!(!plan.contains("Seq Scan on outbox_events"), "{plan}");
    // It reads a small part of the table: the rows from each partition's start, not the 495,000 published before (and beside the fixed cost of one index descent per partition).
    let buffers = |db: &TestDatabase| {
        let pool = db.pool.clone();
        async move {
            // Written out again: it follows the starts.
            let statement = PgStore::new(pool.clone()).backlog_statement().await.unwrap();
            let analyzed: serde_json::Value =
                sqlx::query_scalar(&format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}"))
                    .fetch_one(&pool)
                    .await
                    .unwrap();
            let top = &analyzed[0]["Plan"];
            top["Shared Hit Blocks"].as_i64().unwrap() + top["Shared Read Blocks"].as_i64().unwrap()
        }
    };
    let from_the_starts = buffers(&db).await;
    sqlx::query("UPDATE outbox_partitions SET start_seq = 0").execute(&db.pool).await.unwrap();
    let from_the_first_rows = buffers(&db).await;
    assert!(
        from_the_starts * 10 < from_the_first_rows,
        "from the starts {from_the_starts} buffers, from the first rows {from_the_first_rows}"
    );
    // And it reads what `outbox status` and the gauges show.
    let backlog = PgStore::new(db.pool.clone()).backlog().await.unwrap();
    assert_eq!(backlog.pending_total(), 5);
    assert_eq!(backlog.failed_total(), 5);
    assert!(!backlog.paused);
    let status = outbox_status(&db.url);
    assert_eq!(status["pending"], 5);
    assert_eq!(status["failed"], 5);
}

#[tokio::test]
async fn a_backlog_that_is_most_of_the_table_is_counted_in_one_sequential_scan() {
    let db = TestDatabase::migrated().await;
    sqlx::query(
        "INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, status, published_at)
         SELECT gen_random_uuid(), 'order', (n % 1000)::text,
                CASE WHEN n % 2 = 0 THEN 'order.placed' ELSE 'order.paid' END, '{}'::jsonb,
                CASE WHEN n % 10 = 0 THEN 'published' ELSE 'pending' END, CASE WHEN n % 10 = 0 THEN now() END
           FROM generate_series(1, 20000) AS n",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE outbox_events").execute(&db.pool).await.unwrap();
    let plan = backlog_plan(&db).await;
    // Written for a sequential scan: no walk of the partitions' ranges.
    let scan = plan.lines().find(|line| line.contains("Seq Scan on outbox_events x")).expect(&plan);
    assert!(!scan.contains("never executed"), "{plan}");
    assert!(!plan.contains("outbox_events_partition_seq_idx"), "{plan}");
    let backlog = PgStore::new(db.pool.clone()).backlog().await.unwrap();
    assert_eq!(backlog.pending_total(), 18_000);
    assert_eq!(backlog.pending.len(), 2);
}

#[tokio::test]
async fn the_sqlite_backlog_counts_the_same_figures() {
    let db = outbox_tests::sqlite::TestDatabase::migrated().await;
    let events: Vec<TestEvent> = (0..4).map(|n| event(format!("agg-{n}"), n)).collect();
    let mut tx = db.pool.begin().await.unwrap();
    let ids = outbox_core::Outbox::new().enqueue_all(&mut tx, &events).await.unwrap();
    tx.commit().await.unwrap();
    sqlx::query("UPDATE outbox_events SET status = 'failed' WHERE id = ?1")
        .bind(ids[0].to_string())
        .execute(&db.pool)
        .await
        .unwrap();
    let store = outbox_core::store::SqliteStore::new(db.pool.clone());
    store.set_paused(true).await.unwrap();
    let backlog = store.backlog().await.unwrap();
    assert_eq!(backlog.pending_total(), 3);
    assert_eq!(backlog.pending[0].event_type, "test.happened");
    assert!(backlog.oldest_pending_age() < Duration::from_secs(60));
    assert_eq!(backlog.failed_total(), 1);
    assert!(backlog.paused);
}

/// With `track_commit_timestamp = on` (as the harness starts PostgreSQL), the lag starts at the commit: an event
/// whose transaction stayed open 2 s after its insert is published about 0 s after the commit, not 2 s after
/// `created_at`.
#[tokio::test]
async fn commit_to_publish_counts_from_the_commit_not_from_the_insert() {
    let db = TestDatabase::migrated().await;
    let tracking: String = sqlx::query_scalar("SHOW track_commit_timestamp").fetch_one(&db.pool).await.unwrap();
    assert_eq!(tracking, "on", "the harness starts PostgreSQL with track_commit_timestamp=on");
    let mut relay = ServingRelay::start(&db.url, "file:/dev/null", &[], &[]);
    relay.wait_until_serving().await;

    let mut tx = db.pool.begin().await.unwrap();
    outbox_core::Outbox::new().enqueue(&mut tx, &event("slow", 0)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    tx.commit().await.unwrap();

    let lag_count = format!("{}_count", names::COMMIT_TO_PUBLISH_SECONDS);
    let scrape = relay.scrape_until("the event is published", |s| s.by_type(&lag_count) == Some(1.0)).await;
    let lag = scrape.by_type(&format!("{}_sum", names::COMMIT_TO_PUBLISH_SECONDS)).unwrap();
    assert!(lag < 1.0, "the lag counts from the commit, not from the insert 2 s earlier: {lag} s");
    let since_insert: f64 =
        sqlx::query_scalar("SELECT EXTRACT(EPOCH FROM published_at - created_at)::float8 FROM outbox_events")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(since_insert >= 2.0, "the transaction was open 2 s: {since_insert} s");
}

/// The WAL source's slot gauges on a server of its own (no other test's WAL moves them): while publishing is
/// paused the lag grows with the WAL the relay cannot confirm and the age of the oldest unconfirmed transaction
/// grows with time, as `outbox status` says too; once resumed and drained both fall back to (about) zero.
#[cfg(feature = "wal")]
#[tokio::test]
async fn the_wal_slot_gauges_grow_while_events_wait_and_fall_back_once_they_are_published() {
    let server = PrivateServer::start().unwrap_or_else(|problem| panic!("no private PostgreSQL: {problem}"));
    let db = TestDatabase::create_on(&server.url).await;
    outbox_core::migrate(&db.pool).await.unwrap();
    let outbox = |args: &[&str]| {
        let output = outbox_tests::outbox!().database(&db.url).run(args);
        assert!(output.status.success(), "outbox {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    };
    outbox(&["wal", "enable"]);
    let dir = tempfile::Builder::new().prefix("outbox-wal-gauges-").tempdir().unwrap();
    let sink = format!("file:{}", dir.path().join("events.jsonl").display());
    let mut relay = ServingRelay::start(&db.url, &sink, &["--source", "wal"], &[]);
    relay.wait_until_serving().await;
    let gauges = |s: &Scrape| (s.get(names::WAL_LAG_BYTES, &[]), s.get(names::WAL_CONFIRMED_AGE_SECONDS, &[]));
    let (lag, age) = gauges(&relay.scrape().await);
    assert!(lag.is_some_and(f64::is_finite) && age.is_some_and(f64::is_finite), "{lag:?} {age:?}");
    enqueue(&db.pool, &[event("warm-up", 0)]).await;
    relay.scrape_until("the first event is published", |s| s.by_type(names::EVENTS_PUBLISHED_TOTAL) == Some(1.0)).await;

    // Paused: ten transactions of 100 events stream in, and none can be confirmed.
    outbox(&["pause"]);
    let position = || async {
        sqlx::query_scalar::<_, i64>("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::int8")
            .fetch_one(&db.pool)
            .await
            .unwrap()
    };
    let before = position().await;
    for round in 0..10 {
        enqueue(&db.pool, &(0..100).map(|n| event(format!("agg-{}", n % 10), round * 100 + n)).collect::<Vec<_>>())
            .await;
    }
    let written = (position().await - before) as f64;
    let waiting = relay
        .scrape_until("the lag shows the WAL of the waiting events and their age is a second or more", |s| {
            let (lag, age) = gauges(s);
            lag.is_some_and(|lag| lag >= written / 2.0) && age.is_some_and(|age| age >= 1.0)
        })
        .await;
    let (lag, age) = gauges(&waiting);
    let status = outbox_status(&db.url);
    let slot = &status["wal_slot"];
    assert_eq!(slot["active"], true, "{status}");
    assert!(slot["lag_bytes"].as_f64().unwrap() >= lag.unwrap(), "the server's lag, read later, is larger: {status}");
    let report_age = slot["last_report_age_seconds"].as_f64().expect("the reader's last report");
    assert!((0.0..15.0).contains(&report_age), "the relay reports while it waits: {status}");
    let later = relay.scrape_until("the age grows", |s| gauges(s).1 > age.map(|age| age + 1.0)).await;
    assert!(gauges(&later).0 >= lag, "the lag does not shrink while nothing is confirmed: {}", later.text);
    assert_eq!(later.by_type(names::EVENTS_PUBLISHED_TOTAL), Some(1.0), "nothing published while paused");

    // Resumed: everything is published and confirmed.
    outbox(&["resume"]);
    relay
        .scrape_until("the events are published, the lag is about zero and the age zero", |s| {
            let (lag, age) = gauges(s);
            s.by_type(names::EVENTS_PUBLISHED_TOTAL) == Some(1001.0)
                && lag.is_some_and(|lag| lag < 8192.0)
                && age == Some(0.0)
        })
        .await;
    let status = outbox_status(&db.url);
    assert!(status["wal_slot"]["lag_bytes"].as_u64().unwrap() < written as u64 / 2, "{status}");
}
