//! `outbox relay --metrics-addr ADDR`: the Prometheus exporter and the health endpoints, on one small HTTP server.
//!
//! - `GET /metrics`: every metric of [`outbox_relay::telemetry::names`], Prometheus text format.
//! - `GET /healthz`: 200 while the process runs (liveness).
//! - `GET /readyz`: 200 when the database answers, publishing is not paused and (with `--notify`) the `LISTEN`
//!   connection is up; 503 with the reason otherwise (readiness).

use std::net::SocketAddr;
use std::sync::Arc;
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
    store: Arc<dyn Store>,
}

/// Binds `addr`, installs the Prometheus recorder (histograms with the relay's buckets) and serves the
/// endpoints in the background for as long as the process runs.
pub(crate) async fn serve(addr: SocketAddr, store: Arc<dyn Store>) -> Result<(), Failure> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|error| Failure::Runtime(format!("cannot serve metrics on {addr}: {error}")))?;
    let metrics = install_recorder()?;
    // Every family from the first scrape, before the relay's first backlog refresh.
    let backlog = store.backlog().await.unwrap_or_else(|error| {
        tracing::debug!(error = %error, "cannot read the backlog for the first scrape");
        outbox_core::store::Backlog::default()
    });
    outbox_relay::telemetry::describe_and_zero(&backlog);
    let upkeep = metrics.clone();
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(UPKEEP);
        loop {
            ticks.tick().await;
            upkeep.run_upkeep();
        }
    });
    let app = Router::new()
        .route("/metrics", get(render))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(Endpoints { metrics, store });
    tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::error!(error = %error, "the metrics server stopped");
        }
    });
    Ok(())
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

async fn ready(State(endpoints): State<Endpoints>) -> (StatusCode, &'static str) {
    let unready = StatusCode::SERVICE_UNAVAILABLE;
    match tokio::time::timeout(READY_TIMEOUT, endpoints.store.is_paused()).await {
        Err(_) | Ok(Err(_)) => (unready, "not ready: the database is unreachable\n"),
        Ok(Ok(true)) => (unready, "not ready: publishing is paused (`outbox resume` resumes it)\n"),
        Ok(Ok(false)) if !outbox_relay::telemetry::listeners_connected() => {
            (unready, "not ready: the LISTEN connection is down\n")
        }
        Ok(Ok(false)) => (StatusCode::OK, "ready\n"),
    }
}
