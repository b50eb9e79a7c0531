//! `outbox relay` against a database that is not there yet, or that refuses it, at start (the real binary, real
//! PostgreSQL servers):
//!
//! - unreachable (server stopped, nothing listening): the relay does not exit; it logs a WARN line naming the
//!   database with the password masked, again and again with a growing delay, and once the server is up it
//!   publishes every event, without having spent an attempt on any;
//! - a signal while it waits stops it with exit 0, having written nothing;
//! - wrong credentials: exit 2 at once, one line on stderr, password masked; the right password works, so it is the
//!   password that was refused;
//! - a role without CONNECT on the database (`42501 permission denied for database` at connect): exit 2 at once,
//!   one line naming the refusal and the database, password masked;
//! - outbox tables missing, or a role that may connect but not use them: exit 2 with the schema error;
//! - a signal while the first heartbeat waits for the database (its statements time out): exit 0.

mod bad_input_support;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use bad_input_support::{retry_delays, start, with_password};
use outbox_core::Outbox as Producer;
use outbox_tests::pg::{PrivateServer, TestDatabase};
use outbox_tests::process::free_port;
use serde::Serialize;
use sqlx::PgPool;

const PASSWORD: &str = "hunter2-db-password";

#[derive(Serialize)]
struct Shipped {
    order: u32,
}

impl outbox_core::OutboxEvent for Shipped {
    const EVENT_TYPE: &'static str = "order.shipped";
    const AGGREGATE_TYPE: &'static str = "order";
    const VERSION: u32 = 1;

    fn aggregate_id(&self) -> String {
        self.order.to_string()
    }
}

async fn enqueue(pool: &PgPool, n: u32) {
    let mut tx = pool.begin().await.expect("begin");
    let events: Vec<Shipped> = (0..n).map(|order| Shipped { order }).collect();
    Producer::new().enqueue_all(&mut tx, &events).await.expect("enqueue");
    tx.commit().await.expect("commit");
}

fn private_server() -> PrivateServer {
    PrivateServer::start().unwrap_or_else(|problem| panic!("no private PostgreSQL: {problem}"))
}

fn assert_masked(lines: &[String], password: &str) {
    for line in lines {
        assert!(!line.contains(password), "the password was printed: {line}");
    }
}

#[tokio::test]
async fn an_unreachable_database_is_waited_for_with_growing_delays_and_the_relay_then_publishes_everything() {
    let server = private_server();
    let db = TestDatabase::create_on(&server.url).await;
    outbox_core::migrate(&db.pool).await.expect("migrate");
    enqueue(&db.pool, 20).await;
    db.pool.close().await;
    server.stop().expect("stop the server");

    let dir = tempfile::Builder::new().prefix("outbox-db-at-start-").tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    let url = with_password(&db.url, PASSWORD);
    let sink = format!("file:{}", file.display());
    let mut relay = start(&url, &["relay", "--sink", &sink, "--poll-interval", "10ms"], &[]);

    let warnings = relay.wait_for_lines("cannot reach the database", 4, Duration::from_secs(60)).await;
    let port = url::Url::parse(&db.url).unwrap().port().unwrap();
    for line in &warnings {
        assert!(line.contains("WARN"), "{line}");
        assert!(line.contains(&format!("127.0.0.1:{port}")), "the database is not named: {line}");
        assert!(line.contains("postgres:***@"), "the password is not masked: {line}");
    }
    assert_masked(&warnings, PASSWORD);
    let delays = retry_delays(&warnings);
    assert_eq!(delays.len(), warnings.len(), "every warning says when it retries: {warnings:?}");
    assert!(delays.windows(2).all(|pair| pair[1] > pair[0]), "the delay does not grow: {delays:?}");
    assert!(!file.exists(), "the sink was opened before the database answered");

    server.start_again().expect("start the server again");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(&file).unwrap_or_default().lines().count() < 20 {
        assert!(tokio::time::Instant::now() < deadline, "not every event was published:\n{}", relay.stderr());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = relay.terminate().await;
    assert_eq!(status.code(), Some(0), "{}", relay.stderr());
    assert_masked(&relay.stderr().lines().map(str::to_owned).collect::<Vec<_>>(), PASSWORD);

    let pool = PgPool::connect(&db.url).await.expect("reconnect");
    let rows: Vec<(String, i32)> =
        sqlx::query_as("SELECT status, attempts FROM outbox_events").fetch_all(&pool).await.unwrap();
    assert_eq!(rows.len(), 20);
    assert!(rows.iter().all(|(status, attempts)| status == "published" && *attempts == 0), "{rows:?}");
}

#[tokio::test]
async fn a_relay_waiting_for_the_database_stops_on_sigterm_with_exit_0_and_writes_nothing() {
    let temp = tempfile::Builder::new().prefix("outbox-db-never-").tempdir().unwrap();
    // A directory that does not exist: a relay that writes nothing does not create it.
    let dir = temp.path().join("sink");
    let url = format!("postgres://app:{PASSWORD}@127.0.0.1:{}/shop", free_port());
    let sink = format!("file:{}/events.jsonl", dir.display());
    let mut relay = start(&url, &["relay", "--sink", &sink], &[]);
    let warnings = relay.wait_for_lines("cannot reach the database", 2, Duration::from_secs(30)).await;
    assert!(warnings.iter().all(|line| line.contains("app:***@127.0.0.1")), "{warnings:?}");
    assert_masked(&warnings, PASSWORD);
    let status = relay.terminate().await;
    assert_eq!(status.code(), Some(0), "{}", relay.stderr());
    assert!(!dir.exists(), "the sink was created");
}

#[tokio::test]
async fn wrong_database_credentials_exit_2_at_once_with_one_line_and_the_password_masked() {
    let server = private_server();
    let db = TestDatabase::create_on(&server.url).await;
    outbox_core::migrate(&db.pool).await.expect("migrate");
    enqueue(&db.pool, 3).await;
    // Password authentication for every role but the admin: a hba file of our own, read at the next start.
    let hba = tempfile::Builder::new().prefix("outbox-hba-").suffix(".conf").tempfile().unwrap();
    std::fs::write(
        hba.path(),
        "local all all trust\nhost all postgres 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n",
    )
    .unwrap();
    // A temporary file is readable by its owner only (0600), and the server may run as another user (`postgres`,
    // when the tests run as root).
    std::fs::set_permissions(hba.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
    for statement in [
        "CREATE ROLE app LOGIN PASSWORD 'the-right-password'".to_owned(),
        "GRANT SELECT, UPDATE, DELETE ON outbox_events TO app".to_owned(),
        "GRANT SELECT ON outbox_control TO app".to_owned(),
        "GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_relays, outbox_batches TO app".to_owned(),
        "GRANT SELECT, UPDATE ON outbox_partitions TO app".to_owned(),
        format!("ALTER SYSTEM SET hba_file = '{}'", hba.path().display()),
    ] {
        sqlx::raw_sql(&statement).execute(&db.pool).await.unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
    db.pool.close().await;
    server.stop().expect("stop");
    server.start_again().expect("start with the new hba file");

    let mut url = url::Url::parse(&db.url).unwrap();
    url.set_username("app").unwrap();
    let right = with_password(url.as_str(), "the-right-password");
    let wrong = with_password(url.as_str(), PASSWORD);

    let mut status = start(&right, &["status"], &[]);
    assert_eq!(status.wait_for_exit(Duration::from_secs(30)).await.code(), Some(0), "{}", status.stderr());

    for args in [vec!["relay", "--sink", "stdout"], vec!["status"], vec!["events", "list", "--status", "pending"]] {
        let started = tokio::time::Instant::now();
        let mut command = start(&wrong, &args, &[]);
        let exit = command.wait_for_exit(Duration::from_secs(30)).await;
        let stderr = command.stderr();
        assert_eq!(exit.code(), Some(2), "{args:?}: {stderr}");
        assert!(started.elapsed() < Duration::from_secs(10), "{args:?}: not at once");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: not one line: {stderr}");
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
        assert!(stderr.contains("password authentication failed"), "{args:?}: {stderr}");
        assert!(!stderr.contains(PASSWORD), "{args:?}: the password was printed: {stderr}");
        assert!(command.stdout().is_empty(), "{args:?}");
    }
    let admin = PgPool::connect(&db.url).await.expect("connect as the admin");
    let pending: i64 =
        sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE status = 'pending' AND attempts = 0")
            .fetch_one(&admin)
            .await
            .unwrap();
    assert_eq!(pending, 3, "nothing was claimed or changed");
}

/// A role of this test's own (roles belong to the whole server) with the relay role's grants and a login.
async fn relay_role(db: &TestDatabase, prefix: &str) -> String {
    let role = format!("{prefix}_{}", uuid::Uuid::now_v7().simple());
    sqlx::raw_sql(&outbox_tests::pg::relay_role_sql(&role)).execute(&db.pool).await.expect("the relay role");
    sqlx::raw_sql(&format!("ALTER ROLE {role} LOGIN")).execute(&db.pool).await.expect("a login");
    role
}

/// `url` with `role` as its user and [`PASSWORD`] as its password (the test server trusts 127.0.0.1: any works).
fn as_role(url: &str, role: &str) -> String {
    let mut url = url::Url::parse(url).expect("a URL");
    url.set_username(role).expect("a URL that takes a user");
    with_password(url.as_str(), PASSWORD)
}

#[tokio::test]
async fn a_role_without_connect_on_the_database_exits_2_at_once_naming_the_refusal_with_the_password_masked() {
    let db = TestDatabase::migrated().await;
    enqueue(&db.pool, 2).await;
    let role = relay_role(&db, "outbox_no_connect").await;
    // PUBLIC's CONNECT is what lets a role in by default: without it, PostgreSQL refuses the login with
    // `FATAL 42501 permission denied for database`.
    sqlx::raw_sql(&format!("REVOKE CONNECT ON DATABASE {} FROM PUBLIC", db.name)).execute(&db.pool).await.unwrap();
    let url = as_role(&db.url, &role);
    for args in [vec!["relay", "--sink", "stdout"], vec!["status"]] {
        let started = tokio::time::Instant::now();
        let mut command = start(&url, &args, &[]);
        let exit = command.wait_for_exit(Duration::from_secs(15)).await;
        let stderr = command.stderr();
        assert_eq!(exit.code(), Some(2), "{args:?}: {stderr}");
        assert!(started.elapsed() < Duration::from_secs(10), "{args:?}: not at once");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: not one line: {stderr}");
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
        assert!(stderr.contains("permission denied for database"), "{args:?}: the cause is not named: {stderr}");
        assert!(!stderr.contains(PASSWORD), "{args:?}: the password was printed: {stderr}");
        assert!(command.stdout().is_empty(), "{args:?}");
    }
    // The relay's line names the database it was refused by, masked.
    let mut relay = start(&url, &["relay", "--sink", "stdout"], &[]);
    relay.wait_for_exit(Duration::from_secs(15)).await;
    let stderr = relay.stderr();
    assert!(stderr.contains(&format!("the database at postgres://{role}:***@127.0.0.1")), "{stderr}");
    let pending: i64 =
        sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE status = 'pending' AND attempts = 0")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(pending, 2, "nothing was changed");
}

#[tokio::test]
async fn missing_outbox_tables_or_a_role_that_may_not_use_them_exit_2_with_the_schema_error() {
    // A database never migrated: the relay's first heartbeat finds no table.
    let unmigrated = TestDatabase::create().await;
    // A role that may log in but holds no grant on the outbox tables.
    let db = TestDatabase::migrated().await;
    let role = format!("outbox_no_grants_{}", uuid::Uuid::now_v7().simple());
    sqlx::raw_sql(&format!("CREATE ROLE {role} LOGIN")).execute(&db.pool).await.unwrap();
    for (url, cause) in
        [(with_password(&unmigrated.url, PASSWORD), "does not exist"), (as_role(&db.url, &role), "permission denied")]
    {
        let mut relay = start(&url, &["relay", "--sink", "stdout"], &[]);
        let exit = relay.wait_for_exit(Duration::from_secs(30)).await;
        let stderr = relay.stderr();
        assert_eq!(exit.code(), Some(2), "{stderr}");
        let last = stderr.lines().last().unwrap_or_default();
        assert!(last.starts_with("error: "), "the error is not the last line: {stderr}");
        assert!(last.contains(cause) && last.contains("outbox migrate"), "{last}");
        assert!(!stderr.contains(PASSWORD), "the password was printed: {stderr}");
    }
}

#[tokio::test]
async fn sigterm_while_the_first_heartbeat_waits_for_the_database_exits_0() {
    let db = TestDatabase::migrated().await;
    // The membership table stays locked, and the relay's statements give up on a lock after 100ms: its first
    // heartbeat fails as against a database that does not answer in time, and is tried again and again.
    let mut lock = db.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE outbox_relays IN ACCESS EXCLUSIVE MODE").execute(&mut *lock).await.unwrap();
    let url = format!("{}&options[lock_timeout]=100ms", with_password(&db.url, PASSWORD));
    let mut relay = start(&url, &["relay", "--sink", "stdout"], &[]);
    relay.wait_for_lines("cannot join the relays of this database; retrying", 2, Duration::from_secs(30)).await;
    let status = relay.terminate().await;
    let stderr = relay.stderr();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(!stderr.lines().any(|line| line.starts_with("error: ")), "{stderr}");
    assert!(relay.stdout().is_empty(), "{}", relay.stdout());
    lock.rollback().await.unwrap();
    let members: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_relays").fetch_one(&db.pool).await.unwrap();
    assert_eq!(members, 0, "the relay never joined");
}
