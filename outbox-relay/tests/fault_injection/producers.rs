//! Concurrent producers inside the test process: tasks that commit (and sometimes roll back) transactions of
//! [`events::write`] at a steady rate until a number of events is committed, keeping a [`Ledger`] of what each
//! transaction did.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_core::Outbox;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sqlx::PgPool;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::events::{self, Written};

/// What the producers did, transaction by transaction.
#[derive(Debug, Default, Clone)]
pub(crate) struct Ledger {
    /// Events of transactions whose commit succeeded.
    pub(crate) committed: Vec<Written>,
    /// Events of transactions that ended without a commit: rolled back on purpose, failed before the commit, or
    /// killed before the commit was sent.
    pub(crate) rolled_back: Vec<Written>,
    /// Transactions whose commit was sent but never confirmed (the connection broke, or the producer was killed
    /// during the commit): each either committed whole or not at all.
    pub(crate) in_doubt: Vec<Vec<Written>>,
    /// Transactions started.
    pub(crate) transactions: u64,
}

impl Ledger {
    /// Records what one transaction did.
    pub(crate) fn record(&mut self, outcome: TxOutcome) {
        self.transactions += 1;
        match outcome {
            TxOutcome::Committed(written) => self.committed.extend(written),
            TxOutcome::RolledBack(written) | TxOutcome::Failed(written) => self.rolled_back.extend(written),
            TxOutcome::InDoubt(written) => self.in_doubt.push(written),
        }
    }

    /// Adds another ledger's records.
    pub(crate) fn absorb(&mut self, other: Self) {
        self.committed.extend(other.committed);
        self.rolled_back.extend(other.rolled_back);
        self.in_doubt.extend(other.in_doubt);
        self.transactions += other.transactions;
    }
}

/// How one producer transaction ended.
#[derive(Debug)]
pub(crate) enum TxOutcome {
    /// `COMMIT` succeeded.
    Committed(Vec<Written>),
    /// Rolled back on purpose.
    RolledBack(Vec<Written>),
    /// An error before the commit (the transaction was dropped, so rolled back).
    Failed(Vec<Written>),
    /// `COMMIT` was sent and failed: it may or may not have been applied.
    InDoubt(Vec<Written>),
}

/// One transaction writing `count` events of `aggregate`, committed unless `rollback`.
pub(crate) async fn transaction(
    pool: &PgPool,
    outbox: &Outbox,
    aggregate: &str,
    count: u32,
    rollback: bool,
) -> TxOutcome {
    let Ok(mut tx) = pool.begin().await else {
        return TxOutcome::Failed(Vec::new());
    };
    let Ok(written) = events::write(&mut tx, outbox, aggregate, count).await else {
        return TxOutcome::Failed(Vec::new());
    };
    if rollback {
        // An error here still commits nothing: only a successful COMMIT does.
        let _ = tx.rollback().await;
        return TxOutcome::RolledBack(written);
    }
    match tx.commit().await {
        Ok(()) => TxOutcome::Committed(written),
        Err(_) => TxOutcome::InDoubt(written),
    }
}

/// What the producers of a scenario do.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// Concurrent producer tasks.
    pub(crate) producers: usize,
    /// Events to commit in total.
    pub(crate) events: usize,
    /// The pace, in events per second, all producers together.
    pub(crate) per_second: f64,
    /// The aggregates written to (`order-0`, ...), one chosen at random per transaction.
    pub(crate) aggregates: u32,
    /// One transaction in this many is rolled back after writing its events (0: none).
    pub(crate) rollback_one_in: u32,
    /// Events per transaction: 1 to this many.
    pub(crate) max_per_tx: u32,
    /// Enqueue with `NOTIFY`.
    pub(crate) notify: bool,
}

impl Plan {
    /// `events` events at `per_second` from 4 producers over `aggregates` aggregates, one transaction in 10
    /// rolled back, 1 to 4 events per transaction, no `NOTIFY`.
    pub(crate) fn new(events: usize, per_second: f64, aggregates: u32) -> Self {
        Self { producers: 4, events, per_second, aggregates, rollback_one_in: 10, max_per_tx: 4, notify: false }
    }
}

/// Events not yet committed: `remaining` still to start, `in_flight` in open transactions.
#[derive(Debug)]
struct Budget {
    remaining: usize,
    in_flight: usize,
}

struct Shared {
    plan: Plan,
    started: Instant,
    budget: Mutex<Budget>,
    ledger: Mutex<Ledger>,
    errors: Mutex<u64>,
}

/// Running producers.
pub(crate) struct Producers {
    shared: Arc<Shared>,
    tasks: JoinSet<()>,
}

impl Producers {
    /// Starts `plan.producers` tasks committing on `pool`.
    pub(crate) fn start(pool: &PgPool, plan: Plan) -> Self {
        let shared = Arc::new(Shared {
            budget: Mutex::new(Budget { remaining: plan.events, in_flight: 0 }),
            plan,
            started: Instant::now(),
            ledger: Mutex::default(),
            errors: Mutex::default(),
        });
        let mut tasks = JoinSet::new();
        for _ in 0..shared.plan.producers {
            tasks.spawn(produce(pool.clone(), Arc::clone(&shared)));
        }
        Self { shared, tasks }
    }

    /// Whether every planned event is committed (or in doubt).
    pub(crate) fn is_done(&self) -> bool {
        let budget = self.shared.budget.lock().unwrap();
        budget.remaining == 0 && budget.in_flight == 0
    }

    /// Waits until the producers are done (at most `timeout`) and returns the ledger.
    pub(crate) async fn finish(mut self, timeout: Duration) -> Ledger {
        let all = async { while self.tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(timeout, all).await.is_err() {
            panic!("the producers did not finish within {timeout:?}: {:?}", self.shared.budget.lock().unwrap());
        }
        let errors = *self.shared.errors.lock().unwrap();
        let ledger = self.shared.ledger.lock().unwrap().clone();
        println!(
            "    producers: {} transactions, {} events committed, {} rolled back, {} in doubt, {errors} errors, {:.1}s",
            ledger.transactions,
            ledger.committed.len(),
            ledger.rolled_back.len(),
            ledger.in_doubt.len(),
            self.shared.started.elapsed().as_secs_f64()
        );
        ledger
    }
}

impl Drop for Producers {
    fn drop(&mut self) {
        self.tasks.abort_all();
    }
}

async fn produce(pool: PgPool, shared: Arc<Shared>) {
    let plan = &shared.plan;
    let outbox = if plan.notify { Outbox::new().with_notify() } else { Outbox::new() };
    let mut rng = StdRng::from_entropy();
    loop {
        let count = {
            let mut budget = shared.budget.lock().unwrap();
            if budget.remaining == 0 && budget.in_flight == 0 {
                return;
            }
            let count = budget.remaining.min(rng.gen_range(1..=plan.max_per_tx as usize));
            budget.remaining -= count;
            budget.in_flight += count;
            count
        };
        if count == 0 {
            // Others hold the rest of the budget; one of their transactions may fail and give some back.
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        let started = plan.events - shared.budget.lock().unwrap().remaining;
        let due = shared.started + Duration::from_secs_f64(started as f64 / plan.per_second);
        tokio::time::sleep_until(due).await;

        let aggregate = events::order(rng.gen_range(0..plan.aggregates));
        let rollback = plan.rollback_one_in > 0 && rng.gen_ratio(1, plan.rollback_one_in);
        let count_u32 = u32::try_from(count).expect("a small count");
        let outcome = transaction(&pool, &outbox, &aggregate, count_u32, rollback).await;
        let (give_back, error) = match &outcome {
            TxOutcome::Committed(_) | TxOutcome::InDoubt(_) => (false, matches!(outcome, TxOutcome::InDoubt(_))),
            TxOutcome::RolledBack(_) => (true, false),
            TxOutcome::Failed(_) => (true, true),
        };
        shared.ledger.lock().unwrap().record(outcome);
        {
            let mut budget = shared.budget.lock().unwrap();
            budget.in_flight -= count;
            if give_back {
                budget.remaining += count;
            }
        }
        if error {
            *shared.errors.lock().unwrap() += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
