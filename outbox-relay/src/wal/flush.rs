//! Publishing the events of committed transactions: read by id (only rows still pending), published in order
//! ([`crate::relay::batch::publish`]: the same rounds, timeout and outcomes as the table source), settled in one
//! statement, each row found where the read found it (the last round's by the caller, behind the next batch:
//! [`super::settling`]). A transient failure is retried in place with the backoff policy, holding back the later
//! events of its aggregate, for at most the in-place retry time; then the event and its aggregate go to the table's
//! retry path ([`super::handover`]) and the stream goes on.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};

use outbox_core::store::{AggregateKey, PendingById, PgStore, ReadRow, SettleOutcome, Settlement, StoredEvent};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::handover::Handover;
use super::publish_settle::{publish, row_settlements, settle};
use super::read_ahead::{rows_of, FirstRead};
use super::statement::database;
use crate::backoff::Backoff;
use crate::error::Result;
use crate::relay::batch::Item;
use crate::relay::shared::Shared;
use crate::relay::summary::RunSummary;

/// An event of the stream.
#[derive(Debug, Clone)]
pub(crate) enum Streamed {
    /// A row of the outbox table.
    Row {
        /// The row's id.
        id: Uuid,
        /// The commit time its transaction had on the stream (`None` for the rows that were pending when the slot
        /// was created: their age comes from `created_at`).
        committed_at: Option<SystemTime>,
        /// The transaction that inserted it, as the stream names it (`None` for those pending at the slot's
        /// creation, which the snapshot already showed committed).
        xid: Option<u32>,
    },
    /// An event of the message mode (no table row), with its transaction's commit time.
    Message(Box<StoredEvent>, SystemTime),
}

impl Streamed {
    fn id(&self) -> Uuid {
        match self {
            Self::Row { id, .. } => *id,
            Self::Message(event, _) => event.id,
        }
    }
}

/// What a flush came to.
#[derive(Debug)]
pub(crate) enum Flushed {
    /// Every event is published (or handed to the table's retry path); the rows of the last round, all
    /// published, are still to be settled: the caller runs that statement ([`super::settling::Settling`]), so the
    /// next batch can be read and published meanwhile.
    Done(Vec<Settlement>),
    /// Shutdown came first: what is not settled stays pending and is streamed again.
    Stopped,
}

/// Publishes and settles `events`, in their order. Events of aggregates handed to the table's retry path are
/// left to it (a message-mode event is written to the table for it); an event still failing after the in-place
/// retry time is handed over with its aggregate. `first_read`: the read of the events' rows, started ahead
/// ([`super::read_ahead`]); without it, the rows are read here. The aggregates handed over are recorded in the
/// database before it returns, so before the stream is acknowledged past their events, and so is the stream's
/// order of the rows this batch leaves in the table ([`Handover::leave_in_table`]).
pub(crate) async fn flush(
    shared: &Shared,
    store: &PgStore,
    summary: &mut RunSummary,
    handover: &mut Handover,
    events: &[Streamed],
    first_read: Option<FirstRead>,
    shutdown: &CancellationToken,
) -> Result<Flushed> {
    let flushed = flush_events(shared, store, summary, handover, events, first_read, shutdown).await?;
    if matches!(flushed, Flushed::Done(_)) && !handover.update_record(store, shutdown).await? {
        return Ok(Flushed::Stopped);
    }
    Ok(flushed)
}

async fn flush_events(
    shared: &Shared,
    store: &PgStore,
    summary: &mut RunSummary,
    handover: &mut Handover,
    events: &[Streamed],
    mut first_read: Option<FirstRead>,
    shutdown: &CancellationToken,
) -> Result<Flushed> {
    let mut todo: Vec<Streamed> = events.to_vec();
    let deadline = Instant::now() + handover.retry_in_place();
    // How long to wait before reading a streamed transaction that is not visible yet again.
    let visibility = Backoff::new(Duration::from_millis(1), Duration::from_millis(100)).unwrap_or_default();
    let mut invisible: u32 = 0;
    while !todo.is_empty() {
        let (row_ids, xids) = rows_of(&todo);
        // In the order of `row_ids`, each with its index there (`range`): matched by position, not moved twice.
        let mut rows: Vec<ReadRow> = Vec::new();
        if !row_ids.is_empty() {
            // The read says whether publishing is paused, as the table source's does: no round trip of its own.
            let read = match first_read.take() {
                Some(read) => read.finish().await?,
                None => database(shutdown, || store.pending_by_id(&row_ids, &xids)).await?,
            };
            let Some(read) = read else {
                return Ok(Flushed::Stopped);
            };
            match read {
                PendingById::Rows(read) => rows = read,
                PendingById::Paused => {
                    if !wait_unless_paused(store, shutdown).await? {
                        return Ok(Flushed::Stopped);
                    }
                    continue;
                }
                _ => {
                    // Committed on the stream, not visible to other sessions yet: a row read now would look
                    // deleted. It is visible a moment later (with synchronous replication, once the standby
                    // confirms).
                    invisible += 1;
                    tracing::debug!(reads = invisible, "a streamed transaction is not visible yet; reading again");
                    tokio::select! {
                        () = shutdown.cancelled() => return Ok(Flushed::Stopped),
                        () = tokio::time::sleep(visibility.ceiling(invisible - 1)) => {}
                    }
                    continue;
                }
            }
        }
        // Nothing read that could tell: ask (messages have no row to read the flag with).
        let messages_only = rows.is_empty() && todo.iter().any(|event| matches!(event, Streamed::Message(..)));
        if messages_only && !wait_unless_paused(store, shutdown).await? {
            return Ok(Flushed::Stopped);
        }
        let now = SystemTime::now();
        let since = |at: &SystemTime| now.duration_since(*at).unwrap_or_default();
        let mut items: Vec<Item> = Vec::with_capacity(todo.len());
        let mut messages: HashMap<Uuid, StoredEvent> = HashMap::new();
        let mut followers: Vec<(StoredEvent, Option<SettleOutcome>)> = Vec::new();
        let mut read = rows.into_iter().peekable();
        let mut row_index = 0;
        for event in &todo {
            match event {
                Streamed::Row { committed_at: at, .. } => {
                    let index = row_index;
                    row_index += 1;
                    // Not pending any more (settled by an earlier session), or left to the table's retry path.
                    let Some(row) = read.next_if(|row| row.range == index) else { continue };
                    let aggregate = row.event.aggregate_key();
                    if handover.holds(&aggregate) {
                        handover.leave_in_table([row.event.id]);
                        continue;
                    }
                    let since_commit = at.as_ref().map_or(row.since_commit, since);
                    items.push(Item::new(row.partition, 0, row.event, aggregate, since_commit).at(row.version));
                }
                Streamed::Message(event, at) => {
                    let aggregate = event.aggregate_key();
                    if handover.holds(&aggregate) {
                        followers.push((StoredEvent::clone(event), None));
                        handover.leave_in_table([event.id]);
                        continue;
                    }
                    messages.insert(event.id, StoredEvent::clone(event));
                    items.push(Item::new(0, 0, StoredEvent::clone(event), aggregate, since(at)));
                }
            }
        }
        if database(shutdown, || store.write_wal_events(&followers)).await?.is_none() {
            return Ok(Flushed::Stopped);
        }
        if items.is_empty() {
            break;
        }
        let published = publish(shared, summary, &mut items, &messages).await;
        let of_rows = row_settlements(&published, &messages);
        if published.settlements.len() == items.len()
            && published.settlements.iter().all(|settlement| settlement.outcome == SettleOutcome::Published)
        {
            // All published: nothing is left to retry, and the settle may run behind the next batch.
            return Ok(Flushed::Done(of_rows));
        }
        if settle(shared, store, summary, &of_rows, shutdown).await?.is_none() {
            return Ok(Flushed::Stopped);
        }
        let mut retry_in = None;
        let mut failed_messages = Vec::new();
        let mut failed: HashSet<Uuid> = HashSet::new();
        let mut retrying: HashSet<Uuid> = HashSet::new();
        // Retries that count an attempt (not those whose destination could not be reached at all).
        let mut counted: HashSet<Uuid> = HashSet::new();
        for settlement in &published.settlements {
            match &settlement.outcome {
                SettleOutcome::Retry { delay, counted: counts, .. } => {
                    retrying.insert(settlement.id);
                    if *counts {
                        counted.insert(settlement.id);
                    }
                    retry_in = Some(retry_in.map_or(*delay, |wait: Duration| wait.min(*delay)));
                }
                SettleOutcome::Failed { .. } => {
                    failed.insert(settlement.id);
                    if let Some(event) = messages.remove(&settlement.id) {
                        failed_messages.push((event, Some(settlement.outcome.clone())));
                    }
                }
                SettleOutcome::Published => {}
            }
        }
        // A message-mode event that failed for good is written to the table as `failed`, for operators to see.
        let Some(placed) = database(shutdown, || store.write_wal_events(&failed_messages)).await? else {
            return Ok(Flushed::Stopped);
        };
        let partition_of: HashMap<AggregateKey, u16> = placed.into_iter().map(|(p, key)| (key, p)).collect();
        // A failed event goes to the table's path with its aggregate, whatever the ordering, so that an operator's
        // retry is published from there; with ordering, it holds the aggregate until then.
        for item in items.iter().filter(|item| failed.contains(&item.id)) {
            let partition = partition_of.get(&item.aggregate).copied().unwrap_or(item.partition);
            handover.hold(partition, item.aggregate.clone(), Duration::ZERO);
        }
        handover.leave_held_in_table(&items);
        // Still to publish: the retrying events and those not attempted behind them, in order.
        let attempted: HashSet<Uuid> = published.settlements.iter().map(|settlement| settlement.id).collect();
        let in_batch: HashSet<Uuid> = items.iter().map(|item| item.id).collect();
        let aggregate_of: HashMap<Uuid, AggregateKey> =
            items.iter().map(|item| (item.id, item.aggregate.clone())).collect();
        let mut now_held: Vec<(StoredEvent, Option<SettleOutcome>)> = Vec::new();
        let outcome_of: HashMap<Uuid, &SettleOutcome> =
            published.settlements.iter().map(|settlement| (settlement.id, &settlement.outcome)).collect();
        todo.retain_mut(|event| {
            let id = event.id();
            let unsettled = in_batch.contains(&id) && (retrying.contains(&id) || !attempted.contains(&id));
            let keep = unsettled && aggregate_of.get(&id).is_some_and(|aggregate| !handover.holds(aggregate));
            match (&mut *event, keep) {
                (Streamed::Message(event, _), true) if counted.contains(&id) => event.attempts += 1,
                // Behind an event of its aggregate that failed meanwhile: a message-mode event has no row to
                // wait in, so it is written to the table, pending.
                (Streamed::Message(event, _), false) if unsettled => {
                    // A retry keeps its delay and counted attempt on the table's path (one not attempted has no
                    // outcome).
                    now_held.push((StoredEvent::clone(event), outcome_of.get(&id).map(|&outcome| outcome.clone())));
                }
                _ => {}
            }
            keep
        });
        if database(shutdown, || store.write_wal_events(&now_held)).await?.is_none() {
            return Ok(Flushed::Stopped);
        }
        let Some(wait) = retry_in.filter(|_| !todo.is_empty()) else { continue };
        if Instant::now() + wait > deadline {
            if !hand_over(store, handover, &items, &published.settlements, &todo, wait, shutdown).await? {
                return Ok(Flushed::Stopped);
            }
            handover.leave_held_in_table(&items);
            break;
        }
        tokio::select! {
            () = shutdown.cancelled() => return Ok(Flushed::Stopped),
            () = tokio::time::sleep(wait) => {}
        }
    }
    Ok(Flushed::Done(Vec::new()))
}

/// Retried in place long enough: what is left leaves the stream for the table's retry path with its aggregates
/// (message-mode events are written to the table: pending, the retrying ones after their delay). `false` when
/// shutdown came first: the messages may not be in the table, so nothing past them may be acknowledged.
async fn hand_over(
    store: &PgStore,
    handover: &mut Handover,
    items: &[Item],
    settlements: &[Settlement],
    todo: &[Streamed],
    wait: Duration,
    shutdown: &CancellationToken,
) -> Result<bool> {
    let outcomes: HashMap<Uuid, &SettleOutcome> =
        settlements.iter().map(|settlement| (settlement.id, &settlement.outcome)).collect();
    let messages: Vec<(StoredEvent, Option<SettleOutcome>)> = todo
        .iter()
        .filter_map(|event| match event {
            Streamed::Message(event, _) => {
                let mut event = StoredEvent::clone(event);
                let outcome = outcomes.get(&event.id).map(|outcome| (*outcome).clone());
                // The attempt that just failed is counted by the write (none for a destination that could not be
                // reached, which counted none here either).
                if !matches!(outcome, Some(SettleOutcome::Retry { counted: false, .. })) {
                    event.attempts = event.attempts.saturating_sub(1);
                }
                Some((event, outcome))
            }
            Streamed::Row { .. } => None,
        })
        .collect();
    let Some(placed) = database(shutdown, || store.write_wal_events(&messages)).await? else { return Ok(false) };
    let partition_of: HashMap<AggregateKey, u16> = placed.into_iter().map(|(p, key)| (key, p)).collect();
    let left: HashSet<Uuid> = todo.iter().map(Streamed::id).collect();
    let mut aggregates = 0;
    for item in items.iter().filter(|item| left.contains(&item.id)) {
        if !handover.holds(&item.aggregate) {
            aggregates += 1;
            let partition = partition_of.get(&item.aggregate).copied().unwrap_or(item.partition);
            handover.hold(partition, item.aggregate.clone(), wait);
        }
    }
    tracing::warn!(
        events = todo.len(),
        aggregates,
        "events still failing after the in-place retry go to the table's retry path; the stream goes on"
    );
    Ok(true)
}

/// While publishing is paused (`outbox pause`), waits; `false` when shutdown came first.
async fn wait_unless_paused(store: &PgStore, shutdown: &CancellationToken) -> Result<bool> {
    use outbox_core::store::Store;
    let mut announced = false;
    loop {
        let Some(paused) = database(shutdown, || store.is_paused()).await? else { return Ok(false) };
        if !paused {
            return Ok(true);
        }
        if !announced {
            tracing::info!("publishing is paused (`outbox resume` resumes it)");
            announced = true;
        }
        tokio::select! {
            () = shutdown.cancelled() => return Ok(false),
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}
