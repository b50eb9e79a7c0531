//! `outbox relay --metrics-addr ADDR`: the Prometheus exporter and the health endpoints, on one small HTTP server,
//! served from the start, before the relay waits for its database and its sink.
//!
//! - `GET /metrics`: every metric of [`outbox_relay::telemetry::names`], Prometheus text format (every family from
//!   the first scrape once the database answered; nothing before).
//! - `GET /healthz`: 200 while the process runs (liveness), the start-up waits included.
//! - `GET /readyz`: 503 while the relay starts (`starting: waiting for the database`, `... for the sink`); then 200
//!   when the database answers, publishing is not paused, the relay's last heartbeat got through less than its
//!   lease ago (it is one of the database's relays, owning its share of the partitions) and (with `--notify`) the
//!   `LISTEN` connection is up, 503 with the reason otherwise (readiness).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use outbox_core::store::Store;
use tokio::net::TcpListener;

use crate::Failure;

/// How long `/readyz` waits for the database.
const READY_TIMEOUT: Duration = Duration::from_secs(2);
/// How often histogram data is folded in (the exporter leaves it to us without its own listener).
const UPKEEP: Duration = Duration::from_secs(5);
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Clone)]
struct Endpoints {
    metrics: PrometheusHandle,
    phase: Arc<Mutex<Phase>>,
}

/// Where the relay is: what `/readyz` answers.
#[derive(Clone)]
enum Phase {
    /// Waiting at start for a server, e.g. `the database`: not ready.
    Starting(&'static str),
    /// Running on this store: ready when it answers and publishing is not paused.
    Running(Arc<dyn Store>),
}

/// The served endpoints, to tell them how the start goes.
pub(crate) struct Health {
    phase: Arc<Mutex<Phase>>,
}

impl Health {
    /// `/readyz` answers `not ready: starting: waiting for WHAT`.
    pub(crate) fn waiting_for(&self, what: &'static str) {
        *self.phase.lock().unwrap_or_else(PoisonError::into_inner) = Phase::Starting(what);
    }

    /// The relay runs on `store`: registers every metric family (with the backlog as it is now) and answers
    /// `/readyz` from the store from now on.
    pub(crate) async fn running(&self, store: Arc<dyn Store>) {
        // Every family from the first scrape, before the relay's first backlog refresh.
        let backlog = store.backlog().await.unwrap_or_else(|error| {
            tracing::debug!(error = %error, "cannot read the backlog for the first scrape");
            outbox_core::store::Backlog::default()
        });
        outbox_relay::telemetry::describe_and_zero(&backlog);
        *self.phase.lock().unwrap_or_else(PoisonError::into_inner) = Phase::Running(store);
    }
}

/// Binds `addr`, installs the Prometheus recorder (histograms with the relay's buckets) and serves the
/// endpoints in the background for as long as the process runs; `/readyz` says the relay waits for `waiting_for`
/// until told otherwise.
pub(crate) async fn serve(addr: SocketAddr, waiting_for: &'static str) -> Result<Health, Failure> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|error| Failure::Runtime(format!("cannot serve metrics on {addr}: {error}")))?;
    let metrics = install_recorder()?;
    let upkeep = metrics.clone();
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(UPKEEP);
        loop {
            ticks.tick().await;
            upkeep.run_upkeep();
        }
    });
    let phase = Arc::new(Mutex::new(Phase::Starting(waiting_for)));
    let app = Router::new()
        .route("/metrics", get(render))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(Endpoints { metrics, phase: Arc::clone(&phase) });
    tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::error!(error = %error, "the metrics server stopped");
        }
    });
    Ok(Health { phase })
}

fn install_recorder() -> Result<PrometheusHandle, Failure> {
    let mut builder = PrometheusBuilder::new();
    for (name, buckets) in outbox_relay::telemetry::histogram_buckets() {
        builder = builder.set_buckets_for_metric(Matcher::Full(name.to_owned()), buckets).map_err(Failure::runtime)?;
    }
    builder.install_recorder().map_err(Failure::runtime)
}

async fn render(State(endpoints): State<Endpoints>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, PROMETHEUS_TEXT)], endpoints.metrics.render())
}

async fn ready(State(endpoints): State<Endpoints>) -> (StatusCode, String) {
    let unready = StatusCode::SERVICE_UNAVAILABLE;
    let phase = endpoints.phase.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let store = match phase {
        Phase::Starting(what) => return (unready, format!("not ready: starting: waiting for {what}\n")),
        Phase::Running(store) => store,
    };
    let (status, text) = match tokio::time::timeout(READY_TIMEOUT, store.is_paused()).await {
        Err(_) | Ok(Err(_)) => (unready, "not ready: the database is unreachable\n"),
        Ok(Ok(true)) => (unready, "not ready: publishing is paused (`outbox resume` resumes it)\n"),
        Ok(Ok(false)) if !outbox_relay::telemetry::memberships_current() => {
            (unready, "not ready: the relay's heartbeat has not got through for its lease (it owns no partitions)\n")
        }
        Ok(Ok(false)) if !outbox_relay::telemetry::listeners_connected() => {
            (unready, "not ready: the LISTEN connection is down\n")
        }
        Ok(Ok(false)) => (StatusCode::OK, "ready\n"),
    };
    (status, text.to_owned())
}
