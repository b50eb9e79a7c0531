//! A batch whose rows are read while the batch before it is published: the stream's next batch is complete, so
//! the database reads it while the relay publishes the one before, and the relay then publishes it with the rows
//! already there. Only the first read of a batch is started ahead; a batch that has to read again (a transaction
//! not visible yet, publishing paused, retries in place) reads in line, as one without a read ahead does.
//!
//! A read ahead never changes what is published: it sees the rows that are pending when it runs, like a read in
//! line, and whether an aggregate is left to the table's retry path is still decided when the batch is published.
//! The table's retry path itself runs only when no batch is read ahead.

use outbox_core::store::{PendingById, PgStore};
use pgwire_replication::Lsn;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::flush::Streamed;
use super::statement::{database, Background};

/// The first read of a batch's rows, started ahead.
pub(crate) type FirstRead = Background<PendingById>;

/// A batch of the stream, its rows being read.
pub(crate) struct ReadAhead {
    /// The batch's events, in stream order.
    events: Vec<Streamed>,
    /// Where the batch ends on the stream.
    end: Lsn,
    /// The read of its rows; `None` when it has none (message-mode events only).
    read: Option<FirstRead>,
}

impl ReadAhead {
    /// Starts reading the rows of `events`, which end on the stream at `end`.
    pub(crate) fn start(store: &PgStore, events: Vec<Streamed>, end: Lsn, shutdown: &CancellationToken) -> Self {
        let (ids, xids) = rows_of(&events);
        let read = (!ids.is_empty()).then(|| {
            let store = store.clone();
            let shutdown = shutdown.clone();
            Background::spawn(async move { database(&shutdown, || store.pending_by_id(&ids, &xids)).await })
        });
        Self { events, end, read }
    }

    /// The batch's events, where it ends on the stream, and the read of its rows: to publish.
    pub(crate) fn into_parts(self) -> (Vec<Streamed>, Lsn, Option<FirstRead>) {
        (self.events, self.end, self.read)
    }
}

/// The ids of the rows among `events`, in order, and the transactions that inserted them (each once).
pub(crate) fn rows_of(events: &[Streamed]) -> (Vec<Uuid>, Vec<u32>) {
    let mut ids: Vec<Uuid> = Vec::with_capacity(events.len());
    let mut xids: Vec<u32> = Vec::new();
    for event in events {
        if let Streamed::Row { id, xid, .. } = event {
            ids.push(*id);
            if xids.last() != xid.as_ref() {
                xids.extend(xid);
            }
        }
    }
    (ids, xids)
}
