//! The WAL source among the databases of one server, as real `outbox` processes on a real PostgreSQL with
//! `wal_level = logical`: replication slot names are shared by the server's databases (their advisory locks and
//! `outbox_control` are not), so a relay never drops or reads another database's slot; it stops with one line
//! (exit 2) saying to pick another `--slot`, and the other database's relay then publishes the message-mode events
//! its slot kept. Databases whose names differ only in what a slot name cannot hold (`orders-eu`, `orders_eu`)
//! get default slots of their own. And a table that someone added to the publication `outbox_wal` is not taken for
//! the outbox: its inserts are ignored and the stream goes on.
#![cfg(feature = "wal")]

mod bad_input_support;
mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use outbox_core::Outbox;
use outbox_tests::pg::TestDatabase;
use outbox_tests::process::OutboxProcess;
use uuid::Uuid;

/// Waits (at most 60 s) until the sink holds `n` events; `relay` is the one expected to write them.
fn wait_for_lines(sink: &Path, n: usize, relay: &OutboxProcess) -> Vec<Uuid> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ids = common::written(sink);
        if ids.len() >= n {
            return ids;
        }
        assert!(
            Instant::now() < deadline,
            "the relay wrote {} of {n} events within 60 s:\n{}",
            ids.len(),
            relay.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn outbox(url: &str, args: &[&str]) -> std::process::Output {
    outbox_tests::outbox!().database(url).run(args)
}

/// A new directory for the sinks, removed when dropped: a test keeps it until its relays are stopped.
fn sink_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("outbox-wal-{name}-")).tempdir().unwrap()
}

fn sink(dir: &Path, name: &str) -> (PathBuf, String) {
    let path = dir.join(format!("{name}.jsonl"));
    let url = format!("file:{}", path.display());
    (path, url)
}

/// Switches `db` to the WAL source.
fn wal_enable(db: &TestDatabase) {
    let enabled = outbox(&db.url, &["wal", "enable"]);
    assert!(enabled.status.success(), "{}", String::from_utf8_lossy(&enabled.stderr));
}

/// A migrated database named `name` (quoted: any name PostgreSQL takes) on the server of `on`.
async fn database_named(on: &TestDatabase, name: &str) -> TestDatabase {
    sqlx::raw_sql(&format!("CREATE DATABASE \"{name}\"")).execute(&on.pool).await.expect("CREATE DATABASE");
    let mut url = url::Url::parse(&on.url).unwrap();
    url.set_path(&format!("/{name}"));
    let url = url.to_string();
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(5).connect(&url).await.expect("connect");
    outbox_core::migrate(&pool).await.expect("outbox migrations");
    TestDatabase { pool, url, name: name.to_owned() }
}

/// The slot `db`'s WAL source records, once it exists (the relay created and recorded it).
async fn recorded_slot(db: &TestDatabase) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let slot: Option<String> = sqlx::query_scalar(
            "SELECT c.wal_slot FROM outbox_control c
               JOIN pg_replication_slots s ON s.slot_name = c.wal_slot AND s.database = current_database()",
        )
        .fetch_optional(&db.pool)
        .await
        .unwrap();
        if let Some(slot) = slot {
            return slot;
        }
        assert!(tokio::time::Instant::now() < deadline, "no slot recorded within 30 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The database the slot `slot` belongs to; `None` when there is no such slot.
async fn database_of(db: &TestDatabase, slot: &str) -> Option<String> {
    sqlx::query_scalar("SELECT database::text FROM pg_replication_slots WHERE slot_name = $1")
        .bind(slot)
        .fetch_optional(&db.pool)
        .await
        .unwrap()
}

/// Drops `slot` (stopping nothing: its relays are stopped) so that the shared test server keeps no WAL for it.
async fn drop_slot(db: &TestDatabase, slot: &str) {
    sqlx::query("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1")
        .bind(slot)
        .execute(&db.pool)
        .await
        .unwrap();
}

/// Two databases of one server, the same `--slot` for both: database A's relay creates the slot, stops, and
/// message-mode events wait in the slot. B's relay finds the slot of that name, which is A's: it exits 2 with one
/// line naming the slot and saying to pick another `--slot`, and leaves it alone (before, it dropped it as a slot
/// left unrecorded by a relay of its own, and A's events were lost with it). A's relay then publishes them.
#[tokio::test]
async fn a_relay_given_the_slot_of_another_database_exits_2_and_that_databases_events_are_still_published() {
    let a = TestDatabase::migrated().await;
    let b = TestDatabase::migrated().await;
    wal_enable(&a);
    wal_enable(&b);
    let slot = format!("outbox_shared_{}", &Uuid::now_v7().simple().to_string()[20..]);
    let dir = sink_dir("shared-slot");
    let (sink_a, sink_a_url) = sink(dir.path(), "a");
    let args_a = ["relay", "--source", "wal", "--slot", slot.as_str(), "--sink", sink_a_url.as_str()];
    let mut relay_a = bad_input_support::start(&a.url, &args_a, &[]);
    assert_eq!(recorded_slot(&a).await, slot);
    assert_eq!(relay_a.terminate().await.code(), Some(0));
    let waiting = [common::via_wal(&a, "a", 0).await, common::via_wal(&a, "a", 1).await];

    let (sink_b, sink_b_url) = sink(dir.path(), "b");
    let args_b = ["relay", "--source", "wal", "--slot", slot.as_str(), "--sink", sink_b_url.as_str()];
    let mut relay_b = bad_input_support::start(&b.url, &args_b, &[]);
    let status = relay_b.wait_for_exit(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(2), "{}", relay_b.stderr());
    let stderr = relay_b.stderr();
    let errors: Vec<&str> = stderr.lines().filter(|line| line.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 1, "exactly one error line: {stderr}");
    let error = errors[0];
    assert_eq!(stderr.lines().last(), Some(error), "the error is the last line: {stderr}");
    assert!(error.contains(&format!("`{slot}`")) && error.contains(&format!("`{}`", a.name)), "{error}");
    assert!(error.contains("--slot NAME"), "it says to pick another slot: {error}");
    assert!(common::written(&sink_b).is_empty(), "B published nothing");
    assert_eq!(database_of(&a, &slot).await.as_deref(), Some(a.name.as_str()), "A's slot is still there, A's");
    let recorded_b: Option<String> =
        sqlx::query_scalar("SELECT wal_slot FROM outbox_control").fetch_one(&b.pool).await.unwrap();
    assert_eq!(recorded_b, None, "B recorded no slot");

    let mut relay_a = bad_input_support::start(&a.url, &args_a, &[]);
    assert_eq!(wait_for_lines(&sink_a, 2, &relay_a), waiting, "the events A's slot kept");
    assert_eq!(relay_a.terminate().await.code(), Some(0));
    drop_slot(&a, &slot).await;
}

/// Database names that differ only in what a slot name cannot hold (`orders-eu` and `orders_eu`) had one default
/// slot: the second database's relay took the first's, unrecorded there, for a slot of its own left unrecorded,
/// and dropped it, with the first database's message-mode events. Each now gets a default slot of its own (the
/// exact name keeps the name it had), and both publish.
#[tokio::test]
async fn databases_whose_names_map_to_one_slot_name_get_default_slots_of_their_own_and_lose_nothing() {
    let server = TestDatabase::create().await;
    let tail = &Uuid::now_v7().simple().to_string()[20..];
    let a = database_named(&server, &format!("orders_eu_{tail}")).await;
    let b = database_named(&server, &format!("orders-eu_{tail}")).await;
    wal_enable(&a);
    wal_enable(&b);
    let dir = sink_dir("default-slots");
    let (sink_a, sink_a_url) = sink(dir.path(), "a");
    let args_a = ["relay", "--source", "wal", "--sink", sink_a_url.as_str()];
    let mut relay_a = bad_input_support::start(&a.url, &args_a, &[]);
    let slot_a = recorded_slot(&a).await;
    assert_eq!(slot_a, format!("outbox_events_orders_eu_{tail}"), "a name that is a slot name is kept as it was");
    assert_eq!(relay_a.terminate().await.code(), Some(0));
    let waiting = [common::via_wal(&a, "a", 0).await, common::via_wal(&a, "a", 1).await];

    let (sink_b, sink_b_url) = sink(dir.path(), "b");
    let mut relay_b = bad_input_support::start(&b.url, &["relay", "--source", "wal", "--sink", &sink_b_url], &[]);
    let slot_b = recorded_slot(&b).await;
    assert_ne!(slot_b, slot_a);
    assert!(slot_b.starts_with(&format!("outbox_events_orders_eu_{tail}_")), "{slot_b}");
    let of_b = common::via_wal(&b, "b", 0).await;
    assert_eq!(wait_for_lines(&sink_b, 1, &relay_b), [of_b]);
    assert_eq!(database_of(&a, &slot_a).await.as_deref(), Some(a.name.as_str()), "A's slot is still there, A's");

    let mut relay_a = bad_input_support::start(&a.url, &args_a, &[]);
    assert_eq!(wait_for_lines(&sink_a, 2, &relay_a), waiting, "the events A's slot kept");
    assert_eq!(relay_a.terminate().await.code(), Some(0));
    assert_eq!(relay_b.terminate().await.code(), Some(0));
    assert_eq!(common::written(&sink_b), [of_b], "nothing of A's through B");
    drop_slot(&a, &slot_a).await;
    drop_slot(&b, &slot_b).await;
}

/// A database whose name is not a slot name had, before default slots got their hash, the slot of its name in
/// slot characters (`Shop-1` read `outbox_events_shop_1`): a relay started without `--slot` after the upgrade
/// keeps reading the slot the table's WAL source records, with the message-mode events it kept, rather than
/// stopping because its default changed. A relay given another `--slot` is still refused, naming the recorded one.
#[tokio::test]
async fn a_relay_without_slot_keeps_reading_the_recorded_slot_when_its_default_changed() {
    let server = TestDatabase::create().await;
    let tail = &Uuid::now_v7().simple().to_string()[20..];
    let db = database_named(&server, &format!("Shop-{tail}")).await;
    wal_enable(&db);
    let legacy = format!("outbox_events_shop_{tail}");
    let dir = sink_dir("recorded-slot");
    let (sink, sink_url) = sink(dir.path(), "events");
    let mut relay =
        bad_input_support::start(&db.url, &["relay", "--source", "wal", "--slot", &legacy, "--sink", &sink_url], &[]);
    assert_eq!(recorded_slot(&db).await, legacy);
    assert_eq!(relay.terminate().await.code(), Some(0));
    let waiting = [common::via_wal(&db, "s", 0).await, common::via_wal(&db, "s", 1).await];

    let mut relay = bad_input_support::start(&db.url, &["relay", "--source", "wal", "--sink", &sink_url], &[]);
    assert_eq!(wait_for_lines(&sink, 2, &relay), waiting, "the events the recorded slot kept");
    assert_eq!(relay.terminate().await.code(), Some(0));
    assert!(relay.lines_with("WAL relay started").iter().any(|line| line.contains(&legacy)), "{}", relay.stderr());
    let slots: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_replication_slots WHERE database = current_database()")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(slots, 1, "no slot of the new default");

    let other = outbox(&db.url, &["relay", "--source", "wal", "--slot", "another_slot", "--sink", "stdout"]);
    assert_eq!(other.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&other.stderr);
    assert!(stderr.lines().last().unwrap_or_default().contains(&format!("--slot {legacy}")), "{stderr}");
    drop_slot(&db, &legacy).await;
}

/// Tables added to the publication by hand: one with a `bigint` id, one without an id, and an `outbox_events` of
/// another schema. Their inserts are ignored, also in the transactions of outbox events, which are published; the
/// stream goes on (before, the first such insert failed the session, again and again at the same position).
#[tokio::test]
async fn inserts_into_other_tables_of_the_publication_are_ignored_and_the_events_are_published() {
    let db = TestDatabase::migrated().await;
    wal_enable(&db);
    sqlx::raw_sql(
        "CREATE TABLE other_ids (id bigint);
         CREATE TABLE no_id (note text);
         CREATE SCHEMA elsewhere;
         CREATE TABLE elsewhere.outbox_events (id uuid);
         ALTER PUBLICATION outbox_wal ADD TABLE other_ids, no_id, elsewhere.outbox_events;",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let dir = sink_dir("other-tables");
    let (sink, sink_url) = sink(dir.path(), "events");
    let mut relay = bad_input_support::start(&db.url, &["relay", "--source", "wal", "--sink", &sink_url], &[]);
    let slot = recorded_slot(&db).await;

    let decoy = Uuid::now_v7();
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query("INSERT INTO other_ids VALUES (1)").execute(&mut *tx).await.unwrap();
    sqlx::query("INSERT INTO no_id VALUES ('x')").execute(&mut *tx).await.unwrap();
    sqlx::query("INSERT INTO elsewhere.outbox_events VALUES ($1)").bind(decoy).execute(&mut *tx).await.unwrap();
    let row = Outbox::new().enqueue(&mut tx, &common::event("t", 0)).await.unwrap();
    tx.commit().await.unwrap();
    let message = common::via_wal(&db, "t", 1).await;
    sqlx::raw_sql("INSERT INTO other_ids VALUES (2); INSERT INTO no_id VALUES ('y')").execute(&db.pool).await.unwrap();
    let later = common::enqueue(&db.pool, &[common::event("t", 2)]).await;

    let expected = [vec![row, message], later].concat();
    assert_eq!(wait_for_lines(&sink, 3, &relay), expected);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(common::written(&sink), expected, "nothing else, nothing twice");
    assert!(relay.is_running(), "{}", relay.stderr());
    assert!(relay.lines_with("replication session failed").is_empty(), "the stream went on: {}", relay.stderr());
    let ignored = relay.lines_with("also publishes this table");
    for table in ["public.other_ids", "public.no_id", "elsewhere.outbox_events"] {
        assert!(ignored.iter().any(|line| line.contains(table)), "a warning names {table}: {ignored:?}");
    }
    assert_eq!(common::count(&db.pool, "published").await, 2, "both rows settled");
    assert_eq!(relay.terminate().await.code(), Some(0));
    drop_slot(&db, &slot).await;
}

/// Two relays started at once with different slot names on one table: both create their slot, the first to record
/// it streams, and the other drops its own and stops with one line naming the recorded slot (exit 2); every event
/// is published once (before, both recorded theirs, the last one winning, and both streamed every event).
#[tokio::test]
async fn of_two_relays_that_create_slots_of_different_names_at_once_only_the_first_to_record_streams() {
    let db = TestDatabase::migrated().await;
    wal_enable(&db);
    let dir = sink_dir("two-slots");
    // Both creations are held back until it ends, past both relays' look at the record.
    let running = common::holding_slot_creation(&db.pool).await;
    let (path_a, url_a) = sink(dir.path(), "a");
    let (path_b, url_b) = sink(dir.path(), "b");
    let mut a =
        bad_input_support::start(&db.url, &["relay", "--source", "wal", "--sink", &url_a, "--slot", "two_a"], &[]);
    let mut b =
        bad_input_support::start(&db.url, &["relay", "--source", "wal", "--sink", &url_b, "--slot", "two_b"], &[]);
    common::wait_until_slots_are_listed(&db, &["two_a", "two_b"]).await;
    running.commit().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while a.is_running() && b.is_running() {
        assert!(Instant::now() < deadline, "neither relay stopped within 30 s:\n{}\n{}", a.stderr(), b.stderr());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (mut streaming, mut stopped, streaming_sink) = if a.is_running() { (a, b, path_a) } else { (b, a, path_b) };
    let exit = stopped.wait_for_exit(Duration::from_secs(10)).await;
    assert_eq!(exit.code(), Some(2), "{}", stopped.stderr());
    let last = stopped.stderr().lines().last().unwrap_or_default().to_owned();
    assert!(last.contains("reads the replication slot"), "{last}");
    common::wait_for_the_slot(&db).await;
    let id = common::via_wal(&db, "once", 0).await;
    assert_eq!(wait_for_lines(&streaming_sink, 1, &streaming), [id]);
    let slots: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_replication_slots WHERE slot_name IN ('two_a', 'two_b')")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(slots, 1, "the stopped relay dropped its slot");
    assert_eq!(streaming.terminate().await.code(), Some(0));
}
