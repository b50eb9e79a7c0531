//! Relay crashes: three `outbox relay` processes publish to NATS while four producers commit 20,000 events
//! (100,000 with `OUTBOX_SOAK=1`), and a chaos loop SIGKILLs a random relay every 150-450 ms and restarts it, at
//! least 20 times (100 in the soak). Every committed event arrives, nothing else does, duplicates stay within one
//! batch per kill, and each aggregate's events arrive in commit order.

use std::time::Duration;

use outbox_tests::brokers::{Broker, Kind};
use rand::{Rng, SeedableRng};

use crate::nats_stream;
use crate::producers::{Plan, Producers};
use crate::relays::BATCH_SIZE;
use crate::scene::Scene;

/// The sizes of a run: the short one for CI, the soak behind `OUTBOX_SOAK=1`.
struct Sizes {
    events: usize,
    kills: usize,
    per_second: f64,
}

fn sizes() -> Sizes {
    if std::env::var("OUTBOX_SOAK").is_ok_and(|soak| soak == "1") {
        Sizes { events: 100_000, kills: 100, per_second: 1500.0 }
    } else {
        Sizes { events: 20_000, kills: 20, per_second: 1500.0 }
    }
}

pub(crate) async fn relays_killed_at_random_lose_no_event_and_keep_aggregate_order() {
    let sizes = sizes();
    let scene = Scene::new("relay_crashes", 200).await;
    let broker = Broker::start(Kind::Nats);
    nats_stream::create(&broker).await;
    let spec = scene.relay_spec(&nats_stream::sink(&broker));
    let mut relays = Vec::new();
    for slot in 0..3 {
        relays.push(scene.start_relay(&format!("relay{slot}-0"), &spec).await.0);
    }

    let producers = Producers::start(scene.pool(), Plan::new(sizes.events, sizes.per_second, 200));
    let mut rng = rand::rngs::StdRng::from_entropy();
    let mut kills = 0;
    let mut published_at_kills = Vec::new();
    while kills < sizes.kills || !producers.is_done() {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(150..450))).await;
        let slot = rng.gen_range(0..relays.len());
        relays[slot].kill();
        kills += 1;
        published_at_kills.push(scene.count("published").await);
        // Restarted at once, as a supervisor would; it does not wait for the new process to be up.
        relays[slot] = crate::relays::RelayProcess::spawn(&scene.dir, &format!("relay{slot}-{kills}"), &spec);
    }
    let chaos = scene.started.elapsed();
    let ledger = producers.finish(Duration::from_secs(60)).await;
    // The kills must have hit a relay at work, not an idle one after the backlog was gone.
    let busy = published_at_kills.iter().filter(|published| **published < ledger.committed.len() as i64).count();
    assert!(busy >= sizes.kills, "only {busy} of {kills} kills happened while events were waiting");
    scene.wait_drained(Duration::from_secs(if sizes.events > 20_000 { 900 } else { 180 })).await;
    for relay in &mut relays {
        relay.wait_started(Duration::from_secs(60)).await;
    }

    let delivered = nats_stream::read_all(&broker).await;
    let mut audit = Scene::audit(&[]);
    let extra = format!("kills={kills} chaos={:.1}s relays=3", chaos.as_secs_f64());
    // A kill loses at most the one batch it interrupted: published, not marked, published again.
    scene.finish(relays, &ledger, &[delivered], kills * BATCH_SIZE, &extra, &mut audit).await;
}
