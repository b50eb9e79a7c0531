//! The hand-over to the table's retry path: an event that keeps failing for longer than the in-place retry
//! allows, or that failed for good, leaves the stream together with its aggregate. The aggregate's events stay
//! pending in the table (the failing one with its `next_attempt_at`) and are published from there while the stream
//! moves on; the stream skips the aggregate's later events until the table holds none of its events any more. The
//! stream numbers each event it leaves in the table in its own order ([`PgStore::number_wal_handed_over`]), and
//! the retry path publishes only numbered events, in that order: the order their transactions committed, which is
//! not that of their `seq` when two transactions commit in the reverse of their inserts; a row that committed but
//! has not been streamed yet waits for the stream. A failed event keeps its aggregate on the table's path until an
//! operator retries or cancels it (so that the retry is published from there); with `--ordering aggregate` it
//! holds the aggregate's later events too, as with the table source.
//!
//! The hand-over is recorded in the database (`outbox_wal_handed_over`, written before the stream is acknowledged
//! past the events that caused it, and cleared once the table holds none of the aggregate's events), so a relay
//! that restarts rebuilds it from there ([`PgStore::wal_handed_over`]), whatever an operator did to the events
//! meanwhile. While nothing is handed over, it costs no query.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use outbox_core::store::{AggregateKey, HandedOverRow, Ordering, PgStore, SettleOutcome};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::publish_settle::publish_and_settle;
use super::statement::database;
use crate::error::Result;
use crate::relay::batch::Item;
use crate::relay::shared::Shared;
use crate::relay::summary::RunSummary;

/// The most aggregates one run of the retry path reads, and the most events it reads of each.
const AGGREGATES_PER_RUN: usize = 200;
const EVENTS_PER_AGGREGATE: u32 = 100;
/// How often an aggregate held by a failed event (or publishing, while paused) is looked at again: an operator's
/// retry or cancel is seen within this.
const RECHECK: Duration = Duration::from_secs(2);

/// The aggregates published from the table rather than from the stream, and when to look at them next.
#[derive(Debug, Default)]
pub(crate) struct Handover {
    held: HashMap<AggregateKey, u16>,
    /// Aggregates handed over and not recorded in the database yet ([`record`](Self::record)).
    unrecorded: Vec<(u16, AggregateKey)>,
    /// Aggregates released to the stream and not forgotten in the database yet.
    released: Vec<AggregateKey>,
    /// Rows left in the table for the retry path, in the stream's order, not numbered in the database yet
    /// ([`leave_in_table`](Self::leave_in_table)).
    unnumbered: Vec<Uuid>,
    next: Option<Instant>,
    /// Where the next run goes on when more aggregates are held than one run reads: the last one the run before
    /// read (`None`: from the first). Every held aggregate gets its turn.
    resume_after: Option<AggregateKey>,
    retry_in_place: Duration,
}

impl Handover {
    /// The hand-over as the table records it; a failing event is handed over after `retry_in_place`.
    pub(crate) async fn rebuild(
        store: &PgStore,
        retry_in_place: Duration,
        shutdown: &CancellationToken,
    ) -> Result<Option<Self>> {
        let Some(held) = database(shutdown, || store.wal_handed_over()).await? else { return Ok(None) };
        let mut handover = Self { retry_in_place, ..Self::default() };
        for (partition, aggregate) in held {
            handover.hold(partition, aggregate, Duration::ZERO);
        }
        // Those found by their failed attempts alone (recorded by no relay before) are recorded now.
        if !handover.update_record(store, shutdown).await? {
            return Ok(None);
        }
        if !handover.held.is_empty() {
            tracing::info!(aggregates = handover.held.len(), "aggregates published from the table's retry path");
        }
        Ok(Some(handover))
    }

    /// How long a failing event is retried in place, holding the stream, before it is handed over.
    pub(crate) fn retry_in_place(&self) -> Duration {
        self.retry_in_place
    }

    /// Whether the events of `aggregate` go through the table's retry path.
    pub(crate) fn holds(&self, aggregate: &AggregateKey) -> bool {
        self.held.contains_key(aggregate)
    }

    /// How many aggregates are handed over.
    pub(crate) fn len(&self) -> usize {
        self.held.len()
    }

    /// Hands `aggregate` over; the retry path looks at it in `after` at the latest. Recorded in the database by
    /// [`update_record`](Self::update_record).
    pub(crate) fn hold(&mut self, partition: u16, aggregate: AggregateKey, after: Duration) {
        self.released.retain(|released| *released != aggregate);
        if self.held.insert(aggregate.clone(), partition).is_none() {
            self.unrecorded.push((partition, aggregate));
        }
        self.wake_in(after);
    }

    /// Events (by id, in the stream's order) that the stream leaves in the table for the retry path: those of an
    /// aggregate handed over or failed, or passed while their aggregate was handed over; rows, and message-mode
    /// events written to the table. The retry path publishes only such events, in this order
    /// ([`PgStore::number_wal_handed_over`]): the order their transactions committed, not that of their inserts.
    /// Numbered in the database by [`update_record`](Self::update_record).
    pub(crate) fn leave_in_table(&mut self, ids: impl IntoIterator<Item = Uuid>) {
        self.unnumbered.extend(ids);
    }

    /// The events of `items` (a batch, in the stream's order) whose aggregates are handed over now stay in the
    /// table ([`leave_in_table`](Self::leave_in_table)); those published already are left alone by the numbering.
    pub(crate) fn leave_held_in_table(&mut self, items: &[Item]) {
        let held = &self.held;
        self.unnumbered.extend(items.iter().filter(|item| held.contains_key(&item.aggregate)).map(|item| item.id));
    }

    /// Numbers the rows left in the table, records the aggregates handed over and forgets those released since the
    /// last call (a statement each, none when nothing changed), so that a relay that starts later holds the same
    /// ones; called before the stream is acknowledged past the events of those handed over. `false` when shutdown
    /// came first.
    pub(crate) async fn update_record(&mut self, store: &PgStore, shutdown: &CancellationToken) -> Result<bool> {
        if !self.unnumbered.is_empty() {
            if database(shutdown, || store.number_wal_handed_over(&self.unnumbered)).await?.is_none() {
                return Ok(false);
            }
            self.unnumbered.clear();
        }
        if self.unrecorded.is_empty() && self.released.is_empty() {
            return Ok(true);
        }
        let (unrecorded, released) = (&self.unrecorded, &self.released);
        if database(shutdown, || store.update_wal_hand_over(unrecorded, released)).await?.is_none() {
            return Ok(false);
        }
        self.unrecorded.clear();
        self.released.clear();
        Ok(true)
    }

    /// When the retry path runs next (`None`: nothing is handed over).
    pub(crate) fn next_run(&self) -> Option<Instant> {
        self.next.filter(|_| !self.held.is_empty())
    }

    /// Whether the retry path is due.
    pub(crate) fn is_due(&self) -> bool {
        self.next_run().is_some_and(|at| at <= Instant::now())
    }

    fn wake_in(&mut self, after: Duration) {
        let at = Instant::now() + after;
        self.next = Some(self.next.map_or(at, |next| next.min(at)));
    }

    /// One run of the retry path: reads the numbered events of the handed-over aggregates (one statement), and
    /// publishes and settles those whose aggregate's head is due, each aggregate's in the stream's order
    /// (aggregate by aggregate: the publish keeps the order of a batch); aggregates left with no
    /// event in the table are released to the stream (and forgotten in the database). `false` when shutdown came
    /// first.
    pub(crate) async fn run(
        &mut self,
        shared: &Shared,
        store: &PgStore,
        summary: &mut RunSummary,
        shutdown: &CancellationToken,
    ) -> Result<bool> {
        Ok(self.publish_due(shared, store, summary, shutdown).await? && self.update_record(store, shutdown).await?)
    }

    async fn publish_due(
        &mut self,
        shared: &Shared,
        store: &PgStore,
        summary: &mut RunSummary,
        shutdown: &CancellationToken,
    ) -> Result<bool> {
        self.next = None;
        let aggregates = self.next_turn();
        if self.resume_after.is_some() {
            // The rest of the held aggregates, at once.
            self.wake_in(Duration::ZERO);
        } else if self.held.len() > AGGREGATES_PER_RUN {
            // A round over every held aggregate is done: the next starts again within a recheck, whatever the
            // aggregates of this run wait for (those of the earlier runs may be due sooner).
            self.wake_in(RECHECK);
        }
        // Pending and (with ordering) failed events in one read: an operator's retry or cancel shows in full.
        let failed_hold = shared.config.ordering == Ordering::Aggregate;
        let Some(read) =
            database(shutdown, || store.wal_handed_over_events(&aggregates, EVENTS_PER_AGGREGATE, failed_hold)).await?
        else {
            return Ok(false);
        };
        if read.paused {
            self.wake_in(RECHECK);
            return Ok(true);
        }
        let mut rows: BTreeMap<usize, Vec<HandedOverRow>> = BTreeMap::new();
        for row in read.rows {
            rows.entry(row.row.range).or_default().push(row);
        }
        // Aggregate by aggregate, each in the stream's order (the publish keeps the order of a batch).
        let mut items = Vec::new();
        for (index, (key, _)) in aggregates.iter().enumerate() {
            // More of it than one run reads: published ones bring the next run at once (below); one that waits
            // (a head in backoff, a failed head) must not.
            let mine = rows.remove(&index).unwrap_or_default();
            let Some(head) = mine.first() else {
                // Nothing of it is left in the table: its next events come from the stream again.
                self.held.remove(key);
                self.unrecorded.retain(|(_, unrecorded)| unrecorded != key);
                self.released.push(key.clone());
                continue;
            };
            if head.failed || head.unnumbered {
                self.wake_in(RECHECK);
                continue;
            }
            if !head.row.wait.is_zero() {
                self.wake_in(head.row.wait);
                continue;
            }
            items.extend(mine.into_iter().take_while(|row| !row.failed && !row.unnumbered).map(
                |HandedOverRow { row, .. }| {
                    let aggregate = row.event.aggregate_key();
                    Item::new(row.partition, 0, row.event, aggregate, row.since_commit)
                },
            ));
        }
        if items.is_empty() {
            return Ok(true);
        }
        let Some(published) = publish_and_settle(shared, store, summary, &mut items, &HashMap::new(), shutdown).await?
        else {
            return Ok(false);
        };
        for (.., outcome) in &published.held_back {
            match outcome {
                SettleOutcome::Retry { delay, .. } => self.wake_in(*delay),
                _ => self.wake_in(RECHECK),
            }
        }
        // What was published may have more events behind it, or be done: the next run tells.
        self.wake_in(Duration::ZERO);
        Ok(true)
    }

    /// The held aggregates this run reads: at most [`AGGREGATES_PER_RUN`], in key order from where the last run
    /// stopped, so that aggregates held by failed events at the front never keep the others waiting.
    fn next_turn(&mut self) -> Vec<(AggregateKey, u16)> {
        let mut held: Vec<(&AggregateKey, &u16)> = self.held.iter().collect();
        held.sort_unstable();
        let start = self.resume_after.as_ref().map_or(0, |after| held.partition_point(|(key, _)| *key <= after));
        let start = if start >= held.len() { 0 } else { start };
        let end = (start + AGGREGATES_PER_RUN).min(held.len());
        let turn: Vec<(AggregateKey, u16)> =
            held[start..end].iter().map(|(key, partition)| ((*key).clone(), **partition)).collect();
        self.resume_after = (end < held.len()).then(|| held[end - 1].0.clone());
        turn
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Handover, AGGREGATES_PER_RUN};

    #[test]
    fn runs_take_the_held_aggregates_in_turns_that_cover_every_one_then_start_again() {
        let mut handover = Handover::default();
        let held = 2 * AGGREGATES_PER_RUN + 50;
        for n in 0..held {
            handover.hold(0, ("t".to_owned(), format!("{n:04}")), Duration::ZERO);
        }
        let mut seen = Vec::new();
        for turn in [AGGREGATES_PER_RUN, AGGREGATES_PER_RUN, 50] {
            let aggregates = handover.next_turn();
            assert_eq!(aggregates.len(), turn);
            seen.extend(aggregates.into_iter().map(|(key, _)| key.1));
        }
        assert!(handover.resume_after.is_none(), "a round is done");
        assert_eq!(seen, (0..held).map(|n| format!("{n:04}")).collect::<Vec<_>>(), "each once, in order");
        assert_eq!(handover.next_turn()[0].0 .1, "0000", "the next round starts at the first");
        // One released meanwhile: the turn goes on after the last one read.
        handover.held.remove(&("t".to_owned(), format!("{:04}", AGGREGATES_PER_RUN - 1)));
        assert_eq!(handover.next_turn()[0].0 .1, format!("{AGGREGATES_PER_RUN:04}"));
    }
}
