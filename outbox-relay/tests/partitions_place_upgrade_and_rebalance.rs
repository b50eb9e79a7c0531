//! Partitions: rows written by plain SQL are placed and published, a transaction that commits after a later one
//! of its partition is not skipped (written by the library or by plain SQL), a read names as running a writer newer
//! than every finished transaction (also one that commits while the read runs), relays that join and leave under
//! load keep every aggregate in order and lose nothing, an event that kills its relay every time reaches `failed`,
//! and a database of the previous schema upgrades in place.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{count, enqueue, enqueue_interleaved, event, start, wait_until, Recorder};
use outbox_core::store::{EventFilter, EventStatus, PgStore, ReadBatch, ReadRange, ReadRequest, Store};
use outbox_core::Outbox;
use outbox_relay::{Message, Outcome, Publisher};
use outbox_tests::pg::{PrivateServer, TestDatabase};
use tokio::sync::Notify;
use uuid::Uuid;

#[tokio::test]
async fn rows_inserted_by_plain_sql_get_a_partition_and_are_published() {
    let db = TestDatabase::migrated().await;
    for n in 0..20 {
        sqlx::query(
            "INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
             VALUES ($1, 'test', $2, 'test.happened', $3)",
        )
        .bind(Uuid::now_v7())
        .bind(format!("plain-{}", n % 4))
        .bind(serde_json::json!({"aggregate": format!("plain-{}", n % 4), "n": n / 4, "card_number": "x"}))
        .execute(&db.pool)
        .await
        .unwrap();
    }
    let placed: Vec<(String, i16, i16)> = sqlx::query_as(
        "SELECT aggregate_id, partition, outbox_partition_of(aggregate_type, aggregate_id) FROM outbox_events",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(placed.iter().all(|(_, p, expected)| p == expected && (0..256).contains(p)));
    let mut by_aggregate: HashMap<String, i16> = HashMap::new();
    for (aggregate, partition, _) in &placed {
        assert_eq!(
            *by_aggregate.entry(aggregate.clone()).or_insert(*partition),
            *partition,
            "one aggregate, one partition"
        );
    }
    let recorder = Recorder::new();
    let relay = start(&db, recorder.for_relay(0), common::config().build().unwrap());
    wait_until(Duration::from_secs(20), "all 20 are published", || async { count(&db.pool, "published").await == 20 })
        .await;
    relay.stop().await;
    let mut order: HashMap<String, Vec<u32>> = HashMap::new();
    for seen in recorder.seen() {
        order.entry(seen.aggregate).or_default().push(seen.n);
    }
    assert!(order.values().all(|ns| ns == &[0, 1, 2, 3, 4]), "{order:?}");
}

/// How many partitions each relay owns (`None`: the partitions no relay owns).
async fn partitions_by_owner(db: &TestDatabase) -> HashMap<Option<Uuid>, i64> {
    sqlx::query_as::<_, (Option<Uuid>, i64)>("SELECT owner, count(*) FROM outbox_partitions GROUP BY owner")
        .fetch_all(&db.pool)
        .await
        .unwrap()
        .into_iter()
        .collect()
}

/// An aggregate id of type `test` whose events land in the same partition as those of `aggregate`.
async fn in_the_partition_of(db: &TestDatabase, aggregate: &str) -> String {
    sqlx::query_scalar(
        "SELECT 'neighbour-' || n FROM generate_series(1, 100000) n
          WHERE outbox_partition_of('test', 'neighbour-' || n) = outbox_partition_of('test', $1) LIMIT 1",
    )
    .bind(aggregate)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

/// A transaction takes its `seq` first and commits last, after a later transaction of the same partition was read
/// and published: the relay still publishes it. `plain_sql` writes the first one as another service would.
async fn a_late_commit_in_a_read_partition_is_published(plain_sql: bool) {
    let db = TestDatabase::migrated().await;
    let neighbour = in_the_partition_of(&db, "late").await;
    let recorder = Recorder::new();
    let relay = start(&db, recorder.for_relay(0), common::config().build().unwrap());
    let mut early = db.pool.begin().await.unwrap();
    let slow = if plain_sql {
        let id = Uuid::now_v7();
        sqlx::query(
            "INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
             VALUES ($1, 'test', 'late', 'test.happened', $2)",
        )
        .bind(id)
        .bind(serde_json::json!({"aggregate": "late", "n": 0, "card_number": "x"}))
        .execute(&mut *early)
        .await
        .unwrap();
        id
    } else {
        outbox_core::Outbox::new().enqueue(&mut early, &event("late", 0)).await.unwrap()
    };
    let fast = enqueue(&db.pool, &[event(&neighbour, 0)]).await[0];
    wait_until(Duration::from_secs(10), "the later transaction is published", || async {
        recorder.seen().iter().any(|s| s.id == fast)
    })
    .await;
    // Well past any grace period: only the relay's wait for the running transaction keeps its range open.
    tokio::time::sleep(Duration::from_millis(500)).await;
    early.commit().await.unwrap();
    wait_until(Duration::from_secs(20), "the late commit is published", || async {
        recorder.seen().iter().any(|s| s.id == slow)
    })
    .await;
    relay.stop().await;
    assert_eq!(count(&db.pool, "published").await, 2);
    let seq = |id: Uuid| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT seq FROM outbox_events WHERE id = $1").bind(id).fetch_one(&pool).await
        }
    };
    assert!(seq(slow).await.unwrap() < seq(fast).await.unwrap(), "the late commit sits below the read's cursor");
}

#[tokio::test]
async fn a_transaction_that_commits_after_a_later_one_of_its_partition_is_still_published() {
    a_late_commit_in_a_read_partition_is_published(false).await;
}

#[tokio::test]
async fn a_plain_sql_transaction_that_commits_after_a_later_one_of_its_partition_is_still_published() {
    a_late_commit_in_a_read_partition_is_published(true).await;
}

/// A transaction that holds an id and never writes to the outbox (another part of the application, idle in its
/// transaction for hours) is not waited for: the partitions' starts move past the published rows while it stays
/// open. Waited for, it kept every range read since it began open, so that the relay's memory and every read's
/// recheck grew for as long as it ran.
#[tokio::test]
async fn a_long_transaction_that_never_writes_to_the_outbox_does_not_hold_the_partitions_starts_back() {
    let db = TestDatabase::migrated().await;
    sqlx::raw_sql("CREATE TABLE unrelated (n int)").execute(&db.pool).await.unwrap();
    let mut long = db.pool.begin().await.unwrap();
    sqlx::query("INSERT INTO unrelated VALUES (1)").execute(&mut *long).await.unwrap();
    let recorder = Recorder::new();
    let relay = start(&db, recorder.for_relay(0), common::config().build().unwrap());
    let ids = enqueue(&db.pool, &(0..8).map(|n| event(format!("s{n}"), 0)).collect::<Vec<_>>()).await;
    wait_until(Duration::from_secs(10), "all 8 are published", || async { count(&db.pool, "published").await == 8 })
        .await;
    let behind = "SELECT count(*) FROM outbox_events e JOIN outbox_partitions p USING (partition)
                   WHERE e.id = ANY($1) AND p.start_seq <= e.seq";
    wait_until(Duration::from_secs(10), "the starts move past the published rows", || async {
        sqlx::query_scalar::<_, i64>(behind).bind(&ids).fetch_one(&db.pool).await.unwrap() == 0
    })
    .await;
    long.commit().await.unwrap();
    relay.stop().await;
}

/// A plain SQL insert takes its `seq` before its transaction id, and here it stalls in between (a `BEFORE` trigger
/// that sleeps well past the late-commit grace) while a later row of its partition is read and published: the
/// relay keeps waiting for that writer by its session's transaction, not for the grace only, so the row is
/// published once it commits (and the partition's start never moves past it).
#[tokio::test]
async fn a_plain_sql_insert_that_stalls_between_its_seq_and_its_transaction_id_is_still_published() {
    let db = TestDatabase::migrated().await;
    sqlx::raw_sql(
        "CREATE FUNCTION slow_late_insert() RETURNS trigger LANGUAGE plpgsql AS
           'BEGIN IF NEW.aggregate_id = ''late'' THEN PERFORM pg_sleep(4); END IF; RETURN NEW; END';
         CREATE TRIGGER slow_late_insert BEFORE INSERT ON outbox_events
           FOR EACH ROW EXECUTE FUNCTION slow_late_insert();",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    // A `nextval` that writes the sequence's WAL record (the first of every 32) gives its transaction an id: the
    // insert's must be one that does not.
    sqlx::query("SELECT nextval(pg_get_serial_sequence('outbox_events', 'seq'))").execute(&db.pool).await.unwrap();
    let neighbour = in_the_partition_of(&db, "late").await;
    let recorder = Recorder::new();
    let relay = start(&db, recorder.for_relay(0), common::config().build().unwrap());
    let slow = Uuid::now_v7();
    let writer = db.pool.clone();
    let inserting = tokio::spawn(async move {
        sqlx::query(
            "INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
             VALUES ($1, 'test', 'late', 'test.happened', $2)",
        )
        .bind(slow)
        .bind(serde_json::json!({"aggregate": "late", "n": 0, "card_number": "x"}))
        .execute(&writer)
        .await
    });
    // The insert has taken its `seq` and sleeps in its trigger, without a transaction id.
    let in_trigger = "SELECT EXISTS (SELECT 1 FROM pg_stat_activity
                       WHERE query LIKE 'INSERT INTO outbox_events%' AND wait_event = 'PgSleep' AND backend_xid IS NULL)";
    wait_until(Duration::from_secs(10), "the insert sleeps in its trigger", || async {
        sqlx::query_scalar::<_, bool>(in_trigger).fetch_one(&db.pool).await.unwrap()
    })
    .await;
    let fast = enqueue(&db.pool, &[event(&neighbour, 0)]).await[0];
    wait_until(Duration::from_secs(10), "the later row is published", || async {
        recorder.seen().iter().any(|s| s.id == fast)
    })
    .await;
    let no_id: bool = sqlx::query_scalar(in_trigger).fetch_one(&db.pool).await.unwrap();
    assert!(no_id, "the stalled insert has no transaction id while the later row is published");
    inserting.await.unwrap().unwrap();
    wait_until(Duration::from_secs(20), "the stalled insert is published", || async {
        recorder.seen().iter().any(|s| s.id == slow)
    })
    .await;
    relay.stop().await;
    let seq = |id: Uuid| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT seq FROM outbox_events WHERE id = $1").bind(id).fetch_one(&pool).await
        }
    };
    assert!(seq(slow).await.unwrap() < seq(fast).await.unwrap(), "the stalled insert sits below the read's cursor");
    assert_eq!(count(&db.pool, "published").await, 2);
}

/// A writer newer than every finished transaction, on a database of its own server (without autovacuum: any
/// other transaction that finished after the writer got its id would make the snapshot list it). The "late" writer
/// got its id after the "first" one, took its `seq` first and still runs; the first one has committed. A
/// "bystander" got an id after both and writes no event.
struct NewerWriter {
    /// Keeps the server up.
    _server: PrivateServer,
    db: TestDatabase,
    /// The partition of both events.
    partition: i16,
    /// The late writer's transaction, until [`commit_late`](Self::commit_late).
    late: Option<sqlx::Transaction<'static, sqlx::Postgres>>,
    late_xid: u64,
    /// The bystander's transaction, until [`commit_late`](Self::commit_late).
    bystander: Option<sqlx::Transaction<'static, sqlx::Postgres>>,
    bystander_xid: u64,
    /// The late writer's event, and the first one's.
    slow: Uuid,
    fast: Uuid,
}

impl NewerWriter {
    /// Sets it up after `setup` (SQL run once the database is migrated).
    async fn start(setup: &str) -> Self {
        let server = PrivateServer::start_with("-c autovacuum=off")
            .unwrap_or_else(|problem| panic!("no private PostgreSQL: {problem}"));
        let db = TestDatabase::create_on(&server.url).await;
        outbox_core::migrate(&db.pool).await.unwrap();
        sqlx::raw_sql(setup).execute(&db.pool).await.unwrap();
        let neighbour = in_the_partition_of(&db, "late").await;
        let partition: i16 =
            sqlx::query_scalar("SELECT outbox_partition_of('test', 'late')").fetch_one(&db.pool).await.unwrap();
        let xid = "SELECT pg_current_xact_id()::text::int8";
        let mut first = db.pool.begin().await.unwrap();
        let first_xid: i64 = sqlx::query_scalar(xid).fetch_one(&mut *first).await.unwrap();
        let mut late = db.pool.begin().await.unwrap();
        let slow = Outbox::new().enqueue(&mut late, &event("late", 0)).await.unwrap();
        let late_xid: i64 = sqlx::query_scalar(xid).fetch_one(&mut *late).await.unwrap();
        let mut bystander = db.pool.begin().await.unwrap();
        let bystander_xid: i64 = sqlx::query_scalar(xid).fetch_one(&mut *bystander).await.unwrap();
        let fast = Outbox::new().enqueue(&mut first, &event(&neighbour, 0)).await.unwrap();
        first.commit().await.unwrap();
        assert!(first_xid < late_xid, "the late writer got its id second");
        Self {
            _server: server,
            db,
            partition,
            late: Some(late),
            late_xid: late_xid.unsigned_abs(),
            bystander: Some(bystander),
            bystander_xid: bystander_xid.unsigned_abs(),
            slow,
            fast,
        }
    }

    /// Commits the late writer, then the bystander.
    async fn commit_late(&mut self) {
        self.late.take().expect("the late writer runs").commit().await.unwrap();
        self.bystander.take().expect("the bystander runs").commit().await.unwrap();
    }

    /// Checks what a read taken while the late writer ran returned: the first event only, and the late writer as
    /// running though the snapshot's own list cannot name it.
    fn check_read(&self, read: &ReadBatch) {
        let read_ids: Vec<Uuid> = read.rows.iter().map(|row| row.event.id).collect();
        assert_eq!(read_ids, [self.fast], "the read returns the event committed before its snapshot only");
        let snapshot = read.snapshot.as_ref().expect("a PostgreSQL read has a snapshot");
        let late = self.late_xid;
        assert!(snapshot.xmax <= late, "the snapshot's own list cannot name the late writer: {snapshot:?}");
        assert!(snapshot.running.contains(&late), "the late writer {late} is not running in {snapshot:?}");
    }

    /// Checks that a read taken now sees the late writer finished, and its event.
    async fn check_committed(&self) {
        let store = PgStore::new(self.db.pool.clone());
        let read = store.read(&ReadRequest::new(vec![range_of(self.partition)])).await.unwrap();
        let snapshot = read.snapshot.expect("a PostgreSQL read has a snapshot");
        assert!(snapshot.finished(self.late_xid), "the late writer committed before {snapshot:?}");
        assert!(read.rows.iter().any(|row| row.event.id == self.slow), "the late commit is read once committed");
    }
}

/// PostgreSQL's snapshot lists the running transactions below its `xmax` only, and `xmax` is the newest finished
/// transaction's id + 1. A writer that got its id after another one, took its `seq` first, and still runs when the
/// other one has committed is not in that list: a read names it as running all the same, so the relay waits for it
/// before it treats the range as complete.
#[tokio::test]
async fn a_read_names_as_running_a_writer_whose_id_is_newer_than_every_finished_transaction() {
    let mut scene = NewerWriter::start("").await;
    let store = PgStore::new(scene.db.pool.clone());
    let read = store.read(&ReadRequest::new(vec![range_of(scene.partition)])).await.unwrap();
    scene.check_read(&read);
    let snapshot = read.snapshot.as_ref().expect("a PostgreSQL read has a snapshot");
    assert!(snapshot.unseen_writers.is_empty(), "the late writer has its id: {snapshot:?}");
    assert!(
        !snapshot.running.contains(&scene.bystander_xid),
        "a running transaction that writes no event is not waited for: {snapshot:?}"
    );
    scene.commit_late().await;
    scene.check_committed().await;
}

/// The same writer commits while the read runs: after the read took its snapshot (which neither lists it nor sees
/// its row) and before the read looks at `pg_locks` (where it is gone). The read still names it as running: its id
/// was given out before the read, and it had not finished at the snapshot. So it does the bystander, which only
/// that rule names: had the read looked at `pg_locks` before the gate, the test would fail there.
#[tokio::test]
async fn a_read_names_as_running_a_newer_writer_that_commits_while_the_read_runs() {
    // The read runs as a role whose reads of `outbox_control` wait at a gate (an advisory lock, through a row
    // security policy), which this test holds: the read has its snapshot and waits there.
    let mut scene = NewerWriter::start(
        "CREATE ROLE gated_reader LOGIN;
         GRANT SELECT ON outbox_events, outbox_control TO gated_reader;
         CREATE FUNCTION read_gate() RETURNS boolean LANGUAGE plpgsql VOLATILE AS
           'BEGIN PERFORM pg_advisory_xact_lock_shared(7); RETURN true; END';
         ALTER TABLE outbox_control ENABLE ROW LEVEL SECURITY;
         CREATE POLICY gate ON outbox_control FOR SELECT TO gated_reader USING (read_gate());",
    )
    .await;
    let options: sqlx::postgres::PgConnectOptions = scene.db.url.parse().unwrap();
    let gated = sqlx::PgPool::connect_with(options.username("gated_reader")).await.unwrap();
    let mut gate = scene.db.connect().await;
    sqlx::query("SELECT pg_advisory_lock(7)").execute(&mut gate).await.unwrap();
    let store = PgStore::new(gated);
    let partition = scene.partition;
    let reading = tokio::spawn(async move { store.read(&ReadRequest::new(vec![range_of(partition)])).await });
    wait_until(Duration::from_secs(10), "the read waits at the gate", || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 7 AND NOT granted",
        )
        .fetch_one(&scene.db.pool)
        .await
        .unwrap()
            == 1
    })
    .await;
    scene.commit_late().await;
    sqlx::query("SELECT pg_advisory_unlock(7)").execute(&mut gate).await.unwrap();
    let read = reading.await.unwrap().unwrap();
    scene.check_read(&read);
    let snapshot = read.snapshot.as_ref().expect("a PostgreSQL read has a snapshot");
    assert!(
        snapshot.running.contains(&scene.bystander_xid),
        "the bystander ended while the read ran, and is not counted: {snapshot:?}"
    );
    scene.check_committed().await;
}

/// The whole of `partition`, up to 100 rows.
fn range_of(partition: i16) -> ReadRange {
    ReadRange::new(partition.unsigned_abs(), 0, 100)
}

#[tokio::test]
async fn relays_joining_and_leaving_under_load_keep_every_aggregate_in_order_and_lose_nothing() {
    let db = TestDatabase::migrated().await;
    let recorder = Recorder::new();
    let config = || common::config().lease(Duration::from_secs(2)).batch_size(100).build().unwrap();
    let first = start(&db, recorder.for_relay(0), config());
    // Load all along: one round of 100 aggregates every 100ms, about four seconds.
    let producer = {
        let pool = db.pool.clone();
        tokio::spawn(async move {
            let mut ids = Vec::new();
            for n in 0..40 {
                let round: Vec<_> = (0..100).map(|a| event(format!("agg-{a}"), n)).collect();
                ids.extend(enqueue(&pool, &round).await);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            ids
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let second = start(&db, recorder.for_relay(1), config());
    let third = start(&db, recorder.for_relay(2), config());
    wait_until(Duration::from_secs(20), "the new relays own partitions", || async {
        partitions_by_owner(&db).await.keys().flatten().count() == 3
    })
    .await;
    // One relay leaves gracefully mid-stream, the others take its partitions.
    second.stop().await;
    let ids = producer.await.unwrap();
    wait_until(Duration::from_secs(60), "all 4000 are published", || async {
        count(&db.pool, "published").await == 4000
    })
    .await;
    first.stop().await;
    third.stop().await;
    let mut by_aggregate: HashMap<String, Vec<u32>> = HashMap::new();
    let mut relays = std::collections::HashSet::new();
    for seen in recorder.seen() {
        relays.insert(seen.relay);
        let order = by_aggregate.entry(seen.aggregate).or_default();
        // A duplicate (a batch settled by nobody) may repeat an event, never go back before it.
        if order.last() != Some(&seen.n) {
            order.push(seen.n);
        }
    }
    assert_eq!(ids.len(), 4000);
    assert_eq!(by_aggregate.len(), 100);
    let expected: Vec<u32> = (0..40).collect();
    for (aggregate, order) in &by_aggregate {
        assert_eq!(order, &expected, "aggregate {aggregate} out of order");
    }
    assert!(relays.contains(&2), "the relay that joined under load got no work: {relays:?}");
}

/// A publisher that "kills its relay" when it meets the poison event: it signals the test, which aborts the relay's
/// task (no settle, no graceful exit: what a crash leaves behind), and never returns.
#[derive(Clone)]
struct Killer {
    poison: Uuid,
    met: Arc<Notify>,
    published: Arc<Mutex<Vec<Uuid>>>,
}

impl Publisher for Killer {
    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        if batch.iter().any(|m| m.id == self.poison) {
            self.met.notify_one();
            std::future::pending::<()>().await;
        }
        self.published.lock().unwrap().extend(batch.iter().map(|m| m.id));
        vec![Outcome::Published; batch.len()]
    }
}

#[tokio::test]
async fn an_event_that_kills_its_relay_every_time_reaches_failed_after_the_configured_attempts() {
    let db = TestDatabase::migrated().await;
    let poison = enqueue(&db.pool, &[event("poison", 0)]).await[0];
    let killer = Killer { poison, met: Arc::default(), published: Arc::default() };
    let config = || {
        common::config()
            .lease(Duration::from_millis(500))
            .max_attempts(3)
            .ordering(outbox_relay::Ordering::None)
            .build()
            .unwrap()
    };
    let attempts = || async {
        sqlx::query_scalar::<_, i32>("SELECT attempts FROM outbox_events WHERE id = $1")
            .bind(poison)
            .fetch_one(&db.pool)
            .await
            .unwrap()
    };
    let mut relay = start(&db, killer.clone(), config());
    for crash in 1..=3 {
        tokio::time::timeout(Duration::from_secs(20), killer.met.notified()).await.expect("the relay met the poison");
        relay.handle.abort();
        let _ = relay.handle.await;
        assert_eq!(attempts().await, crash - 1, "a crash was counted before the relay that notices it ran");
        // The next relay removes the dead one (counting the crash), then meets the event again.
        relay = start(&db, killer.clone(), config());
        wait_until(Duration::from_secs(20), "the crash is counted", || async { attempts().await == crash }).await;
    }
    wait_until(Duration::from_secs(20), "the poison event is failed", || async {
        sqlx::query_scalar::<_, String>("SELECT status FROM outbox_events WHERE id = $1")
            .bind(poison)
            .fetch_one(&db.pool)
            .await
            .unwrap()
            == "failed"
    })
    .await;
    relay.stop().await;
    let last_error: String = sqlx::query_scalar("SELECT last_error FROM outbox_events WHERE id = $1")
        .bind(poison)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(last_error.contains("gave up after 3 attempts"), "{last_error}");
    assert!(!killer.published.lock().unwrap().contains(&poison));
}

#[tokio::test]
async fn status_shows_the_relays_their_partitions_and_the_batch_being_published() {
    let db = TestDatabase::migrated().await;
    let ids = enqueue(&db.pool, &[event("held", 0)]).await;
    let killer = Killer { poison: ids[0], met: Arc::default(), published: Arc::default() };
    let relay = start(&db, killer.clone(), common::config().build().unwrap());
    tokio::time::timeout(Duration::from_secs(20), killer.met.notified()).await.expect("publish started");
    let store = PgStore::new(db.pool.clone());
    let status = store.status().await.unwrap();
    assert_eq!(status.partitions, 256);
    assert_eq!(status.relays.len(), 1);
    assert_eq!(status.relays[0].partitions.len(), 256);
    assert_eq!(status.relays[0].in_flight, 1);
    assert_eq!(status.in_flight, 1);
    assert!(status.unowned_partitions.is_empty());
    let in_flight = store.list(&EventFilter::new(EventStatus::InFlight)).await.unwrap();
    assert_eq!(in_flight.iter().map(|e| e.id).collect::<Vec<_>>(), ids);
    assert_eq!(in_flight[0].status, EventStatus::InFlight);
    let detail = store.show(ids[0]).await.unwrap().unwrap();
    assert_eq!(detail.summary.status, EventStatus::InFlight);
    assert!(detail.publishing_relay.is_some());

    // The same through the CLI, with a backlog behind the batch: the relay, its partitions, its batch in flight,
    // and the pending events of its partitions with the oldest one's age.
    let neighbour = in_the_partition_of(&db, "held").await;
    enqueue(&db.pool, &[event(&neighbour, 0), event(&neighbour, 1)]).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let output = outbox_tests::outbox!().database(&db.url).env("OUTBOX_LOG", "warn").run(["status", "--json"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let relays = status["relays"].as_array().unwrap();
    assert_eq!(relays.len(), 1, "{status}");
    assert_eq!(relays[0]["partitions"].as_array().unwrap().len(), 256);
    assert_eq!(relays[0]["in_flight"], 1);
    // The event in flight is still pending in the table; the two of its partition wait behind the batch.
    assert_eq!(relays[0]["pending"], 3, "{status}");
    assert!(relays[0]["oldest_pending_age_seconds"].as_f64().unwrap() >= 1.0, "{status}");
    let output = outbox_tests::outbox!().database(&db.url).env("OUTBOX_LOG", "warn").run([
        "events",
        "list",
        "--status",
        "in_flight",
        "--json",
    ]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let listed: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let listed: Vec<String> = listed.as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap().to_owned()).collect();
    assert_eq!(listed, vec![ids[0].to_string()]);
    relay.handle.abort();
}

/// The previous design's schema (migrations 1 to 3, as that version applied them), with its bookkeeping.
async fn previous_schema(db: &TestDatabase) {
    for sql in [
        include_str!("../../migrations/postgres/20260101000001_outbox_events.sql"),
        include_str!("../../migrations/postgres/20260101000002_relay_control.sql"),
        include_str!("../../migrations/postgres/20260101000003_drop_seq_index.sql"),
    ] {
        sqlx::raw_sql(sql).execute(&db.pool).await.unwrap();
    }
}

/// The previous design's claim statement, as its relays run it.
const PREVIOUS_CLAIM: &str = "\
UPDATE outbox_events e SET status = 'in_flight', lease_owner = $1, lease_expires_at = now() + interval '30 seconds',
       lease_epoch = e.lease_epoch + 1
 WHERE e.id IN (SELECT id FROM outbox_events WHERE status = 'pending' ORDER BY next_attempt_at, seq LIMIT 10
                FOR UPDATE SKIP LOCKED)";

#[tokio::test]
async fn upgrading_a_database_of_the_previous_schema_publishes_every_pending_and_in_flight_row() {
    let db = TestDatabase::create().await;
    previous_schema(&db).await;
    // Events written by the previous version, some of them claimed by one of its relays.
    let ids = enqueue_interleaved(&db.pool, 10, 5).await;
    let claimed = sqlx::query(PREVIOUS_CLAIM).bind(Uuid::now_v7()).execute(&db.pool).await.unwrap().rows_affected();
    assert_eq!(claimed, 10);
    outbox_core::migrate(&db.pool).await.unwrap();
    let recorder = Recorder::new();
    let relay = start(&db, recorder.for_relay(0), common::config().build().unwrap());
    wait_until(Duration::from_secs(20), "all 50 are published", || async { count(&db.pool, "published").await == 50 })
        .await;
    relay.stop().await;
    let mut seen: Vec<Uuid> = recorder.seen().iter().map(|s| s.id).collect();
    seen.sort();
    seen.dedup();
    let mut expected = ids;
    expected.sort();
    assert_eq!(seen, expected, "every row of the previous version is published");
}

#[tokio::test]
async fn an_upgrade_that_waits_for_a_long_transaction_does_not_hold_the_applications_writes_behind_it() {
    let db = TestDatabase::create().await;
    previous_schema(&db).await;
    // A long transaction that read the table: the upgrade's ALTER TABLE cannot have its lock until it ends.
    let mut long = db.pool.begin().await.unwrap();
    sqlx::query("SELECT count(*) FROM outbox_events").execute(&mut *long).await.unwrap();
    let migrating = tokio::spawn({
        let pool = db.pool.clone();
        async move { outbox_core::migrate(&pool).await }
    });
    // The application keeps writing meanwhile (the previous version's plain INSERT).
    let mut slowest = Duration::ZERO;
    let writing = std::time::Instant::now();
    while writing.elapsed() < Duration::from_secs(4) {
        let started = std::time::Instant::now();
        let insert = sqlx::query(
            "INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
             VALUES (gen_random_uuid(), 'order', '1', 'order.placed', '{}')",
        )
        .execute(&db.pool);
        tokio::time::timeout(Duration::from_secs(10), insert)
            .await
            .expect("a write waited 10 s behind the migration")
            .unwrap();
        slowest = slowest.max(started.elapsed());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!migrating.is_finished(), "the migration could not have its lock yet");
    // Each try of the migration waits half a second for its lock at most, and the writes queued behind it as long.
    assert!(slowest < Duration::from_millis(1500), "a write waited {slowest:?}");
    long.commit().await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), migrating)
        .await
        .expect("the migration finished once the long transaction ended")
        .unwrap()
        .unwrap();
    assert!(count(&db.pool, "pending").await > 10, "the rows written meanwhile are kept");
}

#[tokio::test]
async fn a_relay_of_the_previous_design_is_refused_beside_the_new_relays() {
    let db = TestDatabase::migrated().await;
    enqueue(&db.pool, &[event("both", 0)]).await;
    let error = sqlx::query(PREVIOUS_CLAIM).bind(Uuid::now_v7()).execute(&db.pool).await.unwrap_err();
    let message = error.to_string();
    assert!(message.contains("upgrade_relays_to_partition_leases"), "{message}");
    assert_eq!(count(&db.pool, "pending").await, 1, "the refused claim changed nothing");
}

#[tokio::test]
async fn a_relay_refuses_to_start_on_a_database_of_the_previous_schema() {
    let db = TestDatabase::create().await;
    previous_schema(&db).await;
    let relay = start(&db, Recorder::new().for_relay(0), common::config().build().unwrap());
    let result = tokio::time::timeout(Duration::from_secs(20), relay.handle).await.expect("it kept retrying").unwrap();
    let error = result.expect_err("a relay started on the previous schema");
    assert!(!error.is_retryable());
    assert!(error.to_string().contains("outbox migrate"), "{error}");
}

#[tokio::test]
async fn a_relay_under_a_light_load_beats_at_its_heartbeat_interval_not_at_every_settle() {
    let db = TestDatabase::migrated().await;
    // Every heartbeat renews the relay's row (an upsert): a trigger counts them.
    sqlx::raw_sql(
        "CREATE TABLE beats (n bigint NOT NULL);
         INSERT INTO beats VALUES (0);
         CREATE FUNCTION count_beat() RETURNS trigger LANGUAGE plpgsql AS
           $$ BEGIN UPDATE beats SET n = n + 1; RETURN NEW; END $$;
         CREATE TRIGGER count_beat AFTER UPDATE ON outbox_relays FOR EACH ROW EXECUTE FUNCTION count_beat();",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let beats = || async { sqlx::query_scalar::<_, i64>("SELECT n FROM beats").fetch_one(&db.pool).await.unwrap() };
    let recorder = Recorder::new();
    // A 10 s lease: one heartbeat a second.
    let config = common::config().lease(Duration::from_secs(10)).build().unwrap();
    assert_eq!(config.heartbeat_interval(), Duration::from_secs(1));
    let relay = start(&db, recorder.for_relay(0), config);
    wait_until(Duration::from_secs(20), "the relay owns every partition", || async {
        partitions_by_owner(&db).await.iter().any(|(owner, n)| owner.is_some() && *n == 256)
    })
    .await;
    // A light load for three seconds: one event at a time, each settled (its partition idle again) before the
    // next one comes.
    let before = beats().await;
    let started = tokio::time::Instant::now();
    let mut n: i64 = 0;
    while started.elapsed() < Duration::from_secs(3) {
        enqueue(&db.pool, &[event(format!("agg-{n}"), 0)]).await;
        n += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let during = beats().await - before;
    wait_until(Duration::from_secs(20), "every event is published", || async {
        count(&db.pool, "published").await == n
    })
    .await;
    relay.stop().await;
    assert!(n > 50, "only {n} events were written in three seconds");
    // Three seconds at one a second, and a little room for a slow machine.
    assert!(during <= 6, "{during} heartbeats in three seconds of {n} single-event settles");
}

#[tokio::test]
async fn a_relay_that_joins_an_idle_relay_gets_half_the_partitions_within_a_few_heartbeats() {
    let db = TestDatabase::migrated().await;
    let recorder = Recorder::new();
    // A 10 s lease: one heartbeat a second.
    let config = || common::config().lease(Duration::from_secs(10)).build().unwrap();
    let first = start(&db, recorder.for_relay(0), config());
    wait_until(Duration::from_secs(20), "the first relay owns every partition", || async {
        partitions_by_owner(&db).await.iter().any(|(owner, n)| owner.is_some() && *n == 256)
    })
    .await;
    // Nothing to publish: no settle ever makes a partition idle, so the handover rests on the heartbeats alone.
    let joined = tokio::time::Instant::now();
    let second = start(&db, recorder.for_relay(1), config());
    wait_until(Duration::from_secs(20), "each relay owns 128 partitions", || async {
        let owners = partitions_by_owner(&db).await;
        owners.len() == 2 && owners.iter().all(|(owner, n)| owner.is_some() && *n == 128)
    })
    .await;
    let took = joined.elapsed();
    first.stop().await;
    second.stop().await;
    // The joiner's first heartbeat, the first relay's next one (which marks its excess idle, and sends one more
    // at once to hand it over), and the joiner's next one, which takes it: about two heartbeat intervals.
    assert!(took < Duration::from_secs(4), "the split took {took:?}");
}
