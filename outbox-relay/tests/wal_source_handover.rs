//! One bad event does not stop the write-ahead-log stream: an event still failing after `--retry-in-place` goes to
//! the table's retry path with the later events of its aggregate, the stream publishes everything else meanwhile,
//! and once the sink takes the event its aggregate is published in order and returns to the stream. The hand-over
//! is the table's state, so a restarted relay keeps it. Real `outbox` processes, a real PostgreSQL with
//! `wal_level = logical` and a real HTTP receiver on 127.0.0.1.
#![cfg(feature = "wal")]

mod bad_input_support;
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use outbox_tests::pg::TestDatabase;
use uuid::Uuid;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// An HTTP receiver: answers 503 to events of aggregate `flaky` and 400 to those of `poison` while `down`, and
/// records the events it accepted (id, aggregate), in order.
#[derive(Default)]
struct Receiver {
    down: AtomicBool,
    accepted: Mutex<Vec<(Uuid, String)>>,
}

impl Receiver {
    fn accepted(&self) -> Vec<(Uuid, String)> {
        self.accepted.lock().unwrap().clone()
    }

    fn of(&self, aggregate: &str) -> Vec<Uuid> {
        self.accepted().into_iter().filter(|(_, of)| of == aggregate).map(|(id, _)| id).collect()
    }

    async fn wait_for(&self, aggregate: &str, n: usize) -> Vec<Uuid> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ids = self.of(aggregate);
            if ids.len() >= n {
                return ids;
            }
            assert!(Instant::now() < deadline, "{} of {n} events of `{aggregate}` arrived within 30 s", ids.len());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn start_receiver() -> (Arc<Receiver>, String) {
    start_receiver_at("127.0.0.1:0").await
}

/// [`start_receiver`] on `address`.
async fn start_receiver_at(address: &str) -> (Arc<Receiver>, String) {
    let receiver = Arc::new(Receiver::default());
    let state = Arc::clone(&receiver);
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: String| {
            let state = Arc::clone(&state);
            async move {
                let event: serde_json::Value = serde_json::from_str(&body).expect("a JSON event");
                let aggregate = event["aggregate"]["id"].as_str().expect("an aggregate id").to_owned();
                if state.down.load(Ordering::SeqCst) {
                    match aggregate.as_str() {
                        "flaky" => return StatusCode::SERVICE_UNAVAILABLE,
                        "poison" => return StatusCode::BAD_REQUEST,
                        _ => {}
                    }
                }
                let id = event["id"].as_str().expect("an id").parse().expect("a UUID");
                state.accepted.lock().unwrap().push((id, aggregate));
                StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(address).await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (receiver, format!("http://{address}/hook"))
}

fn outbox(url: &str, args: &[&str]) -> std::process::Output {
    outbox_tests::outbox!().database(url).run(args)
}

async fn one(db: &TestDatabase, aggregate: &str, n: u32) -> Uuid {
    common::enqueue(&db.pool, &[common::event(aggregate, n)]).await[0]
}

const RELAY: &[&str] = &[
    "relay",
    "--source",
    "wal",
    "--retry-in-place",
    "1s",
    "--backoff-base",
    "50ms",
    "--backoff-max",
    "200ms",
    "--max-attempts",
    "1000",
];

fn start_relay(db: &TestDatabase, sink: &str) -> outbox_tests::process::OutboxProcess {
    start_relay_with(db, sink, &[])
}

/// [`start_relay`] with more arguments.
fn start_relay_with(db: &TestDatabase, sink: &str, more: &[&str]) -> outbox_tests::process::OutboxProcess {
    let args: Vec<&str> = RELAY.iter().copied().chain(["--sink", sink]).chain(more.iter().copied()).collect();
    bad_input_support::start(&db.url, &args, &[("OUTBOX_WEBHOOK_SECRET", SECRET)])
}

/// A migrated database with the WAL source on, a receiver, and a WAL relay (started with `more` arguments)
/// publishing to it.
struct Scene {
    db: TestDatabase,
    receiver: Arc<Receiver>,
    sink: String,
    relay: outbox_tests::process::OutboxProcess,
}

impl Scene {
    async fn start(more: &[&str]) -> Self {
        let db = TestDatabase::migrated().await;
        assert!(outbox(&db.url, &["wal", "enable"]).status.success());
        let (receiver, sink) = start_receiver().await;
        let relay = start_relay_with(&db, &sink, more);
        Self { db, receiver, sink, relay }
    }

    /// [`start`](Self::start), then a first event published: the relay streams.
    async fn streaming(more: &[&str]) -> Self {
        let scene = Self::start(more).await;
        let warm = one(&scene.db, "warm-up", 0).await;
        assert_eq!(scene.receiver.wait_for("warm-up", 1).await, [warm], "the relay streams");
        scene
    }
}

/// Waits until event `id` is `failed`.
async fn wait_until_failed(db: &TestDatabase, id: Uuid) {
    common::wait_until(Duration::from_secs(10), "the refused event is failed", || async {
        common::status_of(&db.pool, id).await == "failed"
    })
    .await;
}

/// `outbox events retry ID`, as an operator runs it.
fn retry(db: &TestDatabase, id: Uuid) {
    let retried = outbox(&db.url, &["events", "retry", id.to_string().as_str()]);
    assert!(retried.status.success(), "{}", String::from_utf8_lossy(&retried.stderr));
}

#[tokio::test]
async fn an_event_still_failing_after_the_in_place_retry_leaves_the_stream_with_its_aggregate_and_order_holds() {
    let Scene { db, receiver, sink, mut relay } = Scene::streaming(&[]).await;

    receiver.down.store(true, Ordering::SeqCst);
    let mut flaky = vec![one(&db, "flaky", 0).await, one(&db, "flaky", 1).await];
    let others = common::enqueue(&db.pool, &[common::event("other", 0), common::event("other", 1)]).await;
    assert_eq!(receiver.wait_for("other", 2).await, others, "the stream goes on past the failing event");
    assert!(receiver.of("flaky").is_empty(), "nothing of the failing aggregate while the sink refuses it");
    relay.wait_for_lines("the table's retry path", 1, Duration::from_secs(10)).await;

    // The hand-over is the table's state: a restarted relay still publishes the aggregate from the table.
    assert_eq!(relay.terminate().await.code(), Some(0));
    let mut relay = start_relay(&db, &sink);
    flaky.push(one(&db, "flaky", 2).await);
    let later = one(&db, "other", 2).await;
    assert_eq!(receiver.wait_for("other", 3).await[2], later, "the restarted relay streams");
    assert!(receiver.of("flaky").is_empty(), "the aggregate's later event waits behind its failing head");
    let status = outbox(&db.url, &["status", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).expect("status --json");
    assert_eq!(status["source"], "wal", "{status}");
    assert_eq!(status["wal_slot"]["active"], true, "{status}");
    assert!(status["wal_slot"]["lag_bytes"].is_u64(), "{status}");
    // The reading relay reports its position at least every few seconds, also while an aggregate waits.
    let report_age = status["wal_slot"]["last_report_age_seconds"].as_f64().expect("the reader's last report");
    assert!((0.0..15.0).contains(&report_age), "{status}");
    assert_eq!(status["pending"], 3, "the failing aggregate's events wait in the table: {status}");

    receiver.down.store(false, Ordering::SeqCst);
    assert_eq!(receiver.wait_for("flaky", 3).await, flaky, "the aggregate in order once the sink takes it");
    // Back on the stream: a new event of the aggregate follows at once.
    let back = one(&db, "flaky", 3).await;
    assert_eq!(receiver.wait_for("flaky", 4).await[3], back);
    let mut published = 0;
    for _ in 0..100 {
        published = sqlx::query_scalar::<_, i64>("SELECT count(*) FROM outbox_events WHERE status = 'published'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
        if published == 8 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rows: Vec<(String, String, i32)> =
        sqlx::query_as("SELECT aggregate_id, status, attempts FROM outbox_events ORDER BY seq")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(published, 8, "every event is settled in the table: {rows:?}");
    assert_eq!(receiver.accepted().len(), 8, "nothing twice: {:?}", receiver.accepted());
    assert_eq!(relay.terminate().await.code(), Some(0));
}

/// Two transactions of a handed-over aggregate that commit in the reverse of their inserts: the table's retry path
/// publishes them in the order they committed (the stream's), not in the order of their `seq`.
#[tokio::test]
async fn events_of_a_handed_over_aggregate_that_commit_in_reverse_of_their_inserts_are_published_in_commit_order() {
    let Scene { db, receiver, mut relay, .. } = Scene::streaming(&[]).await;

    receiver.down.store(true, Ordering::SeqCst);
    let head = one(&db, "flaky", 0).await;
    relay.wait_for_lines("the table's retry path", 1, Duration::from_secs(10)).await;
    // Inserted first, committed last.
    let mut first = db.pool.begin().await.unwrap();
    let inserted_first = outbox_core::Outbox::new().enqueue(&mut first, &common::event("flaky", 1)).await.unwrap();
    let committed_first = one(&db, "flaky", 2).await;
    first.commit().await.unwrap();
    let after = one(&db, "other", 0).await;
    assert_eq!(receiver.wait_for("other", 1).await, [after], "the stream passed both");
    let seqs: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM outbox_events WHERE aggregate_id = 'flaky' ORDER BY seq")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(seqs, [head, inserted_first, committed_first], "the inserts' order");

    receiver.down.store(false, Ordering::SeqCst);
    assert_eq!(
        receiver.wait_for("flaky", 3).await,
        [head, committed_first, inserted_first],
        "the aggregate in the order its transactions committed"
    );
    assert_eq!(relay.terminate().await.code(), Some(0));
}

/// A row and a message of one aggregate in one transaction, the row refused for good: the message, which the stream
/// gave after it, waits on the table's path behind the failed row, and follows it once an operator retries it.
#[tokio::test]
async fn a_message_behind_a_failed_row_of_its_aggregate_in_one_transaction_waits_for_it() {
    let Scene { db, receiver, mut relay, .. } = Scene::streaming(&[]).await;

    receiver.down.store(true, Ordering::SeqCst);
    let mut tx = db.pool.begin().await.unwrap();
    let row = outbox_core::Outbox::new().enqueue(&mut tx, &common::event("poison", 0)).await.unwrap();
    let message = outbox_core::Outbox::new().via_wal().enqueue(&mut tx, &common::event("poison", 1)).await.unwrap();
    tx.commit().await.unwrap();
    wait_until_failed(&db, row).await;
    let other = one(&db, "other", 0).await;
    assert_eq!(receiver.wait_for("other", 1).await, [other], "the stream goes on");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(receiver.of("poison").is_empty(), "the message waits behind the failed row");

    receiver.down.store(false, Ordering::SeqCst);
    retry(&db, row);
    assert_eq!(receiver.wait_for("poison", 2).await, [row, message], "in the stream's order after the retry");
    assert_eq!(relay.terminate().await.code(), Some(0));
}

/// With `--ordering none` a failed event holds nothing back, and an operator's retry of it is still published: its
/// aggregate stays on the table's path until then.
#[tokio::test]
async fn with_ordering_none_a_failed_event_blocks_nothing_and_an_operators_retry_of_it_is_published() {
    let Scene { db, receiver, mut relay, .. } = Scene::streaming(&["--ordering", "none"]).await;

    receiver.down.store(true, Ordering::SeqCst);
    let head = one(&db, "poison", 0).await;
    wait_until_failed(&db, head).await;
    receiver.down.store(false, Ordering::SeqCst);
    let follower = one(&db, "poison", 1).await;
    assert_eq!(receiver.wait_for("poison", 1).await, [follower], "the failed event holds nothing back");

    retry(&db, head);
    assert_eq!(receiver.wait_for("poison", 2).await, [follower, head], "the retried event is published");
    assert_eq!(relay.terminate().await.code(), Some(0));
}

/// A WAL relay whose sink refuses aggregate `poison` for good: its head event has failed, its follower is
/// pending behind it, and the stream went on past both (an event of another aggregate was published after them).
struct FailedHead {
    db: TestDatabase,
    receiver: Arc<Receiver>,
    sink: String,
    relay: outbox_tests::process::OutboxProcess,
    head: Uuid,
    follower: Uuid,
}

impl FailedHead {
    async fn start() -> Self {
        let Scene { db, receiver, sink, relay } = Scene::start(&[]).await;
        receiver.down.store(true, Ordering::SeqCst);
        let head = one(&db, "poison", 0).await;
        let follower = one(&db, "poison", 1).await;
        let other = one(&db, "other", 0).await;
        assert_eq!(receiver.wait_for("other", 1).await, [other], "the stream goes on past the failed event");
        wait_until_failed(&db, head).await;
        Self { db, receiver, sink, relay, head, follower }
    }

    /// The sink takes every event again, and an operator retries the failed head.
    fn recover_and_retry(&self) {
        self.receiver.down.store(false, Ordering::SeqCst);
        retry(&self.db, self.head);
    }
}

#[tokio::test]
async fn an_event_that_fails_for_good_holds_its_aggregate_until_an_operator_retries_it() {
    let mut scene = FailedHead::start().await;
    let (head, follower) = (scene.head, scene.follower);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        common::status_of(&scene.db.pool, follower).await,
        "pending",
        "the follower waits behind its failed head"
    );
    assert!(scene.receiver.of("poison").is_empty());

    scene.recover_and_retry();
    assert_eq!(scene.receiver.wait_for("poison", 2).await, [head, follower], "in order after the retry");
    assert_eq!(scene.relay.terminate().await.code(), Some(0));
}

/// The hand-over outlives the relay: a failed head and its follower, both passed by the stream, are published in
/// order after the relay restarts and an operator retried the head meanwhile (which leaves no event of the
/// aggregate with a failed attempt), and the aggregate's next event waits for them.
#[tokio::test]
async fn a_handed_over_aggregate_retried_while_the_relay_was_stopped_is_published_in_order_after_the_restart() {
    let mut scene = FailedHead::start().await;
    let (head, follower) = (scene.head, scene.follower);
    // The stream has acknowledged past both: a graceful stop confirms its last position.
    assert_eq!(scene.relay.terminate().await.code(), Some(0));
    scene.recover_and_retry();
    let (db, receiver) = (&scene.db, &scene.receiver);
    let mut relay = start_relay(db, &scene.sink);
    assert_eq!(receiver.wait_for("poison", 2).await, [head, follower], "in order after the restart");
    let next = one(db, "poison", 2).await;
    assert_eq!(receiver.wait_for("poison", 3).await, [head, follower, next]);
    common::wait_until(Duration::from_secs(10), "the aggregate is released to the stream", || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM outbox_wal_handed_over").fetch_one(&db.pool).await.unwrap()
            == 0
    })
    .await;
    assert_eq!(relay.terminate().await.code(), Some(0));
}

#[tokio::test]
async fn a_message_mode_event_that_fails_for_good_becomes_a_failed_row_an_operator_can_retry() {
    let Scene { db, receiver, mut relay, .. } = Scene::start(&[]).await;
    common::wait_for_the_slot(&db).await;
    receiver.down.store(true, Ordering::SeqCst);
    let head = common::via_wal(&db, "poison", 0).await;
    let follower = common::via_wal(&db, "poison", 1).await;
    let other = common::via_wal(&db, "other", 0).await;
    assert_eq!(receiver.wait_for("other", 1).await, [other], "the stream goes on past the failed event");
    let expected = [(head, "failed".to_owned()), (follower, "pending".to_owned())];
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let rows: Vec<(Uuid, String)> =
            sqlx::query_as("SELECT id, status FROM outbox_events ORDER BY seq").fetch_all(&db.pool).await.unwrap();
        if rows == expected {
            break;
        }
        assert!(Instant::now() < deadline, "the failed event and its follower are table rows: {rows:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(receiver.of("poison").is_empty());

    receiver.down.store(false, Ordering::SeqCst);
    retry(&db, head);
    assert_eq!(receiver.wait_for("poison", 2).await, [head, follower], "in order after the retry");
    assert_eq!(relay.terminate().await.code(), Some(0));
}

#[tokio::test]
async fn message_mode_events_whose_receiver_cannot_be_reached_leave_the_stream_without_an_attempt_counted() {
    let db = TestDatabase::migrated().await;
    assert!(outbox(&db.url, &["wal", "enable"]).status.success());
    // Nothing listens there yet: every publish fails to connect.
    let address = format!("127.0.0.1:{}", outbox_tests::process::free_port());
    let sink = format!("http://{address}/hook");
    let args: Vec<&str> = RELAY
        .iter()
        .copied()
        .map(|arg| if arg == "1000" { "2" } else { arg })
        .chain(["--sink", sink.as_str()])
        .collect();
    let mut relay = bad_input_support::start(&db.url, &args, &[("OUTBOX_WEBHOOK_SECRET", SECRET)]);
    common::wait_for_the_slot(&db).await;
    let mut ids = Vec::new();
    for n in 0..2 {
        ids.push(common::via_wal(&db, "a", n).await);
    }
    // After the second of retrying in place, both leave the stream for the table: pending, no attempt counted (two
    // attempts allowed: counted, the in-place retries alone would have failed them).
    common::wait_until(Duration::from_secs(30), "both events are table rows", || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM outbox_events").fetch_one(&db.pool).await.unwrap() == 2
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rows: Vec<(String, i32)> =
        sqlx::query_as("SELECT status, attempts FROM outbox_events ORDER BY seq").fetch_all(&db.pool).await.unwrap();
    assert_eq!(rows, [("pending".to_owned(), 0), ("pending".to_owned(), 0)]);
    let (receiver, _) = start_receiver_at(&address).await;
    assert_eq!(receiver.wait_for("a", 2).await, ids, "in order once the receiver is there");
    assert_eq!(relay.terminate().await.code(), Some(0));
}

#[tokio::test]
async fn a_relay_stopped_before_it_recorded_a_hand_over_of_messages_leaves_none_of_them_pending_for_good() {
    let db = TestDatabase::migrated().await;
    assert!(outbox(&db.url, &["wal", "enable"]).status.success());
    // The first relay's sessions cannot record a hand-over (each refusal counted by a sequence, which a rollback
    // does not undo): that relay never gets past it, as one that stops right before it.
    sqlx::raw_sql(
        "CREATE SEQUENCE refusals;
         CREATE FUNCTION refuse_hand_over() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF current_setting('application_name') = 'first-relay' THEN
                 PERFORM nextval('refusals');
                 RAISE EXCEPTION 'hand-over refused by the test';
             END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER refuse_hand_over BEFORE INSERT ON outbox_wal_handed_over
             FOR EACH ROW EXECUTE FUNCTION refuse_hand_over();",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    // Nothing listens there yet: the messages are postponed (no attempt counted) and leave the stream after the
    // in-place retry.
    let address = format!("127.0.0.1:{}", outbox_tests::process::free_port());
    let sink = format!("http://{address}/hook");
    let separator = if db.url.contains('?') { '&' } else { '?' };
    let first_url = format!("{}{separator}application_name=first-relay", db.url);
    let args: Vec<&str> = RELAY.iter().copied().chain(["--sink", sink.as_str()]).collect();
    let mut first = bad_input_support::start(&first_url, &args, &[("OUTBOX_WEBHOOK_SECRET", SECRET)]);
    common::wait_for_the_slot(&db).await;
    let mut ids = Vec::new();
    for n in 0..2 {
        ids.push(common::via_wal(&db, "a", n).await);
    }
    common::wait_until(Duration::from_secs(30), "the hand-over was refused", || async {
        sqlx::query_scalar::<_, bool>("SELECT is_called FROM refusals").fetch_one(&db.pool).await.unwrap()
    })
    .await;
    first.kill();
    let (receiver, _) = start_receiver_at(&address).await;
    let mut relay = start_relay(&db, &sink);
    assert_eq!(receiver.wait_for("a", 2).await[..2], ids, "in order");
    // Published from the replayed stream or from the table: either way nothing of them stays pending.
    common::wait_until(Duration::from_secs(10), "no event is left pending", || async {
        common::count(&db.pool, "pending").await == 0
    })
    .await;
    assert_eq!(relay.terminate().await.code(), Some(0));
}
