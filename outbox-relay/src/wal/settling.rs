//! The settle of a published batch, run while the next batch is published. The rows of one batch are
//! marked published (or deleted with `--retention 0s`) by a task of their own; the stream is acknowledged past
//! the batch only once that statement has committed, and at most one settle is in flight: the next batch's
//! settle, the table's retry path, an acknowledgement of an idle stream and the end of the session all wait for
//! it first, so acknowledgements stay in stream order and nothing reads a row whose settle is still running.

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
/// Waits until `settling` has ended; forever when nothing is settling. Cancel safe.
pub(crate) async fn settling_ended(settling: &mut Option<Settling>) {
    match settling {
        Some(settling) => settling.ended().await,
        None => std::future::pending().await,
    }
}
