//! Helpers shared by the relay's integration tests: a test event, enqueueing, recording and failing
//! publishers, running relays, bounded waiting.
#![allow(dead_code, unreachable_pub)]

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_core::store::PgStore;
use outbox_core::{Outbox, OutboxEvent};
use outbox_relay::{CancellationToken, Message, Outcome, Publisher, Relay, RelayConfig, RunSummary};
use outbox_tests::pg::TestDatabase;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use tokio::task::JoinHandle;
use uuid::Uuid;

/// The event every test enqueues: its aggregate and its number within the aggregate.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TestEvent {
    pub aggregate: String,
    pub n: u32,
    pub card_number: String,
}

impl OutboxEvent for TestEvent {
    const EVENT_TYPE: &'static str = "test.happened";
    const AGGREGATE_TYPE: &'static str = "test";
    const VERSION: u32 = 1;

    fn aggregate_id(&self) -> String {
        self.aggregate.clone()
    }

    fn sensitive_paths() -> Vec<String> {
        vec!["/card_number".to_owned()]
    }
}

pub fn event(aggregate: impl Into<String>, n: u32) -> TestEvent {
    TestEvent { aggregate: aggregate.into(), n, card_number: "4111111111111111".to_owned() }
}

/// Enqueues `events` in one committed transaction; returns their ids.
pub async fn enqueue(pool: &PgPool, events: &[TestEvent]) -> Vec<Uuid> {
    let mut tx = pool.begin().await.expect("begin");
    let ids = Outbox::new().enqueue_all(&mut tx, events).await.expect("enqueue");
    tx.commit().await.expect("commit");
    ids
}

/// Enqueues `aggregates x per_aggregate` events, interleaved (event 0 of every aggregate, then event 1, ...),
/// one transaction per round.
pub async fn enqueue_interleaved(pool: &PgPool, aggregates: u32, per_aggregate: u32) -> Vec<Uuid> {
    let mut ids = Vec::new();
    for n in 0..per_aggregate {
        let round: Vec<TestEvent> = (0..aggregates).map(|a| event(format!("agg-{a}"), n)).collect();
        ids.extend(enqueue(pool, &round).await);
    }
    ids
}

/// One publish seen by a [`Recorder`].
#[derive(Debug, Clone)]
pub struct Seen {
    pub relay: usize,
    pub id: Uuid,
    pub aggregate: String,
    pub n: u32,
}

/// A publisher that records every message it publishes, in the order publish calls happen, and fails the
/// events it is told to.
#[derive(Debug, Default)]
pub struct Recorder {
    pub seen: Mutex<Vec<Seen>>,
    pub permanent: Mutex<HashSet<Uuid>>,
    pub transient: Mutex<HashSet<Uuid>>,
    pub calls: Mutex<Vec<usize>>,
}

impl Recorder {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// A publisher for relay number `relay` that records into this recorder.
    pub fn for_relay(self: &Arc<Self>, relay: usize) -> RecordingPublisher {
        RecordingPublisher { relay, recorder: Arc::clone(self) }
    }
}

/// [`Recorder`]'s publisher for one relay.
#[derive(Debug, Clone)]
pub struct RecordingPublisher {
    pub relay: usize,
    pub recorder: Arc<Recorder>,
}

impl Publisher for RecordingPublisher {
    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        let permanent = self.recorder.permanent.lock().unwrap().clone();
        let transient = self.recorder.transient.lock().unwrap().clone();
        let mut seen = self.recorder.seen.lock().unwrap();
        self.recorder.calls.lock().unwrap().push(batch.len());
        batch
            .iter()
            .map(|message| {
                if permanent.contains(&message.id) {
                    return Outcome::permanent("rejected by the test");
                }
                if transient.contains(&message.id) {
                    return Outcome::transient("broker unavailable (test)");
                }
                let payload: TestEvent = serde_json::from_str(&message.payload).expect("payload");
                seen.push(Seen { relay: self.relay, id: message.id, aggregate: payload.aggregate, n: payload.n });
                Outcome::Published
            })
            .collect()
    }
}

/// A running relay.
pub struct Running {
    pub shutdown: CancellationToken,
    pub handle: JoinHandle<outbox_relay::Result<RunSummary>>,
}

impl Running {
    /// Stops the relay gracefully and returns its summary.
    pub async fn stop(self) -> RunSummary {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(30), self.handle)
            .await
            .expect("relay did not stop within 30s")
            .expect("relay task panicked")
            .expect("relay failed")
    }
}

pub fn start(db: &TestDatabase, publisher: impl Publisher, config: RelayConfig) -> Running {
    let relay = Relay::new(PgStore::new(db.pool.clone()), publisher, config);
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(relay.run(shutdown.clone()));
    Running { shutdown, handle }
}

/// A config for tests: fast polling, short backoff.
pub fn config() -> outbox_relay::RelayConfigBuilder {
    RelayConfig::builder()
        .poll_interval(Duration::from_millis(10))
        .backoff(Duration::from_millis(10), Duration::from_millis(50))
}

/// Waits until `condition` holds, checking every 20ms, for at most `timeout`; panics with `what` otherwise.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if condition().await {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out after {timeout:?} waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Rows per status.
pub async fn counts(pool: &PgPool) -> HashMap<String, i64> {
    sqlx::query_as::<_, (String, i64)>("SELECT status, count(*) FROM outbox_events GROUP BY status")
        .fetch_all(pool)
        .await
        .expect("count statuses")
        .into_iter()
        .collect()
}

pub async fn count(pool: &PgPool, status: &str) -> i64 {
    counts(pool).await.get(status).copied().unwrap_or(0)
}

/// The rows of `outbox_events` read so far, by the server's statistics: read one by one in sequential scans, and
/// fetched through an index (a fetch by position counts in neither). A session's counts reach the statistics as its
/// transactions end (at most once a second) and when it closes.
pub async fn rows_read(pool: &PgPool) -> (i64, i64) {
    sqlx::query_as(
        "SELECT seq_tup_read, COALESCE(idx_tup_fetch, 0) FROM pg_stat_user_tables WHERE relname = 'outbox_events'",
    )
    .fetch_one(pool)
    .await
    .expect("the table's statistics")
}

/// While a batch is out: an operator cancels `cancelled`, and `counted` gets an attempt counted (as for a dead
/// relay's batch), which moves its row. Returns where `counted`'s row is now (its `ctid`).
pub async fn cancel_one_and_move_another(pool: &PgPool, cancelled: Uuid, counted: Uuid) -> String {
    sqlx::query("UPDATE outbox_events SET status = 'cancelled' WHERE id = $1")
        .bind(cancelled)
        .execute(pool)
        .await
        .expect("cancel");
    sqlx::query_scalar(
        "UPDATE outbox_events SET attempts = attempts + 1, last_error = 'relay died' WHERE id = $1 RETURNING ctid::text",
    )
    .bind(counted)
    .fetch_one(pool)
    .await
    .expect("count an attempt")
}

pub async fn status_of(pool: &PgPool, id: Uuid) -> String {
    sqlx::query_scalar("SELECT status FROM outbox_events WHERE id = $1").bind(id).fetch_one(pool).await.expect("status")
}

/// The `Retry-After` a [`throttling_receiver`] answers with.
#[derive(Debug, Clone, Copy)]
pub enum RetryAfter {
    /// A number of seconds.
    Seconds(u64),
    /// An HTTP date this long after the answer.
    DateIn(Duration),
}

/// A webhook receiver on 127.0.0.1 that answers each request with the next of `answers` (a status and its
/// `Retry-After`), then `204`; it records when each request arrived. Returns the arrivals and the receiver's URL.
pub async fn throttling_receiver(answers: Vec<(u16, RetryAfter)>) -> (Arc<Mutex<Vec<tokio::time::Instant>>>, String) {
    use axum::http::{HeaderMap, StatusCode};
    let arrivals: Arc<Mutex<Vec<tokio::time::Instant>>> = Arc::default();
    let seen = arrivals.clone();
    let app = axum::Router::new().route(
        "/hooks/outbox",
        axum::routing::post(move || {
            let seen = seen.clone();
            let answers = answers.clone();
            async move {
                let mut seen = seen.lock().unwrap();
                seen.push(tokio::time::Instant::now());
                let mut headers = HeaderMap::new();
                let Some(&(status, retry_after)) = answers.get(seen.len() - 1) else {
                    return (StatusCode::NO_CONTENT, headers);
                };
                let value = match retry_after {
                    RetryAfter::Seconds(seconds) => seconds.to_string(),
                    RetryAfter::DateIn(wait) => httpdate::fmt_http_date(std::time::SystemTime::now() + wait),
                };
                headers.insert("retry-after", value.parse().unwrap());
                (StatusCode::from_u16(status).unwrap(), headers)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (arrivals, format!("http://{address}/hooks/outbox"))
}

/// The event ids a file sink wrote, in order.
pub fn written(sink: &std::path::Path) -> Vec<Uuid> {
    std::fs::read_to_string(sink)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|value| value["id"].as_str().and_then(|id| id.parse().ok()))
        .collect()
}

/// A transaction that has an id: the creation of a replication slot waits until it ends (its consistent point
/// lies past every transaction running when it began).
pub async fn holding_slot_creation(pool: &PgPool) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut running = pool.begin().await.unwrap();
    sqlx::query("SELECT pg_current_xact_id()").execute(&mut *running).await.unwrap();
    running
}

/// Waits until every slot of `names` is listed by the server: made, or being made.
pub async fn wait_until_slots_are_listed(db: &TestDatabase, names: &[&str]) {
    wait_until(Duration::from_secs(30), "the slots are being made", || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM pg_replication_slots WHERE slot_name = ANY($1)")
            .bind(names)
            .fetch_one(&db.pool)
            .await
            .unwrap()
            == i64::try_from(names.len()).unwrap()
    })
    .await;
}

/// Enqueues one message-mode event in its own committed transaction.
pub async fn via_wal(db: &TestDatabase, aggregate: &str, n: u32) -> Uuid {
    let mut tx = db.pool.begin().await.unwrap();
    let id = Outbox::new().via_wal().enqueue(&mut tx, &event(aggregate, n)).await.unwrap();
    tx.commit().await.unwrap();
    id
}

/// Waits until the WAL relay has created and recorded its slot, and the slot decodes (its creation is over):
/// message-mode enqueues need it.
pub async fn wait_for_the_slot(db: &TestDatabase) {
    wait_until(Duration::from_secs(30), "the WAL relay recorded its slot", || async {
        sqlx::query_scalar::<_, bool>(
            "SELECT EXISTS (SELECT 1 FROM outbox_control c JOIN pg_replication_slots s ON s.slot_name = c.wal_slot
                             WHERE s.confirmed_flush_lsn IS NOT NULL)",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap()
    })
    .await;
}
