//! The WAL source under crashes, as real `outbox` processes on a real PostgreSQL with `wal_level = logical`: the
//! active relay is killed with SIGKILL while events flow, and the standby started on the same slot publishes within
//! seconds of the kill, with nothing lost and the order per aggregate exact; the active relay loses its replication
//! connection, or every connection it has, again and again, and a relay (the standby, or the same one once it
//! reconnects) publishes within seconds, losing nothing, in order; killed again and again while 20,000 events of
//! both modes flow, the relays that follow lose nothing and publish every aggregate in order.
#![cfg(feature = "wal")]

mod bad_input_support;
mod common;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_tests::pg::TestDatabase;
use uuid::Uuid;

fn sink(dir: &Path, name: &str) -> (PathBuf, String) {
    let path = dir.join(format!("{name}.jsonl"));
    let url = format!("file:{}", path.display());
    (path, url)
}

/// A migrated database published by the WAL source (`outbox wal enable`), and a new directory for the sinks,
/// removed when dropped: the test keeps it until its relays are stopped.
async fn wal_database(name: &str) -> (TestDatabase, tempfile::TempDir) {
    let db = TestDatabase::migrated().await;
    let enabled = outbox_tests::outbox!().database(&db.url).run(["wal", "enable"]);
    assert!(enabled.status.success(), "{}", String::from_utf8_lossy(&enabled.stderr));
    let dir = tempfile::Builder::new().prefix(&format!("outbox-wal-{name}-")).tempdir().unwrap();
    (db, dir)
}

/// Checks the order of `published` (duplicates included, in the order a consumer saw them) against `ids`, where
/// event i is number i / `aggregates` of aggregate i % `aggregates`: an event may come again (what a relay had in
/// flight when it died or was cut off), but it is first published only after every earlier event of its
/// aggregate. Returns the distinct events published.
fn first_published_in_order(ids: &[Uuid], aggregates: u32, published: impl IntoIterator<Item = Uuid>) -> HashSet<Uuid> {
    let aggregates = aggregates as usize;
    let position: HashMap<Uuid, (usize, usize)> =
        ids.iter().enumerate().map(|(i, id)| (*id, (i % aggregates, i / aggregates))).collect();
    let mut seen = HashSet::new();
    let mut first_published: HashMap<usize, usize> = HashMap::new();
    for id in published {
        let (aggregate, n) = *position.get(&id).expect("an event that was enqueued");
        if seen.insert(id) {
            let count = first_published.entry(aggregate).or_default();
            assert_eq!(n, *count, "aggregate {aggregate}: event {n} first published before event {count}");
            *count += 1;
        }
    }
    seen
}

/// The longest a takeover may take, from the active relay's death or lost connection to the next publish.
const TAKEOVER: Duration = Duration::from_secs(10);

/// How long after now the first line is written to `sink` (watched every 10 ms, for at most a minute).
fn first_line(sink: PathBuf) -> tokio::task::JoinHandle<Duration> {
    let from = Instant::now();
    tokio::spawn(async move {
        while common::written(&sink).is_empty() {
            assert!(from.elapsed() < Duration::from_secs(60), "nothing was written to {sink:?} within a minute");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        from.elapsed()
    })
}

#[tokio::test]
async fn a_standby_takes_over_after_sigkill_with_nothing_lost_and_every_aggregate_in_order() {
    const AGGREGATES: u32 = 20;
    const ROUNDS: u32 = 40;
    let (db, dir) = wal_database("takeover").await;
    let (first_sink, first_url) = sink(dir.path(), "first");
    let (second_sink, second_url) = sink(dir.path(), "second");

    let mut first = bad_input_support::start(&db.url, &["relay", "--source", "wal", "--sink", &first_url], &[]);
    let mut ids = common::enqueue_interleaved(&db.pool, AGGREGATES, 1).await;
    common::wait_until(Duration::from_secs(60), "the first relay published", || async {
        !common::written(&first_sink).is_empty()
    })
    .await;
    let mut second = bad_input_support::start(&db.url, &["relay", "--source", "wal", "--sink", &second_url], &[]);
    second.wait_for_lines("standing by", 1, Duration::from_secs(30)).await;
    for round in 1..ROUNDS / 2 {
        let batch: Vec<_> = (0..AGGREGATES).map(|a| common::event(format!("agg-{a}"), round)).collect();
        ids.extend(common::enqueue(&db.pool, &batch).await);
    }
    first.signal("-KILL");
    // From the kill to the standby's first publish: the events enqueued from now on, and any the first relay had
    // not settled, wait for it.
    let first_publish = first_line(second_sink.clone());
    for round in ROUNDS / 2..ROUNDS {
        let batch: Vec<_> = (0..AGGREGATES).map(|a| common::event(format!("agg-{a}"), round)).collect();
        ids.extend(common::enqueue(&db.pool, &batch).await);
    }
    let takeover = first_publish.await.unwrap();
    // A standby tries every 500 ms, and the slot is free once the server has seen the connection close.
    assert!(takeover <= TAKEOVER, "the standby published its first event {takeover:?} after the kill");
    common::wait_until(Duration::from_secs(60), "the standby published what was left", || async {
        common::count(&db.pool, "published").await == ids.len() as i64
    })
    .await;

    let published = common::written(&first_sink).into_iter().chain(common::written(&second_sink));
    assert_eq!(first_published_in_order(&ids, AGGREGATES, published).len(), ids.len(), "events lost");
    assert_eq!(second.terminate().await.code(), Some(0));
}

/// How the test cuts the active relay off the database.
#[derive(Debug, Clone, Copy)]
enum Cut {
    /// Its replication connection only (as when the server's `wal_sender_timeout` ends it): the relay still holds
    /// the slot's lock.
    Replication,
    /// Every session it has (as when its network goes): the lock is released with them.
    Everything,
}

/// The walsender that streams the WAL relay's slot and the application name its relay gave it
/// (`outbox-relay-RELAY_ID`); `None` while no relay streams it.
async fn reader(db: &TestDatabase) -> Option<(i32, String)> {
    sqlx::query_as(
        "SELECT s.active_pid, a.application_name
           FROM outbox_control c
           JOIN pg_replication_slots s ON s.slot_name = c.wal_slot AND s.active
           JOIN pg_stat_activity a ON a.pid = s.active_pid",
    )
    .fetch_optional(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn after_the_active_relay_loses_its_connections_a_relay_takes_over_within_seconds_losing_nothing_in_order() {
    const AGGREGATES: u32 = 20;
    const CUTS: [Cut; 4] = [Cut::Replication, Cut::Everything, Cut::Replication, Cut::Everything];
    let (db, dir) = wal_database("cut").await;
    // One file for both relays, appended to as a broker would receive: the order a consumer sees.
    let (sink_path, sink_url) = sink(dir.path(), "both");
    // Each relay's sessions carry an application name of their own, so that the test can cut one relay off.
    let names = ["outbox_test_relay_a", "outbox_test_relay_b"];
    let mut relays = Vec::new();
    for name in names {
        let mut url = url::Url::parse(&db.url).unwrap();
        url.query_pairs_mut().append_pair("application_name", name);
        let mut relay = bad_input_support::start(url.as_str(), &["relay", "--source", "wal", "--sink", &sink_url], &[]);
        let started = relay.wait_for_lines("WAL relay started", 1, Duration::from_secs(30)).await;
        let id = started[0].split("relay_id=").nth(1).and_then(|rest| rest.split_whitespace().next()).unwrap();
        relays.push((relay, format!("outbox-relay-{id}")));
    }
    common::wait_until(Duration::from_secs(30), "a relay streams the slot", || async { reader(&db).await.is_some() })
        .await;

    // Round r holds event r of every aggregate, in one transaction, every 50 ms until the cuts are done.
    let stop = Arc::new(AtomicBool::new(false));
    let producer = tokio::spawn({
        let (pool, stop) = (db.pool.clone(), Arc::clone(&stop));
        async move {
            let mut ids = Vec::new();
            for round in 0.. {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let batch: Vec<_> = (0..AGGREGATES).map(|a| common::event(format!("agg-{a}"), round)).collect();
                ids.extend(common::enqueue(&pool, &batch).await);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            ids
        }
    });
    let mut markers = Vec::new();
    let mut takeovers = Vec::new();
    for (i, cut) in CUTS.into_iter().enumerate() {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let (walsender, application) = reader(&db).await.expect("a relay streams the slot");
        let cut_off = relays.iter().position(|(_, name)| *name == application).expect("one of the two relays");
        let terminated: Vec<bool> = match cut {
            Cut::Replication => {
                sqlx::query_scalar("SELECT pg_terminate_backend($1)").bind(walsender).fetch_all(&db.pool).await.unwrap()
            }
            Cut::Everything => sqlx::query_scalar(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                  WHERE datname = current_database() AND (pid = $1 OR application_name = $2)",
            )
            .bind(walsender)
            .bind(names[cut_off])
            .fetch_all(&db.pool)
            .await
            .unwrap(),
        };
        // The walsender, and for `Everything` at least the connection that holds the slot's lock too.
        let sessions = match cut {
            Cut::Replication => 1,
            Cut::Everything => 2,
        };
        assert!(terminated.len() >= sessions, "{cut:?}: {terminated:?}");
        assert!(terminated.iter().all(|&done| done), "{cut:?}: {terminated:?}");
        let cut_at = Instant::now();
        // An event enqueued right after the cut: published once a relay streams again.
        let marker = common::enqueue(&db.pool, &[common::event(format!("marker-{i}"), 0)]).await[0];
        common::wait_until(TAKEOVER + Duration::from_secs(20), "the marker is published", || async {
            common::written(&sink_path).contains(&marker)
        })
        .await;
        let took = cut_at.elapsed();
        let (new_walsender, application) = reader(&db).await.expect("a relay streams the slot again");
        assert_ne!(new_walsender, walsender, "{cut:?}: a new replication connection");
        let taken_by = relays.iter().position(|(_, name)| *name == application).expect("one of the two relays");
        takeovers.push((cut, names[cut_off], names[taken_by], took));
        assert!(took <= TAKEOVER, "{cut:?}: the next publish came {took:?} after the cut: {takeovers:?}");
        markers.push(marker);
    }
    stop.store(true, Ordering::SeqCst);
    let ids = producer.await.unwrap();
    common::wait_until(Duration::from_secs(60), "every event is published", || async {
        let written: HashSet<Uuid> = common::written(&sink_path).into_iter().collect();
        ids.iter().chain(&markers).all(|id| written.contains(id))
    })
    .await;

    let published = common::written(&sink_path).into_iter().filter(|id| !markers.contains(id));
    assert_eq!(first_published_in_order(&ids, AGGREGATES, published).len(), ids.len(), "events lost");
    let settled = i64::try_from(ids.len() + markers.len()).unwrap();
    common::wait_until(Duration::from_secs(30), "every row is settled", || async {
        common::count(&db.pool, "published").await == settled
    })
    .await;
    for (mut relay, _) in relays {
        assert_eq!(relay.terminate().await.code(), Some(0), "a lost connection is retried, not fatal");
    }
}

#[tokio::test]
async fn repeated_sigkills_during_20000_events_of_200_aggregates_in_both_modes_lose_nothing_and_keep_order() {
    const AGGREGATES: u32 = 200;
    const ROUNDS: u32 = 100;
    const KILLS: usize = 5;
    let (db, dir) = wal_database("kills").await;
    let mut sinks = Vec::new();
    let start_relay = |sinks: &mut Vec<PathBuf>| {
        let (path, url) = sink(dir.path(), &format!("relay-{}", sinks.len()));
        sinks.push(path);
        bad_input_support::start(&db.url, &["relay", "--source", "wal", "--sink", &url], &[])
    };
    let mut relay = start_relay(&mut sinks);
    common::wait_for_the_slot(&db).await;

    // Round r holds event r of every aggregate, in one transaction: rows in even rounds, logical decoding
    // messages (no row) in odd ones.
    let pool = db.pool.clone();
    let producer = tokio::spawn(async move {
        let mut ids = Vec::with_capacity((AGGREGATES * ROUNDS) as usize);
        for round in 0..ROUNDS {
            let batch: Vec<_> = (0..AGGREGATES).map(|a| common::event(format!("agg-{a}"), round)).collect();
            if round % 2 == 0 {
                ids.extend(common::enqueue(&pool, &batch).await);
            } else {
                let mut tx = pool.begin().await.unwrap();
                ids.extend(outbox_core::Outbox::new().via_wal().enqueue_all(&mut tx, &batch).await.unwrap());
                tx.commit().await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
        ids
    });
    for _ in 0..KILLS {
        tokio::time::sleep(Duration::from_millis(800)).await;
        relay.signal("-KILL");
        relay.wait_for_exit(Duration::from_secs(10)).await;
        relay = start_relay(&mut sinks);
    }
    let ids = producer.await.unwrap();
    assert_eq!(ids.len(), (AGGREGATES * ROUNDS) as usize);
    let all_written = || sinks.iter().flat_map(|sink| common::written(sink)).collect::<HashSet<Uuid>>();
    common::wait_until(Duration::from_secs(120), "the last relay published every event", || async {
        all_written().len() >= ids.len()
    })
    .await;
    let published_by_the_killed: usize = sinks[..KILLS].iter().map(|sink| common::written(sink).len()).sum();
    assert!(published_by_the_killed > 0, "the kills came before anything was published: the test proves nothing");

    // Event i is number i / AGGREGATES of aggregate i % AGGREGATES. Each relay publishes every aggregate in
    // order; across relays an event may come again (what a killed relay had in flight), but an event is first
    // published only after every earlier event of its aggregate.
    let position: HashMap<Uuid, (usize, usize)> =
        ids.iter().enumerate().map(|(i, id)| (*id, (i % AGGREGATES as usize, i / AGGREGATES as usize))).collect();
    let mut seen = HashSet::new();
    let mut first_published: HashMap<usize, usize> = HashMap::new();
    for sink in &sinks {
        let mut last: HashMap<usize, usize> = HashMap::new();
        for id in common::written(sink) {
            let (aggregate, n) = *position.get(&id).expect("an event that was enqueued");
            if let Some(previous) = last.insert(aggregate, n) {
                assert!(n > previous, "aggregate {aggregate}: event {n} published after event {previous} in {sink:?}");
            }
            if seen.insert(id) {
                let count = first_published.entry(aggregate).or_default();
                assert_eq!(n, *count, "aggregate {aggregate}: event {n} first published before event {count}");
                *count += 1;
            }
        }
    }
    assert_eq!(seen.len(), ids.len(), "events lost");
    assert_eq!(common::count(&db.pool, "pending").await, 0, "no row left pending");
    assert_eq!(relay.terminate().await.code(), Some(0));
}
