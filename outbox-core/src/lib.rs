//! Transactional outbox for [sqlx]: events that commit or roll back together with your domain change.
//!
//! ```no_run
//! use outbox_core::{Outbox, OutboxEvent};
//! use serde::Serialize;
//!
//! #[derive(Serialize)]
//! struct PaymentPaid {
//!     payment_id: i64,
//! }
//!
//! impl OutboxEvent for PaymentPaid {
//!     const EVENT_TYPE: &'static str = "payment.paid";
//!     const AGGREGATE_TYPE: &'static str = "payment";
//!     const VERSION: u32 = 1;
//!     fn aggregate_id(&self) -> String {
//!         self.payment_id.to_string()
//!     }
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = sqlx::PgPool::connect("postgres://localhost/shop").await?;
//! outbox_core::migrate(&pool).await?;
//!
//! let mut tx = pool.begin().await?;
//! sqlx::query("UPDATE payments SET status = 'paid' WHERE id = $1").bind(42_i64).execute(&mut *tx).await?;
//! Outbox::new().enqueue(&mut tx, &PaymentPaid { payment_id: 42 }).await?;
//! tx.commit().await?; // the payment and its event are committed together, or neither is
//! # Ok(())
//! # }
//! ```
//!
//! An event can only be written through a live transaction: passing a pool or a bare connection does not
//! compile, so the event can never be committed without the domain change or the other way round:
//!
//! ```compile_fail
//! # use outbox_core::{Outbox, OutboxEvent};
//! # #[derive(serde::Serialize)] struct PaymentPaid;
//! # impl OutboxEvent for PaymentPaid {
//! #     const EVENT_TYPE: &'static str = "payment.paid";
//! #     const AGGREGATE_TYPE: &'static str = "payment";
//! #     const VERSION: u32 = 1;
//! #     fn aggregate_id(&self) -> String { "1".into() }
//! # }
//! # async fn run(pool: sqlx::PgPool) -> Result<(), outbox_core::Error> {
//! Outbox::new().enqueue(&pool, &PaymentPaid).await?; // error: `&Pool<Postgres>` is not a live transaction
//! # Ok(())
//! # }
//! ```
//!
//! Delivery is at least once: the relay (crate `outbox-relay`) publishes committed events and retries until the
//! broker acknowledges them, so consumers deduplicate by [event id](NewEvent::id).
//!
//! With the `derive` feature (on by default), `#[derive(OutboxEvent)]` declares an event's metadata on the
//! payload struct, checks it at compile time, lists its sensitive fields for [redaction](redact), gives it a
//! [JSON Schema](schema::event_schema) and [registers](registry::events) it.

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
mod backend;
mod commit_with_events;
pub mod consume;
pub mod contracts;
mod enqueue;
mod error;
mod event;
mod header_rules;
pub mod inbox;
mod migrate;
mod new_event;
mod payload;
pub mod redact;
pub mod registry;
pub mod schema;
pub mod store;
mod transaction;
mod via_wal;

pub use backend::Backend;
pub use commit_with_events::OutboxTransaction;
pub use consume::{Decode, DecodeError, Versioned};
pub use enqueue::{enqueue, Outbox, DEFAULT_CHANNEL};
pub use error::{Error, Result};
pub use event::OutboxEvent;
pub use header_rules::{check_header, MAX_HEADER_NAME_BYTES, MAX_HEADER_VALUE_BYTES};
pub use migrate::{migrate, MIGRATIONS_TABLE};
pub use new_event::{Headers, NewEvent};
#[cfg(feature = "derive")]
pub use outbox_derive::{OutboxEvent, Redact, RedactedDebug};
pub use redact::Redact;
pub use schemars;
pub use transaction::InTransaction;
pub use via_wal::WalOutbox;
