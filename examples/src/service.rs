//! The whole service in one process: the API, the relay, and the consumer, over webhooks or (feature `nats`)
//! over NATS JetStream.

use std::sync::Arc;
use std::time::Duration;

use axum::routing::{get, post};
use outbox_core::inbox::Inbox;
use outbox_core::Outbox;
use outbox_relay::{CancellationToken, Relay, RelayConfig, WebhookPublisher};

use crate::Database;

/// The signing secret shared by the relay and the consumer when `OUTBOX_WEBHOOK_SECRET` is not set.
const EXAMPLE_SECRET: &str = "whsec_cGF5bWVudHMtZXhhbXBsZS1zZWNyZXQ=";

/// The service: the payment API, a relay publishing its events as webhooks (or to NATS JetStream), and the
/// receipts consumer.
pub struct Service {
    db: Database,
    secret: String,
    poll_interval: Duration,
    #[cfg(feature = "nats")]
    nats: Option<url::Url>,
}

impl std::fmt::Debug for Service {
    /// Everything but the webhook secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("db", &self.db)
            .field("poll_interval", &self.poll_interval)
            .finish_non_exhaustive()
    }
}

/// What the handlers share.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) db: Database,
    pub(crate) outbox: Outbox,
    pub(crate) inbox: Arc<Inbox>,
    pub(crate) verifier: Arc<standardwebhooks::Webhook>,
}

/// Why the service stopped.
pub type ServiceError = Box<dyn std::error::Error + Send + Sync>;

impl Service {
    /// The service on `db` (migrate it first), signing webhooks with `OUTBOX_WEBHOOK_SECRET` or an example
    /// secret.
    #[must_use]
    pub fn new(db: Database) -> Self {
        let secret = std::env::var("OUTBOX_WEBHOOK_SECRET").unwrap_or_else(|_| EXAMPLE_SECRET.to_owned());
        Self {
            db,
            secret,
            poll_interval: Duration::from_millis(200),
            #[cfg(feature = "nats")]
            nats: None,
        }
    }

    /// Publishes the events to the NATS server at `url` (JetStream, the stream `OUTBOX` created when missing)
    /// instead of webhooks, and the receipts consumer reads them from there with a durable consumer.
    #[cfg(feature = "nats")]
    #[must_use]
    pub fn over_nats(mut self, url: url::Url) -> Self {
        self.nats = Some(url);
        self
    }

    /// The relay's longest idle poll interval (default 200 ms).
    #[must_use]
    pub fn poll_interval(mut self, poll_interval: Duration) -> Self {
        self.poll_interval = poll_interval;
        self
    }

    /// Serves the API and the consumer on `listener` and runs the relay, until `shutdown` is cancelled.
    ///
    /// # Errors
    ///
    /// When the server or the relay fails to start or stops with an error.
    pub async fn run(self, listener: tokio::net::TcpListener, shutdown: CancellationToken) -> Result<(), ServiceError> {
        let address = listener.local_addr()?;
        let inbox = Arc::new(Inbox::new("receipts")?);
        let shared = Shared {
            db: self.db.clone(),
            outbox: Outbox::new(),
            inbox: Arc::clone(&inbox),
            verifier: Arc::new(standardwebhooks::Webhook::new(&self.secret)?),
        };
        let app = axum::Router::new()
            .route("/payments/{id}/confirm", post(crate::api::confirm))
            .route("/payments/{id}", get(crate::api::show))
            .route("/hooks/payments", post(crate::receipts::receive))
            .with_state(shared);

        let config = RelayConfig::builder().poll_interval(self.poll_interval).build()?;
        #[cfg(feature = "nats")]
        if let Some(nats) = &self.nats {
            let publisher = outbox_relay::NatsPublisher::builder(nats.clone()).create_destinations(true).build()?;
            publisher.connect().await?; // creates the stream before the consumer looks for it
            let relay =
                tokio::spawn(Relay::with_shared_store(self.db.store(), publisher, config).run(shutdown.clone()));
            let client = async_nats::connect(nats.as_str()).await?;
            let consumer = tokio::spawn({
                let (db, stop) = (self.db.clone(), shutdown.clone());
                async move {
                    let consumed = crate::receipts_over_nats::run(db, inbox, client, stop.clone()).await;
                    stop.cancel(); // a consumer that stopped on an error stops the service with it
                    consumed
                }
            });
            serve(listener, app, &shutdown).await?;
            relay.await??;
            return consumer.await?;
        }
        let hook: url::Url = format!("http://{address}/hooks/payments").parse()?;
        let publisher = WebhookPublisher::builder(hook).secret(&self.secret).build()?;
        let relay = tokio::spawn(Relay::with_shared_store(self.db.store(), publisher, config).run(shutdown.clone()));
        serve(listener, app, &shutdown).await?;
        relay.await??;
        Ok(())
    }
}

/// Serves `app` until `shutdown` is cancelled, then cancels it for the others (when the server stopped first).
async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    shutdown: &CancellationToken,
) -> Result<(), ServiceError> {
    let stop = shutdown.clone();
    let served = axum::serve(listener, app).with_graceful_shutdown(async move { stop.cancelled().await }).await;
    shutdown.cancel();
    Ok(served?)
}
