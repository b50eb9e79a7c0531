//! The consumer side: process each event at most once per consumer, in the consumer's own transaction
//! ([`Inbox::run_once`], or [`Inbox::consume`] to decode the received message too).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use uuid::Uuid;

use crate::backend::Backend;
use crate::consume::{Decode, Received};
use crate::error::{Error, Result};
use crate::transaction::InTransaction;

/// Deduplicates deliveries for one consumer.
///
/// Delivery is at least once, so a consumer may see an event again (a relay crashed between publish and mark, a
/// broker redelivered). The outbox prevents loss; the inbox prevents duplicate effects: record the event id in
/// `outbox_inbox` in the same transaction as the consumer's own writes. If the id was already recorded, the
/// effect already happened and the delivery is skipped; if the handler fails, the transaction rolls back the
/// effect and the record together, so a redelivery runs it again.
///
/// # Example
///
/// ```no_run
/// use outbox_core::inbox::Inbox;
///
/// # async fn run(pool: sqlx::PgPool, event_id: uuid::Uuid) -> Result<(), outbox_core::Error> {
/// let inbox = Inbox::new("billing")?;
/// let Some(mut tx) = inbox.begin(&pool, event_id).await? else {
///     println!("already processed {event_id}; skipped");
///     return Ok(());
/// };
/// sqlx::query("UPDATE invoices SET status = 'paid' WHERE id = $1").bind(7_i64).execute(&mut *tx).await?;
/// tx.commit().await?; // the effect and the inbox record commit together
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Inbox {
    consumer: String,
}

impl Inbox {
    /// The inbox of consumer `consumer` (a stable name per consuming service, e.g. `billing`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConsumer`] when the name is empty, longer than 200 bytes, or has control characters.
    pub fn new(consumer: impl Into<String>) -> Result<Self> {
        let consumer = consumer.into();
        if consumer.is_empty() || consumer.len() > 200 || consumer.chars().any(char::is_control) {
            return Err(Error::InvalidConsumer(consumer));
        }
        Ok(Self { consumer })
    }

    /// The consumer name.
    #[must_use]
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// Records `event_id` as processed in the caller's transaction. Returns `true` the first time (run the
    /// effect, then commit), `false` when it was processed before (skip it).
    ///
    /// On PostgreSQL a concurrent delivery of the same event waits for this transaction: it sees `false` if this
    /// one commits, and `true` if it rolls back. On SQLite, where one transaction writes at a time, a concurrent
    /// delivery (of any event) waits up to the pool's busy timeout (sqlx's default is 5 s) and then fails with
    /// "database is locked": nothing is recorded twice either way; retry the delivery.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] when the insert fails.
    pub async fn record<T: InTransaction>(&self, mut tx: T, event_id: Uuid) -> Result<bool> {
        <T::Database as Backend>::inbox_record(
            crate::backend::Internal::TOKEN,
            tx.connection(),
            &self.consumer,
            event_id,
        )
        .await
    }

    /// Begins a transaction with the event recorded as processed, or returns `None` (and leaves nothing open)
    /// when it was processed before.
    ///
    /// Run the effect on the returned transaction and commit it: the effect and the record commit together. If
    /// the effect fails, drop the transaction (or return early with `?`): both roll back, so a redelivery
    /// processes the event again. A concurrent delivery of the same event waits until this transaction ends (on
    /// SQLite at most the busy timeout, then it fails: see [`record`](Self::record)).
    ///
    /// # Errors
    ///
    /// [`Error::Database`] when the database fails.
    pub async fn begin<DB: Backend>(
        &self,
        pool: &sqlx::Pool<DB>,
        event_id: Uuid,
    ) -> Result<Option<sqlx::Transaction<'static, DB>>> {
        let mut tx = pool.begin().await?;
        if self.record(&mut tx, event_id).await? {
            Ok(Some(tx))
        } else {
            tx.rollback().await?;
            Ok(None)
        }
    }

    /// Runs `handler` once per (consumer, `event_id`), in the consumer's own transaction: begins it with the
    /// event recorded, runs `handler` on it and commits. Returns `Ok(None)` without running `handler` when the
    /// event was processed before.
    ///
    /// When `handler` fails, the transaction rolls back (the effect and the record together) and its error is
    /// returned, so a redelivery runs it again.
    ///
    /// `handler` returns its work as a boxed future (`Box::pin(async move { .. })`), as
    /// [`sqlx::Connection::transaction`] does: that is what lets the returned future be `Send`, so a consumer
    /// runs deliveries on `tokio::spawn`ed tasks or in an axum handler.
    ///
    /// # Errors
    ///
    /// `handler`'s error, or [`Error::Database`] (converted with `From`) when the database fails.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(pool: sqlx::PgPool, event_id: uuid::Uuid) -> Result<(), outbox_core::Error> {
    /// let inbox = outbox_core::inbox::Inbox::new("billing")?;
    /// let ran = inbox
    ///     .run_once(&pool, event_id, |tx| {
    ///         Box::pin(async move {
    ///             sqlx::query("UPDATE invoices SET status = 'paid' WHERE id = $1").bind(7_i64).execute(&mut **tx).await?;
    ///             Ok::<_, outbox_core::Error>(())
    ///         })
    ///     })
    ///     .await?;
    /// if ran.is_none() {
    ///     println!("already processed {event_id}; skipped");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn run_once<DB, F, T, E>(
        &self,
        pool: &sqlx::Pool<DB>,
        event_id: Uuid,
        handler: F,
    ) -> std::result::Result<Option<T>, E>
    where
        DB: Backend,
        F: for<'c> FnOnce(&'c mut sqlx::Transaction<'static, DB>) -> Handled<'c, T, E> + Send,
        E: From<Error>,
    {
        let Some(mut tx) = self.begin(pool, event_id).await? else {
            return Ok(None);
        };
        let value = handler(&mut tx).await?;
        tx.commit().await.map_err(Error::from)?;
        Ok(Some(value))
    }

    /// Decodes `message` as `(event id, Ev)` ([`Received::decode`]) and runs `handler` with the event id and the
    /// event once per (consumer, event id) in the consumer's own transaction, as [`run_once`](Self::run_once).
    ///
    /// A message that does not decode fails before anything is opened: the consumer decides what becomes of it
    /// (a dead-letter queue, a log line; the error never holds a payload value).
    ///
    /// # Errors
    ///
    /// [`Error::Decode`] when the message does not decode, [`Error::Database`] when the database fails, both
    /// converted with `From`, or `handler`'s error.
    ///
    /// # Example
    ///
    /// ```no_run
    /// use outbox_core::consume::Received;
    /// use outbox_core::inbox::Inbox;
    /// # use outbox_core::OutboxEvent;
    /// # #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema, OutboxEvent)]
    /// # #[outbox(event_type = "payment.paid", aggregate = "payment", version = 1)]
    /// # struct PaymentPaid { #[outbox(aggregate_id)] payment_id: i64 }
    ///
    /// # async fn run(pool: sqlx::PgPool, headers: Vec<(String, String)>, body: Vec<u8>) -> Result<(), outbox_core::Error> {
    /// let inbox = Inbox::new("billing")?;
    /// // The future is `Send`: deliveries can run on their own tasks.
    /// tokio::spawn(async move {
    ///     let message = Received::new(&body).headers(headers.iter().map(|(n, v)| (n.as_str(), v.as_str())));
    ///     inbox
    ///         .consume(&pool, &message, |tx, _event_id, paid: PaymentPaid| {
    ///             Box::pin(async move {
    ///                 sqlx::query("UPDATE invoices SET status = 'paid' WHERE payment_id = $1")
    ///                     .bind(paid.payment_id)
    ///                     .execute(&mut **tx)
    ///                     .await?;
    ///                 Ok::<_, outbox_core::Error>(())
    ///             })
    ///         })
    ///         .await
    /// });
    /// # Ok(())
    /// # }
    /// ```
    pub async fn consume<DB, Ev, F, T, E>(
        &self,
        pool: &sqlx::Pool<DB>,
        message: &Received<'_>,
        handler: F,
    ) -> std::result::Result<Option<T>, E>
    where
        DB: Backend,
        Ev: Decode + Send,
        F: for<'c> FnOnce(&'c mut sqlx::Transaction<'static, DB>, Uuid, Ev) -> Handled<'c, T, E> + Send,
        E: From<Error>,
    {
        let (event_id, event) = message.decode::<Ev>().map_err(Error::from)?;
        self.run_once(pool, event_id, move |tx| handler(tx, event_id, event)).await
    }

    /// Deletes this consumer's records older than `age`, at most `limit` at a time, and returns how many went.
    /// Keep records for longer than any redelivery can take (the broker's retention, the relay's retry window):
    /// an event redelivered after its record is gone is processed again.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] when the delete fails.
    pub async fn purge<DB: Backend>(&self, pool: &sqlx::Pool<DB>, age: Duration, limit: u32) -> Result<u64> {
        let mut deleted = 0;
        loop {
            let batch =
                DB::inbox_purge(crate::backend::Internal::TOKEN, pool, &self.consumer, age, limit.max(1)).await?;
            deleted += batch;
            if batch < u64::from(limit.max(1)) {
                return Ok(deleted);
            }
        }
    }
}

/// The work of an inbox handler ([`Inbox::run_once`], [`Inbox::consume`]) on the transaction it borrows for
/// `'c`: a boxed `Send` future, the same type as `futures::future::BoxFuture<'c, Result<T, E>>`, written
/// `Box::pin(async move { .. })`.
pub type Handled<'c, T, E> = Pin<Box<dyn Future<Output = std::result::Result<T, E>> + Send + 'c>>;

/// The header names our publishers put the event id in, in the order they are looked up: CloudEvents `id` in
/// each protocol binding's spelling, the Standard Webhooks id, the NATS deduplication id, and a plain name.
pub const EVENT_ID_HEADERS: [&str; 7] =
    ["ce-id", "ce_id", "cloudEvents:id", "cloudEvents_id", "webhook-id", "Nats-Msg-Id", "event-id"];

/// Finds the event id in a received message's headers (see [`EVENT_ID_HEADERS`]; names compare without case).
///
/// # Example
///
/// ```
/// let id = uuid::Uuid::now_v7();
/// let headers = [("content-type", "application/json".to_owned()), ("ce_id", id.to_string())];
/// let found = outbox_core::inbox::event_id_from_headers(headers.iter().map(|(k, v)| (*k, v.as_str())));
/// assert_eq!(found, Some(id));
/// ```
pub fn event_id_from_headers<'h>(headers: impl IntoIterator<Item = (&'h str, &'h str)>) -> Option<Uuid> {
    let headers: Vec<(&str, &str)> = headers.into_iter().collect();
    EVENT_ID_HEADERS.iter().find_map(|wanted| {
        headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(wanted))
            .and_then(|(_, value)| Uuid::parse_str(value.trim()).ok())
    })
}

#[cfg(test)]
mod tests {
    use super::{event_id_from_headers, Inbox};

    #[test]
    fn event_id_is_found_under_every_binding_name_and_case() {
        let id = uuid::Uuid::now_v7();
        for name in ["ce-id", "CE_ID", "cloudEvents:id", "cloudevents_id", "webhook-id", "nats-msg-id", "event-id"] {
            let value = id.to_string();
            assert_eq!(event_id_from_headers([(name, value.as_str())]), Some(id), "{name}");
        }
    }

    #[test]
    fn missing_or_malformed_ids_are_none() {
        assert_eq!(event_id_from_headers([("content-type", "text/plain")]), None);
        assert_eq!(event_id_from_headers([("ce-id", "not-a-uuid")]), None);
    }

    #[test]
    fn consumer_names_are_validated() {
        assert!(Inbox::new("billing").is_ok());
        for bad in [String::new(), "a\nb".to_owned(), "x".repeat(201)] {
            assert!(Inbox::new(bad).is_err());
        }
    }
}
