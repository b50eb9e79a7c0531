//! Producer crash: producer processes (this binary run as a child, enqueueing through outbox-core in
//! transactions) are SIGKILLed in the middle of a transaction, over and over, while a relay publishes to a
//! `file:` sink. Events of a transaction that never committed never appear, neither in the table nor in the
//! sink; a transaction cut during its commit committed whole or not at all; everything committed is delivered.

use std::time::Duration;

use rand::{Rng, SeedableRng};

use crate::deliveries;
use crate::producer_process::{Mode, ProducerProcess};
use crate::producers::Ledger;
use crate::scene::Scene;

const AGGREGATES: u32 = 50;
const STEADY: usize = 3;
const KILLS: usize = 20;
const HANGS: usize = 4;

pub(crate) async fn killed_producers_leave_no_event_behind() {
    let scene = Scene::new("producer_crash", AGGREGATES).await;
    let sink = scene.dir.join("events.jsonl");
    let spec = scene.relay_spec(&format!("file:{}", sink.display()));
    let (relay, _) = scene.start_relay("relay", &spec).await;
    let url = scene.db.url.clone();
    let mut ledger = Ledger::default();
    let mut rng = rand::rngs::StdRng::from_entropy();

    // Producers that hang inside their transaction: certainly killed before any commit.
    for _ in 0..HANGS {
        let mut hung = ProducerProcess::spawn(&url, Mode::Hang, AGGREGATES);
        hung.wait_opened(1, Duration::from_secs(30)).await;
        ledger.absorb(hung.kill(Mode::Hang));
    }
    let hung_events = ledger.rolled_back.len();

    // Steady producers, one of them killed mid-transaction every 100-300 ms and replaced.
    let mut producers: Vec<_> = (0..STEADY).map(|_| ProducerProcess::spawn(&url, Mode::Steady, AGGREGATES)).collect();
    let mut kills = 0;
    while kills < KILLS {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(100..300))).await;
        let slot = rng.gen_range(0..STEADY);
        producers[slot].wait_opened(1, Duration::from_secs(30)).await;
        producers[slot].wait_mid_transaction(Duration::from_secs(30)).await;
        // Killed at once, then replaced (starting the replacement first would give the victim time to commit).
        ledger.absorb(producers.swap_remove(slot).kill(Mode::Steady));
        producers.push(ProducerProcess::spawn(&url, Mode::Steady, AGGREGATES));
        kills += 1;
    }
    for mut producer in producers {
        producer.wait_mid_transaction(Duration::from_secs(30)).await;
        ledger.absorb(producer.kill(Mode::Steady));
        kills += 1;
    }
    let killed_open = ledger.in_doubt.len();
    assert!(killed_open >= KILLS / 2, "only {killed_open} kills found a transaction open");
    assert!(ledger.committed.len() > 500, "the producers committed only {} events", ledger.committed.len());

    scene.wait_drained(Duration::from_secs(120)).await;
    let delivered = deliveries::read_file_sink(&sink);
    let mut audit = Scene::audit(&[]);
    let extra = format!(
        "producer_kills={kills} killed_with_open_tx={killed_open} hung_events={hung_events} producer_transactions={}",
        ledger.transactions
    );
    // One relay, never disturbed: no duplicates at all.
    let counts = scene.finish(vec![relay], &ledger, &[delivered], 0, &extra, &mut audit).await;
    assert!(
        counts.in_doubt_absent >= KILLS / 2,
        "only {} killed transactions left nothing behind",
        counts.in_doubt_absent
    );
}
