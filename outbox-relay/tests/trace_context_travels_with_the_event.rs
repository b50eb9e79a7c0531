//! Trace context end to end: the W3C `traceparent`/`tracestate` stored with an event at enqueue reaches the
//! broker's message headers, so a consumer's span joins the producer's trace. With the `otel` feature the context
//! is captured from the active OpenTelemetry context and the relay's publish span is linked to the producer span.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{count, event, wait_until};
use outbox_core::{NewEvent, Outbox};
use outbox_tests::pg::TestDatabase;

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const TRACESTATE: &str = "congo=t61rcWkgMzE";

async fn enqueue_with_trace(db: &TestDatabase) -> uuid::Uuid {
    let new = NewEvent::new(&event("traced", 0))
        .unwrap()
        .with_header("traceparent", TRACEPARENT)
        .with_header("tracestate", TRACESTATE);
    let mut tx = db.pool.begin().await.unwrap();
    let ids = Outbox::new().enqueue_events(&mut tx, [new]).await.unwrap();
    tx.commit().await.unwrap();
    ids[0]
}

#[tokio::test]
async fn an_explicit_traceparent_reaches_the_file_sink_of_the_real_binary() {
    let db = TestDatabase::migrated().await;
    let id = enqueue_with_trace(&db).await;
    let dir = tempfile::Builder::new().prefix("outbox-trace-").tempdir().unwrap();
    let sink = dir.path().join("events.jsonl");
    let sink_url = format!("file:{}", sink.display());
    let mut relay = outbox_tests::outbox!().database(&db.url).env("OUTBOX_LOG", "warn").spawn([
        "relay",
        "--poll-interval",
        "10ms",
        "--sink",
        &sink_url,
    ]);
    wait_until(Duration::from_secs(30), "the event is published", || async { count(&db.pool, "published").await == 1 })
        .await;
    relay.kill();
    let line: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&sink).unwrap().lines().next().unwrap()).unwrap();
    assert_eq!(line["id"], id.to_string());
    assert_eq!(line["headers"]["traceparent"], TRACEPARENT);
    assert_eq!(line["headers"]["tracestate"], TRACESTATE);
}

/// The `traceparent` and `tracestate` of one request.
type TraceHeaders = (Option<String>, Option<String>);

#[tokio::test]
async fn an_explicit_traceparent_reaches_the_webhook_request_headers() {
    let db = TestDatabase::migrated().await;
    enqueue_with_trace(&db).await;
    let seen: Arc<Mutex<Vec<TraceHeaders>>> = Arc::default();
    let record = Arc::clone(&seen);
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: axum::http::HeaderMap| {
            let record = Arc::clone(&record);
            async move {
                let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
                record.lock().unwrap().push((get("traceparent"), get("tracestate")));
                axum::http::StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let publisher = outbox_relay::WebhookPublisher::builder(url.parse().unwrap())
        .secret("whsec_b3V0Ym94LXRlc3Qtc2VjcmV0LWtleS0zMi1ieXRlcyE=")
        .build()
        .unwrap();
    let relay = common::start(&db, publisher, common::config().build().unwrap());
    wait_until(Duration::from_secs(30), "the webhook got the event", || async { !seen.lock().unwrap().is_empty() })
        .await;
    relay.stop().await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen, vec![(Some(TRACEPARENT.to_owned()), Some(TRACESTATE.to_owned()))]);
}

#[cfg(feature = "otel")]
mod otel {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use opentelemetry::trace::{TraceContextExt, TracerProvider};
    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
    use outbox_core::{NewEvent, Outbox};
    use outbox_tests::pg::TestDatabase;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    use tracing_subscriber::layer::SubscriberExt;

    use outbox_relay::{Message, Outcome, Publisher};

    use super::common::{self, count, event, wait_until};

    /// A publisher that keeps the headers of every message it is given.
    #[derive(Debug, Default, Clone)]
    struct HeaderRecorder(Arc<Mutex<Vec<outbox_core::Headers>>>);

    impl Publisher for HeaderRecorder {
        async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
            self.0.lock().unwrap().extend(batch.iter().map(|message| message.headers.clone()));
            batch.iter().map(|_| Outcome::Published).collect()
        }
    }

    /// Keeps every finished span.
    #[derive(Debug, Clone, Default)]
    struct Collected(Arc<Mutex<Vec<SpanData>>>);

    impl SpanExporter for Collected {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            self.0.lock().unwrap().extend(batch);
            Ok(())
        }
    }

    #[tokio::test]
    async fn the_active_trace_is_captured_at_enqueue_and_the_publish_span_links_to_it() {
        let spans = Collected::default();
        let provider = SdkTracerProvider::builder().with_simple_exporter(spans.clone()).build();
        let subscriber =
            tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber of this test binary");

        let db = TestDatabase::migrated().await;
        // The producer: a request span, under which the event is enqueued with no header set by hand.
        let (trace_id, span_id) = {
            let request = tracing::info_span!("POST /checkout");
            let _entered = request.enter();
            let producer = request.context().span().span_context().clone();
            let new = NewEvent::new(&event("checkout", 0)).unwrap();
            let traceparent = &new.headers()["traceparent"];
            assert_eq!(traceparent, &format!("00-{}-{}-01", producer.trace_id(), producer.span_id()));
            let mut tx = db.pool.begin().await.unwrap();
            Outbox::new().enqueue_events(&mut tx, [new]).await.unwrap();
            tx.commit().await.unwrap();
            (producer.trace_id(), producer.span_id())
        };

        let recorder = HeaderRecorder::default();
        let relay = common::start(&db, recorder.clone(), common::config().build().unwrap());
        wait_until(Duration::from_secs(30), "the event is published", || async {
            count(&db.pool, "published").await == 1
        })
        .await;
        relay.stop().await;
        let headers = recorder.0.lock().unwrap().clone();
        assert_eq!(headers.len(), 1);
        assert!(headers[0]["traceparent"].contains(&trace_id.to_string()), "{headers:?}");

        provider.force_flush().unwrap();
        let spans = spans.0.lock().unwrap().clone();
        // The other tests of this binary publish too, through the same global provider: look at every publish.
        let linked: Vec<_> = spans
            .iter()
            .filter(|span| span.name == "outbox.publish")
            .flat_map(|span| span.links.links.iter().map(|link| link.span_context.clone()))
            .collect();
        assert!(
            linked.iter().any(|context| context.trace_id() == trace_id && context.span_id() == span_id),
            "a publish span links to the producer span: {linked:?}"
        );
        assert!(spans.iter().any(|span| span.name == "outbox.mark"), "a mark span");
    }
}
