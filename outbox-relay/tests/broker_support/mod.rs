//! What every broker test shares: 1,000 traced events over 50 aggregates enqueued in PostgreSQL (each with the
//! custom headers `tenant` and `correlation-id`), a relay running a broker publisher, bounded waits, and the
//! checks on what an independent consumer received.
#![allow(dead_code, unreachable_pub)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use outbox_core::store::PgStore;
use outbox_core::{NewEvent, Outbox, OutboxEvent};
use outbox_relay::{CancellationToken, Publisher, Relay, RelayConfig, RelayConfigBuilder, RunSummary};
use outbox_tests::pg::TestDatabase;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use tokio::task::JoinHandle;
use uuid::Uuid;

/// The number of aggregates and of events per aggregate of the big runs.
pub const AGGREGATES: u32 = 50;
pub const PER_AGGREGATE: u32 = 20;

/// Where the test contracts are published (the `dataschema` base).
pub const SCHEMA_BASE: &str = "https://contracts.example.com/";

/// The event every broker test enqueues.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OrderPlaced {
    pub order: String,
    pub n: u32,
    /// Padding, to make an oversized event.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

impl OutboxEvent for OrderPlaced {
    const EVENT_TYPE: &'static str = "order.placed";
    const AGGREGATE_TYPE: &'static str = "order";
    const VERSION: u32 = 2;

    fn aggregate_id(&self) -> String {
        self.order.clone()
    }
}

/// One enqueued event, as the checks expect it downstream.
#[derive(Debug, Clone)]
pub struct Sent {
    pub id: Uuid,
    pub aggregate: String,
    pub n: u32,
    pub traceparent: String,
}

/// The custom headers of an event: a `tenant` per aggregate and a `correlation-id` per event.
pub fn custom_headers(aggregate: &str, n: u32) -> [(&'static str, String); 2] {
    [("tenant", format!("tenant-of-{aggregate}")), ("correlation-id", format!("corr-{aggregate}-{n}"))]
}

/// A W3C traceparent unique to `(aggregate, n)`.
pub fn traceparent(aggregate: u32, n: u32) -> String {
    format!("00-{:032x}-{:016x}-01", (u128::from(aggregate) << 32) | u128::from(n) | (1 << 100), u64::from(n) + 1)
}

/// Enqueues `aggregates x per_aggregate` events with a `traceparent` header each, interleaved (event 0 of every
/// aggregate, then event 1, ...), one committed transaction per round.
pub async fn enqueue(pool: &PgPool, aggregates: u32, per_aggregate: u32) -> Vec<Sent> {
    let mut sent = Vec::new();
    for n in 0..per_aggregate {
        let mut round = Vec::new();
        let mut events = Vec::new();
        for a in 0..aggregates {
            let event = OrderPlaced { order: format!("order-{a}"), n, note: String::new() };
            let tp = traceparent(a, n);
            let mut new_event = NewEvent::new(&event).expect("serialize").with_header("traceparent", tp.clone());
            for (name, value) in custom_headers(&event.order, n) {
                new_event = new_event.with_header(name, value);
            }
            events.push(new_event);
            round.push((event.order, n, tp));
        }
        let mut tx = pool.begin().await.expect("begin");
        let ids = Outbox::new().enqueue_events(&mut tx, events).await.expect("enqueue");
        tx.commit().await.expect("commit");
        for (id, (aggregate, n, traceparent)) in ids.into_iter().zip(round) {
            sent.push(Sent { id, aggregate, n, traceparent });
        }
    }
    sent
}

/// Enqueues one event whose payload is `bytes` long or more.
pub async fn enqueue_oversized(pool: &PgPool, bytes: usize) -> Uuid {
    let event = OrderPlaced { order: "order-big".to_owned(), n: 0, note: "x".repeat(bytes) };
    let mut tx = pool.begin().await.expect("begin");
    let id = Outbox::new().enqueue(&mut tx, &event).await.expect("enqueue");
    tx.commit().await.expect("commit");
    id
}

/// A running relay.
pub struct Running {
    shutdown: CancellationToken,
    handle: JoinHandle<outbox_relay::Result<RunSummary>>,
}

impl Running {
    /// Stops the relay gracefully.
    pub async fn stop(self) -> RunSummary {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(60), self.handle)
            .await
            .expect("relay did not stop within 60 s")
            .expect("relay task panicked")
            .expect("relay failed")
    }
}

/// A relay config for broker tests: fast polling, short backoff, attempts enough to ride out a broker restart.
pub fn config() -> RelayConfig {
    config_builder().build().expect("config")
}

/// [`config`] before it is built, for a test to change (fewer attempts, smaller batches).
pub fn config_builder() -> RelayConfigBuilder {
    RelayConfig::builder()
        .poll_interval(Duration::from_millis(10))
        .backoff(Duration::from_millis(20), Duration::from_millis(500))
        .max_attempts(100_000)
}

/// Starts a relay over `db` publishing with `publisher`.
pub fn start(db: &TestDatabase, publisher: impl Publisher, config: RelayConfig) -> Running {
    let relay = Relay::new(PgStore::new(db.pool.clone()), publisher, config);
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(relay.run(shutdown.clone()));
    Running { shutdown, handle }
}

/// Rows with `status`.
pub async fn count(pool: &PgPool, status: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE status = $1")
        .bind(status)
        .fetch_one(pool)
        .await
        .expect("count")
}

/// The status and last error of event `id`.
pub async fn status_of(pool: &PgPool, id: Uuid) -> (String, Option<String>) {
    sqlx::query_as("SELECT status, last_error FROM outbox_events WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .expect("status")
}

/// Waits until at least `n` rows are `status`, for at most `timeout`.
pub async fn wait_for(pool: &PgPool, status: &str, n: i64, timeout: Duration) {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let got = count(pool, status).await;
        if got >= n {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            let errors: Vec<(Option<String>, i64)> = sqlx::query_as(
                "SELECT last_error, count(*) FROM outbox_events GROUP BY last_error ORDER BY count(*) DESC LIMIT 5",
            )
            .fetch_all(pool)
            .await
            .unwrap_or_default();
            panic!("only {got} of {n} events `{status}` within {timeout:?}; last errors: {errors:?}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// One message as a consumer received it: its headers (or attributes) and its body.
#[derive(Debug, Clone)]
pub struct Received {
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

impl outbox_core::Versioned for OrderPlaced {
    type Previous = outbox_core::consume::NoPrevious;
}

impl Received {
    fn payload(&self) -> OrderPlaced {
        serde_json::from_slice(&self.body).expect("the body is the payload JSON")
    }

    /// The message read back as the consumer API reads it: `(event id, typed event)`.
    pub fn decoded(&self) -> (Uuid, OrderPlaced) {
        let headers = self.headers.iter().map(|(name, value)| (name.as_str(), value.as_str()));
        outbox_core::consume::Received::new(&self.body)
            .headers(headers)
            .decode::<OrderPlaced>()
            .unwrap_or_else(|error| panic!("the message does not decode: {error}; headers {:?}", self.headers))
    }
}

/// How a consumer's header names spell the CloudEvents attributes.
#[derive(Debug, Clone, Copy)]
pub struct Spelling {
    pub prefix: &'static str,
}

/// Checks what a consumer received against what was enqueued: every event arrived (duplicates allowed unless
/// `exact`), with its CloudEvents attributes, traceparent and custom headers, and each aggregate's events in
/// commit order.
pub fn check(sent: &[Sent], received: &[Received], spelling: Spelling, exact: bool) {
    let by_id: HashMap<Uuid, &Sent> = sent.iter().map(|s| (s.id, s)).collect();
    let p = spelling.prefix;
    let mut seen = HashSet::new();
    let mut last_n: HashMap<String, u32> = HashMap::new();
    for message in received {
        let get = |name: &str| {
            message
                .headers
                .get(&format!("{p}{name}"))
                .unwrap_or_else(|| panic!("no `{p}{name}` in {:?}", message.headers))
        };
        let id: Uuid = get("id").parse().expect("ce id is a UUID");
        let Some(expected) = by_id.get(&id) else { panic!("received an event that was not sent: {id}") };
        assert_eq!(get("specversion"), "1.0");
        assert_eq!(get("type"), "order.placed");
        assert_eq!(get("source"), "outbox-tests");
        assert_eq!(get("subject"), &expected.aggregate);
        assert_eq!(get("dataschema"), &format!("{SCHEMA_BASE}order.placed/v2.schema.json"));
        assert_eq!(get("schemaversion"), "2");
        assert_eq!(get("aggregatetype"), "order");
        assert!(time::OffsetDateTime::parse(get("time"), &time::format_description::well_known::Rfc3339).is_ok());
        assert_eq!(message.headers.get("traceparent"), Some(&expected.traceparent), "traceparent of {id}");
        for (name, value) in custom_headers(&expected.aggregate, expected.n) {
            assert_eq!(message.headers.get(name), Some(&value), "custom header `{name}` of {id}");
        }
        let payload = message.payload();
        assert_eq!((payload.order.as_str(), payload.n), (expected.aggregate.as_str(), expected.n), "body of {id}");
        let (decoded_id, decoded) = message.decoded();
        assert_eq!(
            (decoded_id, decoded.order.as_str(), decoded.n),
            (id, expected.aggregate.as_str(), expected.n),
            "the consumer API decodes {id}"
        );
        let first = seen.insert(id);
        assert!(first || !exact, "event {id} received twice");
        if first {
            // A duplicate re-sends an event the consumer already has; first deliveries are in commit order.
            if let Some(previous) = last_n.insert(expected.aggregate.clone(), expected.n) {
                assert!(
                    previous < expected.n,
                    "{}: event {} arrived after event {previous}",
                    expected.aggregate,
                    expected.n
                );
            }
        }
    }
    let missing: Vec<_> = sent.iter().filter(|s| !seen.contains(&s.id)).collect();
    assert!(missing.is_empty(), "{} of {} events never arrived, e.g. {:?}", missing.len(), sent.len(), missing.first());
}

/// The CloudEvents settings every broker test publishes with.
pub fn envelope_query() -> String {
    format!("source=outbox-tests&schema_base={SCHEMA_BASE}")
}

/// The AsyncAPI document of `sink` for one contract (`order.placed` v2 about an `order`, as [`OrderPlaced`]),
/// validated by the official parser ([`outbox_tests::asyncapi::parse`]).
pub struct Described {
    /// The channel address of `order.placed` v2.
    pub address: String,
    /// The headers the document says every message carries.
    pub required_headers: Vec<String>,
    /// The document.
    pub document: serde_json::Value,
}

/// Builds and validates the document of `sink` (see [`Described`]).
pub fn describe(sink: &str) -> Described {
    let mut contracts = outbox_core::contracts::Contracts::new();
    contracts.insert(
        "order.placed",
        2,
        serde_json::json!({ "type": "object", "x-outbox-aggregate": "order", "properties": { "order": { "type": "string" } } }),
    );
    let sink: outbox_relay::Sink = sink.parse().expect("a sink URL");
    let document = outbox_relay::asyncapi_document(&contracts, "Broker test", &sink).expect("the document");
    let file = tempfile::Builder::new()
        .prefix("outbox-asyncapi-")
        .suffix(".json")
        .tempfile()
        .expect("a file for the document");
    std::fs::write(file.path(), document.to_string()).expect("write the document");
    let output = outbox_tests::asyncapi::parse(file.path());
    drop(file);
    assert!(
        output.status.success(),
        "the official parser refused the document: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let channel = document["channels"]
        .as_object()
        .and_then(|channels| channels.values().find(|c| c["messages"].get("order.placed.v2").is_some()))
        .expect("a channel for order.placed v2");
    let address = channel["address"].as_str().expect("an address").to_owned();
    let required_headers = document["components"]["schemas"]["outbox.headers"]["required"]
        .as_array()
        .expect("required headers")
        .iter()
        .filter_map(|h| h.as_str().map(str::to_owned))
        .collect();
    Described { address, required_headers, document }
}

/// One event of [`OrderPlaced`] to publish straight to a broker, with a custom header.
pub fn described_message() -> outbox_relay::Message {
    let mut message =
        outbox_relay::Message::new(Uuid::now_v7(), "order.placed", "order", "o-1", r#"{"order":"o-1","n":1}"#);
    message.version = 2;
    message.headers.insert("tenant".to_owned(), "acme".to_owned());
    message
}

/// Checks that what arrived carries every header the document names, and the custom one.
pub fn check_described(described: &Described, received: &Received) {
    for header in &described.required_headers {
        assert!(received.headers.contains_key(header), "`{header}` is missing from {:?}", received.headers.keys());
    }
    assert_eq!(received.headers.get("tenant").map(String::as_str), Some("acme"), "the custom header arrives");
}

/// A broker outage longer than every attempt lasts: the broker (`kill`ed here) is down when the relay starts, which
/// has two attempts per event retried within 50 ms; without the outage rule every event would be `failed` within
/// a second. Checks that none is, and that no attempt was counted, for as long as the broker stays down (the
/// relay keeps trying: each head records the error); then `restart`s the broker, waits until every event is
/// published and returns the events sent.
pub async fn ride_out_an_outage(
    db: &TestDatabase,
    broker: &outbox_tests::brokers::Broker,
    publisher: impl Publisher,
) -> Vec<Sent> {
    broker.kill();
    let sent = enqueue(&db.pool, 20, 5).await;
    let config = config_builder()
        .max_attempts(2)
        .backoff(Duration::from_millis(10), Duration::from_millis(50))
        .build()
        .expect("config");
    let relay = start(db, publisher, config);
    let tried = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM outbox_events WHERE last_error IS NOT NULL")
            .fetch_one(&db.pool)
            .await
            .expect("count")
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while tried().await < 20 {
        assert!(tokio::time::Instant::now() < deadline, "the relay did not try every aggregate's head within 30 s");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // Many more tries than the two attempts allow.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let unused_attempts = || async {
        let (failed, attempted): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE status = 'failed'), count(*) FILTER (WHERE attempts > 0) FROM outbox_events",
        )
        .fetch_one(&db.pool)
        .await
        .expect("counts");
        assert_eq!((failed, attempted), (0, 0), "(failed events, events with an attempt counted) during the outage");
    };
    unused_attempts().await;
    broker.restart();
    wait_for(&db.pool, "published", sent.len() as i64, Duration::from_secs(120)).await;
    relay.stop().await;
    unused_attempts().await;
    sent
}
