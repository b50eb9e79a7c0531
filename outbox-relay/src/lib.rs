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
//! - **Claim**: one statement, its own short transaction, leases a batch of due events to the relay
//!   (`FOR UPDATE SKIP LOCKED`, lease owner, expiry and a fencing epoch). The transaction is committed before
//!   anything is published, so no transaction is open while a broker is slow.
//! - **Publish**: the [`Publisher`] gets the batch and returns an [`Outcome`] per event.
//! - **Settle**: one statement marks the batch: published, rescheduled with backoff ([`Backoff`]: exponential,
//!   full jitter), moved to `failed` (permanent failure or attempts exhausted), or released. It changes only rows
//!   still leased to this relay with the same epoch: a relay that stalled past its lease cannot mark rows that
//!   another relay has claimed since (fencing). Expired leases are reclaimed, so a relay that dies loses nothing;
//!   delivery is at least once and consumers deduplicate by event id.
//! - **Ordering** ([`Ordering::Aggregate`], the default): an event is claimed only when every earlier event of its
//!   aggregate is finished, so several relays publish one aggregate's events in order while different aggregates
//!   flow in parallel. A failing event holds back the later events of its aggregate only.
//! - **Wake-up** ([`Wakeup`]): adaptive polling by default, `LISTEN/NOTIFY` on request.
//! - **Pause**: a control row read by every claim; see [`Store::set_paused`](outbox_core::store::Store::set_paused).
//! - **Retention** ([`Retention`]): published rows deleted after an age, in small batches, or at once.
//! - **Telemetry** ([`telemetry`]): counters, histograms and backlog gauges through the `metrics` facade (the
//!   binary's `--metrics-addr` serves them to Prometheus with `/healthz` and `/readyz`), and `tracing` spans
//!   `outbox.claim`, `outbox.publish` and `outbox.mark` whose per-event lines never carry a payload. With the
//!   `otel` feature, the publish span is linked to each event's producer span through its stored `traceparent`.
//!
//! # Writing a publisher
//!
//! Implement [`Publisher`]: an async function from a batch of [`Message`]s to one [`Outcome`] each. Built in:
//! [`StdoutPublisher`] and [`FilePublisher`] (JSON lines); [`Sink`] parses the `--sink` URLs of the CLI.

mod backoff;
mod config;
mod error;
mod maintenance;
mod masked_url;
mod publish;
mod relay;
mod sink;
pub mod telemetry;
mod wakeup;

pub use backoff::Backoff;
pub use config::{RelayConfig, RelayConfigBuilder, Retention, Wakeup};
pub use error::{Error, Result};
pub use masked_url::masked_text as masked_url;
pub use outbox_core::store::Ordering;
#[cfg(feature = "rabbitmq")]
pub use publish::{AmqpBuilder, AmqpPublisher};
#[cfg(any(feature = "kafka", feature = "nats", feature = "rabbitmq", feature = "sqs", feature = "redis"))]
pub use publish::{CloudEvents, ContentMode, Naming, Template};
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
pub use relay::{shutdown_signal, Relay, RunSummary};
pub use sink::{Sink, SinkPublisher, WEBHOOK_SECRET_ENV};
pub use tokio_util::sync::CancellationToken;

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
