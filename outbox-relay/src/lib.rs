//! The outbox relay: publishes the events committed to the outbox table, at least once, in order per aggregate.
//!
//! ```no_run
//! use outbox_core::store::PgStore;
//! use outbox_relay::{Relay, RelayConfig, StdoutPublisher};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let pool = sqlx::PgPool::connect(&std::env::var("DATABASE_URL")?).await?;
//!     outbox_core::migrate(&pool).await?;
//!     let relay = Relay::new(PgStore::new(pool), StdoutPublisher::new(), RelayConfig::builder().build()?);
//!     relay.run_until_signal().await?; // until SIGINT/SIGTERM, then a graceful shutdown
//!     Ok(())
//! }
//! ```
//!
//! Or, without writing code: `outbox relay --sink stdout` (the `outbox` binary of this crate, feature `cli`).
//!
//! # How it works
//!
//! - **Partitions**: every event belongs to one of the database's partitions (256, by a hash of its aggregate that
//!   the database computes). Live relays split the partitions between them through heartbeats
//!   ([`Store::heartbeat`](outbox_core::store::Store::heartbeat)); each partition has one owner at a time and a
//!   fencing epoch that grows at every change of owner.
//! - **Read**: the owner reads its partitions' due events with a plain `SELECT`, one index range per partition,
//!   writing nothing; before publishing it records the batch's ids (one small row), so that a relay that dies
//!   mid-batch has an attempt counted for those events by the relay that takes its partitions over.
//! - **Publish**: the [`Publisher`] gets the batch and returns an [`Outcome`] per event, within the publish timeout.
//! - **Settle**: one statement marks the batch: published (or deleted), rescheduled with backoff ([`Backoff`]:
//!   exponential, full jitter), or moved to `failed` (permanent failure or attempts exhausted). It changes rows only
//!   in partitions the relay still holds at the epoch it read them with: a relay that stalled past its lease cannot
//!   mark rows another relay publishes now. Delivery is at least once; consumers deduplicate by event id.
//! - **Ordering** ([`Ordering::Aggregate`], the default): one owner per partition publishes each aggregate's
//!   events in order; an aggregate whose head is retrying or failed is held back (in memory, rebuilt from the table
//!   at a takeover) while the other aggregates flow. No query walks the backlog.
//! - **Wake-up** ([`Wakeup`]): adaptive polling by default, `LISTEN/NOTIFY` on request.
//! - **Pause**: a control row read by every heartbeat; see [`Store::set_paused`](outbox_core::store::Store::set_paused).
//! - **Retention** ([`Retention`]): published rows deleted after an age, in small batches, or at once.
//! - **Telemetry** ([`telemetry`]): counters, histograms and backlog gauges through the `metrics` facade (the
//!   binary's `--metrics-addr` serves them to Prometheus with `/healthz` and `/readyz`), and `tracing` spans
//!   `outbox.read`, `outbox.batch`, `outbox.publish` and `outbox.mark` whose per-event lines never carry a payload. With the
//!   `otel` feature, the publish span is linked to each event's producer span through its stored `traceparent`.
//!
//! # Writing a publisher
//!
//! Implement [`Publisher`]: an async function from a batch of [`Message`]s to one [`Outcome`] each. Built in:
//! [`StdoutPublisher`] and [`FilePublisher`] (JSON lines); [`Sink`] parses the `--sink` URLs of the CLI.

mod backoff;
mod config;
mod crypto_provider;
mod error;
mod maintenance;
mod masked_url;
mod publish;
mod relay;
mod sink;
pub mod telemetry;
mod wakeup;
#[cfg(feature = "wal")]
mod wal;

pub use backoff::Backoff;
pub use config::{RelayConfig, RelayConfigBuilder, Retention, Wakeup};
pub use error::{Error, Result};
pub use masked_url::masked_text as masked_url;
pub use outbox_core::store::Ordering;
#[cfg(any(feature = "kafka", feature = "nats", feature = "rabbitmq", feature = "sqs", feature = "redis"))]
pub use publish::{asyncapi_document, CloudEvents, ContentMode, Naming, Template};
#[cfg(feature = "rabbitmq")]
pub use publish::{AmqpBuilder, AmqpPublisher};
pub use publish::{FilePublisher, Message, Outcome, PublishError, Publisher, StdoutPublisher};
#[cfg(feature = "kafka")]
pub use publish::{KafkaBuilder, KafkaPublisher, SaslMechanism, SecurityProtocol};
#[cfg(feature = "nats")]
pub use publish::{NatsBuilder, NatsPublisher};
#[cfg(feature = "redis")]
pub use publish::{RedisBuilder, RedisPublisher};
#[cfg(feature = "sqs")]
pub use publish::{SqsBuilder, SqsPublisher};
#[cfg(feature = "webhook")]
pub use publish::{WebhookBuilder, WebhookPublisher};
pub use relay::summary::RunSummary;
pub use relay::{shutdown_signal, Relay};
pub use sink::{
    Sink, SinkPublisher, WEBHOOK_SECRET_ENV, WEBHOOK_TLS_CA_ENV, WEBHOOK_TLS_CERT_ENV, WEBHOOK_TLS_KEY_ENV,
};
pub use tokio_util::sync::CancellationToken;
#[cfg(feature = "wal")]
pub use wal::WalRelay;

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
