//! Rows written or changed by hand with SQL, on PostgreSQL and on SQLite: a payload that is not a JSON object,
//! headers that are not an object of strings, sensitive paths that are not an array of JSON pointers. The relay
//! never publishes them and never stops: each goes to `failed` with the reason in `last_error` (never its
//! content), holds back the later events of its aggregate like any failure, and every other event is published.
//! `outbox events show` of such a row shows none of a payload whose sensitive paths cannot be read.
//!
//! An unknown status is refused by both databases (a CHECK constraint); a SQLite row written with the check
//! switched off is never claimed, `outbox status` and `outbox events list` still work, and `outbox events show`
//! says the row is unreadable instead of showing it with another status.

mod common;

use std::process::Output;
use std::time::Duration;

use common::{config, event, wait_until, Recorder};
use outbox_core::store::SqliteStore;
use outbox_core::Outbox;
use outbox_relay::{CancellationToken, Relay};
use serde_json::Value;
use uuid::Uuid;

/// `(payload, headers, sensitive_paths, the expected last_error)` of each hand-written row.
const CORRUPTED: [(&str, &str, &str, &str); 13] = [
    ("42", "{}", "[]", PAYLOAD),
    (r#""text""#, "{}", "[]", PAYLOAD),
    ("[1,2]", "{}", "[]", PAYLOAD),
    ("null", "{}", "[]", PAYLOAD),
    (r#"{"card_number":"4111111111111111"}"#, "42", "[]", HEADERS),
    (r#"{"card_number":"4111111111111111"}"#, r#"["traceparent"]"#, "[]", HEADERS),
    (r#"{"card_number":"4111111111111111"}"#, r#"{"traceparent":1}"#, "[]", HEADERS),
    (r#"{"card_number":"4111111111111111"}"#, "null", "[]", HEADERS),
    (r#"{"card_number":"4111111111111111"}"#, "{}", r#""/card_number""#, SENSITIVE),
    (r#"{"card_number":"4111111111111111"}"#, "{}", r#"{"path":"/card_number"}"#, SENSITIVE),
    (r#"{"card_number":"4111111111111111"}"#, "{}", "[1]", SENSITIVE),
    (r#"{"card_number":"4111111111111111"}"#, "{}", "null", SENSITIVE),
    (r#"{"card_number":"4111111111111111"}"#, "{}", r#"["card_number"]"#, SENSITIVE),
];
const PAYLOAD: &str = "corrupted row: payload is not a JSON object";
const HEADERS: &str = "corrupted row: headers is not a JSON object of strings";
const SENSITIVE: &str = "corrupted row: sensitive_paths is not a JSON array of JSON pointers";

/// How many good events each test enqueues (aggregates `good-0`.. `good-9`), plus one behind every corrupted row.
const GOOD: usize = 10;

fn outbox(url: &str, args: &[&str]) -> Output {
    outbox_tests::outbox!().database(url).env("OUTBOX_LOG", "warn").run(args)
}

fn json_of(output: &Output) -> Value {
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("JSON output")
}

/// Checks the CLI on the database after the relay ran: the failed list carries the reasons, status works, and
/// `show` of a row whose sensitive paths are unreadable shows none of its payload.
fn check_cli(url: &str, unreadable_paths: Uuid) {
    let failed = json_of(&outbox(url, &["events", "list", "--status", "failed", "--json"]));
    assert_eq!(failed.as_array().unwrap().len(), CORRUPTED.len(), "{failed}");
    assert!(failed.as_array().unwrap().iter().all(|e| e["last_error"].as_str().unwrap().starts_with("corrupted row")));
    let status = json_of(&outbox(url, &["status", "--json"]));
    assert_eq!(status["failed"], CORRUPTED.len(), "{status}");
    let output = outbox(url, &["events", "show", &unreadable_paths.to_string(), "--json"]);
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(!text.contains("4111111111111111"), "a payload with unreadable sensitive paths was shown: {text}");
    let shown = json_of(&output);
    assert_eq!(shown["payload"], "[REDACTED]");
    assert_eq!(shown["corrupted"], SENSITIVE);
    assert_eq!(shown["status"], "failed");
}

#[tokio::test]
async fn corrupted_rows_on_postgres_go_to_failed_with_the_reason_and_the_rest_is_published() {
    let db = outbox_tests::pg::TestDatabase::migrated().await;
    let good: Vec<_> = (0..GOOD).map(|n| event(format!("good-{n}"), 0)).collect();
    common::enqueue(&db.pool, &good).await;
    let mut corrupted = Vec::new();
    for (n, (payload, headers, sensitive, _)) in CORRUPTED.iter().enumerate() {
        let id = Uuid::now_v7();
        sqlx::query(
            "INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, headers, sensitive_paths)
             VALUES ($1, 'test', $2, 'test.happened', $3::jsonb, $4::jsonb, $5::jsonb)",
        )
        .bind(id)
        .bind(format!("bad-{n}"))
        .bind(payload)
        .bind(headers)
        .bind(sensitive)
        .execute(&db.pool)
        .await
        .expect("insert a corrupted row");
        corrupted.push(id);
    }
    // A good event behind each corrupted one: held back by its failed head, as behind any failure.
    let behind =
        common::enqueue(&db.pool, &(0..CORRUPTED.len()).map(|n| event(format!("bad-{n}"), 1)).collect::<Vec<_>>())
            .await;

    let recorder = Recorder::new();
    let relay = common::start(&db, recorder.for_relay(0), config().build().unwrap());
    wait_until(Duration::from_secs(30), "the good events are published and the corrupted ones failed", || async {
        common::count(&db.pool, "published").await == GOOD as i64
            && common::count(&db.pool, "failed").await == CORRUPTED.len() as i64
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await; // room for a wrong publish to show up
    let summary = relay.stop().await; // the loop never stopped: it stops now, on request
    assert_eq!(summary.failed, CORRUPTED.len() as u64);
    assert_eq!(summary.published, GOOD as u64);

    for (id, (_, _, _, reason)) in corrupted.iter().zip(CORRUPTED) {
        let (status, error, attempts): (String, Option<String>, i32) =
            sqlx::query_as("SELECT status, last_error, attempts FROM outbox_events WHERE id = $1")
                .bind(id)
                .fetch_one(&db.pool)
                .await
                .unwrap();
        assert_eq!((status.as_str(), error.as_deref(), attempts), ("failed", Some(reason), 1), "{id}");
    }
    let seen: Vec<Uuid> = recorder.seen().iter().map(|s| s.id).collect();
    assert!(corrupted.iter().all(|id| !seen.contains(id)), "a corrupted row was published");
    for id in &behind {
        assert_eq!(common::status_of(&db.pool, *id).await, "pending", "an event behind a corrupted head went out");
    }
    check_cli(&db.url, corrupted[8]);
}

/// Inserts by hand a row of aggregate `aggregate` whose payload is not a JSON object; returns its id.
async fn insert_corrupted(pool: &sqlx::PgPool, aggregate: &str) -> Uuid {
    let id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
         VALUES ($1, 'test', $2, 'test.happened', '42'::jsonb)",
    )
    .bind(id)
    .bind(aggregate)
    .execute(pool)
    .await
    .expect("insert a corrupted row");
    id
}

/// A publisher that keeps a batch's order (the file sink) gets every event of an aggregate in one call; a
/// corrupted head in that call still holds back the events behind it: they are not written to the file.
#[tokio::test]
async fn a_corrupted_head_holds_back_its_aggregate_with_a_sink_that_keeps_order() {
    let db = outbox_tests::pg::TestDatabase::migrated().await;
    insert_corrupted(&db.pool, "bad").await;
    let behind = common::enqueue(&db.pool, &[event("bad", 1), event("bad", 2)]).await;
    let good = common::enqueue(&db.pool, &[event("good", 0), event("good", 1)]).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let file = outbox_relay::FilePublisher::open(&path).unwrap();
    let relay = common::start(&db, file, config().build().unwrap());
    wait_until(Duration::from_secs(30), "the good events are published and the corrupted head failed", || async {
        common::count(&db.pool, "published").await == 2 && common::count(&db.pool, "failed").await == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await; // room for a wrong publish to show up
    relay.stop().await;
    let written = common::written(&path);
    assert_eq!(written, good, "only the good aggregate's events, in order");
    for id in behind {
        assert_eq!(common::status_of(&db.pool, id).await, "pending", "an event behind a corrupted head went out");
    }
}

/// The same sink, the corrupted row in the middle of its aggregate: the event before it is written in the call
/// and settled `published` (before, its outcome was dropped for the corrupted row behind it, and the row stayed
/// pending below the partition's start, read by nothing again); the one behind it waits.
#[tokio::test]
async fn the_event_before_a_corrupted_row_of_its_aggregate_is_published_and_settled_with_a_sink_that_keeps_order() {
    let db = outbox_tests::pg::TestDatabase::migrated().await;
    let before = common::enqueue(&db.pool, &[event("mixed", 0)]).await;
    let corrupted = insert_corrupted(&db.pool, "mixed").await;
    let behind = common::enqueue(&db.pool, &[event("mixed", 2)]).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let file = outbox_relay::FilePublisher::open(&path).unwrap();
    let relay = common::start(&db, file, config().build().unwrap());
    wait_until(Duration::from_secs(10), "the first event is published and the corrupted one failed", || async {
        common::status_of(&db.pool, before[0]).await == "published"
            && common::status_of(&db.pool, corrupted).await == "failed"
    })
    .await;
    relay.stop().await;
    let written = common::written(&path);
    assert_eq!(written, before, "the event before the corrupted row, once");
    assert_eq!(common::status_of(&db.pool, behind[0]).await, "pending", "the event behind it waits");
}

/// A row whose `attempts` was set by hand to the column's largest value: its failure is settled (the count stays
/// at the largest value) with the rest of its batch, instead of failing the whole settle, which left the batch
/// pending and published it again and again.
#[tokio::test]
async fn a_row_at_the_largest_attempt_count_still_settles_as_failed_with_its_batch() {
    let db = outbox_tests::pg::TestDatabase::migrated().await;
    let worn = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, attempts)
         VALUES ($1, 'test', 'worn', 'test.happened', '42'::jsonb, 2147483647)",
    )
    .bind(worn)
    .execute(&db.pool)
    .await
    .expect("insert a row at the largest attempt count");
    let good = common::enqueue(&db.pool, &[event("good", 0)]).await;
    let recorder = Recorder::new();
    let relay = common::start(&db, recorder.for_relay(0), config().build().unwrap());
    wait_until(Duration::from_secs(10), "the row is failed and the other event published", || async {
        common::status_of(&db.pool, worn).await == "failed" && common::status_of(&db.pool, good[0]).await == "published"
    })
    .await;
    relay.stop().await;
    let attempts: i32 = sqlx::query_scalar("SELECT attempts FROM outbox_events WHERE id = $1")
        .bind(worn)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(attempts, i32::MAX);
    assert_eq!(recorder.seen().iter().filter(|seen| seen.id == good[0]).count(), 1, "published once");
}

/// Times PostgreSQL stores but Rust's time types do not hold (`'infinity'`, `'-infinity'`, the year 20000), set
/// by hand: the relay reads them clamped and never stops. An event parked with `next_attempt_at = 'infinity'` waits;
/// events with such a `created_at` are published; every other event, in every lane, is published.
#[tokio::test]
async fn times_beyond_what_rust_holds_neither_stop_the_relay_nor_hold_back_other_events() {
    let db = outbox_tests::pg::TestDatabase::migrated().await;
    let good: Vec<_> = (0..GOOD).map(|n| event(format!("good-{n}"), 0)).collect();
    let good = common::enqueue(&db.pool, &good).await;
    let odd = [event("parked", 0), event("parked-far", 0), event("far", 0), event("ancient", 0)];
    let odd = common::enqueue(&db.pool, &odd).await;
    for (id, set) in odd.iter().zip([
        "next_attempt_at = 'infinity', attempts = 1",
        "next_attempt_at = '20000-01-01 00:00:00+00', attempts = 1",
        "created_at = 'infinity', next_attempt_at = '-infinity'",
        "created_at = '-infinity'",
    ]) {
        sqlx::query(&format!("UPDATE outbox_events SET {set} WHERE id = $1")).bind(id).execute(&db.pool).await.unwrap();
    }
    let recorder = Recorder::new();
    let relay = common::start(&db, recorder.for_relay(0), config().build().unwrap());
    wait_until(Duration::from_secs(30), "every event but the parked one is published", || async {
        common::count(&db.pool, "published").await == (GOOD + 2) as i64
    })
    .await;
    for parked in &odd[..2] {
        assert_eq!(common::status_of(&db.pool, *parked).await, "pending", "an event parked for ever was published");
    }
    assert!(!relay.handle.is_finished(), "the relay stopped");
    relay.stop().await;
    let seen: Vec<Uuid> = recorder.seen().iter().map(|s| s.id).collect();
    assert!(good.iter().chain(&odd[2..]).all(|id| seen.contains(id)));
}

#[tokio::test]
async fn postgres_refuses_an_unknown_status_written_by_hand() {
    let db = outbox_tests::pg::TestDatabase::migrated().await;
    let ids = common::enqueue(&db.pool, &[event("a", 0)]).await;
    for statement in [
        format!("UPDATE outbox_events SET status = 'done' WHERE id = '{}'", ids[0]),
        "INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, status)
         VALUES (gen_random_uuid(), 'test', 'b', 'test.happened', '{}', 'bogus')"
            .to_owned(),
    ] {
        let error = sqlx::query(&statement).execute(&db.pool).await.expect_err("accepted an unknown status");
        let code = error.as_database_error().and_then(|e| e.code()).unwrap_or_default().into_owned();
        assert_eq!(code, "23514", "not a CHECK violation: {error}");
    }
    let rows: Vec<(String,)> = sqlx::query_as("SELECT status FROM outbox_events").fetch_all(&db.pool).await.unwrap();
    assert_eq!(rows, vec![("pending".to_owned(),)]);
}

async fn sqlite_enqueue(pool: &sqlx::SqlitePool, events: &[common::TestEvent]) -> Vec<Uuid> {
    let mut tx = pool.begin().await.unwrap();
    let ids = Outbox::new().enqueue_all(&mut tx, events).await.unwrap();
    tx.commit().await.unwrap();
    ids
}

async fn sqlite_count(pool: &sqlx::SqlitePool, status: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE status = ?1")
        .bind(status)
        .fetch_one(pool)
        .await
        .unwrap()
}

const SQLITE_INSERT: &str =
    "INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, headers, sensitive_paths, status)
     VALUES (?1, 'test', ?2, 'test.happened', ?3, ?4, ?5, ?6)";

#[tokio::test]
async fn corrupted_rows_on_sqlite_go_to_failed_with_the_reason_and_unknown_statuses_are_never_claimed() {
    let db = outbox_tests::sqlite::TestDatabase::migrated().await;
    let good: Vec<_> = (0..GOOD).map(|n| event(format!("good-{n}"), 0)).collect();
    sqlite_enqueue(&db.pool, &good).await;
    let mut corrupted = Vec::new();
    for (n, (payload, headers, sensitive, _)) in CORRUPTED.iter().enumerate() {
        let id = Uuid::now_v7();
        sqlx::query(SQLITE_INSERT)
            .bind(id.hyphenated().to_string())
            .bind(format!("bad-{n}"))
            .bind(payload)
            .bind(headers)
            .bind(sensitive)
            .bind("pending")
            .execute(&db.pool)
            .await
            .expect("insert a corrupted row");
        corrupted.push(id);
    }
    // The CHECK constraint refuses an unknown status...
    let refused = sqlx::query(SQLITE_INSERT)
        .bind(Uuid::now_v7().hyphenated().to_string())
        .bind("bogus")
        .bind("{}")
        .bind("{}")
        .bind("[]")
        .bind("bogus")
        .execute(&db.pool)
        .await
        .expect_err("accepted an unknown status");
    assert!(refused.to_string().contains("CHECK constraint failed"), "{refused}");
    // ... unless it is switched off: such a row, and one whose payload is not JSON at all, are written anyway.
    let bogus = Uuid::now_v7();
    let not_json = Uuid::now_v7();
    {
        let mut conn = db.pool.acquire().await.unwrap();
        sqlx::query("PRAGMA ignore_check_constraints = ON").execute(&mut *conn).await.unwrap();
        for (id, aggregate, payload, status) in
            [(bogus, "bogus", "{}", "bogus"), (not_json, "not-json", r#"{"card_number": "4111"#, "pending")]
        {
            sqlx::query(SQLITE_INSERT)
                .bind(id.hyphenated().to_string())
                .bind(aggregate)
                .bind(payload)
                .bind("{}")
                .bind("[]")
                .bind(status)
                .execute(&mut *conn)
                .await
                .unwrap();
        }
        sqlx::query("PRAGMA ignore_check_constraints = OFF").execute(&mut *conn).await.unwrap();
    }

    let recorder = Recorder::new();
    let relay = Relay::new(SqliteStore::new(db.pool.clone()), recorder.for_relay(0), config().build().unwrap());
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(relay.run(shutdown.clone()));
    wait_until(Duration::from_secs(30), "the good events are published and the corrupted ones failed", || async {
        sqlite_count(&db.pool, "published").await == GOOD as i64
            && sqlite_count(&db.pool, "failed").await == CORRUPTED.len() as i64 + 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    shutdown.cancel();
    let summary = handle.await.expect("relay task").expect("the relay kept running");
    assert_eq!(summary.failed, CORRUPTED.len() as u64 + 1);

    for (id, reason) in corrupted.iter().zip(CORRUPTED.map(|c| c.3)).chain([(&not_json, PAYLOAD)]) {
        let (status, error): (String, Option<String>) =
            sqlx::query_as("SELECT status, last_error FROM outbox_events WHERE id = ?1")
                .bind(id.hyphenated().to_string())
                .fetch_one(&db.pool)
                .await
                .unwrap();
        assert_eq!((status.as_str(), error.as_deref()), ("failed", Some(reason)), "{id}");
    }
    let seen: Vec<Uuid> = recorder.seen().iter().map(|s| s.id).collect();
    assert!(corrupted.iter().chain([&not_json]).all(|id| !seen.contains(id)), "a corrupted row was published");
    assert_eq!(sqlite_count(&db.pool, "bogus").await, 1, "the row with an unknown status was claimed");

    // The operator's commands do not trip over the rows: status and list work; show says what is wrong.
    let status = json_of(&outbox(&db.url, &["status", "--json"]));
    assert_eq!(status["failed"], CORRUPTED.len() + 1, "{status}");
    let pending = json_of(&outbox(&db.url, &["events", "list", "--status", "pending", "--json"]));
    assert_eq!(pending.as_array().unwrap().len(), 0, "{pending}");
    let show = outbox(&db.url, &["events", "show", &bogus.to_string()]);
    let stderr = String::from_utf8_lossy(&show.stderr);
    assert_eq!(show.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("error: ") && stderr.contains("unknown status `bogus`"), "{stderr}");
    let stored = sqlx::query_scalar::<_, i64>("SELECT count(*) FROM outbox_events").fetch_one(&db.pool).await.unwrap();
    assert_eq!(stored, (GOOD + CORRUPTED.len() + 2) as i64, "a row was lost");
    check_cli_sqlite(&db.url, corrupted[8]);
}

/// [`check_cli`] with the extra failed row of the SQLite test.
fn check_cli_sqlite(url: &str, unreadable_paths: Uuid) {
    let output = outbox(url, &["events", "show", &unreadable_paths.to_string(), "--json"]);
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(!text.contains("4111111111111111"), "a payload with unreadable sensitive paths was shown: {text}");
    let shown = json_of(&output);
    assert_eq!(shown["payload"], "[REDACTED]");
    assert_eq!(shown["corrupted"], SENSITIVE);
}
