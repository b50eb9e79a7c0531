//! The settle of published batches, run while the next batches are published. The rows of a batch are marked
//! published (or deleted with `--retention 0s`) by a task of their own; the stream is acknowledged past the batch
//! only once that statement has committed. At most one settle is in flight: the batches published while it runs
//! wait in [`Queued`] and are settled together by the next statement, so a slow commit delays no publish (up to a
//! batch's worth of rows waiting; then publishing waits for the settle, as it did for every batch before). The
//! table's retry path, an acknowledgement of an idle stream and the end of the session wait until every published
//! batch is settled, so acknowledgements stay in stream order and nothing reads a row whose settle is still to
//! come.

use outbox_core::store::{PgStore, SettleReport, Settlement};
use pgwire_replication::Lsn;
use tokio_util::sync::CancellationToken;

use super::statement::{database, Background};
use crate::error::Result;
use crate::relay::summary::RunSummary;

/// A batch's settle, running.
pub(crate) struct Settling {
    statement: Background<SettleReport>,
    /// Where the batch ends on the stream; `None` for the rows pending when the slot was created.
    through: Option<Lsn>,
}

impl Settling {
    /// Starts settling `rows` (all published) in the background.
    pub(crate) fn start(
        store: &PgStore,
        rows: Vec<Settlement>,
        delete: bool,
        through: Option<Lsn>,
        shutdown: &CancellationToken,
    ) -> Self {
        let store = store.clone();
        let shutdown = shutdown.clone();
        let statement =
            Background::spawn(async move { database(&shutdown, || store.settle_by_id(&rows, delete)).await });
        Self { statement, through }
    }

    /// Whether the statement has ended (its result waits for [`finish`](Self::finish)).
    pub(crate) fn has_ended(&self) -> bool {
        self.statement.is_done()
    }

    /// Waits until the statement has ended, keeping its result for [`finish`](Self::finish). Cancel safe.
    pub(crate) async fn ended(&mut self) {
        self.statement.ended().await;
    }

    /// Waits until the settle has committed and adds its report to `summary`. `Some(through)`: the stream may be
    /// acknowledged through that position (`None` inside: nothing to acknowledge); `None`: shutdown came first
    /// and nothing was settled (those events are streamed again).
    ///
    /// # Errors
    ///
    /// The settle's fatal database error.
    pub(crate) async fn finish(self, summary: &mut RunSummary) -> Result<Option<Option<Lsn>>> {
        let report = self.statement.finish().await?;
        Ok(report.map(|report| {
            summary.add(report);
            self.through
        }))
    }
}
/// Published batches waiting for the running settle to end, to be settled together by the next statement.
#[derive(Default)]
pub(crate) struct Queued {
    rows: Vec<Settlement>,
    /// Where the last of them ends on the stream; `None` when none does (nothing queued, or only rows pending
    /// when the slot was created).
    through: Option<Lsn>,
}

impl Queued {
    /// Adds a batch's `rows`, which ends on the stream at `through`.
    pub(crate) fn add(&mut self, rows: Vec<Settlement>, through: Option<Lsn>) {
        self.rows.extend(rows);
        self.through = self.through.max(through);
    }

    /// The rows waiting.
    pub(crate) fn rows(&self) -> usize {
        self.rows.len()
    }

    /// Nothing waits: no rows, and no position to acknowledge.
    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty() && self.through.is_none()
    }

    /// The rows waiting and where the last of their batches ends, leaving nothing queued.
    pub(crate) fn take(&mut self) -> (Vec<Settlement>, Option<Lsn>) {
        let Self { rows, through } = std::mem::take(self);
        (rows, through)
    }
}

/// Waits until `settling` has ended; forever when nothing is settling. Cancel safe.
pub(crate) async fn settling_ended(settling: &mut Option<Settling>) {
    match settling {
        Some(settling) => settling.ended().await,
        None => std::future::pending().await,
    }
}
