//! What reached the consumers, and the checks of the delivered set against the committed set.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use sqlx::PgPool;
use uuid::Uuid;

use crate::events::{OrderPlaced, Written};
use crate::producers::Ledger;

/// One delivery as a consumer saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Delivered {
    pub(crate) id: Uuid,
    pub(crate) aggregate: String,
    pub(crate) n: i64,
}

impl Delivered {
    pub(crate) fn new(id: Uuid, payload: &OrderPlaced) -> Self {
        Self { id, aggregate: payload.order.clone(), n: payload.n }
    }
}

/// The lines of a `file:` sink, in file order. A last line cut short (its relay was killed while writing it) is
/// not a delivery: the relay had not finished the write, so it had not marked the event either.
pub(crate) fn read_file_sink(path: &Path) -> Vec<Delivered> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    lines
        .iter()
        .filter(|line| line.ends_with('\n'))
        .map(|line| {
            let line: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            assert_eq!(line["type"], "fault.order_placed");
            let payload: OrderPlaced = serde_json::from_value(line["payload"].clone()).expect("the payload");
            Delivered::new(line["id"].as_str().and_then(|id| id.parse().ok()).expect("an id"), &payload)
        })
        .collect()
}

/// The counts a scenario prints.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Counts {
    pub(crate) committed: usize,
    pub(crate) rolled_back: usize,
    pub(crate) in_doubt_committed: usize,
    pub(crate) in_doubt_absent: usize,
    pub(crate) delivered: usize,
    pub(crate) duplicates: usize,
}

/// Checks the delivered set against the committed set and the table, and returns the counts:
///
/// - every transaction in doubt committed whole or not at all; those that did count as committed;
/// - the table holds exactly the committed events, all `published`, and each aggregate's row version is the
///   number of its committed events (the domain change and its events committed together);
/// - every committed event was delivered at least once, nothing else was (no rolled-back event, no phantom),
///   and each delivery carries the payload that was committed;
/// - at most `max_duplicates` deliveries repeat an event;
/// - each aggregate's first deliveries are its events 1, 2, 3... in order, within each of `streams` (a stream
///   is what one consumer saw in order: a broker's stream, or a file).
pub(crate) async fn check(pool: &PgPool, ledger: &Ledger, streams: &[Vec<Delivered>], max_duplicates: usize) -> Counts {
    let rows: Vec<(Uuid, String, String)> = sqlx::query_as("SELECT id, aggregate_id, status FROM outbox_events")
        .fetch_all(pool)
        .await
        .expect("read the table");
    let in_table: HashMap<Uuid, String> = rows.iter().map(|(id, _, status)| (*id, status.clone())).collect();

    let mut committed: HashMap<Uuid, &Written> = ledger.committed.iter().map(|w| (w.id, w)).collect();
    let (mut in_doubt_committed, mut in_doubt_absent) = (0, 0);
    let mut absent: Vec<&Written> = ledger.rolled_back.iter().collect();
    for transaction in &ledger.in_doubt {
        let present = transaction.iter().filter(|w| in_table.contains_key(&w.id)).count();
        assert!(
            present == 0 || present == transaction.len(),
            "a transaction in doubt committed {present} of its {} events: {transaction:?}",
            transaction.len()
        );
        if present == 0 {
            in_doubt_absent += 1;
            absent.extend(transaction);
        } else {
            in_doubt_committed += 1;
            committed.extend(transaction.iter().map(|w| (w.id, w)));
        }
    }

    for written in &absent {
        assert!(
            !in_table.contains_key(&written.id),
            "an event of a transaction that did not commit is in the table: {written:?}"
        );
    }
    for (id, written) in &committed {
        assert!(in_table.contains_key(id), "a committed event is not in the table: {written:?}");
    }
    let strangers: Vec<_> = rows.iter().filter(|(id, _, _)| !committed.contains_key(id)).collect();
    assert!(strangers.is_empty(), "{} rows no producer committed, e.g. {:?}", strangers.len(), strangers.first());
    let unfinished: Vec<_> = rows.iter().filter(|(_, _, status)| status != "published").collect();
    assert!(unfinished.is_empty(), "{} events not published, e.g. {:?}", unfinished.len(), unfinished.first());

    let versions: Vec<(String, i64)> =
        sqlx::query_as("SELECT id, version FROM fault_orders").fetch_all(pool).await.expect("read the orders");
    let mut per_aggregate: HashMap<&str, Vec<i64>> = HashMap::new();
    for written in committed.values() {
        per_aggregate.entry(written.aggregate.as_str()).or_default().push(written.n);
    }
    for (aggregate, version) in &versions {
        let mut numbers = per_aggregate.remove(aggregate.as_str()).unwrap_or_default();
        numbers.sort_unstable();
        assert_eq!(numbers, (1..=*version).collect::<Vec<_>>(), "{aggregate}: its committed events vs its version");
    }
    assert!(per_aggregate.is_empty(), "events of unknown aggregates: {:?}", per_aggregate.keys());

    let mut seen: HashSet<Uuid> = HashSet::new();
    let mut deliveries = 0;
    for stream in streams {
        let mut last: BTreeMap<&str, i64> = BTreeMap::new();
        for delivered in stream {
            deliveries += 1;
            let Some(written) = committed.get(&delivered.id) else {
                let rolled_back = absent.iter().any(|w| w.id == delivered.id);
                panic!("delivered an event that was never committed (rolled back: {rolled_back}): {delivered:?}");
            };
            assert_eq!(
                (delivered.aggregate.as_str(), delivered.n),
                (written.aggregate.as_str(), written.n),
                "the payload delivered for {}",
                delivered.id
            );
            if seen.insert(delivered.id) {
                // A first delivery: the aggregate's next event, in order.
                let previous = last.insert(&delivered.aggregate, delivered.n).unwrap_or(0);
                assert!(
                    delivered.n > previous,
                    "{}: event {} was first delivered after event {previous}",
                    delivered.aggregate,
                    delivered.n
                );
            }
        }
    }
    let missing: Vec<_> = committed.values().filter(|w| !seen.contains(&w.id)).collect();
    assert!(missing.is_empty(), "{} committed events never delivered, e.g. {:?}", missing.len(), missing.first());
    let duplicates = deliveries - seen.len();
    assert!(
        duplicates <= max_duplicates,
        "{duplicates} duplicate deliveries, more than the fault window explains ({max_duplicates})"
    );
    Counts {
        committed: committed.len(),
        rolled_back: absent.len(),
        in_doubt_committed,
        in_doubt_absent,
        delivered: deliveries,
        duplicates,
    }
}
