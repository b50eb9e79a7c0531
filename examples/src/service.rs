//! The whole service in one process: the API, the relay, and the consumer.

use std::sync::Arc;
use std::time::Duration;

use axum::routing::{get, post};
use outbox_core::inbox::Inbox;
use outbox_core::Outbox;
use outbox_relay::{CancellationToken, Relay, RelayConfig, WebhookPublisher};

use crate::Database;

/// The signing secret shared by the relay and the consumer when `OUTBOX_WEBHOOK_SECRET` is not set.
const EXAMPLE_SECRET: &str = "whsec_cGF5bWVudHMtZXhhbXBsZS1zZWNyZXQ=";

/// The service: the payment API, a relay publishing its events as webhooks, and the receipts consumer.
pub struct Service {
    db: Database,
    secret: String,
    poll_interval: Duration,
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
        Self { db, secret, poll_interval: Duration::from_millis(200) }
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
        let shared = Shared {
            db: self.db.clone(),
            outbox: Outbox::new(),
            inbox: Arc::new(Inbox::new("receipts")?),
            verifier: Arc::new(standardwebhooks::Webhook::new(&self.secret)?),
        };
        let app = axum::Router::new()
            .route("/payments/{id}/confirm", post(crate::api::confirm))
            .route("/payments/{id}", get(crate::api::show))
            .route("/hooks/payments", post(crate::receipts::receive))
            .with_state(shared);

        let hook: url::Url = format!("http://{address}/hooks/payments").parse()?;
        let publisher = WebhookPublisher::builder(hook).secret(&self.secret).build()?;
        let config = RelayConfig::builder().poll_interval(self.poll_interval).build()?;
        let relay = Relay::with_shared_store(self.db.store(), publisher, config);
        let relay = tokio::spawn(relay.run(shutdown.clone()));

        let stop = shutdown.clone();
        axum::serve(listener, app).with_graceful_shutdown(async move { stop.cancelled().await }).await?;
        shutdown.cancel();
        relay.await??;
        Ok(())
    }
}
