//! Publishing one claimed batch: rounds of at most one event per aggregate (with ordering), per-event outcomes
//! turned into settlements, and one settle statement for the whole batch.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use outbox_core::store::{ClaimedEvent, Ordering, SettleOutcome, SettleReport, Settlement};
use tokio::time::Instant;
use uuid::Uuid;

use crate::publish::{Message, Outcome};
use crate::relay::Shared;
use crate::Error;

/// A claimed event ready to publish: the message and the lease token it was claimed with.
struct Item {
    message: Message,
    epoch: i64,
}

impl Item {
    fn settle(&self, outcome: SettleOutcome) -> Settlement {
        Settlement::new(self.message.id, self.epoch, outcome)
    }
}

/// Publishes `events` (claimed at `claimed_at`, in `seq` order) and settles them. Never holds a transaction: the
/// claim was committed before this runs, and the settle is one statement after the last publish.
pub(crate) async fn publish(shared: &Shared, events: Vec<ClaimedEvent>, claimed_at: Instant) -> SettleReport {
    // Stop publishing a little before the lease ends: past it, another relay may already own the rows.
    let lease = shared.config.lease;
    let deadline = claimed_at + lease - (lease / 10).min(Duration::from_secs(5));
    let rounds = rounds(events, shared.config.ordering);
    let mut settlements = Vec::new();
    let mut blocked: HashSet<(String, String)> = HashSet::new();
    let mut expired = false;
    for round in rounds {
        let (ready, held): (Vec<Item>, Vec<Item>) =
            round.into_iter().partition(|item| !expired && !blocked.contains(&aggregate_key(&item.message)));
        settlements.extend(held.iter().map(|item| item.settle(SettleOutcome::Release)));
        if ready.is_empty() {
            continue;
        }
        if Instant::now() >= deadline {
            tracing::warn!(
                events = ready.len(),
                "lease about to expire before publishing; releasing the rest of the batch"
            );
            expired = true;
            settlements.extend(ready.iter().map(|item| item.settle(SettleOutcome::Release)));
            continue;
        }
        let messages: Vec<Message> = ready.iter().map(|item| item.message.clone()).collect();
        let outcomes = shared.publisher.publish_boxed(&messages).await;
        for (index, item) in ready.iter().enumerate() {
            let outcome = outcomes.get(index).cloned().unwrap_or_else(|| {
                Outcome::transient(format!(
                    "the publisher returned {} outcomes for {} events",
                    outcomes.len(),
                    ready.len()
                ))
            });
            let settlement = settle_outcome(shared, item, outcome);
            if settlement.outcome != SettleOutcome::Published && shared.config.ordering == Ordering::Aggregate {
                blocked.insert(aggregate_key(&item.message));
            }
            settlements.push(settlement);
        }
    }
    settle(shared, &settlements).await
}

/// Writes the settlements, retrying a retryable database error a few times. If it still fails the rows stay
/// in flight until their lease expires and are published again: at least once, never lost.
pub(crate) async fn settle(shared: &Shared, settlements: &[Settlement]) -> SettleReport {
    let span = tracing::info_span!("outbox.mark", events = settlements.len());
    tracing::Instrument::instrument(settle_in_span(shared, settlements), span).await
}

async fn settle_in_span(shared: &Shared, settlements: &[Settlement]) -> SettleReport {
    let delete_published = shared.config.retention == crate::Retention::Immediately;
    let mut wait = Duration::from_millis(50);
    for attempt in 1..=4 {
        match shared.store.settle(shared.owner, settlements, delete_published).await {
            Ok(report) => {
                if report.fenced > 0 {
                    tracing::warn!(
                        events = report.fenced,
                        "lease lost before marking: another relay reclaimed these events; not marking them"
                    );
                }
                return report;
            }
            Err(error) => {
                let error = Error::from_store(error);
                if attempt == 4 || !error.is_retryable() {
                    tracing::error!(events = settlements.len(), error = %error, "cannot mark the batch; it will be published again after its lease expires");
                    break;
                }
                tracing::warn!(events = settlements.len(), error = %error, "cannot mark the batch; retrying");
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
        }
    }
    SettleReport::default()
}

fn settle_outcome(shared: &Shared, item: &Item, outcome: Outcome) -> Settlement {
    let message = &item.message;
    let attempts = message.attempts + 1;
    match outcome {
        Outcome::Published => item.settle(SettleOutcome::Published),
        Outcome::Permanent(error) => {
            tracing::error!(
                event_id = %message.id, event_type = %message.event_type, aggregate_id = %message.aggregate_id,
                attempts, error = %error, "permanent publish failure; event moved to failed"
            );
            item.settle(SettleOutcome::Failed { error: error.message().to_owned() })
        }
        Outcome::Transient(error) if attempts >= shared.config.max_attempts => {
            tracing::error!(
                event_id = %message.id, event_type = %message.event_type, aggregate_id = %message.aggregate_id,
                attempts, error = %error, "publish failed and attempts are exhausted; event moved to failed"
            );
            item.settle(SettleOutcome::Failed { error: format!("gave up after {attempts} attempts: {error}") })
        }
        Outcome::Transient(error) => {
            let delay = shared.config.backoff.delay(message.attempts);
            tracing::warn!(
                event_id = %message.id, event_type = %message.event_type, aggregate_id = %message.aggregate_id,
                attempts, retry_in = ?delay, error = %error, "publish failed; will retry"
            );
            item.settle(SettleOutcome::Retry { error: error.message().to_owned(), delay })
        }
    }
}

fn aggregate_key(message: &Message) -> (String, String) {
    (message.aggregate_type.clone(), message.aggregate_id.clone())
}

/// Splits a batch (in `seq` order) into publish rounds. With ordering, round `k` holds the `k`-th event of each
/// aggregate, so a round never has two events of one aggregate and an aggregate's events go out in order, one
/// round after the other. Without, the whole batch is one round.
fn rounds(events: Vec<ClaimedEvent>, ordering: Ordering) -> Vec<Vec<Item>> {
    let items = events.into_iter().map(|claimed| Item { epoch: claimed.epoch, message: Message::from(claimed.event) });
    match ordering {
        Ordering::None => vec![items.collect()],
        Ordering::Aggregate => {
            let mut rounds: Vec<Vec<Item>> = Vec::new();
            let mut seen: HashMap<(String, String), usize> = HashMap::new();
            for item in items {
                let round = seen.entry(aggregate_key(&item.message)).or_insert(0);
                if rounds.len() <= *round {
                    rounds.push(Vec::new());
                }
                rounds[*round].push(item);
                *round += 1;
            }
            rounds
        }
    }
}

/// The rows a batch task holds, so they can be released if the task is aborted or panics.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    pub(crate) rows: Vec<(Uuid, i64, u32)>,
}

impl Held {
    pub(crate) fn of(events: &[ClaimedEvent]) -> Self {
        Self { rows: events.iter().map(|e| (e.event.id, e.epoch, e.event.attempts)).collect() }
    }

    pub(crate) fn release(&self) -> Vec<Settlement> {
        self.rows.iter().map(|(id, epoch, _)| Settlement::new(*id, *epoch, SettleOutcome::Release)).collect()
    }

    /// Counts a panic of the publisher as a transient failure, so a publisher that panics on some event cannot
    /// loop forever on it.
    pub(crate) fn panicked(&self, shared: &Shared) -> Vec<Settlement> {
        self.rows
            .iter()
            .map(|(id, epoch, attempts)| {
                let error = "the publisher panicked".to_owned();
                let outcome = if attempts + 1 >= shared.config.max_attempts {
                    SettleOutcome::Failed { error }
                } else {
                    SettleOutcome::Retry { error, delay: shared.config.backoff.delay(*attempts) }
                };
                Settlement::new(*id, *epoch, outcome)
            })
            .collect()
    }
}
