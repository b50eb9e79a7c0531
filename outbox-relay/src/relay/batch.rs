//! Publishing one batch: in rounds of at most one event per aggregate (unless the publisher keeps a batch's
//! order), with a timeout and a guard against a panicking publisher, each outcome turned into a settlement.

use std::sync::Arc;

use foldhash::HashSet;

use outbox_core::store::{AggregateKey, CorruptedRow, Ordering, RowVersion, SettleOutcome, Settlement, StoredEvent};
use tokio_util::task::AbortOnDropHandle;
use uuid::Uuid;

use super::retry;
use super::shared::Shared;
use crate::publish::{Message, Outcome};

/// One event of a batch.
pub(crate) struct Item {
    pub(crate) id: Uuid,
    pub(crate) seq: i64,
    pub(crate) partition: u16,
    /// The partition's epoch when the event was read.
    pub(crate) epoch: i64,
    /// The partition's generation when the event was read (grows when an operator changes its rows).
    pub(crate) generation: i64,
    pub(crate) aggregate: AggregateKey,
    pub(crate) attempts: u32,
    event_type: String,
    /// Where the read found its row, for the settle.
    version: Option<RowVersion>,
    content: Content,
}

/// What its row holds.
enum Content {
    /// A message to publish.
    Ready(Message),
    /// The message, handed to the publisher (moved, not copied).
    Taken,
    /// A row changed by hand that cannot be published ([`StoredEvent::check`]).
    Corrupted(CorruptedRow),
}

impl Item {
    /// The item of `event` (of `aggregate`, its [`StoredEvent::aggregate_key`]), whose transaction committed
    /// `since_commit` ago.
    pub(crate) fn new(
        partition: u16,
        epoch: i64,
        event: StoredEvent,
        aggregate: AggregateKey,
        since_commit: std::time::Duration,
    ) -> Self {
        let (id, seq, attempts) = (event.id, event.seq, event.attempts);
        let event_type = event.event_type.clone();
        let content = match event.check() {
            Ok(()) => Content::Ready(Message::from_checked(event, since_commit)),
            Err(problem) => Content::Corrupted(problem),
        };
        Self { id, seq, partition, epoch, generation: 0, aggregate, attempts, event_type, version: None, content }
    }

    /// Read at `generation` of its partition ([`PartitionLease::generation`](outbox_core::store::PartitionLease)).
    pub(crate) fn in_generation(mut self, generation: i64) -> Self {
        self.generation = generation;
        self
    }

    /// Where the read found its row ([`ReadRow::version`](outbox_core::store::ReadRow)).
    pub(crate) fn at(mut self, version: Option<RowVersion>) -> Self {
        self.version = version;
        self
    }

    pub(crate) fn event_type(&self) -> &str {
        &self.event_type
    }

    /// Its message, to hand to the publisher; `None` for a corrupted row (or a message taken already).
    fn take_message(&mut self) -> Option<Message> {
        match std::mem::replace(&mut self.content, Content::Taken) {
            Content::Ready(message) => Some(message),
            other => {
                self.content = other;
                None
            }
        }
    }
}

/// What a batch came to: the settlements of the events attempted, and the aggregates to hold back (retrying or
/// failed heads) with the `seq` of their head and the outcome. Events not attempted (behind a failed event of
/// their aggregate) get no settlement: they stay pending, held back with their aggregate.
#[derive(Debug, Default)]
pub(crate) struct Published {
    pub(crate) settlements: Vec<Settlement>,
    pub(crate) held_back: Vec<(u16, AggregateKey, i64, SettleOutcome)>,
}

/// Publishes `items` (in `seq` order). Their messages are handed to the publisher, not copied: the items keep what
/// the settle and the logs need.
pub(crate) async fn publish(shared: &Shared, items: &mut [Item]) -> Published {
    let ordering = shared.config.ordering;
    let keeps_order = shared.publisher.keeps_order_erased();
    let mut messages: Vec<Option<Message>> = items.iter_mut().map(Item::take_message).collect();
    let items: &[Item] = items;
    let mut done = Published::default();
    let mut blocked: HashSet<&AggregateKey> = HashSet::default();
    let mut left: Vec<usize> = (0..items.len()).collect();
    while !left.is_empty() {
        // This round: the next event of every aggregate (all of them, in order, when the publisher keeps order), up
        // to the events one call may carry; with ordering, an aggregate with an event left for later leaves its
        // later events for later too.
        let cap = shared.call_size.cap();
        let mut round: Vec<usize> = Vec::new();
        let mut later: Vec<usize> = Vec::new();
        let mut in_round: HashSet<&AggregateKey> = HashSet::default();
        let mut deferred: HashSet<&AggregateKey> = HashSet::default();
        for index in left {
            let item = &items[index];
            if ordering == Ordering::Aggregate && blocked.contains(&item.aggregate) {
                continue;
            }
            if round.len() >= cap
                || (ordering == Ordering::Aggregate && !deferred.is_empty() && deferred.contains(&item.aggregate))
            {
                if ordering == Ordering::Aggregate {
                    deferred.insert(&item.aggregate);
                }
                later.push(index);
                continue;
            }
            if ordering == Ordering::None || keeps_order || in_round.insert(&item.aggregate) {
                round.push(index);
            } else {
                later.push(index);
            }
        }
        left = later;
        let mut ready: Vec<&Item> = Vec::with_capacity(round.len());
        let mut batch: Vec<Message> = Vec::with_capacity(round.len());
        for index in round {
            let item = &items[index];
            if ordering == Ordering::Aggregate && blocked.contains(&item.aggregate) {
                // Behind an event of its aggregate that failed in this round (a corrupted row): not published, read
                // again with it. Only a publisher that keeps order gets an aggregate's events in one round.
                continue;
            }
            if let Some(message) = messages[index].take() {
                ready.push(item);
                batch.push(message);
            } else if let Content::Corrupted(problem) = &item.content {
                // Never published: moved to `failed` at once, and like any failure it holds back its aggregate.
                tracing::error!(
                    event_id = %item.id, event_type = %item.event_type, aggregate_id = %item.aggregate.1,
                    attempts = item.attempts + 1, error = %problem, "corrupted row; event moved to failed"
                );
                crate::telemetry::record_corrupted(&item.event_type);
                let outcome = SettleOutcome::Failed { error: problem.to_string() };
                hold_back(&mut done, &mut blocked, item, ordering, &outcome);
                done.settlements.push(Settlement::new(item.id, outcome));
            }
        }
        if ready.is_empty() {
            continue;
        }
        let start = shared.destination.call_starts();
        let events = batch.len();
        let started = tokio::time::Instant::now();
        let (outcomes, timed_out) = call(shared, batch).await;
        let took = (!timed_out).then(|| started.elapsed());
        if let Some(cap) = shared.call_size.after_call(events, took, shared.config.publish_timeout) {
            tracing::warn!(
                events, cap, timeout = ?shared.config.publish_timeout,
                "the publisher did not finish a call within the publish timeout; calls carry at most `cap` events \
                 from now on (more again while they finish quickly)"
            );
        }
        let outage = shared.destination.call_ended(
            start,
            outcomes.contains(&Outcome::Published),
            outcomes.iter().any(|outcome| matches!(outcome, Outcome::Transient(error) if error.is_unavailable())),
        );
        // Aggregates an outcome of this call held back. Not `blocked`, which also holds those of corrupted rows met
        // while the round was made: every event of the call came before such a row, and its outcome stands.
        let mut failed_in_call: HashSet<&AggregateKey> = HashSet::default();
        for (index, item) in ready.iter().enumerate() {
            if ordering == Ordering::Aggregate && failed_in_call.contains(&item.aggregate) {
                // An earlier event of its aggregate failed in this call: not settled, read again with it.
                continue;
            }
            let outcome = outcomes.get(index).cloned().unwrap_or_else(|| {
                Outcome::transient(format!(
                    "the publisher returned {} outcomes for {} events",
                    outcomes.len(),
                    ready.len()
                ))
            });
            let settled = settle_outcome(shared, item, outcome, outage);
            if settled != SettleOutcome::Published {
                hold_back(&mut done, &mut blocked, item, ordering, &settled);
                failed_in_call.insert(&item.aggregate);
            }
            done.settlements.push(Settlement::new(item.id, settled).at(item.version.clone()));
        }
    }
    done
}

/// A failure holds back the item's aggregate: with ordering, its later events wait for it; without, only a retry
/// is read again later (a failed event blocks nothing).
fn hold_back<'a>(
    done: &mut Published,
    blocked: &mut HashSet<&'a AggregateKey>,
    item: &'a Item,
    ordering: Ordering,
    outcome: &SettleOutcome,
) {
    let holds = match ordering {
        Ordering::Aggregate => true,
        Ordering::None => matches!(outcome, SettleOutcome::Retry { .. }),
    };
    if holds {
        blocked.insert(&item.aggregate);
        done.held_back.push((item.partition, item.aggregate.clone(), item.seq, outcome.clone()));
    }
}

/// One publisher call, in a task of its own (a panic is a failed attempt, not a dead relay) and under the
/// publish timeout (a sink that hangs is a failed attempt too); `true` with the outcomes when it timed out. The
/// task ends with the call: a publish that timed out, or whose relay was stopped past its shutdown timeout, is
/// aborted.
async fn call(shared: &Shared, messages: Vec<Message>) -> (Vec<Outcome>, bool) {
    let count = messages.len();
    let publisher = Arc::clone(&shared.publisher);
    let task = AbortOnDropHandle::new(tokio::spawn(async move { publisher.publish_boxed(&messages).await }));
    match tokio::time::timeout(shared.config.publish_timeout, task).await {
        Ok(Ok(outcomes)) => (outcomes, false),
        Ok(Err(error)) if error.is_panic() => {
            tracing::error!(events = count, "the publisher panicked; the events count a failed attempt");
            (vec![Outcome::transient("the publisher panicked"); count], false)
        }
        Ok(Err(_)) => (vec![Outcome::transient("the publish was cancelled"); count], false),
        Err(_) => {
            let timeout = shared.config.publish_timeout;
            tracing::error!(events = count, ?timeout, "the publish timed out; the events count a failed attempt");
            (vec![Outcome::transient(format!("the publish timed out after {timeout:?}")); count], true)
        }
    }
}

/// The settlement of `item`'s `outcome`, from a call that was the `outage`th in a row to reach nothing (`None`: the
/// destination was reached).
fn settle_outcome(shared: &Shared, item: &Item, outcome: Outcome, outage: Option<u32>) -> SettleOutcome {
    let attempts = item.attempts + 1;
    let retry_after = outcome.retry_after();
    let (error, permanent) = match outcome {
        Outcome::Published => return SettleOutcome::Published,
        Outcome::Permanent(error) => (error, true),
        Outcome::Transient(error) => (error, false),
    };
    let settled = match outage {
        Some(outage) if !permanent && error.is_unavailable() => {
            retry::while_unreachable(&shared.config, outage, error.message().to_owned(), retry_after)
        }
        _ => retry::after_failure_waiting(
            &shared.config,
            item.attempts,
            error.message().to_owned(),
            permanent,
            retry_after,
        ),
    };
    crate::telemetry::record_failure(&item.event_type, &settled);
    if let SettleOutcome::Retry { delay, counted: false, .. } = &settled {
        tracing::warn!(
            event_id = %item.id, event_type = %item.event_type, aggregate_id = %item.aggregate.1,
            attempts = item.attempts, retry_in = ?delay, error = %error,
            "the destination is unreachable; will retry (no attempt counted)"
        )
    } else if let SettleOutcome::Retry { delay, .. } = &settled {
        tracing::warn!(
            event_id = %item.id, event_type = %item.event_type, aggregate_id = %item.aggregate.1,
            attempts, retry_in = ?delay, error = %error, "publish failed; will retry"
        )
    } else {
        tracing::error!(
            event_id = %item.id, event_type = %item.event_type, aggregate_id = %item.aggregate.1,
            attempts, error = %error, "publish failed for good; event moved to failed"
        )
    }
    settled
}
