//! What every scenario sets up and ends with: a fresh database migrated by `outbox migrate`, the domain table, a
//! least-privileged relay role of its own, a directory for logs and sinks; at the end, the delivered-set checks,
//! the printed counts and the security audit.

use std::path::PathBuf;
use std::time::Duration;

use outbox_tests::pg::TestDatabase;
use sqlx::PgPool;
use tokio::time::Instant;
use uuid::Uuid;

use crate::audit::{self, Audit};
use crate::deliveries::{self, Delivered};
use crate::events;
use crate::producers::Ledger;
use crate::relays::{RelayProcess, RelaySpec};

/// The relay role's password: it is in the relays' `DATABASE_URL`, and must never be printed.
pub(crate) const RELAY_PASSWORD: &str = "pw-relay-c0ffee-7d1";

/// One scenario's database, role and directory.
pub(crate) struct Scene {
    pub(crate) name: &'static str,
    pub(crate) db: TestDatabase,
    /// The URL of the least-privileged relay role, for the relay processes.
    pub(crate) relay_url: String,
    pub(crate) dir: PathBuf,
    pub(crate) started: Instant,
    /// Removes `dir` when the scene is dropped at the end of its scenario, after [`finish`](Self::finish) stopped
    /// the relays and audited their logs and the scenario's last checks passed; a failed scenario keeps it (see the
    /// `Drop` impl).
    dir_guard: tempfile::TempDir,
}

impl Drop for Scene {
    /// A failed scenario keeps its directory, whose path it printed at its start: the relays' logs and sinks are
    /// what explains the failure.
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.dir_guard.disable_cleanup(true);
        }
    }
}

impl Scene {
    /// A scene on the test server with `aggregates` orders.
    pub(crate) async fn new(name: &'static str, aggregates: u32) -> Self {
        Self::on(name, TestDatabase::create().await, aggregates).await
    }

    /// A scene on `db` (fresh and empty) with `aggregates` orders.
    pub(crate) async fn on(name: &'static str, db: TestDatabase, aggregates: u32) -> Self {
        let started = Instant::now();
        audit::run_cli(&db.url, &["migrate"], true);
        events::create_domain(&db.pool, aggregates).await;
        let role = format!("fault_relay_{}", Uuid::now_v7().simple());
        sqlx::raw_sql(&outbox_tests::pg::relay_role_sql(&role)).execute(&db.pool).await.expect("the relay role");
        sqlx::raw_sql(&format!("ALTER ROLE {role} LOGIN PASSWORD '{RELAY_PASSWORD}'"))
            .execute(&db.pool)
            .await
            .expect("let the relay role log in");
        let mut relay_url = url::Url::parse(&db.url).expect("the database URL");
        relay_url.set_username(&role).expect("a user name");
        relay_url.set_password(Some(RELAY_PASSWORD)).expect("a password");
        let dir_guard = tempfile::Builder::new()
            .prefix(&format!("outbox-fault-{name}-"))
            .tempdir()
            .expect("the scenario's directory");
        let dir = dir_guard.path().to_path_buf();
        println!("    [{name}] logs and sinks in {}", dir.display());
        Self { name, db, relay_url: relay_url.to_string(), dir, started, dir_guard }
    }

    /// The admin pool (producers and checks).
    pub(crate) fn pool(&self) -> &PgPool {
        &self.db.pool
    }

    /// A relay spec publishing to `sink` as the least-privileged role.
    pub(crate) fn relay_spec(&self, sink: &str) -> RelaySpec {
        RelaySpec::new(&self.relay_url, sink)
    }

    /// Starts a relay process and waits until it runs; returns it with its relay id.
    pub(crate) async fn start_relay(&self, name: &str, spec: &RelaySpec) -> (RelayProcess, Uuid) {
        let mut relay = RelayProcess::spawn(&self.dir, name, spec);
        let id = relay.wait_started(Duration::from_secs(60)).await;
        (relay, id)
    }

    /// Rows with `status`.
    pub(crate) async fn count(&self, status: &str) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE status = $1")
            .bind(status)
            .fetch_one(self.pool())
            .await
            .expect("count")
    }

    /// Waits until no event is pending or in flight (at most `timeout`).
    pub(crate) async fn wait_drained(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let left: i64 =
                sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE status IN ('pending', 'in_flight')")
                    .fetch_one(self.pool())
                    .await
                    .unwrap_or(i64::MAX);
            if left == 0 {
                return;
            }
            if Instant::now() >= deadline {
                let errors: Vec<(Option<String>, i64)> = sqlx::query_as(
                    "SELECT last_error, count(*) FROM outbox_events WHERE status IN ('pending', 'in_flight')
                      GROUP BY last_error ORDER BY count(*) DESC LIMIT 5",
                )
                .fetch_all(self.pool())
                .await
                .unwrap_or_default();
                panic!("[{}] {left} events still unpublished after {timeout:?}; last errors: {errors:?}", self.name);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The scenario's end: scrapes the live relays' metrics, stops them gracefully (exit 0), checks the delivered
    /// `streams` against `ledger` (at most `max_duplicates` duplicates), prints the counts with `extra`, and
    /// audits everything printed for leaks. Returns the counts.
    pub(crate) async fn finish(
        &self,
        relays: Vec<RelayProcess>,
        ledger: &Ledger,
        streams: &[Vec<Delivered>],
        max_duplicates: usize,
        extra: &str,
        audit: &mut Audit,
    ) -> deliveries::Counts {
        for mut relay in relays {
            if let Some(scrape) = relay.scrape().await {
                audit.add(format!("{} /metrics", relay.name), scrape);
            }
            relay.stop_gracefully().await;
        }
        let counts = deliveries::check(self.pool(), ledger, streams, max_duplicates).await;
        let duration = self.started.elapsed();
        println!(
            "    [{}] committed={} rolled_back={} in_doubt_committed={} in_doubt_absent={} delivered={} \
             duplicates={} (bound {max_duplicates}) {extra} duration={:.1}s",
            self.name,
            counts.committed,
            counts.rolled_back,
            counts.in_doubt_committed,
            counts.in_doubt_absent,
            counts.delivered,
            counts.duplicates,
            duration.as_secs_f64()
        );
        audit.add_logs(&self.dir);
        audit.add_stored_errors(self.pool()).await;
        let shown: Vec<Uuid> =
            ledger.committed.iter().step_by((ledger.committed.len() / 3).max(1)).map(|w| w.id).collect();
        audit.add_cli(&self.db.url, &shown);
        audit.check(self.name);
        counts
    }

    /// The audit every scenario fills: it looks for the relay role's password too.
    pub(crate) fn audit(secrets: &[&str]) -> Audit {
        let mut all = vec![RELAY_PASSWORD];
        all.extend_from_slice(secrets);
        Audit::new(&all)
    }
}
