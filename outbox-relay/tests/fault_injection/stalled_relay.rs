//! Stalled relay: a relay is SIGSTOPped while it publishes a batch, past its 1 s lease; a second relay removes it,
//! takes its partitions over (at new epochs) and publishes the batch; then the first gets SIGCONT. Its outcomes are
//! fenced out (the rows keep the second relay's marks, its log says so), no transaction stayed open during the
//! stall, and the duplicates stay within that one batch.

use std::collections::HashMap;
use std::time::Duration;

use outbox_tests::brokers::{Broker, Kind};
use time::OffsetDateTime;
use tokio::time::Instant;
use uuid::Uuid;

use crate::nats_stream;
use crate::producers::{Plan, Producers};
use crate::relays::{RelayProcess, BATCH_SIZE};
use crate::scene::Scene;

const LEASE: Duration = Duration::from_secs(1);

/// The events of the batches `owner` is publishing: id and the epoch of its partition.
async fn held_by(scene: &Scene, owner: Uuid) -> HashMap<Uuid, i64> {
    sqlx::query_as(
        "SELECT e.id, p.epoch FROM outbox_batches b
           JOIN outbox_events e ON e.id = ANY(b.events) AND e.status = 'pending'
           JOIN outbox_partitions p ON p.partition = e.partition
          WHERE b.relay_id = $1",
    )
    .bind(owner)
    .fetch_all(scene.pool())
    .await
    .expect("read the leases")
    .into_iter()
    .collect()
}

/// Stops `relay` at a moment it holds a batch; returns that batch.
async fn stop_holding_a_batch(scene: &Scene, relay: &RelayProcess, owner: Uuid) -> HashMap<Uuid, i64> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "the relay never held a batch when stopped");
        if held_by(scene, owner).await.is_empty() {
            tokio::time::sleep(Duration::from_millis(2)).await;
            continue;
        }
        relay.pause();
        // Frozen now; a statement it sent just before the stop still runs at the server. Then what the table says
        // it holds, it holds for good: any batch it publishes after the stall was recorded before it.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let held = held_by(scene, owner).await;
        if !held.is_empty() {
            return held;
        }
        relay.resume();
    }
}

pub(crate) async fn stalled_relay_is_fenced_and_duplicates_stay_within_one_batch() {
    let scene = Scene::new("stalled_relay", 100).await;
    let broker = Broker::start(Kind::Nats);
    nats_stream::create(&broker).await;
    let spec = scene.relay_spec(&nats_stream::sink(&broker)).option("--lease", "1s");
    let producers = Producers::start(scene.pool(), Plan::new(4000, 800.0, 100));
    let (stale, stale_id) = scene.start_relay("stale", &spec).await;

    let held = stop_holding_a_batch(&scene, &stale, stale_id).await;
    let stopped_at = Instant::now();
    let open: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
          WHERE datname = current_database() AND usename LIKE 'fault_relay_%'
            AND (state LIKE 'idle in transaction%' OR backend_xid IS NOT NULL)",
    )
    .fetch_one(scene.pool())
    .await
    .expect("pg_stat_activity");
    assert_eq!(open, 0, "the stalled relay holds a transaction open");

    let (successor, successor_id) = scene.start_relay("successor", &spec).await;
    let taken_over = Instant::now() + Duration::from_secs(60);
    let marks = loop {
        let rows: Vec<(Uuid, String, i64, Option<OffsetDateTime>)> = sqlx::query_as(
            "SELECT e.id, e.status, p.epoch, e.published_at FROM outbox_events e
                   JOIN outbox_partitions p ON p.partition = e.partition WHERE e.id = ANY($1)",
        )
        .bind(held.keys().copied().collect::<Vec<_>>())
        .fetch_all(scene.pool())
        .await
        .expect("read the held rows");
        let done = rows.iter().all(|(id, status, epoch, _)| status == "published" && *epoch > held[id]);
        if done && stopped_at.elapsed() >= 3 * LEASE {
            break rows.into_iter().map(|(id, _, _, published_at)| (id, published_at)).collect::<HashMap<_, _>>();
        }
        assert!(Instant::now() < taken_over, "the successor did not take the stalled relay's batch over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let stall = stopped_at.elapsed();

    stale.resume();
    let deadline = Instant::now() + Duration::from_secs(60);
    let fenced = loop {
        let lines = stale.lines_saying("taken over before marking");
        if let Some(line) = lines.first() {
            break line["events"].as_u64().expect("the fenced count");
        }
        assert!(Instant::now() < deadline, "the stalled relay never reported its marks fenced");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(fenced >= 1 && fenced as usize <= BATCH_SIZE, "fenced {fenced} events");

    let ledger = producers.finish(Duration::from_secs(120)).await;
    scene.wait_drained(Duration::from_secs(120)).await;
    let after: Vec<(Uuid, Option<OffsetDateTime>)> =
        sqlx::query_as("SELECT id, published_at FROM outbox_events WHERE id = ANY($1)")
            .bind(held.keys().copied().collect::<Vec<_>>())
            .fetch_all(scene.pool())
            .await
            .expect("read the held rows again");
    for (id, published_at) in after {
        assert_eq!(published_at, marks[&id], "the stalled relay changed the mark of {id}");
    }
    assert_ne!(stale_id, successor_id);

    let delivered = nats_stream::read_all(&broker).await;
    let mut audit = Scene::audit(&[]);
    let extra = format!("held={} fenced={fenced} stall={:.1}s lease=1s", held.len(), stall.as_secs_f64());
    // The stalled relay publishes each event of its batch at most once more than the successor does.
    scene.finish(vec![stale, successor], &ledger, &[delivered], held.len(), &extra, &mut audit).await;
}
