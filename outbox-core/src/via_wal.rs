//! Enqueueing without a table row: the event goes into PostgreSQL's write-ahead log as a transactional logical
//! decoding message, for the WAL relay (`outbox relay --source wal`) to publish.

use sqlx::Postgres;
use uuid::Uuid;

use crate::enqueue::Outbox;
use crate::error::{Error, Result};
use crate::event::OutboxEvent;
use crate::new_event::NewEvent;
use crate::store::wal_message::WAL_EMIT_LOCK;
use crate::store::WAL_MESSAGE_PREFIX;
use crate::transaction::InTransaction;

/// One statement for the whole batch: one message per event, in the array's order, each committed or rolled back
/// with the transaction (`transactional = true`), and only while the WAL relay's slot exists to keep them. The
/// check runs once, before any message (`outbox_wal_slot_ready`, migrations 8 and 17): it takes the emit lock shared
/// (never waiting: `outbox wal disable` or `drop-slot` holds it while it moves the slot's unpublished messages to
/// the table), then finds the recorded slot in `pg_replication_slots` (read from shared memory, so current even in
/// an older snapshot) with a confirmed position (its creation is over) while no drop holds the close lock, or
/// remembers that this session found it less than a second ago. It returns false, and nothing is written, without
/// the slot.
const EMIT: &str = "\
SELECT pg_logical_emit_message(true, $1, m.content) FROM UNNEST($2::text[]) AS m(content)
 WHERE (SELECT outbox_wal_slot_ready($3))";

/// The most bytes a message-mode event's aggregate type and id may hold together. A message that leaves the stream
/// (it kept failing, or failed for good) is written to the table and its aggregate recorded in
/// `outbox_wal_handed_over`, whose B-tree key holds both: an index entry takes at most about 2.7 kB (a third of a
/// page), so longer, incompressible texts fail there (SQLSTATE 54000). Refused at enqueue instead, with the margin
/// of the entry's headers.
pub(crate) const MAX_WAL_AGGREGATE_BYTES: usize = 2_600;

/// Why `aggregate_type` and `aggregate_id` cannot be a message-mode event's, if they cannot
/// ([`MAX_WAL_AGGREGATE_BYTES`]).
#[must_use]
pub(crate) fn wal_aggregate_too_long(aggregate_type: &str, aggregate_id: &str) -> Option<String> {
    let bytes = aggregate_type.len() + aggregate_id.len();
    (bytes > MAX_WAL_AGGREGATE_BYTES).then(|| {
        format!(
            "its aggregate type and id hold {bytes} bytes, more than the {MAX_WAL_AGGREGATE_BYTES} the table's index \
             of handed-over aggregates takes; nothing was written"
        )
    })
}

/// Checks what [`emit`] can write: every event's headers, and its aggregate within [`MAX_WAL_AGGREGATE_BYTES`].
/// `OutboxTransaction` runs it at enqueue for its message-mode events.
pub(crate) fn check(event: &NewEvent) -> Result<()> {
    event.check()?;
    match wal_aggregate_too_long(event.aggregate_type(), event.aggregate_id()) {
        None => Ok(()),
        Some(reason) => Err(Error::InvalidEvent { event_type: event.event_type().to_owned(), reason }),
    }
}

/// Writes events into PostgreSQL's write-ahead log inside a transaction you own, with no table row
/// ([`Outbox::via_wal`]).
///
/// Each event becomes a transactional logical decoding message (`pg_logical_emit_message(true, 'outbox', ...)`):
/// it commits or rolls back with your domain change exactly like a row, and only a WAL relay
/// (`outbox relay --source wal`) publishes it, in commit order. Nothing is written to the outbox table, so the
/// enqueue costs the WAL record and nothing else: no index entries, no row to settle or purge later. An event that
/// fails for good is written to the table as `failed` (and one still failing after the relay's in-place retry, as
/// pending), so `outbox events` shows it and `outbox events retry` works as usual.
///
/// [`enqueue`](Self::enqueue) costs a round trip of its own; [`begin`](Self::begin) gives an
/// [`OutboxTransaction`](crate::OutboxTransaction) that sends the messages with the `COMMIT`, in one round trip.
///
/// Only a PostgreSQL transaction is accepted (a compile error otherwise), and like [`Outbox`] only a transaction:
/// never a pool or a bare connection. The WAL relay's slot must exist, so that the write-ahead log keeps the
/// messages until they are published: run `outbox wal enable` and start `outbox relay --source wal` once before
/// the first enqueue; without the slot the enqueue writes nothing and returns [`Error::WalSourceOff`]. When the
/// slot goes (`outbox wal disable` or `outbox wal drop-slot`), the messages it had not published yet are moved
/// to the table as pending rows first, and enqueues running meanwhile fail the same way: no event is ever lost
/// between the two sources. A session remembers a check that found the slot for a second (the two commands wait
/// that long before they drop it), so a slot dropped by hand rather than with `outbox wal drop-slot` loses the
/// messages of sessions that checked it in the second before.
///
/// # Example
///
/// ```no_run
/// # use outbox_core::{Outbox, OutboxEvent};
/// # #[derive(serde::Serialize)] struct OrderPlaced { order_id: i64 }
/// # impl OutboxEvent for OrderPlaced {
/// #     const EVENT_TYPE: &'static str = "order.placed";
/// #     const AGGREGATE_TYPE: &'static str = "order";
/// #     const VERSION: u32 = 1;
/// #     fn aggregate_id(&self) -> String { self.order_id.to_string() }
/// # }
/// # async fn run(pool: sqlx::PgPool) -> Result<(), outbox_core::Error> {
/// let outbox = Outbox::new().via_wal();
/// let mut tx = pool.begin().await?;
/// // ... your domain change ...
/// let id = outbox.enqueue(&mut tx, &OrderPlaced { order_id: 1 }).await?;
/// tx.commit().await?; // the event is in the WAL only if this commits
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct WalOutbox {
    _private: (),
}

impl Outbox {
    /// Writes events into the write-ahead log instead of the outbox table: see [`WalOutbox`]. Notification
    /// settings do not apply (the WAL relay needs none).
    #[must_use]
    pub fn via_wal(self) -> WalOutbox {
        WalOutbox::default()
    }
}

impl WalOutbox {
    /// Writes one event in the transaction and returns its id.
    ///
    /// # Errors
    ///
    /// Serialization and validation errors of [`NewEvent::new`] (nothing is written), [`Error::WalSourceOff`]
    /// without the WAL relay's slot (nothing is written, the transaction goes on), and [`Error::Database`] when
    /// the write fails.
    pub async fn enqueue<T, E>(&self, tx: T, event: &E) -> Result<Uuid>
    where
        T: InTransaction<Database = Postgres>,
        E: OutboxEvent + ?Sized,
    {
        let event = NewEvent::new(event)?;
        let id = event.id();
        self.enqueue_events(tx, [event]).await?;
        Ok(id)
    }

    /// Writes events of one type in the transaction, in one statement, and returns their ids in order. Every
    /// event is serialized before anything is written.
    ///
    /// # Errors
    ///
    /// As [`enqueue`](Self::enqueue).
    pub async fn enqueue_all<'e, T, E, I>(&self, tx: T, events: I) -> Result<Vec<Uuid>>
    where
        T: InTransaction<Database = Postgres>,
        E: OutboxEvent + 'e,
        I: IntoIterator<Item = &'e E>,
    {
        let events = events.into_iter().map(NewEvent::new).collect::<Result<Vec<_>>>()?;
        self.enqueue_events(tx, events).await
    }

    /// Writes already built [`NewEvent`]s (of any types, with headers) in one statement, and returns their ids in
    /// order. An empty batch writes nothing and costs no round trip.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidEvent`] when an event has a header the brokers would refuse, or an aggregate type and id
    /// longer than 2,600 bytes together (the table could not hold the event if it failed; nothing is written),
    /// [`Error::WalSourceOff`] without the WAL relay's slot (nothing is written, the transaction goes on),
    /// [`Error::Database`] when the write fails.
    pub async fn enqueue_events<T, I>(&self, mut tx: T, events: I) -> Result<Vec<Uuid>>
    where
        T: InTransaction<Database = Postgres>,
        I: IntoIterator<Item = NewEvent>,
    {
        let events: Vec<NewEvent> = events.into_iter().collect();
        events.iter().try_for_each(check)?;
        if events.is_empty() {
            return Ok(Vec::new());
        }
        emit(tx.connection(), &events).await?;
        Ok(events.iter().map(NewEvent::id).collect())
    }
}

/// Writes `events` (checked, at least one) as messages on `connection`, in one statement with parameters.
///
/// # Errors
///
/// [`Error::WalSourceOff`] without the WAL relay's slot (nothing is written), [`Error::Database`] when the write
/// fails.
pub(crate) async fn emit(connection: &mut sqlx::PgConnection, events: &[NewEvent]) -> Result<()> {
    events.iter().try_for_each(check)?;
    let contents: Vec<String> = events.iter().map(crate::store::wal_message::encode).collect();
    let emitted = sqlx::query(EMIT)
        .bind(WAL_MESSAGE_PREFIX)
        .bind(contents)
        .bind(WAL_EMIT_LOCK)
        .execute(connection)
        .await
        .map_err(Error::from)?
        .rows_affected();
    if emitted != events.len() as u64 {
        return Err(Error::WalSourceOff);
    }
    Ok(())
}
