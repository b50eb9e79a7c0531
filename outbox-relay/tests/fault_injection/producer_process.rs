//! Producers as real processes: this test binary run again with `OUTBOX_FAULT_CHILD=producer`, enqueueing
//! through outbox-core in transactions, so that a test can SIGKILL a producer in the middle of one.
//!
//! The child says on stdout what each transaction did before and after its commit (`open {json}`, then
//! `commit N` or `rollback N`); the parent reads those lines into a [`Ledger`]. A transaction that was open when
//! its producer died is in doubt only if the kill may have hit the commit itself; the `hang` mode never commits
//! (it waits on stdin after writing), so a kill there is certainly mid-transaction.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_core::Outbox;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgPoolOptions;

use crate::events::{self, Written};
use crate::producers::Ledger;

/// The variable that makes this binary a producer.
const CHILD_ENV: &str = "OUTBOX_FAULT_CHILD";
const DATABASE_ENV: &str = "OUTBOX_FAULT_DATABASE_URL";
const MODE_ENV: &str = "OUTBOX_FAULT_MODE";
const AGGREGATES_ENV: &str = "OUTBOX_FAULT_AGGREGATES";
/// A child never outlives this, whatever happens to its parent.
const LIFETIME: Duration = Duration::from_secs(180);

/// What a producer process does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Transactions one after the other, each held open for a few milliseconds before its commit; one in ten
    /// rolled back.
    Steady,
    /// One transaction, written and then held open forever.
    Hang,
}

/// One transaction as announced before its commit.
#[derive(Debug, Serialize, Deserialize)]
struct Opened {
    tx: u64,
    events: Vec<Written>,
}

/// Runs the producer when this process is one (`OUTBOX_FAULT_CHILD=producer`); `None` otherwise.
pub(crate) fn child_main() -> Option<ExitCode> {
    if std::env::var(CHILD_ENV).ok()?.as_str() != "producer" {
        return None;
    }
    let url = std::env::var(DATABASE_ENV).expect("OUTBOX_FAULT_DATABASE_URL");
    let hang = std::env::var(MODE_ENV).is_ok_and(|mode| mode == "hang");
    let aggregates: u32 = std::env::var(AGGREGATES_ENV).ok().and_then(|n| n.parse().ok()).unwrap_or(50);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let produced = runtime.block_on(async {
        tokio::time::timeout(LIFETIME, produce(&url, if hang { Mode::Hang } else { Mode::Steady }, aggregates)).await
    });
    Some(if produced.is_ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

async fn produce(url: &str, mode: Mode, aggregates: u32) {
    let pool = PgPoolOptions::new().max_connections(1).connect(url).await.expect("connect");
    let outbox = Outbox::new();
    let mut rng = rand::rngs::StdRng::from_entropy();
    for tx_number in 1.. {
        let aggregate = events::order(rng.gen_range(0..aggregates));
        let mut tx = pool.begin().await.expect("begin");
        let written = events::write(&mut tx, &outbox, &aggregate, rng.gen_range(1..=4)).await.expect("write");
        println!("open {}", serde_json::to_string(&Opened { tx: tx_number, events: written }).expect("json"));
        if mode == Mode::Hang {
            // Until killed (or until the parent goes away and stdin closes: then the drop rolls back).
            let _ = std::io::stdin().read_line(&mut String::new());
            return;
        }
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..15))).await;
        if rng.gen_ratio(1, 10) {
            tx.rollback().await.expect("rollback");
            println!("rollback {tx_number}");
        } else {
            tx.commit().await.expect("commit");
            println!("commit {tx_number}");
        }
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..5))).await;
    }
}

/// What the parent has read from one child so far.
#[derive(Debug, Default)]
struct Transcript {
    open: BTreeMap<u64, Vec<Written>>,
    ledger: Ledger,
    ended: bool,
}

/// A running producer process, killed when dropped.
pub(crate) struct ProducerProcess {
    child: Child,
    transcript: Arc<Mutex<Transcript>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl ProducerProcess {
    /// Starts this binary as a producer on `database_url` over `aggregates` orders.
    pub(crate) fn spawn(database_url: &str, mode: Mode, aggregates: u32) -> Self {
        let mut child = Command::new(std::env::current_exe().expect("the test binary"))
            .env(CHILD_ENV, "producer")
            .env(DATABASE_ENV, database_url)
            .env(MODE_ENV, if mode == Mode::Hang { "hang" } else { "steady" })
            .env(AGGREGATES_ENV, aggregates.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn a producer process");
        let stdout = child.stdout.take().expect("piped stdout");
        let transcript = Arc::new(Mutex::new(Transcript::default()));
        let shared = Arc::clone(&transcript);
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let mut transcript = shared.lock().unwrap();
                if let Some(json) = line.strip_prefix("open ") {
                    let opened: Opened = serde_json::from_str(json).expect("an `open` line");
                    transcript.open.insert(opened.tx, opened.events);
                } else if let Some(tx) = line.strip_prefix("commit ") {
                    let written = transcript.open.remove(&tx.parse().expect("tx")).expect("an open tx");
                    transcript.ledger.record(crate::producers::TxOutcome::Committed(written));
                } else if let Some(tx) = line.strip_prefix("rollback ") {
                    let written = transcript.open.remove(&tx.parse().expect("tx")).expect("an open tx");
                    transcript.ledger.record(crate::producers::TxOutcome::RolledBack(written));
                }
            }
            shared.lock().unwrap().ended = true;
        });
        Self { child, transcript, reader: Some(reader) }
    }

    /// Transactions the child has announced as open (whatever became of them).
    pub(crate) fn opened(&self) -> usize {
        let transcript = self.transcript.lock().unwrap();
        transcript.open.len() + usize::try_from(transcript.ledger.transactions).unwrap_or(usize::MAX)
    }

    /// Waits until the child has announced `n` transactions, for at most `timeout`.
    pub(crate) async fn wait_opened(&mut self, n: usize, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.opened() < n {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("a producer process exited with {status} before opening {n} transactions");
            }
            assert!(tokio::time::Instant::now() < deadline, "a producer opened no transaction within {timeout:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits until the child has a transaction open (announced, not yet finished), for at most `timeout`.
    pub(crate) async fn wait_mid_transaction(&mut self, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.transcript.lock().unwrap().open.is_empty() {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("a producer process exited with {status}");
            }
            assert!(tokio::time::Instant::now() < deadline, "a producer opened no transaction within {timeout:?}");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// SIGKILLs the child and returns its ledger: the transactions it had open are `in_doubt` if a commit may
    /// have been under way (`Steady`), `rolled_back` if it was certainly not (`Hang`: it never commits).
    pub(crate) fn kill(mut self, mode: Mode) -> Ledger {
        self.child.kill().expect("SIGKILL a producer");
        self.child.wait().expect("reap a producer");
        if let Some(reader) = self.reader.take() {
            reader.join().expect("the reader thread");
        }
        let mut transcript = self.transcript.lock().unwrap();
        assert!(transcript.ended);
        let mut ledger = std::mem::take(&mut transcript.ledger);
        for (_, written) in std::mem::take(&mut transcript.open) {
            ledger.record(match mode {
                Mode::Steady => crate::producers::TxOutcome::InDoubt(written),
                Mode::Hang => crate::producers::TxOutcome::Failed(written),
            });
        }
        ledger
    }
}

impl Drop for ProducerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
