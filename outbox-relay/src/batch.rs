//! Publishing one claimed batch: rounds of at most one event per aggregate (with ordering), per-event outcomes
//! turned into settlements, and one settle statement for the whole batch.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use outbox_core::store::{ClaimedEvent, CorruptedRow, Ordering, SettleOutcome, SettleReport, Settlement, StoredEvent};
use tokio::time::Instant;
use uuid::Uuid;

use crate::publish::{Message, Outcome};
use crate::relay::Shared;
use crate::Error;

/// A claimed event and the lease token it was claimed with.
struct Item {
    content: Content,
    epoch: i64,
}

/// What a claimed row holds.
enum Content {
    /// A message to publish.
    Ready(Message),
    /// A row changed by hand that cannot be published ([`StoredEvent::check`]).
    Corrupted(StoredEvent, CorruptedRow),
}

impl Item {
    fn new(claimed: ClaimedEvent) -> Self {
        let content = match claimed.event.check() {
            Ok(()) => Content::Ready(Message::from_checked(claimed.event)),
            Err(problem) => Content::Corrupted(claimed.event, problem),
        };
        Self { content, epoch: claimed.epoch }
    }

    fn id(&self) -> Uuid {
        match &self.content {
            Content::Ready(message) => message.id,
            Content::Corrupted(event, _) => event.id,
        }
    }

    fn aggregate_key(&self) -> (String, String) {
        match &self.content {
            Content::Ready(message) => (message.aggregate_type.clone(), message.aggregate_id.clone()),
            Content::Corrupted(event, _) => (event.aggregate_type.clone(), event.aggregate_id.clone()),
        }
    }

    fn settle(&self, outcome: SettleOutcome) -> Settlement {
        Settlement::new(self.id(), self.epoch, outcome)
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
            round.into_iter().partition(|item| !expired && !blocked.contains(&item.aggregate_key()));
        settlements.extend(held.iter().map(|item| item.settle(SettleOutcome::Release)));
        let (ready, corrupted): (Vec<Item>, Vec<Item>) =
            ready.into_iter().partition(|item| matches!(item.content, Content::Ready(_)));
        for item in &corrupted {
            // Never published: moved to `failed` at once, and like any failure it holds back its aggregate.
            if let Content::Corrupted(event, problem) = &item.content {
                tracing::error!(
                    event_id = %event.id, event_type = %event.event_type, aggregate_id = %event.aggregate_id,
                    attempts = event.attempts + 1, error = %problem, "corrupted row; event moved to failed"
                );
                crate::telemetry::record_corrupted(&event.event_type);
                settlements.push(item.settle(SettleOutcome::Failed { error: problem.to_string() }));
            }
            if shared.config.ordering == Ordering::Aggregate {
                blocked.insert(item.aggregate_key());
            }
        }
        let ready: Vec<(&Item, &Message)> = ready
            .iter()
            .filter_map(|item| match &item.content {
                Content::Ready(message) => Some((item, message)),
                Content::Corrupted(..) => None,
            })
            .collect();
        if ready.is_empty() {
            continue;
        }
        if Instant::now() >= deadline {
            tracing::warn!(
                events = ready.len(),
                "lease about to expire before publishing; releasing the rest of the batch"
            );
            expired = true;
            settlements.extend(ready.iter().map(|(item, _)| item.settle(SettleOutcome::Release)));
            continue;
        }
        let messages: Vec<Message> = ready.iter().map(|(_, message)| (*message).clone()).collect();
        let outcomes = shared.publisher.publish_boxed(&messages).await;
        for (index, (item, message)) in ready.iter().enumerate() {
            let outcome = outcomes.get(index).cloned().unwrap_or_else(|| {
                Outcome::transient(format!(
                    "the publisher returned {} outcomes for {} events",
                    outcomes.len(),
                    ready.len()
                ))
            });
            let settlement = settle_outcome(shared, item, message, outcome);
            if settlement.outcome != SettleOutcome::Published && shared.config.ordering == Ordering::Aggregate {
                blocked.insert(item.aggregate_key());
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

fn settle_outcome(shared: &Shared, item: &Item, message: &Message, outcome: Outcome) -> Settlement {
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

/// Splits a batch (in `seq` order) into publish rounds. With ordering, round `k` holds the `k`-th event of each
/// aggregate, so a round never has two events of one aggregate and an aggregate's events go out in order, one
/// round after the other. Without, the whole batch is one round.
fn rounds(events: Vec<ClaimedEvent>, ordering: Ordering) -> Vec<Vec<Item>> {
    let items = events.into_iter().map(Item::new);
    match ordering {
        Ordering::None => vec![items.collect()],
        Ordering::Aggregate => {
            let mut rounds: Vec<Vec<Item>> = Vec::new();
            let mut seen: HashMap<(String, String), usize> = HashMap::new();
            for item in items {
                let round = seen.entry(item.aggregate_key()).or_insert(0);
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
