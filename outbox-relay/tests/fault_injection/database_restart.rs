//! Database restart: PostgreSQL is stopped (`pg_ctl stop -m fast`, every session cut) under load for 3 s and
//! started again. The two relays, one polling and one woken by `LISTEN/NOTIFY` (`--notify`, polling only every
//! 30 s), ride it out in the same processes: their pools reconnect, the listener comes back (it wakes its relay
//! within seconds of a commit again), and every committed event is delivered. Transactions whose commit was cut
//! off are in doubt and must have committed whole or not at all.

use std::time::Duration;

use outbox_core::Outbox;
use outbox_relay::telemetry::names;
use outbox_tests::brokers::{Broker, Kind};
use outbox_tests::pg::{PrivateServer, TestDatabase};
use tokio::time::Instant;

use crate::nats_stream;
use crate::producers::{self, Plan, Producers, TxOutcome};
use crate::relays::{metric, RelayProcess, BATCH_SIZE};
use crate::scene::Scene;

const DOWNTIME: Duration = Duration::from_secs(3);

async fn listener_connected(relay: &RelayProcess) -> bool {
    let text = relay.scrape().await.unwrap_or_default();
    metric(&text, names::LISTENER_CONNECTED, &[]) == Some(1.0)
}

pub(crate) async fn database_restart_under_load_relays_reconnect_and_finish() {
    let server = PrivateServer::start().unwrap_or_else(|problem| panic!("no private PostgreSQL: {problem}"));
    let scene = Scene::on("database_restart", TestDatabase::create_on(&server.url).await, 100).await;
    let broker = Broker::start(Kind::Nats);
    nats_stream::create(&broker).await;
    let spec = scene.relay_spec(&nats_stream::sink(&broker));
    let (mut polling, _) = scene.start_relay("polling", &spec).await;
    let listening_spec = spec.clone().flag("--notify").option("--poll-interval", "30s");
    let (mut listening, _) = scene.start_relay("listening", &listening_spec).await;
    let mut plan = Plan::new(4000, 250.0, 100);
    plan.notify = true;
    let producers = Producers::start(scene.pool(), plan);
    let deadline = Instant::now() + Duration::from_secs(60);
    while scene.count("published").await < 500 || !listener_connected(&listening).await {
        assert!(Instant::now() < deadline, "no steady state before the restart");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let published_before = scene.count("published").await;
    tokio::task::block_in_place(|| server.stop()).expect("pg_ctl stop");
    let stopped = Instant::now();
    tokio::time::sleep(DOWNTIME).await;
    tokio::task::block_in_place(|| server.start_again()).expect("pg_ctl start");
    let down = stopped.elapsed();

    let mut ledger = producers.finish(Duration::from_secs(120)).await;
    scene.wait_drained(Duration::from_secs(120)).await;
    assert!(polling.is_running() && listening.is_running(), "a relay exited instead of reconnecting");
    // Every session was cut: the relays' sessions now are new ones, and they published what came after.
    let sessions: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND usename LIKE 'fault_relay_%'",
    )
    .fetch_one(scene.pool())
    .await
    .expect("pg_stat_activity");
    assert!(sessions >= 2, "{sessions} relay sessions after the restart");
    let published_after = scene.count("published").await - published_before;
    assert!(published_after >= 500, "only {published_after} events published after the restart");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !listener_connected(&listening).await {
        assert!(Instant::now() < deadline, "the LISTEN connection did not come back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // With the polling relay gone, only a notification wakes the listening one before its 30 s poll.
    polling.stop_gracefully().await;
    let outbox = Outbox::new().with_notify();
    let mut latencies = Vec::new();
    for _ in 0..5 {
        let committed = Instant::now();
        let outcome = producers::transaction(scene.pool(), &outbox, "order-0", 1, false).await;
        let TxOutcome::Committed(written) = &outcome else { panic!("a probe did not commit: {outcome:?}") };
        let id = written[0].id;
        ledger.record(outcome);
        let deadline = committed + Duration::from_secs(10);
        loop {
            let status: String = sqlx::query_scalar("SELECT status FROM outbox_events WHERE id = $1")
                .bind(id)
                .fetch_one(scene.pool())
                .await
                .expect("the probe's status");
            if status == "published" {
                break;
            }
            assert!(Instant::now() < deadline, "a notified event waited more than 10 s: LISTEN is not back");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        latencies.push(committed.elapsed().as_millis());
    }

    let delivered = nats_stream::read_all(&broker).await;
    let mut audit = Scene::audit(&[]);
    let extra = format!(
        "downtime={:.1}s published_after_restart={published_after} notified_latency_ms={latencies:?}",
        down.as_secs_f64()
    );
    // Batches published but not marked when the sessions were cut are published again: one per relay.
    scene.finish(vec![listening], &ledger, &[delivered], 2 * 2 * BATCH_SIZE, &extra, &mut audit).await;
    drop(server);
}
