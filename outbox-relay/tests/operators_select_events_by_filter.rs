//! `outbox events list`, `retry` and `cancel` select events by the same filters (type, aggregate, status, age),
//! `list` pages with `--after`, `--dry-run` changes nothing, and on a terminal more than one event is changed only
//! after a yes: on PostgreSQL and on SQLite, through the real binary.
#![cfg(feature = "cli")]

use std::collections::BTreeMap;
use std::process::Output;

use outbox_core::store::{CancelTarget, EventFilter, EventStatus, PgStore, RetryTarget, SqliteStore, Store};
use outbox_core::{Outbox, OutboxEvent};
use serde::Serialize;
use uuid::Uuid;

/// `order.placed` of an order.
#[derive(Serialize)]
struct Placed {
    order_id: String,
}

/// `order.shipped` of an order.
#[derive(Serialize)]
struct Shipped {
    order_id: String,
}

macro_rules! order_event {
    ($name:ident, $event_type:literal) => {
        impl OutboxEvent for $name {
            const EVENT_TYPE: &'static str = $event_type;
            const AGGREGATE_TYPE: &'static str = "order";
            const VERSION: u32 = 1;

            fn aggregate_id(&self) -> String {
                self.order_id.clone()
            }
        }
        impl $name {
            fn new(order_id: &str) -> Self {
                Self { order_id: order_id.to_owned() }
            }
        }
    };
}
order_event!(Placed, "order.placed");
order_event!(Shipped, "order.shipped");

/// The database of one backend, with what differs between them.
enum Database {
    Postgres(outbox_tests::pg::TestDatabase),
    Sqlite(outbox_tests::sqlite::TestDatabase),
}

impl Database {
    fn url(&self) -> &str {
        match self {
            Self::Postgres(db) => &db.url,
            Self::Sqlite(db) => &db.url,
        }
    }

    fn store(&self) -> Box<dyn Store> {
        match self {
            Self::Postgres(db) => Box::new(PgStore::new(db.pool.clone())),
            Self::Sqlite(db) => Box::new(SqliteStore::new(db.pool.clone())),
        }
    }

    /// Enqueues `order.placed` for o-1, o-2, o-3 and `order.shipped` for o-1, o-2, in this order.
    async fn enqueue(&self) -> Vec<Uuid> {
        let placed: Vec<Placed> = ["o-1", "o-2", "o-3"].into_iter().map(Placed::new).collect();
        let shipped: Vec<Shipped> = ["o-1", "o-2"].into_iter().map(Shipped::new).collect();
        let outbox = Outbox::new();
        let mut ids = Vec::new();
        match self {
            Self::Postgres(db) => {
                let mut tx = db.pool.begin().await.unwrap();
                ids.extend(outbox.enqueue_all(&mut tx, &placed).await.unwrap());
                ids.extend(outbox.enqueue_all(&mut tx, &shipped).await.unwrap());
                tx.commit().await.unwrap();
            }
            Self::Sqlite(db) => {
                let mut tx = db.pool.begin().await.unwrap();
                ids.extend(outbox.enqueue_all(&mut tx, &placed).await.unwrap());
                ids.extend(outbox.enqueue_all(&mut tx, &shipped).await.unwrap());
                tx.commit().await.unwrap();
            }
        }
        ids
    }

    /// Runs one statement of the test's set-up (no parameters: ids are inlined).
    async fn execute(&self, sql: &str) {
        match self {
            Self::Postgres(db) => drop(sqlx::query(sql).execute(&db.pool).await.unwrap()),
            Self::Sqlite(db) => drop(sqlx::query(sql).execute(&db.pool).await.unwrap()),
        }
    }

    /// Moves the events to `failed` after three attempts, enqueued `hours_ago`.
    async fn fail(&self, ids: &[Uuid], hours_ago: u32) {
        let ids: Vec<String> = ids.iter().map(|id| format!("'{id}'")).collect();
        let created = match self {
            Self::Postgres(_) => format!("now() - interval '{hours_ago} hours'"),
            Self::Sqlite(_) => format!("strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-{hours_ago} hours')"),
        };
        self.execute(&format!(
            "UPDATE outbox_events SET status = 'failed', attempts = 3, last_error = 'boom', created_at = {created}
              WHERE id IN ({})",
            ids.join(", ")
        ))
        .await;
    }

    /// Records a batch that a relay is publishing now, of the event `id` alone.
    async fn publishing(&self, id: Uuid) {
        self.execute(&match self {
            Self::Postgres(_) => format!(
                "INSERT INTO outbox_batches (relay_id, batch_id, events) \
                 VALUES (gen_random_uuid(), gen_random_uuid(), ARRAY['{id}']::uuid[])"
            ),
            Self::Sqlite(_) => {
                format!("INSERT INTO outbox_batches (relay_id, batch_id, events) VALUES ('r', 'b', json_array('{id}'))")
            }
        })
        .await;
    }

    /// Every event's status and attempts, by id.
    async fn states(&self) -> BTreeMap<Uuid, (EventStatus, u32)> {
        let events = self.store().list(&EventFilter::default().limit(1000)).await.unwrap();
        events.into_iter().map(|event| (event.id, (event.status, event.attempts))).collect()
    }
}

fn outbox(url: &str, args: &[&str]) -> Output {
    outbox_tests::outbox!().database(url).env("OUTBOX_LOG", "warn").run(args)
}

/// The ids of `outbox events list ... --json`.
fn listed(url: &str, args: &[&str]) -> Vec<Uuid> {
    let output = outbox(url, &[&["events", "list", "--json"], args].concat());
    assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
    let events: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).unwrap();
    events.iter().map(|event| event["id"].as_str().unwrap().parse().unwrap()).collect()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn assert_usage_error(output: &Output, what: &str, expected: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{what}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{what}: one line: {stderr}");
    assert!(stderr.contains(expected), "{what}: {stderr}");
}

/// The scenario, the same on both backends.
async fn filters_select_the_same_events_for_list_retry_and_cancel(db: Database) {
    let url = db.url().to_owned();
    let ids = db.enqueue().await;
    let (placed, shipped) = (&ids[..3], &ids[3..]);
    db.fail(&placed[..2], 2).await; // order.placed o-1, o-2: failed two hours ago
    db.fail(&[placed[2], shipped[1]], 0).await; // order.placed o-3, order.shipped o-2: failed just now
    let before = db.states().await;

    // The same filters select the same events in list, retry and cancel.
    let old_failed_placed = ["--status", "failed", "--event-type", "order.placed", "--older-than", "1h"];
    assert_eq!(listed(&url, &old_failed_placed), placed[..2]);
    assert_eq!(listed(&url, &["--aggregate-id", "o-2"]), [placed[1], shipped[1]]);
    assert_eq!(listed(&url, &["--status", "failed"]), [placed[0], placed[1], placed[2], shipped[1]]);

    // Pages: `--after` the last id of a page gives the next one, in insertion order.
    assert_eq!(listed(&url, &["--limit", "2"]), ids[..2]);
    assert_eq!(listed(&url, &["--limit", "2", "--after", &ids[1].to_string()]), ids[2..4]);
    assert_eq!(listed(&url, &["--limit", "2", "--after", &ids[3].to_string()]), ids[4..]);
    assert_eq!(listed(&url, &["--limit", "2", "--after", &ids[4].to_string()]), Vec::<Uuid>::new());
    let unknown = outbox(&url, &["events", "list", "--after", &Uuid::now_v7().to_string()]);
    assert_eq!(unknown.status.code(), Some(1), "{}", String::from_utf8_lossy(&unknown.stderr));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no event with id"));
    let page = outbox(&url, &["events", "list", "--limit", "2"]);
    assert!(
        String::from_utf8_lossy(&page.stderr).contains(&format!("--after {}", ids[1])),
        "a full page says how to go on"
    );

    // --dry-run prints what would change and changes nothing.
    let dry = outbox(&url, &[&["events", "retry", "--dry-run"][..], &old_failed_placed[2..]].concat());
    assert!(dry.status.success(), "{}", String::from_utf8_lossy(&dry.stderr));
    let shown = stdout(&dry);
    assert!(shown.starts_with("would retry 2 event(s)"), "{shown}");
    assert!(shown.contains(&placed[0].to_string()) && shown.contains(&placed[1].to_string()), "{shown}");
    assert!(!shown.contains(&placed[2].to_string()), "{shown}");
    let dry = outbox(&url, &["events", "cancel", "--dry-run", "--status", "failed", "--aggregate-id", "o-2"]);
    assert!(stdout(&dry).starts_with("would cancel 2 event(s)"), "{}", stdout(&dry));
    assert_eq!(db.states().await, before, "a dry run changes nothing");

    // Bad selections: one line, exit 2, nothing changed.
    let wrong = outbox(&url, &["events", "retry", "--status", "pending"]);
    assert_usage_error(&wrong, "retry of pending events", "retry takes failed events");
    let wrong = outbox(&url, &["events", "cancel", "--event-type", "order.shipped"]);
    assert_usage_error(&wrong, "cancel without a status", "needs --status pending or --status failed");
    let wrong = outbox(&url, &["events", "cancel", "--status", "published", "--event-type", "order.shipped"]);
    assert_usage_error(&wrong, "cancel of published events", "cancel takes pending or failed events");
    let wrong = outbox(&url, &["events", "cancel", &ids[0].to_string(), "--status", "failed"]);
    assert_usage_error(&wrong, "ids and filters", "cannot be used with");
    let wrong = outbox(&url, &["events", "retry", "--older-than", "soon"]);
    assert_usage_error(&wrong, "a malformed age", "malformed duration");
    assert_eq!(db.states().await, before, "bad input changes nothing");

    // Without a terminal nothing is asked: the filters' events change, the others stay.
    let retried = outbox(&url, &[&["events", "retry"][..], &old_failed_placed[2..]].concat());
    assert!(retried.status.success(), "{}", String::from_utf8_lossy(&retried.stderr));
    assert_eq!(stdout(&retried).trim(), "retried 2 event(s)");
    let after_retry = db.states().await;
    for id in &placed[..2] {
        assert_eq!(after_retry[id], (EventStatus::Pending, 0), "retried, attempts reset");
    }
    assert_eq!(after_retry[&placed[2]], (EventStatus::Failed, 3), "too young for --older-than 1h");
    assert_eq!(after_retry[&shipped[1]], (EventStatus::Failed, 3), "another type");

    let cancelled = outbox(&url, &["events", "cancel", "--status", "pending", "--aggregate-id", "o-1"]);
    assert!(cancelled.status.success(), "{}", String::from_utf8_lossy(&cancelled.stderr));
    assert_eq!(stdout(&cancelled).trim(), "cancelled 2 event(s)");
    let after_cancel = db.states().await;
    assert_eq!(after_cancel[&placed[0]].0, EventStatus::Cancelled);
    assert_eq!(after_cancel[&shipped[0]].0, EventStatus::Cancelled);
    assert_eq!(after_cancel[&placed[1]].0, EventStatus::Pending, "another aggregate");

    // --limit changes at most that many, oldest first.
    let limited = outbox(&url, &["events", "cancel", "--status", "failed", "--limit", "1"]);
    assert_eq!(stdout(&limited).trim(), "cancelled 1 event(s)", "{}", String::from_utf8_lossy(&limited.stderr));
    assert_eq!(db.states().await[&placed[2]].0, EventStatus::Cancelled, "the oldest failed one");
    assert_eq!(db.states().await[&shipped[1]].0, EventStatus::Failed);

    // The store does the same for library users: the failed events the filter matches, at most its limit.
    let store = db.store();
    let filter = EventFilter::new(EventStatus::Failed).event_type("order.shipped");
    assert_eq!(store.retry(&RetryTarget::Matching(filter.clone())).await.unwrap(), [shipped[1]]);
    assert_eq!(
        store.retry(&RetryTarget::Matching(filter)).await.unwrap(),
        Vec::<Uuid>::new(),
        "pending now: nothing to retry"
    );
    let pending = EventFilter::new(EventStatus::Pending).limit(1);
    assert_eq!(store.cancel(&CancelTarget::Matching(pending)).await.unwrap(), [placed[1]]);
    assert_eq!(
        store.cancel(&CancelTarget::Matching(EventFilter::new(EventStatus::Published))).await.unwrap(),
        Vec::<Uuid>::new()
    );
}

/// An event in a batch being published, the same on both backends.
async fn an_event_being_published_is_not_pending_to_list_nor_to_cancel_and_takes_no_place_in_the_limit(db: Database) {
    let url = db.url().to_owned();
    let ids = db.enqueue().await;
    db.publishing(ids[0]).await;
    assert_eq!(listed(&url, &["--status", "in_flight"]), [ids[0]]);
    assert_eq!(listed(&url, &["--status", "pending"]), ids[1..], "what list shows as pending");
    let dry = outbox(&url, &["events", "cancel", "--dry-run", "--status", "pending"]);
    assert!(stdout(&dry).starts_with("would cancel 4 event(s)"), "{}", stdout(&dry));
    assert!(!stdout(&dry).contains(&ids[0].to_string()), "{}", stdout(&dry));
    // The limit counts the events that can change: the oldest pending one not being published.
    let limited = outbox(&url, &["events", "cancel", "--status", "pending", "--limit", "1"]);
    assert!(limited.status.success(), "{}", String::from_utf8_lossy(&limited.stderr));
    assert_eq!(stdout(&limited).trim(), "cancelled 1 event(s)");
    let states = db.states().await;
    assert_eq!(states[&ids[0]].0, EventStatus::InFlight, "left to its relay");
    assert_eq!(states[&ids[1]].0, EventStatus::Cancelled);
    assert!(ids[2..].iter().all(|id| states[id].0 == EventStatus::Pending), "{states:?}");
}

/// Runs `outbox ARGS` on a pseudo-terminal with `answer` typed in.
fn on_a_terminal(url: &str, args: &str, answer: &str) -> Output {
    let args: Vec<&str> = args.split(' ').collect();
    outbox_tests::outbox!().database(url).env("OUTBOX_LOG", "warn").run_on_a_terminal(&args, answer)
}

/// The confirmation, the same on both backends.
async fn more_than_one_event_changes_on_a_terminal_only_after_a_yes(db: Database) {
    let url = db.url().to_owned();
    let ids = db.enqueue().await;
    db.fail(&ids[..2], 1).await;
    let before = db.states().await;

    let declined = on_a_terminal(&url, "events cancel --status failed", "n\n");
    let shown = stdout(&declined);
    assert!(shown.contains("cancel 2 event(s)? [y/N]"), "the question: {shown}");
    assert_eq!(declined.status.code(), Some(1), "{shown}");
    assert!(shown.contains("nothing changed"), "{shown}");
    assert_eq!(db.states().await, before, "declined: nothing changed");

    let accepted = on_a_terminal(&url, "events retry --status failed", "y\n");
    assert!(accepted.status.success(), "{}", stdout(&accepted));
    assert!(stdout(&accepted).contains("retried 2 event(s)"), "{}", stdout(&accepted));
    let states = db.states().await;
    assert!(ids[..2].iter().all(|id| states[id] == (EventStatus::Pending, 0)), "{states:?}");

    // One event is not asked about, and --yes asks nothing.
    db.fail(&ids[..1], 1).await;
    let one = on_a_terminal(&url, "events cancel --status failed", "");
    assert!(stdout(&one).contains("cancelled 1 event(s)") && !stdout(&one).contains("[y/N]"), "{}", stdout(&one));
    let yes = on_a_terminal(&url, "events cancel --status pending --yes", "");
    assert!(stdout(&yes).contains("cancelled 4 event(s)") && !stdout(&yes).contains("[y/N]"), "{}", stdout(&yes));
}

#[tokio::test]
async fn postgres_filters_select_the_same_events_for_list_retry_and_cancel() {
    filters_select_the_same_events_for_list_retry_and_cancel(Database::Postgres(
        outbox_tests::pg::TestDatabase::migrated().await,
    ))
    .await;
}

#[tokio::test]
async fn sqlite_filters_select_the_same_events_for_list_retry_and_cancel() {
    filters_select_the_same_events_for_list_retry_and_cancel(Database::Sqlite(
        outbox_tests::sqlite::TestDatabase::migrated().await,
    ))
    .await;
}

#[tokio::test]
async fn postgres_more_than_one_event_changes_on_a_terminal_only_after_a_yes() {
    more_than_one_event_changes_on_a_terminal_only_after_a_yes(Database::Postgres(
        outbox_tests::pg::TestDatabase::migrated().await,
    ))
    .await;
}

#[tokio::test]
async fn sqlite_more_than_one_event_changes_on_a_terminal_only_after_a_yes() {
    more_than_one_event_changes_on_a_terminal_only_after_a_yes(Database::Sqlite(
        outbox_tests::sqlite::TestDatabase::migrated().await,
    ))
    .await;
}

#[tokio::test]
async fn postgres_an_event_being_published_is_not_pending_to_list_nor_to_cancel_and_takes_no_place_in_the_limit() {
    an_event_being_published_is_not_pending_to_list_nor_to_cancel_and_takes_no_place_in_the_limit(Database::Postgres(
        outbox_tests::pg::TestDatabase::migrated().await,
    ))
    .await;
}

#[tokio::test]
async fn sqlite_an_event_being_published_is_not_pending_to_list_nor_to_cancel_and_takes_no_place_in_the_limit() {
    an_event_being_published_is_not_pending_to_list_nor_to_cancel_and_takes_no_place_in_the_limit(Database::Sqlite(
        outbox_tests::sqlite::TestDatabase::migrated().await,
    ))
    .await;
}

/// A migrated PostgreSQL database, its URL and a pool of its own.
async fn postgres_database() -> (Database, String, sqlx::PgPool) {
    let pg = outbox_tests::pg::TestDatabase::migrated().await;
    let (url, pool) = (pg.url.clone(), pg.pool.clone());
    (Database::Postgres(pg), url, pool)
}

/// A transaction of another session holding the row of event `id` (`FOR UPDATE`) until it ends.
async fn hold_row(pool: &sqlx::PgPool, id: Uuid) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut holder = pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM outbox_events WHERE id = $1 FOR UPDATE").bind(id).execute(&mut *holder).await.unwrap();
    holder
}

#[tokio::test]
async fn postgres_a_change_by_filter_waits_for_a_row_another_session_holds_instead_of_skipping_it() {
    let (db, url, pool) = postgres_database().await;
    let ids = db.enqueue().await;
    db.fail(&ids[..2], 0).await;
    let holder = hold_row(&pool, ids[1]).await;
    let command =
        tokio::task::spawn_blocking(move || outbox(&url, &["events", "retry", "--status", "failed", "--yes"]));
    // The command either waits for the row's lock or (skipping it) finishes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !command.is_finished() {
        let waiting: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock')",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        if waiting {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the command neither waited nor finished within 20 s");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    holder.commit().await.unwrap();
    let retried = command.await.unwrap();
    assert!(retried.status.success(), "{}", String::from_utf8_lossy(&retried.stderr));
    assert_eq!(stdout(&retried).trim(), "retried 2 event(s)", "the row held is retried too, once released");
    let states = db.states().await;
    assert!(ids[..2].iter().all(|id| states[id] == (EventStatus::Pending, 0)), "{states:?}");
}

/// A cancel holds every partition while it runs, which stops the relays' settles: a row another session holds for
/// long is waited for a few seconds only, then the cancel gives up with one line and changes nothing (before the
/// wait was bounded, a session idle in a transaction held the cancel, and every relay behind it, for as long as it
/// lived).
#[tokio::test]
async fn postgres_a_cancel_by_filter_gives_up_on_a_row_held_for_long_and_changes_nothing() {
    let (db, url, pool) = postgres_database().await;
    let ids = db.enqueue().await;
    let before = db.states().await;
    let holder = hold_row(&pool, ids[1]).await;
    let started = std::time::Instant::now();
    let command =
        tokio::task::spawn_blocking(move || outbox(&url, &["events", "cancel", "--status", "pending", "--yes"]));
    let waited = tokio::time::timeout(std::time::Duration::from_secs(30), command).await;
    let took = started.elapsed();
    // Released in any case, so that a command still waiting ends too.
    holder.rollback().await.unwrap();
    let cancelled = waited.expect("the cancel gave up within 30 s").unwrap();
    let stderr = String::from_utf8_lossy(&cancelled.stderr);
    assert_eq!(cancelled.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("lock timeout"), "{stderr}");
    assert!(took < std::time::Duration::from_secs(20), "gave up after {took:?}");
    assert_eq!(db.states().await, before, "nothing changed");
}
