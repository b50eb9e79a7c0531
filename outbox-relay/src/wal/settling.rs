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
    /// Starts settling `rows` (all published) in the background; with `messages_through`, the same statement
    /// records that the message-mode events streamed through that position are published (they have no row that
    /// could tell, and the slot's confirmed position may fall back behind them when the server restarts).
    pub(crate) fn start(
        store: &PgStore,
        rows: Vec<Settlement>,
        delete: bool,
        through: Option<Lsn>,
        messages_through: Option<Lsn>,
        shutdown: &CancellationToken,
    ) -> Self {
        let store = store.clone();
        let shutdown = shutdown.clone();
        let messages_through = messages_through.map(|lsn| lsn.to_pg_string());
        let statement = Background::spawn(async move {
            database(&shutdown, || store.settle_streamed(&rows, delete, messages_through.as_deref())).await
        });
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
    /// The message-mode events of the batches waiting (they have no row, but count towards what may wait).
    messages: usize,
    /// Where the last of them ends on the stream; `None` when none does (nothing queued, or only rows pending
    /// when the slot was created).
    through: Option<Lsn>,
    /// Where the last of them that carried message-mode events ends on the stream: recorded by their settle.
    messages_through: Option<Lsn>,
}

/// What [`Queued::take`] hands over: the rows, where the last batch ends, and where the last one with
/// message-mode events ends.
pub(crate) type Taken = (Vec<Settlement>, Option<Lsn>, Option<Lsn>);

impl Queued {
    /// Adds a batch's `rows`, which ends on the stream at `through`, and which carried `messages` message-mode
    /// events.
    pub(crate) fn add(&mut self, rows: Vec<Settlement>, through: Option<Lsn>, messages: usize) {
        self.rows.extend(rows);
        self.through = self.through.max(through);
        if messages > 0 {
            self.messages += messages;
            self.messages_through = self.messages_through.max(through);
        }
    }

    /// The events waiting: rows, and message-mode events whose position waits to be recorded.
    pub(crate) fn events(&self) -> usize {
        self.rows.len() + self.messages
    }

    /// Nothing waits: no rows, and no position to acknowledge.
    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty() && self.through.is_none()
    }

    /// The rows waiting, where the last of their batches ends and where the last with message-mode events ends,
    /// leaving nothing queued.
    pub(crate) fn take(&mut self) -> Taken {
        let Self { rows, through, messages_through, .. } = std::mem::take(self);
        (rows, through, messages_through)
    }
}

/// Waits until `settling` has ended; forever when nothing is settling. Cancel safe.
pub(crate) async fn settling_ended(settling: &mut Option<Settling>) {
    match settling {
        Some(settling) => settling.ended().await,
        None => std::future::pending().await,
    }
}
