//! The service's tables and its one domain transaction, on SQLite or PostgreSQL.

use std::sync::Arc;

use outbox_core::consume::Received;
use outbox_core::inbox::Inbox;
use outbox_core::store::{PgStore, SqliteStore, Store};
use outbox_core::{Error, Outbox};
use sqlx::{PgPool, SqlitePool};
use time::format_description::well_known::Rfc3339;

use crate::PaymentPaid;

/// The service's database.
#[derive(Debug, Clone)]
pub enum Database {
    /// PostgreSQL, the production backend.
    Postgres(PgPool),
    /// SQLite, the embedded default.
    Sqlite(SqlitePool),
}

/// The outcome of confirming a payment.
#[derive(Debug, Clone, PartialEq)]
pub enum Confirmation {
    /// The payment was pending; it is paid now and its event is in the outbox.
    Paid(PaymentPaid),
    /// The payment was already paid: nothing changed and no event was enqueued.
    AlreadyPaid,
    /// No payment has this id.
    Unknown,
}

/// Runs the same code on whichever pool the database has (the SQL is the same on both backends).
macro_rules! on_pool {
    ($db:expr, $pool:ident => $body:expr) => {
        match $db {
            Database::Postgres($pool) => $body,
            Database::Sqlite($pool) => $body,
        }
    };
}

const CREATE_TABLES: [&str; 2] = [
    "CREATE TABLE IF NOT EXISTS payments (
        id BIGINT PRIMARY KEY, order_id BIGINT NOT NULL, amount_cents BIGINT NOT NULL,
        status TEXT NOT NULL DEFAULT 'pending', paid_at TEXT)",
    "CREATE TABLE IF NOT EXISTS receipts (
        payment_id BIGINT PRIMARY KEY, event_id TEXT NOT NULL, amount_cents BIGINT NOT NULL)",
];

impl Database {
    /// Connects to `url`: `sqlite://path` (add `?mode=rwc` to create the file), `sqlite::memory:`, or
    /// `postgres://...`.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] when the URL is not one of these or the connection fails.
    pub async fn connect(url: &str) -> Result<Self, Error> {
        if url.starts_with("sqlite:") {
            // An in-memory database lives as long as a connection to it: the pool keeps one for good.
            let pool = sqlx::sqlite::SqlitePoolOptions::new()
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None)
                .connect(url)
                .await?;
            Ok(Self::Sqlite(pool))
        } else {
            Ok(Self::Postgres(PgPool::connect(url).await?))
        }
    }

    /// Creates the outbox tables and the service's own (`payments`, `receipts`).
    ///
    /// # Errors
    ///
    /// [`Error`] when a statement fails.
    pub async fn migrate(&self) -> Result<(), Error> {
        on_pool!(self, pool => {
            outbox_core::migrate(pool).await?;
            for sql in CREATE_TABLES {
                sqlx::query(sql).execute(pool).await?;
            }
            Ok(())
        })
    }

    /// Adds a pending payment.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] when the insert fails (e.g. the id exists).
    pub async fn add_payment(&self, id: i64, order_id: i64, amount_cents: i64) -> Result<(), Error> {
        on_pool!(self, pool => {
            sqlx::query("INSERT INTO payments (id, order_id, amount_cents) VALUES ($1, $2, $3)")
                .bind(id)
                .bind(order_id)
                .bind(amount_cents)
                .execute(pool)
                .await?;
            Ok(())
        })
    }

    /// The Go article's `ConfirmPayment` (the reference design): marks the payment paid and enqueues
    /// [`PaymentPaid`] in one transaction.
    ///
    /// # Errors
    ///
    /// [`Error`] when the database fails; then neither the payment nor the event changed.
    pub async fn confirm_payment(&self, outbox: &Outbox, payment_id: i64) -> Result<Confirmation, Error> {
        let paid_at = time::OffsetDateTime::now_utc().format(&Rfc3339).unwrap_or_default();
        on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            let paid: Option<(i64, i64)> = sqlx::query_as(
                "UPDATE payments SET status = 'paid', paid_at = $2
                  WHERE id = $1 AND status = 'pending'
                 RETURNING order_id, amount_cents",
            )
            .bind(payment_id)
            .bind(&paid_at)
            .fetch_optional(&mut *tx)
            .await?;
            let Some((order_id, amount_cents)) = paid else {
                let exists: Option<i64> = sqlx::query_scalar("SELECT id FROM payments WHERE id = $1")
                    .bind(payment_id)
                    .fetch_optional(&mut *tx)
                    .await?;
                return Ok(if exists.is_some() { Confirmation::AlreadyPaid } else { Confirmation::Unknown });
            };
            let event = PaymentPaid { payment_id, order_id, amount_cents, paid_at };
            outbox.enqueue(&mut tx, &event).await?;
            tx.commit().await?;
            Ok(Confirmation::Paid(event))
        })
    }

    /// A payment's status (`pending` or `paid`), or `None` if there is no such payment.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] when the query fails.
    pub async fn payment_status(&self, payment_id: i64) -> Result<Option<String>, Error> {
        on_pool!(self, pool => {
            Ok(sqlx::query_scalar("SELECT status FROM payments WHERE id = $1")
                .bind(payment_id)
                .fetch_optional(pool)
                .await?)
        })
    }

    /// The receipts the consumer recorded: `(payment_id, event_id)`, by payment.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] when the query fails.
    pub async fn receipts(&self) -> Result<Vec<(i64, String)>, Error> {
        on_pool!(self, pool => {
            Ok(sqlx::query_as("SELECT payment_id, event_id FROM receipts ORDER BY payment_id").fetch_all(pool).await?)
        })
    }

    /// The outbox store of this database, for the relay.
    #[must_use]
    pub fn store(&self) -> Arc<dyn Store> {
        match self {
            Self::Postgres(pool) => Arc::new(PgStore::new(pool.clone())),
            Self::Sqlite(pool) => Arc::new(SqliteStore::new(pool.clone())),
        }
    }

    /// Decodes `message` as [`PaymentPaid`] and records its receipt exactly once per event id (the inbox of
    /// consumer `receipts`, [`Inbox::consume`]); `false` when the event was processed before.
    ///
    /// # Errors
    ///
    /// [`Error::Decode`] when the message is not a `payment.paid` this consumer can read (an
    /// [`UnknownType`](outbox_core::DecodeError::UnknownType) for another event), [`Error::Database`] when the
    /// database fails.
    pub(crate) async fn record_receipt(&self, inbox: &Inbox, message: &Received<'_>) -> Result<bool, Error> {
        on_pool!(self, pool => {
            let recorded = inbox
                .consume(pool, message, |tx, event_id, paid: PaymentPaid| {
                    Box::pin(async move {
                        sqlx::query("INSERT INTO receipts (payment_id, event_id, amount_cents) VALUES ($1, $2, $3)")
                            .bind(paid.payment_id)
                            .bind(event_id.to_string())
                            .bind(paid.amount_cents)
                            .execute(&mut **tx)
                            .await?;
                        Ok::<_, Error>(())
                    })
                })
                .await?;
            Ok(recorded.is_some())
        })
    }
}
