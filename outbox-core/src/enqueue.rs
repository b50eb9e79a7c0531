//! Writing events into the outbox, inside the caller's transaction.

use uuid::Uuid;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::event::OutboxEvent;
use crate::new_event::NewEvent;
use crate::transaction::InTransaction;

/// The channel the relay listens on when enqueue notifications are on.
pub const DEFAULT_CHANNEL: &str = "outbox_events";

/// Writes events into the outbox table inside a transaction you own.
///
/// `Outbox` holds the enqueue settings; it is cheap to clone and to keep in your application state. The events
/// become visible to the relay only when your transaction commits; if it rolls back (explicitly, or because the
/// transaction is dropped), they vanish with your domain change.
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
/// let outbox = Outbox::new();
/// let mut tx = pool.begin().await?;
/// let orders = [OrderPlaced { order_id: 1 }, OrderPlaced { order_id: 2 }];
/// let ids = outbox.enqueue_all(&mut tx, &orders).await?; // one statement for the whole batch
/// tx.commit().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct Outbox {
    notify: Option<String>,
}

impl Outbox {
    /// Enqueue settings with notifications off: the relay finds new events by polling.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Also notifies the relay on [`DEFAULT_CHANNEL`] when the transaction commits (PostgreSQL `NOTIFY`; a rolled
    /// back transaction notifies nobody).
    ///
    /// This lowers the relay's wake-up latency but costs commit throughput: PostgreSQL serializes the commits of
    /// transactions that notify, which weighs more the more producers commit concurrently.
    #[must_use]
    pub fn with_notify(self) -> Self {
        Self { notify: Some(DEFAULT_CHANNEL.to_owned()) }
    }

    /// Like [`with_notify`](Self::with_notify), on another channel.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidIdentifier`] unless `channel` is 1 to 63 characters of `[a-z0-9_]` starting with a letter or
    /// an underscore.
    pub fn with_notify_channel(self, channel: &str) -> Result<Self> {
        Ok(Self { notify: Some(valid_identifier(channel)?.to_owned()) })
    }

    /// The channel notified at commit, if any.
    #[must_use]
    pub fn notify_channel(&self) -> Option<&str> {
        self.notify.as_deref()
    }

    /// Writes one event in the transaction and returns its id.
    ///
    /// # Errors
    ///
    /// Serialization and validation errors of [`NewEvent::new`] (nothing is written), and
    /// [`Error::Database`] when the insert fails.
    pub async fn enqueue<T, E>(&self, tx: T, event: &E) -> Result<Uuid>
    where
        T: InTransaction,
        E: OutboxEvent + ?Sized,
    {
        let event = NewEvent::new(event)?;
        let id = event.id();
        self.enqueue_events(tx, [event]).await?;
        Ok(id)
    }

    /// Writes events of one type in the transaction, in one statement, and returns their ids in order.
    ///
    /// Every event is serialized before anything is written: one that fails fails the batch, and nothing is
    /// written.
    ///
    /// # Errors
    ///
    /// As [`enqueue`](Self::enqueue).
    pub async fn enqueue_all<'e, T, E, I>(&self, tx: T, events: I) -> Result<Vec<Uuid>>
    where
        T: InTransaction,
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
    /// [`Error::InvalidEvent`] when an event has a header the brokers would refuse ([`NewEvent::check`]; nothing
    /// is written), [`Error::Database`] when the insert fails.
    pub async fn enqueue_events<T, I>(&self, mut tx: T, events: I) -> Result<Vec<Uuid>>
    where
        T: InTransaction,
        I: IntoIterator<Item = NewEvent>,
    {
        let events: Vec<NewEvent> = events.into_iter().collect();
        events.iter().try_for_each(NewEvent::check)?;
        if events.is_empty() {
            return Ok(Vec::new());
        }
        <T::Database as Backend>::insert_events(
            crate::backend::Internal::TOKEN,
            tx.connection(),
            &events,
            self.notify.as_deref(),
        )
        .await?;
        Ok(events.iter().map(NewEvent::id).collect())
    }
}

/// Writes one event in the transaction with the default settings ([`Outbox::new`]) and returns its id.
///
/// # Errors
///
/// As [`Outbox::enqueue`].
///
/// # Example
///
/// ```no_run
/// # use outbox_core::OutboxEvent;
/// # #[derive(serde::Serialize)] struct OrderPlaced { order_id: i64 }
/// # impl OutboxEvent for OrderPlaced {
/// #     const EVENT_TYPE: &'static str = "order.placed";
/// #     const AGGREGATE_TYPE: &'static str = "order";
/// #     const VERSION: u32 = 1;
/// #     fn aggregate_id(&self) -> String { self.order_id.to_string() }
/// # }
/// # async fn run(pool: sqlx::PgPool) -> Result<(), outbox_core::Error> {
/// let mut tx = pool.begin().await?;
/// outbox_core::enqueue(&mut tx, &OrderPlaced { order_id: 1 }).await?;
/// tx.commit().await?;
/// # Ok(())
/// # }
/// ```
pub async fn enqueue<T, E>(tx: T, event: &E) -> Result<Uuid>
where
    T: InTransaction,
    E: OutboxEvent + ?Sized,
{
    Outbox::new().enqueue(tx, event).await
}

/// Checks that `name` is a plain SQL identifier that needs no quoting.
pub(crate) fn valid_identifier(name: &str) -> Result<&str> {
    let mut chars = name.chars();
    let starts_well = chars.next().is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_plain = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if starts_well && rest_plain && name.len() <= 63 {
        Ok(name)
    } else {
        Err(Error::InvalidIdentifier(name.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::valid_identifier;

    #[test]
    fn plain_identifiers_are_accepted() {
        for name in ["outbox_events", "_x", "a1"] {
            assert_eq!(valid_identifier(name).unwrap(), name);
        }
    }

    #[test]
    fn identifiers_that_would_need_quoting_are_rejected() {
        for name in ["", "1a", "Outbox", "a-b", "a;drop table x", "a\"b", &"a".repeat(64)] {
            assert!(valid_identifier(name).is_err(), "{name:?} was accepted");
        }
    }
}
