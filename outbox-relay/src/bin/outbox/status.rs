//! `outbox status`.
//!
//! The backlog (pending and oldest pending age by event type), the dead letters by event type and the pause flag
//! come from [`Store::backlog`](outbox_core::store::Store::backlog), the statement the relay's gauges are
//! refreshed from: the command and the metrics show the same numbers. On PostgreSQL it also shows the source
//! that publishes the table and, for the WAL source, its slot: whether a relay reads it, the WAL it keeps (lag in
//! bytes) and when the reader last reported its position.

use std::collections::BTreeMap;

use outbox_core::store::{PgStore, SlotStatus, Source};
use serde_json::json;

use crate::args::StatusArgs;
use crate::{connect, Failure, Outcome};

pub(crate) async fn run(database_url: Option<&str>, args: StatusArgs) -> Outcome {
    let database = connect::open(database_url, 2).await?;
    let store = database.store();
    let backlog = store.backlog().await.map_err(Failure::runtime)?;
    let status = store.status().await.map_err(Failure::runtime)?;
    let wal = match &database {
        connect::Database::Postgres(pool) => {
            let pg = PgStore::new(pool.clone());
            let state = pg.wal_state().await.map_err(Failure::runtime)?;
            Some((state.source, pg.wal_slot_status().await.map_err(Failure::runtime)?))
        }
        connect::Database::Sqlite(_) => None,
    };
    let source = wal.as_ref().map_or(Source::Table, |(source, _)| *source);
    let slot = wal.and_then(|(_, slot)| slot);
    if args.json {
        let pending: Vec<_> = backlog
            .pending
            .iter()
            .map(|p| {
                json!({
                    "event_type": p.event_type,
                    "pending": p.pending,
                    "oldest_age_seconds": p.oldest_age.as_secs_f64(),
                })
            })
            .collect();
        let failed: Vec<_> =
            backlog.failed.iter().map(|f| json!({"event_type": f.event_type, "failed": f.failed})).collect();
        let report = json!({
            "source": source.as_str(),
            "wal_slot": slot.as_ref().map(|slot| json!({
                "slot": slot.slot,
                "active": slot.active,
                "lag_bytes": slot.lag_bytes,
                "last_report_age_seconds": slot.last_report_age.map(|age| age.as_secs_f64()),
            })),
            "paused": backlog.paused,
            "pending": backlog.pending_total(),
            "oldest_pending_age_seconds": backlog.oldest_pending_age().as_secs_f64(),
            "pending_by_type": pending,
            "in_flight": status.in_flight,
            "failed": backlog.failed_total(),
            "failed_by_type": failed,
            "published_last_minute": status.published_last_minute,
            "published_last_hour": status.published_last_hour,
            "partitions": status.partitions,
            "unowned_partitions": status.unowned_partitions,
            "relays": status.relays.iter().map(|relay| json!({
                "relay_id": relay.relay_id,
                "host": relay.host,
                "heartbeat_age_seconds": relay.heartbeat_age.as_secs_f64(),
                "partitions": relay.partitions,
                "in_flight": relay.in_flight,
                "pending": relay.pending,
                "oldest_pending_age_seconds": relay.oldest_pending_age.as_secs_f64(),
            })).collect::<Vec<_>>(),
        });
        outln!("{report}");
        return Ok(());
    }
    outln!("source:     {}", source_line(source, slot.as_ref()));
    outln!("paused:     {}", if backlog.paused { "yes (`outbox resume` to resume)" } else { "no" });
    outln!("pending:    {}", backlog.pending_total());
    outln!("in flight:  {}", status.in_flight);
    outln!("failed:     {}", backlog.failed_total());
    outln!(
        "published:  {} in the last minute, {} in the last hour",
        status.published_last_minute,
        status.published_last_hour
    );
    outln!(
        "relays:     {} live, {} partitions, {} unowned",
        status.relays.len(),
        status.partitions,
        status.unowned_partitions.len()
    );
    if !status.relays.is_empty() {
        outln!();
        outln!(
            "{:<36}  {:<24}  {:>10}  {:>9}  {:>9}  {:>14}  HEARTBEAT",
            "RELAY",
            "HOST",
            "PARTITIONS",
            "IN FLIGHT",
            "PENDING",
            "OLDEST PENDING"
        );
        for relay in &status.relays {
            outln!(
                "{:<36}  {:<24}  {:>10}  {:>9}  {:>9}  {:>14}  {} ago",
                relay.relay_id,
                relay.host,
                partition_ranges(&relay.partitions),
                relay.in_flight,
                relay.pending,
                humantime::format_duration(std::time::Duration::from_secs(relay.oldest_pending_age.as_secs()))
                    .to_string(),
                humantime::format_duration(std::time::Duration::from_millis(relay.heartbeat_age.as_millis() as u64)),
            );
        }
    }
    // One row per event type with a backlog or dead letters.
    let mut rows: BTreeMap<&str, (u64, Option<std::time::Duration>, u64)> = BTreeMap::new();
    for p in &backlog.pending {
        let row = rows.entry(p.event_type.as_str()).or_default();
        row.0 = p.pending;
        row.1 = Some(p.oldest_age);
    }
    for f in &backlog.failed {
        rows.entry(f.event_type.as_str()).or_default().2 = f.failed;
    }
    if !rows.is_empty() {
        let width = rows.keys().map(|event_type| event_type.len()).max().unwrap_or(0).max(10);
        outln!();
        outln!("{:<width$}  {:>9}  {:>9}  OLDEST PENDING", "EVENT TYPE", "PENDING", "FAILED");
        for (event_type, (pending, oldest, failed)) in rows {
            let age = oldest
                .map(|age| humantime::format_duration(std::time::Duration::from_secs(age.as_secs())).to_string())
                .unwrap_or_else(|| "-".to_owned());
            outln!("{event_type:<width$}  {pending:>9}  {failed:>9}  {age}");
        }
    }
    Ok(())
}

/// The source, and the WAL relay's slot when there is one.
fn source_line(source: Source, slot: Option<&SlotStatus>) -> String {
    let Some(slot) = slot else {
        return match source {
            Source::Wal => "wal (no slot yet: the first `outbox relay --source wal` creates it)".to_owned(),
            _ => source.to_string(),
        };
    };
    let reader = if slot.active {
        match slot.last_report_age {
            Some(age) => format!("read by a relay that reported its position {} ago", rounded(age)),
            None => "read by a relay".to_owned(),
        }
    } else {
        "no relay reads it: the server keeps its WAL (`outbox wal drop-slot` if it is abandoned)".to_owned()
    };
    format!("{source} (slot {}: lag {} bytes of WAL, {reader})", slot.slot, slot.lag_bytes)
}

/// A duration to the tenth of a second.
fn rounded(age: std::time::Duration) -> humantime::FormattedDuration {
    humantime::format_duration(std::time::Duration::from_millis(age.as_millis() as u64 / 100 * 100))
}

/// Partitions as compact ranges: `0-63,128`.
fn partition_ranges(partitions: &[u16]) -> String {
    let mut ranges: Vec<String> = Vec::new();
    let mut iter = partitions.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        ranges.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
    }
    if ranges.is_empty() {
        "-".to_owned()
    } else {
        ranges.join(",")
    }
}
