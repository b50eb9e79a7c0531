//! The write-ahead-log source (`outbox relay --source wal`), as real `outbox` processes on a real PostgreSQL
//! started with `wal_level = logical`: the rows pending when the slot is created are published first, once; then
//! the stream publishes in commit order; a restarted relay resumes without losing or re-publishing settled events;
//! a failing event retried in place waits as long as the receiver's `Retry-After` asks, up to the backoff's
//! maximum; and a relay of the source that does not publish the table, or of a role without the REPLICATION
//! privilege, refuses to start with one line.
#![cfg(feature = "wal")]

mod bad_input_support;
mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_core::Outbox;
use outbox_tests::pg::TestDatabase;
use uuid::Uuid;

fn wait_for_lines(sink: &Path, n: usize) -> Vec<Uuid> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ids = common::written(sink);
        if ids.len() >= n {
            return ids;
        }
        assert!(Instant::now() < deadline, "the relay wrote {} of {n} events within 60 s", ids.len());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn outbox(url: &str, args: &[&str]) -> std::process::Output {
    outbox_tests::outbox!().database(url).run(args)
}

/// A file sink's path in a new directory, and the directory, removed when dropped: a test keeps it until its
/// relays are stopped and the file is read.
fn sink_in(name: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::Builder::new().prefix(&format!("outbox-wal-{name}-")).tempdir().unwrap();
    let sink = dir.path().join("events.jsonl");
    (dir, sink)
}

#[tokio::test]
async fn pending_rows_are_published_first_once_then_the_stream_in_commit_order_and_a_restart_loses_nothing() {
    let db = TestDatabase::migrated().await;
    let before: Vec<Uuid> = common::enqueue(&db.pool, &[common::event("a", 0), common::event("a", 1)]).await;
    let enabled = outbox(&db.url, &["wal", "enable"]);
    assert!(enabled.status.success(), "{}", String::from_utf8_lossy(&enabled.stderr));

    let (_sink_dir, sink) = sink_in("order");
    let sink_url = format!("file:{}", sink.display());
    let args = ["relay", "--source", "wal", "--sink", sink_url.as_str()];
    let mut relay = bad_input_support::start(&db.url, &args, &[]);
    assert_eq!(wait_for_lines(&sink, 2), before, "the rows pending at the slot's creation, in seq order");

    // Two transactions of one aggregate that commit in the reverse of their inserts.
    let mut first = db.pool.begin().await.unwrap();
    let inserted_first = Outbox::new().enqueue(&mut first, &common::event("b", 0)).await.unwrap();
    let mut second = db.pool.begin().await.unwrap();
    let inserted_second = Outbox::new().enqueue(&mut second, &common::event("b", 1)).await.unwrap();
    second.commit().await.unwrap();
    first.commit().await.unwrap();
    let ids = wait_for_lines(&sink, 4);
    assert_eq!(ids[2..], [inserted_second, inserted_first], "published in commit order");

    assert_eq!(relay.terminate().await.code(), Some(0), "SIGTERM stops the WAL relay gracefully");
    let during_stop = common::enqueue(&db.pool, &[common::event("c", 0), common::event("c", 1)]).await;
    let mut relay = bad_input_support::start(&db.url, &args, &[]);
    let ids = wait_for_lines(&sink, 6);
    assert_eq!(ids[4..], during_stop, "the restarted relay resumes the stream where it was acknowledged");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(common::written(&sink).len(), 6, "nothing published twice: {:?}", common::written(&sink));
    assert_eq!(common::count(&db.pool, "published").await, 6, "every row settled as published");
    assert_eq!(relay.terminate().await.code(), Some(0));

    let disabled = outbox(&db.url, &["wal", "disable"]);
    assert!(disabled.status.success(), "{}", String::from_utf8_lossy(&disabled.stderr));
    assert!(String::from_utf8_lossy(&disabled.stdout).contains("(the slot is dropped"), "it says so");
    assert!(String::from_utf8_lossy(&disabled.stderr).is_empty(), "{}", String::from_utf8_lossy(&disabled.stderr));
    let slots: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_replication_slots WHERE database = current_database()")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(slots, 0, "`outbox wal disable` drops the slot");
}

/// Switching back with no slot to drop (no WAL relay ran, or `outbox wal drop-slot` dropped it) says nothing of a
/// slot; `drop-slot` then says there is none.
#[tokio::test]
async fn wal_disable_without_a_slot_does_not_claim_to_drop_one() {
    let db = TestDatabase::migrated().await;
    assert!(outbox(&db.url, &["wal", "enable"]).status.success());
    let disabled = outbox(&db.url, &["wal", "disable"]);
    assert!(disabled.status.success(), "{}", String::from_utf8_lossy(&disabled.stderr));
    assert_eq!(
        String::from_utf8_lossy(&disabled.stdout).trim(),
        "the table source publishes the table now: start `outbox relay`"
    );
    let dropped = outbox(&db.url, &["wal", "drop-slot"]);
    assert!(dropped.status.success(), "{}", String::from_utf8_lossy(&dropped.stderr));
    assert_eq!(String::from_utf8_lossy(&dropped.stdout).trim(), "no slot to drop");
}

/// A slot that exists without being recorded was made by a relay that stopped before recording it (killed between
/// the two): the rows pending at its snapshot are known to nobody. The next relay drops it and makes it again, so
/// those rows are published, not skipped.
#[tokio::test]
async fn a_slot_left_unrecorded_by_a_relay_that_stopped_is_made_again_and_the_pending_rows_are_published() {
    let db = TestDatabase::migrated().await;
    let pending = common::enqueue(&db.pool, &[common::event("o", 0), common::event("o", 1)]).await;
    assert!(outbox(&db.url, &["wal", "enable"]).status.success());
    sqlx::query("SELECT pg_create_logical_replication_slot('orphaned', 'pgoutput')").execute(&db.pool).await.unwrap();
    let (_sink_dir, sink) = sink_in("orphaned");
    let sink_url = format!("file:{}", sink.display());
    let args = ["relay", "--source", "wal", "--slot", "orphaned", "--sink", sink_url.as_str()];
    let mut relay = bad_input_support::start(&db.url, &args, &[]);
    assert_eq!(wait_for_lines(&sink, 2), pending, "the rows pending before the slot was recorded");
    let later = common::enqueue(&db.pool, &[common::event("o", 2)]).await;
    assert_eq!(wait_for_lines(&sink, 3)[2..], later);
    assert_eq!(relay.terminate().await.code(), Some(0));
    assert!(relay.stderr().contains("never recorded"), "{}", relay.stderr());

    // A relay started with another slot than the recorded one refuses, naming both.
    let other = outbox(&db.url, &["relay", "--source", "wal", "--slot", "another", "--sink", "stdout"]);
    assert_eq!(other.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&other.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.contains("`orphaned`") && last.contains("--slot orphaned"), "{stderr}");
    assert_eq!(slots_of(&db).await, 1, "no second slot");
}

/// More aggregates handed over to the table's retry path than one run reads (200), the first 200 held by failed
/// events: the runs take them in turns, so an aggregate after them is still published.
#[tokio::test]
async fn aggregates_handed_over_after_two_hundred_failed_ones_are_still_published() {
    let db = TestDatabase::migrated().await;
    let (_sink_dir, sink, mut relay) = wal_relay_with_its_slot(&db, "turns").await;
    assert_eq!(relay.terminate().await.code(), Some(0));
    sqlx::raw_sql(
        "INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, status, attempts, last_error)
         SELECT gen_random_uuid(), 'test', 'a-' || lpad(g::text, 3, '0'), 'test.happened', '{}', 'failed', 1, 'refused'
           FROM generate_series(0, 199) g;
         INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, attempts)
         VALUES ('0190c3a1-0000-7000-8000-00000000000a', 'test', 'z', 'test.happened', '{\"n\":0}', 1);",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let sink_url = format!("file:{}", sink.display());
    let mut relay = bad_input_support::start(&db.url, &["relay", "--source", "wal", "--sink", &sink_url], &[]);
    assert_eq!(wait_for_lines(&sink, 1), ["0190c3a1-0000-7000-8000-00000000000a".parse::<Uuid>().unwrap()]);
    assert_eq!(relay.terminate().await.code(), Some(0));
}

#[tokio::test]
async fn a_relay_of_the_source_that_does_not_publish_the_table_exits_2_with_one_line_saying_how_to_switch() {
    let db = TestDatabase::migrated().await;
    let wal = outbox(&db.url, &["relay", "--source", "wal", "--sink", "stdout"]);
    assert_eq!(wal.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&wal.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.starts_with("error: ") && last.contains("`outbox wal enable`"), "{stderr}");

    assert!(outbox(&db.url, &["wal", "enable"]).status.success());
    let table = outbox(&db.url, &["relay", "--sink", "stdout"]);
    assert_eq!(table.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&table.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.starts_with("error: ") && last.contains("`outbox wal disable`"), "{stderr}");
}

#[tokio::test]
async fn wal_enable_is_refused_while_a_table_relay_is_live() {
    let db = TestDatabase::migrated().await;
    let mut relay = bad_input_support::start(&db.url, &["relay", "--sink", "stdout"], &[]);
    common::wait_until(Duration::from_secs(30), "the table relay joined", || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM outbox_relays").fetch_one(&db.pool).await.unwrap() > 0
    })
    .await;
    let refused = outbox(&db.url, &["wal", "enable"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("table relay(s) are live"));
    let source: String = sqlx::query_scalar("SELECT source FROM outbox_control").fetch_one(&db.pool).await.unwrap();
    assert_eq!(source, "table", "a refused switch changes nothing");
    assert_eq!(relay.terminate().await.code(), Some(0));
}

#[tokio::test]
async fn the_wal_tests_run_on_the_postgresql_version_asked_for_and_at_least_14() {
    let db = TestDatabase::migrated().await;
    let version: i32 =
        sqlx::query_scalar("SELECT current_setting('server_version_num')::int4").fetch_one(&db.pool).await.unwrap();
    assert!(version >= 140_000, "the WAL source needs PostgreSQL 14 or later, the tests run on {version}");
    // scripts/test-all.sh runs these tests a second time on PostgreSQL 14 and says so here.
    if let Ok(major) = std::env::var("OUTBOX_TEST_POSTGRES_MAJOR") {
        assert_eq!(version / 10_000, major.parse::<i32>().unwrap(), "the server is not the PostgreSQL asked for");
    }
}

#[tokio::test]
async fn without_wal_level_logical_the_wal_relay_exits_2_with_one_line_naming_the_setting() {
    let server = outbox_tests::pg::PrivateServer::start_with("-c wal_level=replica")
        .unwrap_or_else(|problem| panic!("no private PostgreSQL: {problem}"));
    let db = TestDatabase::create_on(&server.url).await;
    outbox_core::migrate(&db.pool).await.expect("the migrations run without logical decoding too");
    let wal = outbox(&db.url, &["relay", "--source", "wal", "--sink", "stdout"]);
    assert_eq!(wal.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&wal.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.starts_with("error: ") && last.contains("wal_level is `replica`"), "{stderr}");
    assert!(last.contains("ALTER SYSTEM SET wal_level = logical"), "it says what to run: {last}");
    let slots: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_replication_slots").fetch_one(&db.pool).await.unwrap();
    assert_eq!(slots, 0, "a refused start creates nothing");
}

#[tokio::test]
async fn without_the_replication_privilege_the_wal_relay_exits_2_with_one_line_naming_it_and_publishes_nothing() {
    let db = TestDatabase::migrated().await;
    assert!(outbox(&db.url, &["wal", "enable"]).status.success());
    let pending = common::enqueue(&db.pool, &[common::event("r", 0)]).await;
    // The relay role's grants and a login, but neither REPLICATION nor superuser. Roles belong to the whole
    // server: a name of this test's own.
    let role = format!("outbox_wal_relay_{}", Uuid::now_v7().simple());
    sqlx::raw_sql(&outbox_tests::pg::relay_role_sql(&role)).execute(&db.pool).await.unwrap();
    sqlx::raw_sql(&format!("ALTER ROLE {role} LOGIN NOREPLICATION NOSUPERUSER")).execute(&db.pool).await.unwrap();
    let mut url = url::Url::parse(&db.url).unwrap();
    url.set_username(&role).unwrap();

    let (_sink_dir, sink) = sink_in("no-replication");
    let sink_url = format!("file:{}", sink.display());
    let refused = outbox(url.as_str(), &["relay", "--source", "wal", "--sink", &sink_url]);
    assert_eq!(refused.status.code(), Some(2), "{}", String::from_utf8_lossy(&refused.stderr));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    let errors: Vec<&str> = stderr.lines().filter(|line| line.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 1, "exactly one error line: {stderr}");
    let error = errors[0];
    assert_eq!(stderr.lines().last(), Some(error), "the error is the last line: {stderr}");
    assert!(error.contains(&format!("role `{role}` has no REPLICATION privilege")), "it names the privilege: {error}");
    assert!(error.contains(&format!("ALTER ROLE \"{role}\" REPLICATION")), "it says what to run: {error}");
    assert!(String::from_utf8_lossy(&refused.stdout).is_empty(), "nothing on stdout");

    assert!(common::written(&sink).is_empty(), "nothing published");
    assert_eq!(common::status_of(&db.pool, pending[0]).await, "pending", "the pending row stays pending");
    assert_eq!(slots_of(&db).await, 0, "a refused start creates no slot");

    // What the line says to run, with the WAL source's grants of migrations/roles: the same role then publishes.
    sqlx::raw_sql(&format!("ALTER ROLE \"{role}\" REPLICATION")).execute(&db.pool).await.unwrap();
    sqlx::raw_sql(&outbox_tests::pg::wal_relay_grants_sql(&role)).execute(&db.pool).await.unwrap();
    let mut relay = bad_input_support::start(url.as_str(), &["relay", "--source", "wal", "--sink", &sink_url], &[]);
    assert_eq!(wait_for_lines(&sink, 1), pending, "with the privilege the relay publishes: {}", relay.stderr());
    assert_eq!(relay.terminate().await.code(), Some(0));
}

#[tokio::test]
async fn wal_drop_slot_and_wal_disable_are_refused_while_a_wal_relay_reads_the_slot() {
    let db = TestDatabase::migrated().await;
    assert!(outbox(&db.url, &["wal", "enable"]).status.success());
    let mut relay = bad_input_support::start(&db.url, &["relay", "--source", "wal", "--sink", "stdout"], &[]);
    common::wait_for_the_slot(&db).await;
    for command in ["drop-slot", "disable"] {
        let refused = outbox(&db.url, &["wal", command]);
        assert_eq!(refused.status.code(), Some(1), "`outbox wal {command}` while the slot is read");
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(stderr.contains("the WAL relay is reading slot") && stderr.contains("stop it"), "{stderr}");
        assert!(String::from_utf8_lossy(&refused.stdout).is_empty(), "it claims nothing was done");
    }
    let (source, slots): (String, i64) = sqlx::query_as(
        "SELECT c.source, (SELECT count(*) FROM pg_replication_slots s WHERE s.slot_name = c.wal_slot)
           FROM outbox_control c",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((source.as_str(), slots), ("wal", 1), "a refused removal changes nothing");
    assert_eq!(relay.terminate().await.code(), Some(0));
}

#[tokio::test]
async fn a_table_relay_that_registers_while_wal_enable_commits_waits_for_it_and_refuses_to_start() {
    let db = TestDatabase::migrated().await;
    // `outbox wal enable` held just before its commit: it took the switch lock and found no table relay live.
    let mut switch = db.pool.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(outbox_core::store::SOURCE_SWITCH_LOCK)
        .execute(&mut *switch)
        .await
        .unwrap();
    let switched = sqlx::query(
        "UPDATE outbox_control SET source = 'wal'
          WHERE id AND NOT EXISTS (SELECT 1 FROM outbox_relays WHERE expires_at > now())",
    )
    .execute(&mut *switch)
    .await
    .unwrap();
    assert_eq!(switched.rows_affected(), 1);

    let mut relay = bad_input_support::start(&db.url, &["relay", "--sink", "stdout"], &[]);
    common::wait_until(Duration::from_secs(30), "the table relay registered", || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM outbox_relays").fetch_one(&db.pool).await.unwrap() > 0
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(relay.is_running(), "the relay waits for the switch in progress: {}", relay.stderr());
    assert!(relay.lines_with("relay started").is_empty(), "it has not started publishing: {}", relay.stderr());
    switch.commit().await.unwrap();

    let status = relay.wait_for_exit(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(2), "{}", relay.stderr());
    let stderr = relay.stderr();
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.starts_with("error: ") && last.contains("`outbox wal disable`"), "{stderr}");
}

#[tokio::test]
async fn a_wal_relay_that_starts_while_wal_disable_commits_waits_for_it_and_refuses_to_start_without_a_slot() {
    let db = TestDatabase::migrated().await;
    assert!(outbox(&db.url, &["wal", "enable"]).status.success());
    // `outbox wal disable` held just before its commit: it took the switch lock and switched back.
    let mut switch = db.pool.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(outbox_core::store::SOURCE_SWITCH_LOCK)
        .execute(&mut *switch)
        .await
        .unwrap();
    sqlx::query("UPDATE outbox_control SET source = 'table' WHERE id").execute(&mut *switch).await.unwrap();

    let mut relay = bad_input_support::start(&db.url, &["relay", "--source", "wal", "--sink", "stdout"], &[]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(relay.is_running(), "the relay waits for the switch in progress: {}", relay.stderr());
    switch.commit().await.unwrap();

    let status = relay.wait_for_exit(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(2), "{}", relay.stderr());
    let stderr = relay.stderr();
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.starts_with("error: ") && last.contains("`outbox wal enable`"), "{stderr}");
    assert_eq!(slots_of(&db).await, 0, "a slot was created for a source that is off");
}

#[tokio::test]
async fn a_wal_relay_that_leads_before_it_streams_blocks_wal_disable_and_drops_a_slot_created_after_a_switch_back() {
    let db = TestDatabase::migrated().await;
    assert!(outbox(&db.url, &["wal", "enable"]).status.success());
    let mut first = bad_input_support::start(&db.url, &["relay", "--source", "wal", "--sink", "stdout"], &[]);
    common::wait_for_the_slot(&db).await;
    assert_eq!(first.terminate().await.code(), Some(0));
    let slot: String = sqlx::query_scalar("SELECT wal_slot FROM outbox_control").fetch_one(&db.pool).await.unwrap();

    // This session leads the slot, as a relay does from before it creates or streams it: a second relay stands by.
    let mut leader = db.pool.acquire().await.unwrap();
    sqlx::query("SELECT pg_advisory_lock($1, hashtext($2))")
        .bind(outbox_core::store::WAL_LEADER_LOCK_CLASS)
        .bind(&slot)
        .execute(&mut *leader)
        .await
        .unwrap();
    let mut standby = bad_input_support::start(&db.url, &["relay", "--source", "wal", "--sink", "stdout"], &[]);
    common::wait_until(Duration::from_secs(30), "the relay stands by", || async {
        !standby.lines_with("standing by").is_empty()
    })
    .await;
    let refused = outbox(&db.url, &["wal", "disable"]);
    assert_eq!(refused.status.code(), Some(1), "`outbox wal disable` while a relay leads the slot");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("the WAL relay is reading slot"), "{stderr}");
    assert_eq!(slots_of(&db).await, 1, "a refused disable changes nothing");

    // A switch back by hand between the standby's checks and its takeover: the slot it then creates is not
    // recorded, and it drops it and stops.
    sqlx::query("SELECT pg_drop_replication_slot($1)").bind(&slot).execute(&db.pool).await.unwrap();
    sqlx::query("UPDATE outbox_control SET source = 'table', wal_slot = NULL WHERE id")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query("SELECT pg_advisory_unlock($1, hashtext($2))")
        .bind(outbox_core::store::WAL_LEADER_LOCK_CLASS)
        .bind(&slot)
        .execute(&mut *leader)
        .await
        .unwrap();
    let status = standby.wait_for_exit(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(2), "{}", standby.stderr());
    let stderr = standby.stderr();
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.starts_with("error: ") && last.contains("`outbox wal enable`"), "{stderr}");
    common::wait_until(Duration::from_secs(10), "the slot it created is dropped", || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1")
            .bind(&slot)
            .fetch_one(&db.pool)
            .await
            .unwrap()
            == 0
    })
    .await;
}

/// The replication slots of `db`'s database.
async fn slots_of(db: &TestDatabase) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM pg_replication_slots WHERE database = current_database()")
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// `outbox wal enable`, then a WAL relay (defaults) into a file sink in a new directory, once it has recorded its
/// slot: the sink's directory (removed when dropped), the sink and the relay.
async fn wal_relay_with_its_slot(
    db: &TestDatabase,
    name: &str,
) -> (tempfile::TempDir, std::path::PathBuf, outbox_tests::process::OutboxProcess) {
    assert!(outbox(&db.url, &["wal", "enable"]).status.success());
    let (sink_dir, sink) = sink_in(name);
    let sink_url = format!("file:{}", sink.display());
    let relay = bad_input_support::start(&db.url, &["relay", "--source", "wal", "--sink", &sink_url], &[]);
    common::wait_for_the_slot(db).await;
    (sink_dir, sink, relay)
}

/// An event without sensitive fields.
#[derive(serde::Serialize)]
struct Plain {
    n: u32,
}

impl outbox_core::OutboxEvent for Plain {
    const EVENT_TYPE: &'static str = "plain.happened";
    const AGGREGATE_TYPE: &'static str = "plain";
    const VERSION: u32 = 1;

    fn aggregate_id(&self) -> String {
        "p".to_owned()
    }
}

async fn rows(db: &TestDatabase) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM outbox_events").fetch_one(&db.pool).await.unwrap()
}

#[tokio::test]
async fn message_mode_events_publish_in_commit_order_with_no_table_row_and_never_when_rolled_back() {
    let db = TestDatabase::migrated().await;
    let mut tx = db.pool.begin().await.unwrap();
    let refused = Outbox::new().via_wal().enqueue(&mut tx, &common::event("early", 0)).await;
    assert!(matches!(refused, Err(outbox_core::Error::WalSourceOff)), "no slot yet: {refused:?}");
    tx.commit().await.expect("the refused enqueue wrote nothing and left the transaction usable");

    assert!(outbox(&db.url, &["wal", "enable"]).status.success());
    let (_sink_dir, sink) = sink_in("messages");
    let sink_url = format!("file:{}", sink.display());
    let args = ["relay", "--source", "wal", "--sink", sink_url.as_str()];
    let mut relay = bad_input_support::start(&db.url, &args, &[]);
    common::wait_for_the_slot(&db).await;

    let mut first = db.pool.begin().await.unwrap();
    let emitted_first = Outbox::new().via_wal().enqueue(&mut first, &common::event("m", 0)).await.unwrap();
    let mut rolled_back = db.pool.begin().await.unwrap();
    let never = Outbox::new().via_wal().enqueue(&mut rolled_back, &common::event("m", 9)).await.unwrap();
    let mut second = db.pool.begin().await.unwrap();
    let emitted_second = Outbox::new().via_wal().enqueue(&mut second, &common::event("m", 1)).await.unwrap();
    second.commit().await.unwrap();
    rolled_back.rollback().await.unwrap();
    first.commit().await.unwrap();
    let batch = {
        let mut tx = db.pool.begin().await.unwrap();
        let events = [common::event("n", 0), common::event("n", 1)];
        let ids = Outbox::new().via_wal().enqueue_all(&mut tx, &events).await.unwrap();
        tx.commit().await.unwrap();
        ids
    };
    let ids = wait_for_lines(&sink, 4);
    let of =
        |ids: &[Uuid], aggregate: &[Uuid]| ids.iter().filter(|id| aggregate.contains(id)).copied().collect::<Vec<_>>();
    assert_eq!(of(&ids, &[emitted_first, emitted_second]), [emitted_second, emitted_first], "in commit order");
    assert_eq!(of(&ids, &batch), batch, "a batch in its order");
    let line: serde_json::Value = std::fs::read_to_string(&sink)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .find(|line| line["id"] == emitted_second.to_string())
        .unwrap();
    assert_eq!((line["type"].as_str(), line["aggregate"]["id"].as_str()), (Some("test.happened"), Some("m")));
    assert_eq!(line["payload"]["n"], 1, "the payload as enqueued: {line}");
    assert_eq!(rows(&db).await, 0, "a message-mode event has no table row");

    assert_eq!(relay.terminate().await.code(), Some(0));
    let while_stopped = [common::via_wal(&db, "m", 2).await, common::via_wal(&db, "m", 3).await];
    let mut relay = bad_input_support::start(&db.url, &args, &[]);
    let ids = wait_for_lines(&sink, 6);
    assert_eq!(of(&ids, &while_stopped), while_stopped, "the slot kept what was enqueued while the relay was stopped");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(common::written(&sink).len(), 6, "nothing twice: {:?}", common::written(&sink));
    assert!(!common::written(&sink).contains(&never), "the rolled-back transaction's event is never published");
    assert_eq!(relay.terminate().await.code(), Some(0));
}

#[tokio::test]
async fn switching_back_to_the_table_moves_the_unpublished_message_mode_events_to_pending_rows() {
    let db = TestDatabase::migrated().await;
    let (_sink_dir, sink, mut relay) = wal_relay_with_its_slot(&db, "switch-back").await;
    let published = common::via_wal(&db, "s", 0).await;
    assert_eq!(wait_for_lines(&sink, 1), [published]);
    assert_eq!(relay.terminate().await.code(), Some(0));

    // Enqueued after the WAL relay stopped: only the slot holds them.
    let unpublished = [common::via_wal(&db, "s", 1).await, common::via_wal(&db, "s", 2).await];
    let disabled = outbox(&db.url, &["wal", "disable"]);
    assert!(disabled.status.success(), "{}", String::from_utf8_lossy(&disabled.stderr));
    let said = String::from_utf8_lossy(&disabled.stdout);
    assert!(said.contains("2 unpublished message-mode events are now pending rows"), "it says what it moved: {said}");
    let pending: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM outbox_events WHERE status = 'pending' ORDER BY seq")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(pending, unpublished, "the slot's unpublished events are pending rows, in order");
    let mut tx = db.pool.begin().await.unwrap();
    let refused = Outbox::new().via_wal().enqueue(&mut tx, &common::event("s", 3)).await;
    assert!(matches!(refused, Err(outbox_core::Error::WalSourceOff)), "no slot any more: {refused:?}");
    tx.rollback().await.unwrap();

    let sink_url = format!("file:{}", sink.display());
    let mut relay = bad_input_support::start(&db.url, &["relay", "--sink", &sink_url], &[]);
    let ids = wait_for_lines(&sink, 3);
    assert_eq!(ids[1..], unpublished, "the table relay publishes them");
    assert_eq!(relay.terminate().await.code(), Some(0));
}

/// Dropping a slot is not transactional: `wal disable` commits the slot's message-mode events as table rows before
/// it drops the slot, so a failure after the drop (here the step that forgets the slot, refused by a trigger)
/// loses none of them, and the command run again finishes the switch.
#[tokio::test]
async fn wal_disable_that_fails_after_dropping_the_slot_keeps_the_moved_events_and_finishes_when_run_again() {
    let db = TestDatabase::migrated().await;
    let (_sink_dir, _sink, mut relay) = wal_relay_with_its_slot(&db, "drop-fails").await;
    assert_eq!(relay.terminate().await.code(), Some(0));
    let unpublished = [common::via_wal(&db, "f", 0).await, common::via_wal(&db, "f", 1).await];
    sqlx::raw_sql(
        "CREATE FUNCTION refuse_forgetting() RETURNS trigger LANGUAGE plpgsql AS
           $$ BEGIN RAISE EXCEPTION 'forgetting the slot refused by the test'; END $$;
         CREATE TRIGGER refuse_forgetting BEFORE UPDATE ON outbox_control FOR EACH ROW
           WHEN (OLD.wal_slot IS NOT NULL AND NEW.wal_slot IS NULL) EXECUTE FUNCTION refuse_forgetting();",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let failed = outbox(&db.url, &["wal", "disable"]);
    assert!(!failed.status.success(), "the switch failed: {}", String::from_utf8_lossy(&failed.stdout));
    assert!(String::from_utf8_lossy(&failed.stderr).contains("refused by the test"));
    let pending: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM outbox_events WHERE status = 'pending' ORDER BY seq")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(pending, unpublished, "the slot's events are rows, whether or not the slot is still there");

    sqlx::raw_sql("DROP TRIGGER refuse_forgetting ON outbox_control").execute(&db.pool).await.unwrap();
    let disabled = outbox(&db.url, &["wal", "disable"]);
    assert!(disabled.status.success(), "{}", String::from_utf8_lossy(&disabled.stderr));
    assert_eq!(slots_of(&db).await, 0);
    let pending: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM outbox_events WHERE status = 'pending' ORDER BY seq")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(pending, unpublished, "each once");
}

#[tokio::test]
async fn producers_enqueueing_while_wal_disable_runs_lose_nothing_and_are_refused_once_it_returned() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;

    use sqlx::Connection;

    let db = TestDatabase::migrated().await;
    let (_sink_dir, _sink, mut relay) = wal_relay_with_its_slot(&db, "disable-race").await;
    assert_eq!(relay.terminate().await.code(), Some(0));

    // Two producers enqueue in a transaction of theirs, each on one session, which remembers its check of the slot
    // between transactions; two send their event with the commit (`OutboxTransaction`), on the pool's sessions.
    let returned = Arc::new(AtomicBool::new(false));
    let enqueued = Arc::new(AtomicUsize::new(0));
    let producers: Vec<_> = (0..4)
        .map(|producer| {
            let (pool, returned, enqueued) = (db.pool.clone(), returned.clone(), enqueued.clone());
            tokio::spawn(async move {
                let mut session = pool.acquire().await.unwrap();
                let mut accepted = Vec::new();
                for n in 0.. {
                    let after = returned.load(Ordering::SeqCst);
                    let event = common::event(format!("p{producer}"), n);
                    let outcome = if producer % 2 == 0 {
                        let mut tx = session.begin().await.unwrap();
                        match Outbox::new().via_wal().enqueue(&mut tx, &event).await {
                            Ok(id) => tx.commit().await.map(|()| id).map_err(outbox_core::Error::from),
                            Err(error) => {
                                tx.rollback().await.unwrap();
                                Err(error)
                            }
                        }
                    } else {
                        let mut tx = Outbox::new().via_wal().begin(&pool).await.unwrap();
                        let id = tx.enqueue(&event).unwrap();
                        tx.commit().await.map(|_| id)
                    };
                    match outcome {
                        Ok(id) => {
                            assert!(!after, "an enqueue begun after `outbox wal disable` returned was accepted");
                            accepted.push(id);
                            enqueued.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(outbox_core::Error::WalSourceOff) if after => break,
                        Err(outbox_core::Error::WalSourceOff) => {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                        Err(error) => panic!("enqueue: {error}"),
                    }
                }
                accepted
            })
        })
        .collect();
    let started = Instant::now();
    while enqueued.load(Ordering::SeqCst) < 40 {
        assert!(started.elapsed() < Duration::from_secs(30), "the producers enqueued nothing within 30 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let url = db.url.clone();
    let disabled = tokio::task::spawn_blocking(move || outbox(&url, &["wal", "disable"])).await.unwrap();
    returned.store(true, Ordering::SeqCst);
    assert!(disabled.status.success(), "{}", String::from_utf8_lossy(&disabled.stderr));

    let mut accepted = Vec::new();
    for producer in producers {
        accepted.extend(producer.await.expect("a producer"));
    }
    assert!(accepted.len() >= 4, "the producers enqueued while the slot was there: {}", accepted.len());
    let mut pending: Vec<Uuid> =
        sqlx::query_scalar("SELECT id FROM outbox_events WHERE status = 'pending'").fetch_all(&db.pool).await.unwrap();
    pending.sort();
    accepted.sort();
    assert_eq!(pending, accepted, "every accepted event was moved to the table, and nothing else");
    let said = String::from_utf8_lossy(&disabled.stdout);
    assert!(said.contains(&format!("{} unpublished message-mode events", accepted.len())), "{said}");
}

#[tokio::test]
async fn a_closing_mark_left_by_a_command_that_died_does_not_refuse_producers() {
    let db = TestDatabase::migrated().await;
    let (_sink_dir, sink, mut relay) = wal_relay_with_its_slot(&db, "dead-mark").await;
    // What `outbox wal disable` leaves when it dies after marking the slot closing: the mark, and no session
    // holding the close lock.
    sqlx::query("UPDATE outbox_control SET wal_closing_at = now() WHERE id").execute(&db.pool).await.unwrap();
    let id = common::via_wal(&db, "d", 0).await;
    assert_eq!(wait_for_lines(&sink, 1), [id], "accepted and published");
    assert_eq!(relay.terminate().await.code(), Some(0));
}

#[tokio::test]
async fn a_message_mode_transaction_sends_its_events_with_the_commit_and_without_a_slot_rolls_back_whole() {
    let db = TestDatabase::migrated().await;
    sqlx::query("CREATE TABLE orders (id INT PRIMARY KEY)").execute(&db.pool).await.unwrap();
    let orders = || async { sqlx::query_scalar::<_, i32>("SELECT id FROM orders").fetch_all(&db.pool).await.unwrap() };

    // Events with a sensitive field are written with parameters before the `COMMIT`; others travel with it.
    for sensitive in [true, false] {
        let mut tx = Outbox::new().via_wal().begin(&db.pool).await.unwrap();
        sqlx::query("INSERT INTO orders VALUES (1)").execute(&mut *tx).await.unwrap();
        if sensitive {
            tx.enqueue(&common::event("t", 0)).unwrap();
        } else {
            tx.enqueue(&Plain { n: 0 }).unwrap();
        }
        let refused = tx.commit().await;
        assert!(matches!(refused, Err(outbox_core::Error::WalSourceOff)), "no slot yet: {refused:?}");
        assert!(orders().await.is_empty(), "the domain change is rolled back with the events");
    }

    let (_sink_dir, sink, mut relay) = wal_relay_with_its_slot(&db, "with-the-commit").await;
    let mut tx = Outbox::new().via_wal().begin(&db.pool).await.unwrap();
    sqlx::query("INSERT INTO orders VALUES (2)").execute(&mut *tx).await.unwrap();
    let first = tx.enqueue(&common::event("t", 1)).unwrap();
    let second = tx.enqueue(&common::event("t", 2)).unwrap();
    assert_eq!(tx.commit().await.unwrap(), [first, second]);
    assert_eq!(orders().await, [2]);
    assert_eq!(wait_for_lines(&sink, 2), [first, second], "published in order");
    let mut tx = Outbox::new().via_wal().begin(&db.pool).await.unwrap();
    sqlx::query("INSERT INTO orders VALUES (3)").execute(&mut *tx).await.unwrap();
    let plain = [tx.enqueue(&Plain { n: 1 }).unwrap(), tx.enqueue(&Plain { n: 2 }).unwrap()];
    assert_eq!(tx.commit().await.unwrap(), plain);
    assert_eq!(wait_for_lines(&sink, 4)[2..], plain, "published in order");
    assert_eq!(orders().await, [2, 3]);
    assert_eq!(rows(&db).await, 0, "no table row");
    assert_eq!(relay.terminate().await.code(), Some(0));
}

#[tokio::test]
async fn a_paused_wal_relay_publishes_no_row_and_no_message_until_resumed() {
    let db = TestDatabase::migrated().await;
    let (_sink_dir, sink, mut relay) = wal_relay_with_its_slot(&db, "paused").await;
    let before = common::enqueue(&db.pool, &[common::event("p", 0)]).await;
    assert_eq!(wait_for_lines(&sink, 1), before);

    let paused = outbox(&db.url, &["pause"]);
    assert!(paused.status.success(), "{}", String::from_utf8_lossy(&paused.stderr));
    let row = common::enqueue(&db.pool, &[common::event("p", 1)]).await;
    let message = common::via_wal(&db, "q", 0).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(common::written(&sink), before, "nothing is published while paused");

    assert!(outbox(&db.url, &["resume"]).status.success());
    let ids = wait_for_lines(&sink, 3);
    assert_eq!(ids[1..], [row[0], message], "published in commit order once resumed");
    assert_eq!(relay.terminate().await.code(), Some(0));
}

/// The WAL relay does the table relay's upkeep too: `--retention 7d` deletes published rows past it, and the
/// backlog and pause gauges follow the database (before, retention deleted nothing and the gauges kept the values
/// of the relay's start).
#[tokio::test]
async fn a_wal_relay_deletes_published_rows_past_the_retention_and_its_gauges_follow_a_pause() {
    let db = TestDatabase::migrated().await;
    assert!(outbox(&db.url, &["wal", "enable"]).status.success());
    sqlx::query(
        "INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, status, created_at,
                                    published_at)
         SELECT gen_random_uuid(), 'test', 'old-' || i, 'test.happened', '{}', 'published',
                now() - interval '8 days', now() - interval '8 days'
           FROM generate_series(1, 500) i",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let (_sink_dir, sink) = sink_in("retention");
    let sink_url = format!("file:{}", sink.display());
    let metrics = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let args = ["relay", "--source", "wal", "--retention", "7d", "--sink", &sink_url, "--metrics-addr", &metrics];
    let mut relay = bad_input_support::start(&db.url, &args, &[]);
    common::wait_until(Duration::from_secs(30), "the old published rows are deleted", || async {
        rows(&db).await == 0
    })
    .await;
    assert!(outbox(&db.url, &["pause"]).status.success());
    let paused = format!("http://{metrics}/metrics");
    common::wait_until(Duration::from_secs(30), "the paused gauge shows the pause", || async {
        let scrape = async { reqwest::get(&paused).await.ok()?.text().await.ok() }.await;
        scrape.is_some_and(|text| {
            text.lines().any(|line| line.starts_with("outbox_relay_paused") && line.ends_with(" 1"))
        })
    })
    .await;
    assert_eq!(relay.terminate().await.code(), Some(0));
}

/// A migrated database published by the WAL source (`outbox wal enable`), on a PostgreSQL of its own started with
/// `settings`: for tests that change server-wide settings. The server stops when the first value is dropped.
async fn wal_database_on_private_server(settings: &str) -> (outbox_tests::pg::PrivateServer, TestDatabase) {
    let server = outbox_tests::pg::PrivateServer::start_with(settings)
        .unwrap_or_else(|problem| panic!("no private PostgreSQL: {problem}"));
    let db = TestDatabase::create_on(&server.url).await;
    outbox_core::migrate(&db.pool).await.unwrap();
    let enabled = outbox(&db.url, &["wal", "enable"]);
    assert!(enabled.status.success(), "{}", String::from_utf8_lossy(&enabled.stderr));
    (server, db)
}

#[tokio::test]
async fn a_row_whose_commit_is_streamed_before_other_sessions_see_it_is_published_once_they_do() {
    // With a synchronous standby named, a commit waits for it after its record is flushed: the stream has the
    // commit while the row is still invisible to every other session. A relay that read it then would find no row
    // and take it for one settled or deleted; this one waits until the row is visible.
    let (_server, db) = wal_database_on_private_server("").await;
    let (_sink_dir, sink) = sink_in("visibility");
    let sink_url = format!("file:{}", sink.display());
    let mut relay = bad_input_support::start(&db.url, &["relay", "--source", "wal", "--sink", sink_url.as_str()], &[]);
    common::wait_for_the_slot(&db).await;

    let reconfigure = |setting: &'static str| {
        let pool = db.pool.clone();
        async move {
            sqlx::query(setting).execute(&pool).await.unwrap();
            sqlx::query("SELECT pg_reload_conf()").execute(&pool).await.unwrap();
        }
    };
    reconfigure("ALTER SYSTEM SET synchronous_standby_names = 'outbox_test_no_such_standby'").await;
    // The new setting takes effect once the checkpointer has read it: until then a commit does not wait (its
    // event is published as usual), so commit events until one does.
    let waiting_for_the_standby = || async {
        sqlx::query_scalar::<_, bool>("SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE wait_event = 'SyncRep')")
            .fetch_one(&db.pool)
            .await
            .unwrap()
    };
    let mut earlier: Vec<Uuid> = Vec::new();
    let producer = loop {
        let pool = db.pool.clone();
        let n = u32::try_from(earlier.len()).unwrap();
        let producer = tokio::spawn(async move {
            let mut tx = pool.begin().await.unwrap();
            // The throwaway server commits asynchronously; this commit waits for the standby like a durable one.
            sqlx::query("SET LOCAL synchronous_commit = on").execute(&mut *tx).await.unwrap();
            let id = Outbox::new().enqueue(&mut tx, &common::event("v", n)).await.unwrap();
            tx.commit().await.unwrap();
            id
        });
        let waits = loop {
            if waiting_for_the_standby().await {
                break true;
            }
            if producer.is_finished() {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        if waits {
            break producer;
        }
        earlier.push(producer.await.unwrap());
        assert!(earlier.len() < 200, "no commit waited for the standby named in synchronous_standby_names");
    };
    assert_eq!(wait_for_lines(&sink, earlier.len()), earlier, "the commits before the setting took effect");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(common::written(&sink).len(), earlier.len(), "nothing is published before its transaction is visible");
    assert!(!producer.is_finished(), "the commit still waits");

    reconfigure("ALTER SYSTEM RESET synchronous_standby_names").await;
    let id = producer.await.unwrap();
    let ids = wait_for_lines(&sink, earlier.len() + 1);
    assert_eq!(ids[earlier.len()..], [id], "published once its transaction is visible");
    let published = i64::try_from(ids.len()).unwrap();
    common::wait_until(Duration::from_secs(30), "every row is settled", || async {
        common::count(&db.pool, "published").await == published
    })
    .await;
    assert_eq!(relay.terminate().await.code(), Some(0));
}

#[tokio::test]
async fn a_slot_the_server_invalidated_stops_the_relay_with_one_line_and_a_new_slot_publishes_the_pending_rows() {
    let (_server, db) = wal_database_on_private_server("-c max_slot_wal_keep_size=1MB").await;
    let (_sink_dir, sink) = sink_in("lost-slot");
    let sink_url = format!("file:{}", sink.display());
    let args = ["relay", "--source", "wal", "--sink", sink_url.as_str()];
    let mut relay = bad_input_support::start(&db.url, &args, &[]);
    common::wait_for_the_slot(&db).await;
    assert_eq!(relay.terminate().await.code(), Some(0));

    // Rows enqueued while no relay runs, then more WAL than the slot may keep: a checkpoint invalidates it.
    let pending = common::enqueue(&db.pool, &[common::event("l", 0), common::event("l", 1)]).await;
    sqlx::query("CREATE TABLE filler (x text)").execute(&db.pool).await.unwrap();
    common::wait_until(Duration::from_secs(60), "the server invalidated the slot", || async {
        sqlx::raw_sql(
            "INSERT INTO filler SELECT repeat('x', 1000) FROM generate_series(1, 5000); \
             SELECT pg_switch_wal(); CHECKPOINT;",
        )
        .execute(&db.pool)
        .await
        .unwrap();
        sqlx::query_scalar::<_, bool>(
            "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE database = current_database() \
             AND wal_status = 'lost')",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap()
    })
    .await;

    let refused = outbox(&db.url, &args);
    assert_eq!(refused.status.code(), Some(2), "a lost slot is not retried forever");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.starts_with("error: ") && last.contains("was invalidated"), "{stderr}");
    assert!(last.contains("max_slot_wal_keep_size"), "it names the setting: {last}");
    assert!(common::written(&sink).is_empty(), "nothing was published from the lost slot");

    // What the line says to do.
    assert!(last.contains("`outbox wal drop-slot`"), "{last}");
    let dropped = outbox(&db.url, &["wal", "drop-slot"]);
    assert!(dropped.status.success(), "{}", String::from_utf8_lossy(&dropped.stderr));
    let said = String::from_utf8_lossy(&dropped.stdout);
    assert!(said.starts_with("slot dropped") && said.contains("invalidated"), "it says the slot was lost: {said}");
    let mut relay = bad_input_support::start(&db.url, &args, &[]);
    assert_eq!(wait_for_lines(&sink, 2), pending, "the new slot publishes the rows still pending first");
    assert_eq!(relay.terminate().await.code(), Some(0));
}

#[cfg(feature = "webhook")]
#[tokio::test]
async fn an_event_retried_in_place_waits_the_receivers_retry_after_capped_at_the_backoff_maximum() {
    let db = TestDatabase::migrated().await;
    assert!(outbox(&db.url, &["wal", "enable"]).status.success());
    // 429 and 503 ask for a second each, then an hour, which the backoff's maximum (2 s) cuts down.
    use common::RetryAfter::Seconds;
    let (arrivals, url) =
        common::throttling_receiver(vec![(429, Seconds(1)), (503, Seconds(1)), (503, Seconds(3600))]).await;
    let args = [
        "relay",
        "--source",
        "wal",
        "--sink",
        &url,
        "--retry-in-place",
        "60s",
        "--backoff-base",
        "10ms",
        "--backoff-max",
        "2s",
    ];
    let secret = ("OUTBOX_WEBHOOK_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
    let mut relay = bad_input_support::start(&db.url, &args, &[secret]);
    common::wait_for_the_slot(&db).await;
    common::enqueue(&db.pool, &[common::event("throttled", 0)]).await;
    common::wait_until(Duration::from_secs(60), "the throttled event is published", || async {
        common::count(&db.pool, "published").await == 1
    })
    .await;
    let arrivals = arrivals.lock().unwrap().clone();
    assert_eq!(arrivals.len(), 4, "three refused attempts, then the one that got through");
    let gaps: Vec<Duration> = arrivals.windows(2).map(|pair| pair[1] - pair[0]).collect();
    // Without the hint the backoff (10 ms, doubling) would have retried within 40 ms.
    assert!(gaps[0] >= Duration::from_secs(1) && gaps[1] >= Duration::from_secs(1), "Retry-After: 1: {gaps:?}");
    assert!(gaps[2] >= Duration::from_secs(2), "the hour asked for, capped at --backoff-max 2s: {gaps:?}");
    let attempts: i32 = sqlx::query_scalar("SELECT attempts FROM outbox_events").fetch_one(&db.pool).await.unwrap();
    assert_eq!(attempts, 3, "each refused attempt counted");
    assert_eq!(relay.terminate().await.code(), Some(0), "{}", relay.stderr());
}

/// The status of event `id`; `None` once its row is gone.
async fn status_or_gone(db: &TestDatabase, id: Uuid) -> Option<String> {
    sqlx::query_scalar("SELECT status FROM outbox_events WHERE id = $1")
        .bind(id)
        .fetch_optional(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_wal_settle_finds_each_row_where_it_was_read_and_writes_only_the_events_it_read_still_pending() {
    use outbox_core::store::{PendingById, PgStore, Settlement};
    for delete in [false, true] {
        let db = TestDatabase::migrated().await;
        let store = PgStore::new(db.pool.clone());
        // One aggregate: rows side by side on the first page.
        let ids = common::enqueue(&db.pool, &(0..4).map(|n| common::event("located", n)).collect::<Vec<_>>()).await;
        let PendingById::Rows(rows) = store.pending_by_id(&ids, &[]).await.unwrap() else {
            panic!("the streamed rows were not read");
        };
        assert_eq!(rows.len(), 4);
        assert!(rows.iter().all(|row| row.version.is_some()), "the read gives every row its version");
        let (gone, cancelled, counted) = (rows[1].event.id, rows[2].event.id, rows[3].event.id);

        // While the batch is out: one event is deleted, and a new event is written (the settle is handed its row's
        // version for the deleted one, as when vacuum lets a new row reuse a slot); an operator cancels another; a
        // third gets an attempt counted and moves.
        sqlx::query("DELETE FROM outbox_events WHERE id = $1").bind(gone).execute(&db.pool).await.unwrap();
        let newcomer = common::enqueue(&db.pool, &[common::event("located", 9)]).await[0];
        let PendingById::Rows(newcomer_row) = store.pending_by_id(&[newcomer], &[]).await.unwrap() else {
            panic!("the new event was not read");
        };
        let moved = common::cancel_one_and_move_another(&db.pool, cancelled, counted).await;
        assert_ne!(moved, rows[3].version.as_ref().unwrap().to_string(), "the counted attempt did not move the row");

        let mut marks: Vec<Settlement> =
            rows.iter().map(|row| Settlement::published(row.event.id).at(row.version.clone())).collect();
        marks[1] = Settlement::published(gone).at(newcomer_row[0].version.clone());
        let report = store.settle_by_id(&marks, delete).await.unwrap();
        assert_eq!((report.published, report.fenced), (2, 2), "delete: {delete}");
        let settled = (!delete).then(|| "published".to_owned());
        assert_eq!(status_or_gone(&db, rows[0].event.id).await, settled, "delete: {delete}");
        assert_eq!(status_or_gone(&db, counted).await, settled, "a row that moved was not settled (delete: {delete})");
        assert_eq!(status_or_gone(&db, newcomer).await.as_deref(), Some("pending"), "an event never read was settled");
        assert_eq!(
            status_or_gone(&db, cancelled).await.as_deref(),
            Some("cancelled"),
            "an operator's cancel was overwritten"
        );
    }
}

/// `(seq_tup_read, idx_scan)` of `outbox_events`, as the statistics system has them: the rows read by sequential
/// scans (the migrations' scans of the empty table, which may be counted late, read none), and the index scans.
#[tokio::test]
async fn the_read_and_the_settle_of_streamed_rows_fetch_each_row_by_key_or_position_with_plans_made_on_an_empty_table()
{
    use outbox_core::store::{PendingById, PgStore, Settlement};
    let db = TestDatabase::migrated().await;
    // One connection: every read and settle runs the statement prepared, and planned, while the table was empty.
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(&db.url).await.unwrap();
    let store = PgStore::new(pool.clone());
    // A position that once held a row, then the table emptied and vacuumed to no page at all.
    let gone = common::enqueue(&db.pool, &[common::event("gone", 0)]).await;
    let PendingById::Rows(gone) = store.pending_by_id(&gone, &[]).await.unwrap() else { panic!("not read") };
    sqlx::query("TRUNCATE outbox_events").execute(&db.pool).await.unwrap();
    sqlx::query("VACUUM ANALYZE outbox_events").execute(&db.pool).await.unwrap();
    // Past the five calls after which PostgreSQL keeps a plan made for any parameters.
    for _ in 0..8 {
        let PendingById::Rows(rows) = store.pending_by_id(&[Uuid::now_v7()], &[]).await.unwrap() else {
            panic!("a read of an empty table was not answered with rows");
        };
        assert!(rows.is_empty());
        let absent = Settlement::published(gone[0].event.id).at(gone[0].version.clone());
        assert_eq!(store.settle_by_id(&[absent], false).await.unwrap().published, 0);
    }
    let mut ids = Vec::new();
    for round in 0..10 {
        let events: Vec<_> = (0..300).map(|n| common::event(format!("agg-{round}"), n)).collect();
        ids.extend(common::enqueue(&db.pool, &events).await);
    }
    let (seq_before, fetched_before) = common::rows_read(&db.pool).await;
    let mut settled = 0;
    for batch in ids.chunks(100) {
        let PendingById::Rows(rows) = store.pending_by_id(batch, &[]).await.unwrap() else {
            panic!("the committed rows were not read");
        };
        assert_eq!(rows.iter().map(|row| row.event.id).collect::<Vec<_>>(), batch, "every row read, in order");
        let marks: Vec<_> =
            rows.iter().map(|row| Settlement::published(row.event.id).at(row.version.clone())).collect();
        settled += store.settle_by_id(&marks, false).await.unwrap().published;
    }
    assert_eq!(settled as usize, ids.len());
    // The session's counts reach the statistics system when it ends.
    pool.close().await;
    let lookups = i64::try_from(ids.len()).unwrap();
    common::wait_until(Duration::from_secs(30), "the reads' rows are counted", || async {
        let (seq, fetched) = common::rows_read(&db.pool).await;
        seq > seq_before || fetched - fetched_before >= lookups
    })
    .await;
    let (seq, fetched) = common::rows_read(&db.pool).await;
    let read = (seq - seq_before, fetched - fetched_before);
    assert_eq!(read.0, 0, "the reads and settles read {} rows in sequential scans", read.0);
    // One primary-key lookup per id, for the read; the settle fetches each row by its position, which counts
    // nothing. A plan that walks an index to join the batch to the table fetches every row of it, per batch.
    assert!(
        (lookups..2 * lookups).contains(&read.1),
        "{} rows fetched through an index, for {lookups} ids read and settled",
        read.1
    );
    // Counted by a scan of the whole table: only after the statistics were read.
    assert_eq!(common::count(&db.pool, "published").await as usize, ids.len());
}

/// Acknowledges every message at once, except the first it is given, which it holds until `release` gets a
/// permit; keeps the ids it acknowledged.
#[derive(Clone)]
struct HoldsTheFirst {
    given_first: Arc<tokio::sync::Notify>,
    release: Arc<tokio::sync::Semaphore>,
    holding: Arc<std::sync::atomic::AtomicBool>,
    acknowledged: Arc<std::sync::Mutex<Vec<Uuid>>>,
    /// Refuses every event for good instead of acknowledging it.
    refuses: bool,
}

impl outbox_relay::Publisher for HoldsTheFirst {
    async fn publish(&self, batch: &[outbox_relay::Message]) -> Vec<outbox_relay::Outcome> {
        if !self.holding.swap(true, std::sync::atomic::Ordering::SeqCst) {
            self.given_first.notify_one();
            self.release.acquire().await.expect("the test keeps the semaphore open").forget();
        }
        if self.refuses {
            return batch.iter().map(|_| outbox_relay::Outcome::permanent("refused by the test")).collect();
        }
        self.acknowledged.lock().unwrap().extend(batch.iter().map(|message| message.id));
        batch.iter().map(|_| outbox_relay::Outcome::Published).collect()
    }
}

impl HoldsTheFirst {
    fn new() -> Self {
        Self {
            given_first: Arc::default(),
            release: Arc::new(tokio::sync::Semaphore::new(0)),
            holding: Arc::default(),
            acknowledged: Arc::default(),
            refuses: false,
        }
    }

    fn refusing() -> Self {
        Self { refuses: true, ..Self::new() }
    }

    fn acknowledged(&self) -> Vec<Uuid> {
        self.acknowledged.lock().unwrap().clone()
    }
}

/// A WAL relay (batches of `batch_size`) whose first event is published while a test transaction holds its
/// row's lock, so that the event's settle waits for the lock.
struct HeldSettle {
    db: TestDatabase,
    publisher: HoldsTheFirst,
    shutdown: outbox_relay::CancellationToken,
    relay: tokio::task::JoinHandle<outbox_relay::Result<outbox_relay::RunSummary>>,
    /// The held event.
    held: Uuid,
    /// The WAL insert position once the held event committed.
    after_held: String,
    /// The transaction holding the lock.
    lock: sqlx::Transaction<'static, sqlx::Postgres>,
}

impl HeldSettle {
    async fn start(batch_size: u32) -> Self {
        Self::start_with(HoldsTheFirst::new(), batch_size).await
    }

    async fn start_with(publisher: HoldsTheFirst, batch_size: u32) -> Self {
        use outbox_core::store::{PgStore, Source};
        let db = TestDatabase::migrated().await;
        PgStore::new(db.pool.clone()).switch_source(Source::Wal).await.unwrap();
        let (shutdown, relay) = spawn_wal_relay(&db, &publisher, batch_size);
        common::wait_for_the_slot(&db).await;
        let held = common::enqueue(&db.pool, &[common::event("held", 0)]).await[0];
        let after_held = wal_insert_lsn(&db).await;
        tokio::time::timeout(Duration::from_secs(30), publisher.given_first.notified()).await.expect("never published");
        let mut lock = db.pool.begin().await.unwrap();
        sqlx::query("SELECT 1 FROM outbox_events WHERE id = $1 FOR UPDATE")
            .bind(held)
            .execute(&mut *lock)
            .await
            .unwrap();
        publisher.release.add_permits(1);
        common::wait_until(Duration::from_secs(30), "the settle waits for the row's lock", || async {
            waiting_settle(&db).await.is_some()
        })
        .await;
        Self { db, publisher, shutdown, relay, held, after_held, lock }
    }

    /// Enqueues an event in a transaction of its own, and waits until it is published when `published` says.
    async fn later(&self, n: u32, published: bool) -> Uuid {
        let id = common::enqueue(&self.db.pool, &[common::event(format!("later-{n}"), 0)]).await[0];
        if published {
            let what = format!("later event {n} published while the first one's settle waits");
            common::wait_until(Duration::from_secs(10), &what, || async {
                self.publisher.acknowledged().contains(&id)
            })
            .await;
        }
        id
    }

    /// Whether the slot is acknowledged below the held event's commit, once the relay has reported (every 100 ms).
    async fn acknowledged_below_the_held_event(&self) -> bool {
        tokio::time::sleep(Duration::from_secs(1)).await;
        lsn_below(&self.db, &acknowledged_lsn(&self.db).await, &self.after_held).await
    }
}

/// How long a stop of [`spawn_wal_relay`]'s relays waits for a settle.
const HELD_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(2);

/// A WAL relay in this process, batches of `batch_size`, publishing to `publisher`: its shutdown and its task.
fn spawn_wal_relay(
    db: &TestDatabase,
    publisher: &HoldsTheFirst,
    batch_size: u32,
) -> (outbox_relay::CancellationToken, tokio::task::JoinHandle<outbox_relay::Result<outbox_relay::RunSummary>>) {
    let shutdown = outbox_relay::CancellationToken::new();
    let config = outbox_relay::RelayConfig::builder()
        .batch_size(batch_size)
        .shutdown_timeout(HELD_SHUTDOWN_TIMEOUT)
        .build()
        .unwrap();
    let relay = outbox_relay::WalRelay::new(db.pool.clone(), &db.url, publisher.clone(), config).unwrap();
    (shutdown.clone(), tokio::spawn(relay.run(shutdown)))
}

/// A relay of [`spawn_wal_relay`] whose publisher holds nothing back (default batches).
fn spawn_unheld_wal_relay(
    db: &TestDatabase,
) -> (
    HoldsTheFirst,
    outbox_relay::CancellationToken,
    tokio::task::JoinHandle<outbox_relay::Result<outbox_relay::RunSummary>>,
) {
    let publisher = HoldsTheFirst::new();
    publisher.release.add_permits(1);
    let (shutdown, relay) = spawn_wal_relay(db, &publisher, 2000);
    (publisher, shutdown, relay)
}

/// Stops `relay` while a settle waits for a row lock: the stop waits for it for the shutdown timeout, no longer.
async fn stop_while_a_settle_is_held(
    shutdown: outbox_relay::CancellationToken,
    relay: tokio::task::JoinHandle<outbox_relay::Result<outbox_relay::RunSummary>>,
) {
    stop_within_the_shutdown_timeout(shutdown, relay, "a settle held by a row lock").await;
}

/// Stops `relay` while it waits for `what`: the stop waits for it for the shutdown timeout after the signal, no
/// longer (the margin is for a slow machine; the waits it bounds are a minute or for ever).
async fn stop_within_the_shutdown_timeout(
    shutdown: outbox_relay::CancellationToken,
    relay: tokio::task::JoinHandle<outbox_relay::Result<outbox_relay::RunSummary>>,
    what: &str,
) {
    let asked = Instant::now();
    shutdown.cancel();
    let stopped = tokio::time::timeout(HELD_SHUTDOWN_TIMEOUT + Duration::from_secs(15), relay).await;
    let waited = asked.elapsed();
    stopped.unwrap_or_else(|_| panic!("the stop waited for {what} past its shutdown timeout")).unwrap().unwrap();
    assert!(waited >= HELD_SHUTDOWN_TIMEOUT, "the stop gave up on {what} before the shutdown timeout: {waited:?}");
}

/// Where the next WAL record goes: past the commit of every transaction that returned (the test server commits
/// without waiting for the flush).
async fn wal_insert_lsn(db: &TestDatabase) -> String {
    sqlx::query_scalar("SELECT pg_current_wal_insert_lsn()::text").fetch_one(&db.pool).await.unwrap()
}

/// The position the WAL relay's slot is confirmed through.
async fn acknowledged_lsn(db: &TestDatabase) -> String {
    sqlx::query_scalar(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots s JOIN outbox_control c ON s.slot_name = c.wal_slot",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

async fn lsn_below(db: &TestDatabase, lower: &str, upper: &str) -> bool {
    sqlx::query_scalar("SELECT $1::pg_lsn < $2::pg_lsn").bind(lower).bind(upper).fetch_one(&db.pool).await.unwrap()
}

/// The backend of a settle (`outbox_settle_published_at`, or an `UPDATE` of the outbox table) that waits for a lock.
async fn waiting_settle(db: &TestDatabase) -> Option<i32> {
    sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity
          WHERE datname = current_database() AND wait_event_type = 'Lock'
            AND (query ILIKE '%outbox_settle_published_at%' OR query ILIKE '%UPDATE outbox_events%')",
    )
    .fetch_optional(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_settle_that_waits_for_a_lock_holds_back_at_most_a_batch_and_each_batch_is_acknowledged_once_settled() {
    // With the default batch size every later event is published while the settle waits; with batches of one
    // event, one batch waits for it and the next publish waits too.
    for (batch_size, published_while_held) in [(2000, 3), (1, 2)] {
        let held = HeldSettle::start(batch_size).await;
        let mut later = Vec::new();
        let mut before_the_last = String::new();
        for n in 0..3 {
            before_the_last = wal_insert_lsn(&held.db).await;
            later.push(held.later(n, (n as usize) < published_while_held).await);
        }
        assert!(
            held.acknowledged_below_the_held_event().await,
            "the slot was acknowledged past events whose settle has not committed (batch {batch_size})"
        );
        for id in &later[published_while_held..] {
            assert!(!held.publisher.acknowledged().contains(id), "more than a batch was published behind the settle");
        }
        for id in std::iter::once(&held.held).chain(&later) {
            assert_eq!(common::status_of(&held.db.pool, *id).await, "pending", "settled before the held event");
        }

        // Once the lock goes, every event is published and settled, and the slot moves past the last of them.
        let HeldSettle { db, publisher, shutdown, relay, lock, .. } = held;
        lock.rollback().await.unwrap();
        common::wait_until(Duration::from_secs(30), "every event settled", || async {
            common::count(&db.pool, "published").await == 4
        })
        .await;
        common::wait_until(Duration::from_secs(30), "the slot acknowledged past the last event", || async {
            lsn_below(&db, &before_the_last, &acknowledged_lsn(&db).await).await
        })
        .await;
        shutdown.cancel();
        relay.await.unwrap().unwrap();
        assert_eq!(publisher.acknowledged().len(), 4, "an event was published twice (batch {batch_size})");
    }
}

#[tokio::test]
async fn a_stop_waits_for_a_settle_held_by_a_row_lock_until_the_shutdown_timeout_and_acknowledges_nothing_past_it() {
    let held = HeldSettle::start(2000).await;
    let later = held.later(0, true).await;
    let HeldSettle { db, shutdown, relay, lock, after_held, .. } = held;
    stop_while_a_settle_is_held(shutdown, relay).await;
    assert!(
        lsn_below(&db, &acknowledged_lsn(&db).await, &after_held).await,
        "the slot was acknowledged past an event whose settle had not committed"
    );
    assert_eq!(common::status_of(&db.pool, later).await, "pending", "the batch queued behind the settle was settled");

    // The next relay streams both again and settles them once the lock is gone.
    lock.rollback().await.unwrap();
    let (publisher, shutdown, relay) = spawn_unheld_wal_relay(&db);
    common::wait_until(Duration::from_secs(30), "both events settled", || async {
        common::count(&db.pool, "published").await == 2
    })
    .await;
    common::wait_until(Duration::from_secs(30), "the later event published again", || async {
        publisher.acknowledged().contains(&later)
    })
    .await;
    shutdown.cancel();
    relay.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_stop_while_the_sink_holds_a_batch_ends_within_the_shutdown_timeout_and_the_batch_is_streamed_again() {
    use outbox_core::store::{PgStore, Source};
    let db = TestDatabase::migrated().await;
    PgStore::new(db.pool.clone()).switch_source(Source::Wal).await.unwrap();
    // Its first publish never returns (the publish timeout, a minute by default, is far off).
    let publisher = HoldsTheFirst::new();
    let (shutdown, relay) = spawn_wal_relay(&db, &publisher, 2000);
    common::wait_for_the_slot(&db).await;
    let held = common::enqueue(&db.pool, &[common::event("held", 0)]).await[0];
    tokio::time::timeout(Duration::from_secs(30), publisher.given_first.notified()).await.expect("never published");
    stop_within_the_shutdown_timeout(shutdown, relay, "a publish the sink never answers").await;
    assert_eq!(common::status_of(&db.pool, held).await, "pending", "the unanswered event was settled");

    // The next relay streams it again and publishes it.
    let (publisher, shutdown, relay) = spawn_unheld_wal_relay(&db);
    common::wait_until(Duration::from_secs(30), "the held event published and settled", || async {
        publisher.acknowledged().contains(&held) && common::status_of(&db.pool, held).await == "published"
    })
    .await;
    shutdown.cancel();
    relay.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_stop_waits_for_the_settle_of_a_refused_event_held_by_a_row_lock_until_the_shutdown_timeout() {
    // The held event is refused for good: its settle is not one of a batch all published, and runs inline.
    let HeldSettle { db, shutdown, relay, lock, held, .. } =
        HeldSettle::start_with(HoldsTheFirst::refusing(), 2000).await;
    stop_while_a_settle_is_held(shutdown, relay).await;
    lock.rollback().await.unwrap();
    // The settle, left to end on its own, marks the event failed once the lock goes.
    common::wait_until(Duration::from_secs(30), "the refused event marked failed", || async {
        common::status_of(&db.pool, held).await == "failed"
    })
    .await;
}

#[tokio::test]
async fn a_settle_that_fails_for_good_leaves_the_batches_behind_it_unsettled_and_unacknowledged() {
    let held = HeldSettle::start(2000).await;
    let later = [held.later(0, true).await, held.later(1, true).await];
    // The held event's settle is refused for good (an error of class 42) once it tries again; the batches queued
    // behind it would settle.
    sqlx::raw_sql(
        "CREATE FUNCTION refuse_the_held_event() RETURNS trigger LANGUAGE plpgsql AS
         $$ BEGIN RAISE EXCEPTION 'refused by the test' USING ERRCODE = 'insufficient_privilege'; END $$",
    )
    .execute(&held.db.pool)
    .await
    .unwrap();
    let trigger = format!(
        "CREATE TRIGGER refuse_the_held_event BEFORE UPDATE ON outbox_events FOR EACH ROW
          WHEN (OLD.id = '{}') EXECUTE FUNCTION refuse_the_held_event()",
        held.held
    );
    let pool = held.db.pool.clone();
    // Waits behind the settle's table lock, and is granted as soon as the settle's connection is gone.
    let created = tokio::spawn(async move { sqlx::raw_sql(&trigger).execute(&pool).await.map(|_| ()) });
    common::wait_until(Duration::from_secs(30), "the trigger waits for the settle", || async {
        sqlx::query_scalar::<_, bool>(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database()
                             AND wait_event_type = 'Lock' AND query ILIKE 'CREATE TRIGGER%')",
        )
        .fetch_one(&held.db.pool)
        .await
        .unwrap()
    })
    .await;
    let pid = waiting_settle(&held.db).await.expect("the settle waits for the lock");
    assert!(sqlx::query_scalar::<_, bool>("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(&held.db.pool)
        .await
        .unwrap());
    created.await.unwrap().expect("the trigger is created");
    let HeldSettle { db, relay, held: held_event, after_held, lock, .. } = held;
    lock.rollback().await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(30), relay).await.expect("the relay stops").unwrap();
    let error = ended.expect_err("the refused settle stops the relay").to_string();
    assert!(error.contains("refused by the test"), "{error}");
    assert!(
        lsn_below(&db, &acknowledged_lsn(&db).await, &after_held).await,
        "the slot was acknowledged past a batch whose settle never committed"
    );
    for id in std::iter::once(&held_event).chain(&later) {
        assert_eq!(common::status_of(&db.pool, *id).await, "pending", "settled behind an unsettled batch");
    }

    // Without the trigger, the next relay publishes them again and settles them.
    sqlx::raw_sql("DROP TRIGGER refuse_the_held_event ON outbox_events").execute(&db.pool).await.unwrap();
    let (publisher, shutdown, relay) = spawn_unheld_wal_relay(&db);
    common::wait_until(Duration::from_secs(30), "every event published and settled", || async {
        common::count(&db.pool, "published").await == 3
    })
    .await;
    shutdown.cancel();
    relay.await.unwrap().unwrap();
    let mut published = publisher.acknowledged();
    published.sort();
    let mut expected = vec![held_event, later[0], later[1]];
    expected.sort();
    assert_eq!(published, expected, "the unsettled events were not published again, once each");
}

/// Stops `server` under the relay (a fast shutdown) and starts it again.
fn restart(server: &outbox_tests::pg::PrivateServer) {
    server.stop().unwrap();
    server.start_again().unwrap();
}

/// Enqueues `n` message-mode events of `aggregate`, one transaction each, retrying an enqueue the database was not
/// there for (a restart): their ids.
async fn via_wal_events(db: &TestDatabase, aggregate: &str, n: u32) -> Vec<Uuid> {
    let mut ids = Vec::new();
    for i in 0..n {
        let event = common::event(aggregate, i);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let enqueued = async {
                let mut tx = db.pool.begin().await?;
                let id = Outbox::new().via_wal().enqueue(&mut tx, &event).await?;
                tx.commit().await?;
                Ok::<_, outbox_core::Error>(id)
            };
            match enqueued.await {
                Ok(id) => {
                    ids.push(id);
                    break;
                }
                Err(error) => {
                    assert!(Instant::now() < deadline, "cannot enqueue: {error}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
    ids
}

/// The ids `sink` holds more than once, with how many times.
fn duplicates(sink: &Path) -> Vec<(Uuid, usize)> {
    let mut seen: std::collections::HashMap<Uuid, usize> = std::collections::HashMap::new();
    for id in common::written(sink) {
        *seen.entry(id).or_default() += 1;
    }
    seen.into_iter().filter(|(_, times)| *times > 1).collect()
}

/// Waits until `sink` holds every one of `ids`, which `relay` publishes.
async fn wait_for_all(sink: &Path, ids: &[Uuid], relay: &outbox_tests::process::OutboxProcess) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let have: std::collections::HashSet<Uuid> = common::written(sink).into_iter().collect();
        let missing_at: Vec<usize> = (0..ids.len()).filter(|&i| !have.contains(&ids[i])).collect();
        let missing = missing_at.len();
        if missing == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{missing} of {} events not published (at {missing_at:?}): {}",
            ids.len(),
            relay.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A fast shutdown of PostgreSQL while the WAL relay catches up is not held up by the relay. At a shutdown the
/// server's WAL sender waits for its reader to confirm everything it sent, which a relay whose settles fail cannot
/// do: the shutdown waited for `wal_sender_timeout` (a minute by default; `pg_ctl stop` gave up first), here
/// switched off. The relay's session now ends when the server says it is shutting down, or cannot be reached for
/// the pool's acquire timeout, which closes the replication connection. Nothing is lost: every event is published
/// once the server is back.
#[tokio::test]
async fn a_fast_shutdown_of_the_server_while_the_relay_catches_up_is_not_held_up_by_the_replication_connection() {
    const EVENTS: usize = 200_000;
    // No `wal_sender_timeout`: the WAL sender waits for the relay as long as its connection is open.
    let (server, db) = wal_database_on_private_server("-c wal_sender_timeout=0").await;
    let (_sink_dir, sink) = sink_in("fast-shutdown");
    let sink_url = format!("file:{}", sink.display());
    let args = ["relay", "--source", "wal", "--sink", sink_url.as_str()];
    let mut relay = bad_input_support::start(&db.url, &args, &[]);
    common::wait_for_the_slot(&db).await;
    assert_eq!(relay.terminate().await.code(), Some(0));
    // A backlog the slot keeps while no relay runs: 200 transactions of 1,000 events.
    for _ in 0..EVENTS / 1000 {
        sqlx::query(
            "INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
             SELECT gen_random_uuid(), 'account', (i % 100)::text, 'account.credited', '{}'
               FROM generate_series(1, 1000) i",
        )
        .execute(&db.pool)
        .await
        .unwrap();
    }
    let mut relay = bad_input_support::start(&db.url, &args, &[]);
    common::wait_until(Duration::from_secs(30), "the relay publishes", || async { !common::written(&sink).is_empty() })
        .await;
    let written = common::written(&sink).len();
    assert!(written < EVENTS, "the relay is still catching up ({written} of {EVENTS} written)");

    let started = Instant::now();
    let stopped = server.stop();
    let took = started.elapsed();
    assert!(stopped.is_ok() && took < Duration::from_secs(30), "a fast shutdown took {took:?}: {stopped:?}");

    server.start_again().unwrap();
    common::wait_until(Duration::from_secs(120), "every event is published after the restart", || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM outbox_events WHERE status = 'published'")
            .fetch_one(&db.pool)
            .await
            .is_ok_and(|published| published == EVENTS as i64)
    })
    .await;
    let distinct: std::collections::HashSet<Uuid> = common::written(&sink).into_iter().collect();
    assert_eq!(distinct.len(), EVENTS, "every event reached the sink");
    assert_eq!(relay.terminate().await.code(), Some(0));
}

#[tokio::test]
async fn message_mode_events_are_not_published_again_after_the_server_restarts() {
    // On PostgreSQL 14 to 16 the slot's confirmed position is written to disk only when its restart position
    // moves, and a shutdown checkpoint does not write it: a restart rewinds the stream. Rows are read by id and
    // those settled are skipped; messages have no row, so the relay records how far they are published.
    let (server, db) = wal_database_on_private_server("").await;
    let (_sink_dir, sink) = sink_in("server-restart");
    let sink_url = format!("file:{}", sink.display());
    let args = ["relay", "--source", "wal", "--sink", sink_url.as_str(), "--batch-size", "100"];
    let mut relay = bad_input_support::start(&db.url, &args, &[]);
    common::wait_for_the_slot(&db).await;

    // Caught up, then a fast restart: nothing is published again.
    let mut ids = via_wal_events(&db, "a", 3000).await;
    wait_for_all(&sink, &ids, &relay).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    restart(&server);
    ids.extend(via_wal_events(&db, "b", 200).await);
    wait_for_all(&sink, &ids, &relay).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let again = duplicates(&sink).len();
    assert_eq!(again, 0, "{again} events published again after a fast restart of a caught-up relay");
    assert_eq!(common::written(&sink).len(), ids.len());
    assert_eq!(relay.terminate().await.code(), Some(0));
}

#[tokio::test]
async fn a_message_mode_event_whose_aggregate_the_table_cannot_index_is_refused_at_enqueue_and_skipped_by_the_relay() {
    let db = TestDatabase::migrated().await;
    let (_sink_dir, sink, mut relay) = wal_relay_with_its_slot(&db, "too-long-aggregate").await;
    // Incompressible: an index entry cannot hold it (SQLSTATE 54000 when the event would be written to the table).
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let long: String = (0..3000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'a' + u8::try_from(x % 26).unwrap())
        })
        .collect();
    let mut tx = db.pool.begin().await.unwrap();
    let refused = Outbox::new().via_wal().enqueue(&mut tx, &common::event(long.clone(), 0)).await;
    let Err(outbox_core::Error::InvalidEvent { reason, .. }) = refused else { panic!("accepted: {refused:?}") };
    assert!(!reason.contains('\n') && reason.contains("aggregate type and id"), "{reason}");
    tx.commit().await.expect("nothing written, the transaction goes on");
    // The same through the transaction that writes its events with the commit: refused where it is enqueued
    // (before, it was buffered, committed, and skipped by the relay).
    let mut buffered = Outbox::new().via_wal().begin(&db.pool).await.unwrap();
    let refused = buffered.enqueue(&common::event(long.clone(), 0));
    let Err(outbox_core::Error::InvalidEvent { reason, .. }) = refused else { panic!("accepted: {refused:?}") };
    assert!(reason.contains("aggregate type and id"), "{reason}");
    assert_eq!(buffered.buffered(), 0);
    buffered.rollback().await.unwrap();

    // One written by hand (an older version): the relay skips it, logged without its payload, and goes on.
    let skipped = Uuid::now_v7();
    let content = serde_json::json!({
        "id": skipped, "type": "test.happened", "aggregate_type": "t", "aggregate_id": long, "version": 1,
        "payload": {"secret": "do-not-log"}, "headers": {}, "sensitive_paths": [],
    });
    sqlx::query("SELECT pg_logical_emit_message(true, 'outbox', $1)")
        .bind(content.to_string())
        .execute(&db.pool)
        .await
        .unwrap();
    let after = common::via_wal(&db, "t", 1).await;
    assert_eq!(wait_for_lines(&sink, 1), [after], "the stream goes on past it");
    let logged = relay.stderr();
    assert!(logged.contains("skipped a message-mode event the table cannot hold"), "{logged}");
    assert!(logged.contains(&skipped.to_string()) && !logged.contains("do-not-log"), "{logged}");
    assert_eq!(relay.terminate().await.code(), Some(0));
}

/// The close lock `outbox wal disable` and `drop-slot` hold while they close the slot to producers (the emit lock's
/// key, "outboxm", plus one; `outbox_core`'s `WAL_CLOSE_LOCK`).
const WAL_CLOSE_LOCK: i64 = 0x006f_7574_626f_786e;

/// A message-mode transaction with the commit, on a session of its own (no check of the slot remembered), at
/// `REPEATABLE READ`, its snapshot taken now.
async fn repeatable_read_producer(db: &TestDatabase) -> (sqlx::PgPool, outbox_core::OutboxTransaction) {
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(&db.url).await.unwrap();
    let mut tx = Outbox::new().via_wal().begin(&pool).await.unwrap();
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ").execute(&mut *tx).await.unwrap();
    sqlx::query("SELECT 1").execute(&mut *tx).await.unwrap();
    (pool, tx)
}

/// A `REPEATABLE READ` producer whose snapshot predates a drop's closing mark cannot see it; it still cannot write
/// a message while the drop holds the slot closed (before, its check passed, and between the drop's move of the
/// slot's messages and the drop itself its message went with the slot).
#[tokio::test]
async fn a_producer_whose_snapshot_predates_a_drop_of_the_slot_is_refused_while_the_drop_holds_it_closed() {
    let db = TestDatabase::migrated().await;
    let (_sink_dir, _sink, mut relay) = wal_relay_with_its_slot(&db, "closed-to-old-snapshots").await;
    assert_eq!(relay.terminate().await.code(), Some(0));
    let (_pool, mut producer) = repeatable_read_producer(&db).await;
    // What a drop does first: the close lock, then the mark, committed.
    let mut dropping = db.pool.acquire().await.unwrap();
    sqlx::query("SELECT pg_advisory_lock($1)").bind(WAL_CLOSE_LOCK).execute(&mut *dropping).await.unwrap();
    sqlx::query("UPDATE outbox_control SET wal_closing_at = clock_timestamp() WHERE id")
        .execute(&mut *dropping)
        .await
        .unwrap();
    producer.enqueue(&common::event("old-snapshot", 0)).unwrap();
    let committed = producer.commit().await;
    assert!(matches!(committed, Err(outbox_core::Error::WalSourceOff)), "{committed:?}");
    sqlx::query("UPDATE outbox_control SET wal_closing_at = NULL WHERE id").execute(&mut *dropping).await.unwrap();
    sqlx::query("SELECT pg_advisory_unlock($1)").bind(WAL_CLOSE_LOCK).execute(&mut *dropping).await.unwrap();
    // Once the slot is open again, the same producer writes.
    let (_pool, mut producer) = repeatable_read_producer(&db).await;
    producer.enqueue(&common::event("old-snapshot", 1)).unwrap();
    producer.commit().await.expect("the slot is open again");
}

/// The recorded slot is gone (dropped by hand) and the relay makes it again; while its creation waits for a
/// running transaction, the slot is listed but decodes nothing yet: a producer is refused then, not told to write a
/// message that would never be streamed.
#[tokio::test]
async fn while_the_recorded_slot_is_made_again_producers_are_refused_until_it_decodes() {
    let db = TestDatabase::migrated().await;
    let (_sink_dir, sink, mut relay) = wal_relay_with_its_slot(&db, "made-again").await;
    assert_eq!(relay.terminate().await.code(), Some(0));
    let slot: String = sqlx::query_scalar("SELECT wal_slot FROM outbox_control").fetch_one(&db.pool).await.unwrap();
    sqlx::query("SELECT pg_drop_replication_slot($1)").bind(&slot).execute(&db.pool).await.unwrap();
    let running = common::holding_slot_creation(&db.pool).await;
    let sink_url = format!("file:{}", sink.display());
    let mut relay = bad_input_support::start(&db.url, &["relay", "--source", "wal", "--sink", &sink_url], &[]);
    common::wait_until_slots_are_listed(&db, &[slot.as_str()]).await;
    let (_pool, mut producer) = repeatable_read_producer(&db).await;
    producer.enqueue(&common::event("early", 0)).unwrap();
    let committed = producer.commit().await;
    assert!(matches!(committed, Err(outbox_core::Error::WalSourceOff)), "{committed:?}");
    running.commit().await.unwrap();
    common::wait_for_the_slot(&db).await;
    let after = common::via_wal(&db, "late", 0).await;
    assert_eq!(wait_for_lines(&sink, 1), [after], "published once the slot decodes");
    assert_eq!(relay.terminate().await.code(), Some(0));
}
