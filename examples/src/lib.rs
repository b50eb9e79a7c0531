//! The payment service of the Go article (the reference design), used by the examples and their tests.
//!
//! `POST /payments/{id}/confirm` marks a payment paid and enqueues [`PaymentPaid`] in the same transaction; a
//! relay in the same process publishes committed events as signed webhooks; a consumer (the `receipts`
//! service, behind `POST /hooks/payments` of the same process) verifies each delivery and records a receipt
//! exactly once per event with the [inbox](outbox_core::inbox). It runs on SQLite (the default, no server) or on
//! PostgreSQL. [`Database`] and [`PaymentPaid`] are always here (the quick start uses them); the HTTP service
//! needs the `service` feature. With the `nats` feature, [`Service::over_nats`] publishes to NATS JetStream
//! instead and the consumer reads the stream with a durable consumer.
//!
//! ```no_run
//! # #[cfg(feature = "service")]
//! # async fn run() -> Result<(), outbox_examples::ServiceError> {
//! use outbox_examples::{Database, Service};
//! let db = Database::connect("sqlite://payments.db?mode=rwc").await?;
//! db.migrate().await?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! Service::new(db).run(listener, outbox_relay::CancellationToken::new()).await?;
//! # Ok(())
//! # }
//! ```

#[cfg(feature = "service")]
mod api;
mod database;
mod event;
#[cfg(feature = "service")]
mod receipts;
#[cfg(feature = "nats")]
mod receipts_over_nats;
#[cfg(feature = "service")]
mod service;

pub use database::{Confirmation, Database};
pub use event::PaymentPaid;
#[cfg(feature = "service")]
pub use service::{Service, ServiceError};
