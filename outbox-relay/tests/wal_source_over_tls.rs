//! The write-ahead-log source's replication connection over TLS, against a real PostgreSQL on 127.0.0.1 that takes
//! TCP connections only with TLS (`hostssl` lines alone, for `replication` too) and a server certificate of a
//! private CA: with `sslmode=verify-full` and that CA the relay streams, with the password exchanged and every
//! payload sent inside TLS; with `sslmode=disable`, or a CA that did not sign the server's certificate, it stops at
//! once with one line saying why.
//!
//! The library tests give the pool the server's Unix socket (a `local` line), so that only the replication
//! connection, the one under test, goes over TCP; the `outbox` binary's test makes every connection over TCP with
//! TLS.
#![cfg(feature = "wal")]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use outbox_core::store::{PgStore, Source};
use outbox_relay::{CancellationToken, Error, RelayConfig, RunSummary, WalRelay};
use outbox_tests::certificates::Certificates;
use outbox_tests::pg::{PrivateServer, TestDatabase};
use uuid::Uuid;

/// Unix-socket connections trusted; over TCP, only TLS, with a password, for replication too.
const HBA: &str = "\
local   all          all                  trust
hostssl all          all    127.0.0.1/32  scram-sha-256
hostssl replication  all    127.0.0.1/32  scram-sha-256
";

const PASSWORD: &str = "tls-only-s3cret";

/// A private server that takes only TLS over TCP, its CA's files, and a migrated database switched to the WAL
/// source (`outbox wal enable`), its pool on the Unix socket.
struct TlsOnly {
    db: TestDatabase,
    certificates: Certificates,
    server: PrivateServer,
    dir: tempfile::TempDir,
}

impl TlsOnly {
    async fn start() -> Self {
        let dir = tempfile::Builder::new().prefix("outbox-wal-tls-").tempdir().unwrap();
        let certificates = Certificates::generate(dir.path(), "pg");
        let server =
            PrivateServer::start_with_tls(&certificates, HBA, "").unwrap_or_else(|problem| panic!("{problem}"));
        let db = TestDatabase::create_on(&server.socket_url()).await;
        outbox_core::migrate(&db.pool).await.unwrap();
        PgStore::new(db.pool.clone()).switch_source(Source::Wal).await.unwrap();
        sqlx::query(&format!("ALTER ROLE postgres PASSWORD '{PASSWORD}'")).execute(&db.pool).await.unwrap();
        Self { db, certificates, server, dir }
    }

    /// The database's URL over TCP, with `tls` as its query.
    fn tcp_url(&self, tls: &[(&str, &Path)]) -> String {
        let mut url = url::Url::parse(&format!(
            "postgres://postgres:{PASSWORD}@127.0.0.1:{}/{}",
            self.server.port(),
            self.db.name
        ))
        .unwrap();
        for (key, value) in tls {
            url.query_pairs_mut().append_pair(key, &value.to_string_lossy());
        }
        url.into()
    }

    fn relay(&self, url: &str, publisher: common::RecordingPublisher) -> WalRelay {
        let config = RelayConfig::builder().shutdown_timeout(Duration::from_secs(5)).build().unwrap();
        WalRelay::new(self.db.pool.clone(), url, publisher, config).unwrap()
    }

    /// Runs a relay of `url` that the server must refuse; its error, within 30 s.
    async fn refused(&self, url: &str) -> Error {
        let recorder = common::Recorder::new();
        let run = self.relay(url, recorder.for_relay(0)).run(CancellationToken::new());
        let ended = tokio::time::timeout(Duration::from_secs(30), run).await;
        let error = ended.expect("the relay stops at once, not retrying for ever").expect_err("the relay is refused");
        assert_eq!(recorder.count(), 0, "nothing published");
        error
    }
}

/// Waits until `recorder` saw every id of `ids`; panics with the relay's error if it stops first.
async fn wait_published(
    recorder: &common::Recorder,
    ids: &[Uuid],
    relay: &mut tokio::task::JoinHandle<outbox_relay::Result<RunSummary>>,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let seen: Vec<Uuid> = recorder.seen().iter().map(|seen| seen.id).collect();
        if ids.iter().all(|id| seen.contains(id)) {
            return;
        }
        if relay.is_finished() {
            panic!("the relay stopped before publishing: {:?}", relay.await.unwrap());
        }
        assert!(Instant::now() < deadline, "published {seen:?} of {ids:?} within 60 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn with_verify_full_and_the_servers_ca_the_relay_streams_over_tls_from_a_server_that_takes_only_tls() {
    let tls = TlsOnly::start().await;
    let pending = common::enqueue(&tls.db.pool, &[common::event("tls", 0), common::event("tls", 1)]).await;
    let url = tls.tcp_url(&[("sslmode", Path::new("verify-full")), ("sslrootcert", &tls.certificates.ca)]);
    let recorder = common::Recorder::new();
    let shutdown = CancellationToken::new();
    let mut relay = tokio::spawn(tls.relay(&url, recorder.for_relay(0)).run(shutdown.clone()));
    wait_published(&recorder, &pending, &mut relay).await;

    let streamed = common::enqueue(&tls.db.pool, &[common::event("tls", 2)]).await;
    wait_published(&recorder, &streamed, &mut relay).await;
    let encrypted: Vec<(bool, String)> = sqlx::query_as(
        "SELECT s.ssl, r.application_name FROM pg_stat_replication r JOIN pg_stat_ssl s ON s.pid = r.pid",
    )
    .fetch_all(&tls.db.pool)
    .await
    .unwrap();
    assert!(
        matches!(encrypted.as_slice(), [(true, name)] if name.starts_with("outbox-relay-")),
        "the relay's walsender, and its connection is TLS: {encrypted:?}"
    );

    shutdown.cancel();
    let summary = tokio::time::timeout(Duration::from_secs(30), relay).await.unwrap().unwrap().unwrap();
    assert_eq!(summary.published, 3);
    assert_eq!(common::count(&tls.db.pool, "published").await, 3, "every row settled as published");
}

#[tokio::test]
async fn with_sslmode_allow_or_prefer_the_relay_uses_tls_when_the_server_takes_only_tls() {
    let tls = TlsOnly::start().await;
    let mut published = 0;
    // `allow` connects without TLS first and, refused, with TLS; `prefer` asks for TLS first (neither verifies).
    for (n, mode) in ["allow", "prefer"].into_iter().enumerate() {
        let n = u32::try_from(n).unwrap();
        let ids = common::enqueue(&tls.db.pool, &[common::event(mode, n)]).await;
        let recorder = common::Recorder::new();
        let shutdown = CancellationToken::new();
        let url = tls.tcp_url(&[("sslmode", Path::new(mode))]);
        let mut relay = tokio::spawn(tls.relay(&url, recorder.for_relay(0)).run(shutdown.clone()));
        wait_published(&recorder, &ids, &mut relay).await;
        let encrypted: Vec<bool> =
            sqlx::query_scalar("SELECT s.ssl FROM pg_stat_replication r JOIN pg_stat_ssl s ON s.pid = r.pid")
                .fetch_all(&tls.db.pool)
                .await
                .unwrap();
        assert_eq!(encrypted, [true], "{mode}: the walsender's connection is TLS");
        shutdown.cancel();
        published += tokio::time::timeout(Duration::from_secs(30), relay).await.unwrap().unwrap().unwrap().published;
    }
    assert_eq!(published, 2);
}

#[tokio::test]
async fn with_sslmode_disable_a_server_that_takes_only_tls_refuses_the_relay_at_once_with_one_line() {
    let tls = TlsOnly::start().await;
    common::enqueue(&tls.db.pool, &[common::event("plain", 0)]).await;
    let error = tls.refused(&tls.tcp_url(&[("sslmode", Path::new("disable"))])).await;
    let text = error.to_string();
    assert!(matches!(error, Error::Refused { .. }), "{error:?}");
    assert!(text.contains("no pg_hba.conf entry") && text.contains("no encryption"), "{text}");
    assert!(!text.contains('\n') && !text.contains(PASSWORD), "one line, the password masked: {text}");
}

#[tokio::test]
async fn with_verify_full_a_server_certificate_that_the_trusted_ca_did_not_sign_is_refused_at_once() {
    let tls = TlsOnly::start().await;
    common::enqueue(&tls.db.pool, &[common::event("mitm", 0)]).await;
    let other = Certificates::generate(tls.dir.path(), "other");
    let error = tls.refused(&tls.tcp_url(&[("sslmode", Path::new("verify-full")), ("sslrootcert", &other.ca)])).await;
    let text = error.to_string();
    assert!(matches!(error, Error::Refused { .. }), "{error:?}");
    assert!(text.contains("invalid peer certificate") && text.contains("UnknownIssuer"), "{text}");
    assert!(!text.contains('\n') && !text.contains(PASSWORD), "one line, the password masked: {text}");
}

/// The `outbox` binary with a URL that asks for verified TLS: every connection it makes (its pool, the replication
/// stream) goes over TLS to a server that takes nothing else over TCP, `outbox status` answers and the WAL relay
/// publishes. (sqlx was built without TLS before: the pool could not connect with `sslmode=verify-full`.)
#[tokio::test]
async fn the_outbox_binary_reaches_a_server_that_takes_only_tls_for_every_connection() {
    let tls = TlsOnly::start().await;
    let ids = common::enqueue(&tls.db.pool, &[common::event("cli", 0)]).await;
    let url = tls.tcp_url(&[("sslmode", Path::new("verify-full")), ("sslrootcert", &tls.certificates.ca)]);
    let outbox = outbox_tests::outbox!().database(&url);
    let status = outbox.run(["status", "--json"]);
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let sink = tls.dir.path().join("events.jsonl");
    let sink_url = format!("file:{}", sink.display());
    let mut relay = outbox.spawn(["relay", "--source", "wal", "--sink", &sink_url]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&sink).unwrap_or_default().contains(&ids[0].to_string()) {
        assert!(Instant::now() < deadline, "nothing published within 60 s: {}", relay.output());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let encrypted: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
          WHERE a.datname = current_database() AND a.client_addr IS NOT NULL AND NOT s.ssl",
    )
    .fetch_one(&tls.db.pool)
    .await
    .unwrap();
    assert_eq!(encrypted, 0, "a TCP connection of the relay without TLS");
    assert_eq!(relay.terminate().await.code(), Some(0), "{}", relay.output());
}
