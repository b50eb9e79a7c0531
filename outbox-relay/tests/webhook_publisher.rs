//! The webhook publisher against a real HTTP server on 127.0.0.1: signatures, statuses, batches, and the relay
//! end to end, a receiver's `Retry-After` included.

mod common;

use std::sync::atomic::{AtomicU16, AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use outbox_relay::{Message, Outcome, Publisher, Relay, RelayConfig, WebhookPublisher};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// What the receiving server saw, and how it answers.
#[derive(Default)]
struct Receiver {
    requests: Mutex<Vec<(HeaderMap, Bytes)>>,
    status: AtomicU16,
    delay_ms: AtomicU64,
    /// A `Retry-After` to answer with.
    retry_after: Mutex<Option<String>>,
    /// Bodies longer than this (when not 0) are refused with `413 Payload Too Large`, unread.
    max_body: std::sync::atomic::AtomicUsize,
}

/// Starts a real HTTP server on 127.0.0.1 that records every request and answers with the configured status.
async fn start_receiver() -> (Arc<Receiver>, url::Url) {
    let receiver = Arc::new(Receiver { status: AtomicU16::new(204), ..Receiver::default() });
    let state = receiver.clone();
    let app = axum::Router::new().route(
        "/hooks/outbox",
        post(move |headers: HeaderMap, body: Bytes| {
            let state = state.clone();
            async move {
                let delay = state.delay_ms.load(AtomicOrdering::SeqCst);
                if delay > 0 {
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                }
                let max_body = state.max_body.load(AtomicOrdering::SeqCst);
                if max_body > 0 && body.len() > max_body {
                    return (StatusCode::PAYLOAD_TOO_LARGE, HeaderMap::new());
                }
                state.requests.lock().unwrap().push((headers, body));
                let mut answer = HeaderMap::new();
                if let Some(retry_after) = state.retry_after.lock().unwrap().clone() {
                    answer.insert("retry-after", retry_after.parse().unwrap());
                }
                (StatusCode::from_u16(state.status.load(AtomicOrdering::SeqCst)).unwrap(), answer)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (receiver, format!("http://{address}/hooks/outbox").parse().unwrap())
}

fn publisher(url: &url::Url) -> WebhookPublisher {
    WebhookPublisher::builder(url.clone()).secret(SECRET).timeout(Duration::from_millis(500)).build().unwrap()
}

fn message(n: u32) -> Message {
    let mut message = Message::new(
        uuid::Uuid::now_v7(),
        "payment.paid",
        "payment",
        n.to_string(),
        format!(r#"{{"payment_id":{n},"amount_cents":{}}}"#, n * 100),
    );
    message.version = 2;
    message
}

/// The three signature headers of a request, as a receiver reads them.
fn signature_headers(headers: &HeaderMap) -> HeaderMap {
    let mut map = HeaderMap::new();
    for name in ["webhook-id", "webhook-timestamp", "webhook-signature"] {
        let value = headers.get(name).unwrap_or_else(|| panic!("no {name} header")).clone();
        map.insert(name, value);
    }
    map
}

/// Verifies a request as a receiver would, with the Standard Webhooks reference library.
fn verify(headers: &HeaderMap, body: &[u8]) {
    standardwebhooks::Webhook::new(SECRET)
        .unwrap()
        .verify(body, &signature_headers(headers))
        .expect("the signature verifies with the secret");
}

#[tokio::test]
async fn every_event_is_posted_once_with_a_signature_that_verifies_with_the_secret() {
    let (receiver, url) = start_receiver().await;
    let batch: Vec<_> = (1..=5).map(message).collect();
    let outcomes = publisher(&url).publish(&batch).await;
    assert_eq!(outcomes, vec![Outcome::Published; 5]);

    let requests = receiver.requests.lock().unwrap();
    assert_eq!(requests.len(), 5);
    let mut seen = Vec::new();
    for (headers, body) in requests.iter() {
        verify(headers, body);
        assert_eq!(headers["content-type"], "application/json");
        let body: serde_json::Value = serde_json::from_slice(body).unwrap();
        let id = headers["webhook-id"].to_str().unwrap().to_owned();
        assert_eq!(body["id"], id.as_str(), "webhook-id is the event id");
        let sent = batch.iter().find(|m| m.id.to_string() == id).expect("a known event");
        assert_eq!(body["type"], "payment.paid");
        assert_eq!(body["version"], 2);
        assert_eq!(body["aggregate"], serde_json::json!({"type": "payment", "id": sent.aggregate_id}));
        assert_eq!(body["data"], sent.payload_json().unwrap());
        seen.push(id);
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 5);
}

#[tokio::test]
async fn a_tampered_body_or_another_secret_does_not_verify() {
    let (receiver, url) = start_receiver().await;
    publisher(&url).publish(&[message(1)]).await;
    let (headers, body) = receiver.requests.lock().unwrap()[0].clone();
    let signature = signature_headers(&headers);
    let mut tampered = body.to_vec();
    tampered.extend_from_slice(b" ");
    assert!(standardwebhooks::Webhook::new(SECRET).unwrap().verify(&tampered, &signature).is_err());
    let other = standardwebhooks::Webhook::new("whsec_QW5vdGhlclNlY3JldEtleUJ5dGVzMTIzNA==").unwrap();
    assert!(other.verify(&body, &signature).is_err(), "another secret does not verify");
}

#[tokio::test]
async fn every_event_header_is_forwarded_as_an_http_header() {
    let (receiver, url) = start_receiver().await;
    let mut traced = message(1);
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    traced.headers.insert("traceparent".into(), traceparent.into());
    traced.headers.insert("tracestate".into(), "congo=t61rcWkgMzE".into());
    traced.headers.insert("tenant".into(), "acme".into());
    traced.headers.insert("correlation-id".into(), "c-42".into());
    publisher(&url).publish(&[traced]).await;
    let (headers, _) = receiver.requests.lock().unwrap()[0].clone();
    assert_eq!(headers["traceparent"], traceparent);
    assert_eq!(headers["tracestate"], "congo=t61rcWkgMzE");
    assert_eq!(headers["tenant"], "acme");
    assert_eq!(headers["correlation-id"], "c-42");
}

#[tokio::test]
async fn a_retry_after_of_429_or_503_is_passed_on_in_seconds_or_as_a_date() {
    let (receiver, url) = start_receiver().await;
    let publisher = publisher(&url);
    receiver.status.store(429, AtomicOrdering::SeqCst);
    *receiver.retry_after.lock().unwrap() = Some("7".to_owned());
    let outcome = publisher.publish(&[message(1)]).await.remove(0);
    assert!(matches!(outcome, Outcome::Transient(_)), "{outcome:?}");
    assert_eq!(outcome.retry_after(), Some(Duration::from_secs(7)));

    receiver.status.store(503, AtomicOrdering::SeqCst);
    let date = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(120));
    *receiver.retry_after.lock().unwrap() = Some(date);
    let delay = publisher.publish(&[message(1)]).await.remove(0).retry_after().expect("a delay from the date");
    assert!(delay > Duration::from_secs(100) && delay <= Duration::from_secs(120), "{delay:?}");

    // Only 429 and 503 carry a wait; a malformed value is no wait.
    receiver.status.store(500, AtomicOrdering::SeqCst);
    assert_eq!(publisher.publish(&[message(1)]).await.remove(0).retry_after(), None);
    receiver.status.store(429, AtomicOrdering::SeqCst);
    *receiver.retry_after.lock().unwrap() = Some("later".to_owned());
    assert_eq!(publisher.publish(&[message(1)]).await.remove(0).retry_after(), None);
}

#[tokio::test]
async fn batch_mode_sends_one_signed_request_holding_every_event() {
    let (receiver, url) = start_receiver().await;
    let publisher = WebhookPublisher::builder(url).secret(SECRET).batch(true).build().unwrap();
    let batch: Vec<_> = (1..=4).map(message).collect();
    assert_eq!(publisher.publish(&batch).await, vec![Outcome::Published; 4]);
    let requests = receiver.requests.lock().unwrap();
    assert_eq!(requests.len(), 1);
    let (headers, body) = &requests[0];
    verify(headers, body);
    let bodies: Vec<serde_json::Value> = serde_json::from_slice(body).unwrap();
    let ids: Vec<_> = bodies.iter().map(|b| b["id"].as_str().unwrap().to_owned()).collect();
    assert_eq!(ids, batch.iter().map(|m| m.id.to_string()).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_batch_refused_as_too_large_is_sent_again_in_parts_and_only_an_event_too_large_alone_fails() {
    let (receiver, url) = start_receiver().await;
    let publisher = WebhookPublisher::builder(url).secret(SECRET).batch(true).build().unwrap();
    let mut batch: Vec<_> = (1..=40).map(message).collect();
    // About five events' bodies per request (a receiver's body limit, as nginx's `client_max_body_size` sets).
    let one = serde_json::to_vec(&serde_json::json!([{"id": batch[0].id, "data": "x".repeat(400)}])).unwrap().len();
    receiver.max_body.store(5 * one, AtomicOrdering::SeqCst);
    batch[7].payload = format!(r#"{{"payment_id":8,"note":"{}"}}"#, "x".repeat(6 * one));
    let outcomes = publisher.publish(&batch).await;
    for (n, outcome) in outcomes.iter().enumerate() {
        if n == 7 {
            assert!(matches!(outcome, Outcome::Permanent(e) if e.message().contains("413")), "{outcome:?}");
        } else {
            assert_eq!(*outcome, Outcome::Published, "event {n}");
        }
    }
    // Every other event reached the receiver exactly once, in requests it took.
    let mut received: Vec<String> = batch_requests(&receiver).into_iter().flat_map(|(_, ids)| ids).collect();
    received.sort();
    let mut expected: Vec<String> =
        batch.iter().enumerate().filter(|(n, _)| *n != 7).map(|(_, m)| m.id.to_string()).collect();
    expected.sort();
    assert_eq!(received, expected);
}

#[tokio::test]
async fn a_retried_batch_keeps_its_webhook_id_and_carries_each_events_headers() {
    let (receiver, url) = start_receiver().await;
    let publisher = WebhookPublisher::builder(url).secret(SECRET).batch(true).build().unwrap();
    let mut batch: Vec<_> = (1..=3).map(message).collect();
    batch[0].headers.insert("tenant".into(), "acme".into());
    batch[1].headers.insert("correlation-id".into(), "c-2".into());
    receiver.status.store(503, AtomicOrdering::SeqCst);
    publisher.publish(&batch).await;
    receiver.status.store(204, AtomicOrdering::SeqCst);
    batch.reverse();
    assert_eq!(publisher.publish(&batch).await, vec![Outcome::Published; 3]);
    publisher.publish(&batch[..2]).await;
    let requests = receiver.requests.lock().unwrap();
    let id = |n: usize| requests[n].0["webhook-id"].to_str().unwrap().to_owned();
    assert_eq!(id(0), id(1), "the retry of the same events, in another order, has the same webhook-id");
    assert_ne!(id(0), id(2), "other events, another webhook-id");
    let bodies: Vec<serde_json::Value> = serde_json::from_slice(&requests[0].1).unwrap();
    assert_eq!(bodies[0]["headers"], serde_json::json!({"tenant": "acme"}));
    assert_eq!(bodies[1]["headers"], serde_json::json!({"correlation-id": "c-2"}));
    assert_eq!(bodies[2]["headers"], serde_json::json!({}));
}

/// The `webhook-id` of each request the receiver got, and the event ids of its body, in order.
fn batch_requests(receiver: &Receiver) -> Vec<(String, Vec<String>)> {
    let requests = receiver.requests.lock().unwrap();
    requests
        .iter()
        .map(|(headers, body)| {
            verify(headers, body);
            let bodies: Vec<serde_json::Value> = serde_json::from_slice(body).unwrap();
            let ids = bodies.iter().map(|b| b["id"].as_str().unwrap().to_owned()).collect();
            (headers["webhook-id"].to_str().unwrap().to_owned(), ids)
        })
        .collect()
}

fn ids_of(messages: &[&Message]) -> Vec<String> {
    messages.iter().map(|m| m.id.to_string()).collect()
}

#[tokio::test]
async fn a_retry_that_regroups_a_failed_batch_sends_its_events_again_under_the_first_webhook_id() {
    let (receiver, url) = start_receiver().await;
    let publisher = WebhookPublisher::builder(url).secret(SECRET).batch(true).build().unwrap();
    let [one, two, three, four, five]: [Message; 5] = std::array::from_fn(|n| message(n as u32 + 1));
    receiver.status.store(503, AtomicOrdering::SeqCst);
    let first = [one.clone(), two.clone(), three.clone()];
    assert!(publisher.publish(&first).await.iter().all(|o| matches!(o, Outcome::Transient(_))));

    // The receiver is back; the relay retries the three events in another order, with two new ones among them.
    receiver.status.store(204, AtomicOrdering::SeqCst);
    let retry = [four.clone(), three.clone(), one.clone(), two.clone(), five.clone()];
    assert_eq!(publisher.publish(&retry).await, vec![Outcome::Published; 5]);

    let requests = batch_requests(&receiver);
    assert_eq!(requests.len(), 3, "the failed request, then two: {requests:?}");
    let (first_id, first_ids) = &requests[0];
    assert_eq!(first_ids, &ids_of(&[&one, &two, &three]));
    let again: Vec<_> = requests[1..].iter().filter(|(id, _)| id == first_id).collect();
    assert_eq!(again.len(), 1, "the first request's events went out again under its webhook-id: {requests:?}");
    assert_eq!(&again[0].1, first_ids, "the same events in the same order");
    {
        let bodies = receiver.requests.lock().unwrap();
        let resent = bodies.iter().skip(1).find(|(headers, _)| headers["webhook-id"] == first_id.as_str()).unwrap();
        assert_eq!(resent.1, bodies[0].1, "the same body: a receiver deduplicating by webhook-id sees one message");
    }
    let new: Vec<_> = requests[1..].iter().filter(|(id, _)| id != first_id).collect();
    assert_eq!(new.len(), 1);
    assert_eq!(new[0].1, ids_of(&[&four, &five]), "the new events in a request of their own");
    assert!(new[0].0.starts_with("batch_"));

    // Once published, the events are forgotten: a later batch of other events gets its own id.
    assert_eq!(publisher.publish(&[message(6)]).await, vec![Outcome::Published]);
    assert!(batch_requests(&receiver)[3].0 != *first_id && batch_requests(&receiver)[3].0 != new[0].0);
}

#[tokio::test]
async fn a_failed_batch_retried_in_parts_never_reuses_its_webhook_id_for_a_part() {
    let (receiver, url) = start_receiver().await;
    let publisher = WebhookPublisher::builder(url).secret(SECRET).batch(true).build().unwrap();
    let [one, two, three, four]: [Message; 4] = std::array::from_fn(|n| message(n as u32 + 1));
    receiver.status.store(503, AtomicOrdering::SeqCst);
    publisher.publish(&[one.clone(), two.clone(), three.clone()]).await;
    receiver.status.store(204, AtomicOrdering::SeqCst);
    // The retry delays differ per event: two come back with a new one, the last alone.
    assert_eq!(publisher.publish(&[two.clone(), four.clone()]).await, vec![Outcome::Published; 2]);
    assert_eq!(publisher.publish(&[one.clone(), three.clone()]).await, vec![Outcome::Published; 2]);

    let requests = batch_requests(&receiver);
    assert_eq!(requests.len(), 3, "{requests:?}");
    let first_id = &requests[0].0;
    assert_eq!(requests[1].1, ids_of(&[&two, &four]));
    assert_eq!(requests[2].1, ids_of(&[&one, &three]));
    assert!(
        requests[1..].iter().all(|(id, _)| id != first_id),
        "a part under the first id would be dropped by a receiver that took the first request: {requests:?}"
    );
    assert_ne!(requests[1].0, requests[2].0);
}

#[tokio::test]
async fn statuses_map_to_published_transient_or_permanent() {
    let (receiver, url) = start_receiver().await;
    let publisher = publisher(&url);
    for (status, expected) in [
        (200, "published"),
        (202, "published"),
        (408, "transient"),
        (429, "transient"),
        (500, "transient"),
        (503, "transient"),
        (400, "permanent"),
        (404, "permanent"),
        (413, "permanent"),
        (422, "permanent"),
        (302, "permanent"),
    ] {
        receiver.status.store(status, AtomicOrdering::SeqCst);
        let outcome = publisher.publish(&[message(1)]).await.remove(0);
        let kind = match &outcome {
            Outcome::Published => "published",
            Outcome::Transient(_) => "transient",
            Outcome::Permanent(_) => "permanent",
        };
        assert_eq!(kind, expected, "HTTP {status}: {outcome:?}");
        if let Outcome::Transient(error) | Outcome::Permanent(error) = outcome {
            assert_eq!(error.message(), format!("webhook answered HTTP {status}"));
        }
    }
}

#[tokio::test]
async fn a_slow_or_unreachable_receiver_is_a_transient_failure() {
    let (receiver, url) = start_receiver().await;
    receiver.delay_ms.store(2_000, AtomicOrdering::SeqCst);
    let outcome = publisher(&url).publish(&[message(1)]).await.remove(0);
    assert_eq!(outcome, Outcome::transient("webhook timed out"));

    // A port nobody listens on.
    let closed = outbox_tests::process::free_addr();
    let url: url::Url = format!("http://{closed}/hooks").parse().unwrap();
    let outcome = publisher(&url).publish(&[message(1)]).await.remove(0);
    match outcome {
        Outcome::Transient(error) => {
            assert!(error.message().starts_with("webhook request failed"), "{}", error.message());
            assert!(!error.message().contains("/hooks"), "errors carry no URL: {}", error.message());
        }
        other => panic!("expected a transient failure, got {other:?}"),
    }
}

/// A receiver that never answers the connection (its accept queue is full, so the kernel drops the connection
/// requests, as a host that is down or a firewall that drops packets does) is unreachable: no attempt is counted
/// (before, the connect and the request had one timeout, and it came out as a counted "timed out").
#[tokio::test]
async fn a_receiver_that_never_answers_the_connection_is_unavailable_not_a_counted_failure() {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    let address = listener.local_addr().unwrap();
    // Never accepted: they fill the queue.
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(std::net::TcpStream::connect_timeout(&address, Duration::from_secs(1)));
    }
    let url: url::Url = format!("http://{address}/hooks").parse().unwrap();
    let publisher = WebhookPublisher::builder(url).secret(SECRET).timeout(Duration::from_secs(2)).build().unwrap();
    let outcome = publisher.publish(&[message(1)]).await.remove(0);
    assert!(matches!(&outcome, Outcome::Transient(error) if error.is_unavailable()), "{outcome:?}");
    drop((held, listener));
}

#[test]
fn invalid_settings_are_refused_with_one_line_errors_and_never_show_the_password() {
    let url: url::Url = "https://relay:hunter2@hooks.example.com/x".parse().unwrap();
    let cases = [
        (WebhookPublisher::builder(url.clone()), "a webhook needs a signing secret"),
        (WebhookPublisher::builder(url.clone()).secret("whsec_not base64!"), "is not `whsec_` followed by base64"),
        (
            WebhookPublisher::builder(url.clone()).secret(SECRET).timeout(Duration::ZERO),
            "timeout must be more than zero",
        ),
        (WebhookPublisher::builder(url.clone()).secret(SECRET).concurrency(0), "concurrency must be at least 1"),
        (WebhookPublisher::builder("ftp://hooks.example.com/".parse().unwrap()).secret(SECRET), "a webhook URL is"),
    ];
    for (builder, expected) in cases {
        let error = builder.build().unwrap_err().to_string();
        assert!(error.contains(expected), "{error}");
        assert!(!error.contains('\n'), "{error}");
        assert!(!error.contains("hunter2"), "{error}");
    }
    let publisher = WebhookPublisher::builder(url).secret(SECRET).build().unwrap();
    assert_eq!(publisher.to_string(), "https://relay:***@hooks.example.com/x");
    let debug = format!("{publisher:?}");
    assert!(!debug.contains("hunter2") && !debug.contains("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), "{debug}");
}

#[tokio::test]
async fn relay_publishes_committed_events_to_the_webhook_and_marks_them_published() {
    use outbox_core::store::PgStore;
    use outbox_core::OutboxEvent;

    #[derive(serde::Serialize)]
    struct OrderPlaced {
        order_id: u32,
    }
    impl OutboxEvent for OrderPlaced {
        const EVENT_TYPE: &'static str = "order.placed";
        const AGGREGATE_TYPE: &'static str = "order";
        const VERSION: u32 = 1;
        fn aggregate_id(&self) -> String {
            (self.order_id % 5).to_string()
        }
    }

    let db = outbox_tests::pg::TestDatabase::migrated().await;
    let events: Vec<_> = (0..20).map(|order_id| OrderPlaced { order_id }).collect();
    let mut tx = db.pool.begin().await.unwrap();
    let ids = outbox_core::Outbox::new().enqueue_all(&mut tx, &events).await.unwrap();
    tx.commit().await.unwrap();

    let (receiver, url) = start_receiver().await;
    let config = RelayConfig::builder().poll_interval(Duration::from_millis(20)).build().unwrap();
    let relay = Relay::new(PgStore::new(db.pool.clone()), publisher(&url), config);
    let shutdown = outbox_relay::CancellationToken::new();
    let running = tokio::spawn(relay.run(shutdown.clone()));

    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let published: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE status = 'published'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
        if published == 20 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "only {published} of 20 published within 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shutdown.cancel();
    running.await.unwrap().unwrap();

    let requests = receiver.requests.lock().unwrap();
    for (headers, body) in requests.iter() {
        verify(headers, body);
    }
    let mut received: Vec<uuid::Uuid> =
        requests.iter().map(|(headers, _)| headers["webhook-id"].to_str().unwrap().parse().unwrap()).collect();
    received.sort();
    received.dedup();
    assert_eq!(received, ids, "every committed event reached the webhook");
}

#[tokio::test]
async fn a_receiver_slower_than_a_batch_per_publish_timeout_gets_every_event_in_smaller_calls_and_none_fails() {
    use outbox_core::store::PgStore;
    use outbox_core::OutboxEvent;

    #[derive(serde::Serialize)]
    struct OrderPlaced {
        order_id: u32,
    }
    impl OutboxEvent for OrderPlaced {
        const EVENT_TYPE: &'static str = "order.placed";
        const AGGREGATE_TYPE: &'static str = "order";
        const VERSION: u32 = 1;
        fn aggregate_id(&self) -> String {
            self.order_id.to_string()
        }
    }

    let db = outbox_tests::pg::TestDatabase::migrated().await;
    let events: Vec<_> = (0..40).map(|order_id| OrderPlaced { order_id }).collect();
    let mut tx = db.pool.begin().await.unwrap();
    outbox_core::Outbox::new().enqueue_all(&mut tx, &events).await.unwrap();
    tx.commit().await.unwrap();
    // One request at a time, 250 ms each: the 40 events of a batch take 10 s, ten times the publish timeout, and
    // the retries of a few milliseconds' backoff come back together.
    let (receiver, url) = start_receiver().await;
    receiver.delay_ms.store(250, AtomicOrdering::SeqCst);
    let publisher = WebhookPublisher::builder(url).secret(SECRET).concurrency(1).build().unwrap();
    let config = RelayConfig::builder()
        .poll_interval(Duration::from_millis(20))
        .publish_timeout(Duration::from_secs(1))
        .backoff(Duration::from_millis(10), Duration::from_millis(100))
        .max_attempts(6)
        .build()
        .unwrap();
    let relay = Relay::new(PgStore::new(db.pool.clone()), publisher, config);
    let shutdown = outbox_relay::CancellationToken::new();
    let running = tokio::spawn(relay.run(shutdown.clone()));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let (published, failed) = loop {
        let counts: (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE status = 'published'), count(*) FILTER (WHERE status = 'failed')
               FROM outbox_events",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        if counts.0 + counts.1 == 40 || tokio::time::Instant::now() >= deadline {
            break counts;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    shutdown.cancel();
    running.await.unwrap().unwrap();
    assert_eq!((published, failed), (40, 0), "(published, failed)");
}

#[tokio::test]
async fn the_relay_waits_a_receivers_retry_after_in_seconds_or_as_a_date_up_to_the_backoff_maximum() {
    use common::RetryAfter::{DateIn, Seconds};
    let db = outbox_tests::pg::TestDatabase::migrated().await;
    // A 429 asks for a second, a 503 for a date three seconds on, another 503 for an hour, which the backoff's
    // maximum (3 s) cuts down; then the receiver takes the event.
    let answers = vec![(429, Seconds(1)), (503, DateIn(Duration::from_secs(3))), (503, Seconds(3600))];
    let (arrivals, url) = common::throttling_receiver(answers).await;
    let config = common::config().backoff(Duration::from_millis(10), Duration::from_secs(3)).build().unwrap();
    let relay = common::start(&db, publisher(&url.parse().unwrap()), config);
    common::enqueue(&db.pool, &[common::event("throttled", 0)]).await;
    common::wait_until(Duration::from_secs(60), "the throttled event is published", || async {
        common::count(&db.pool, "published").await == 1
    })
    .await;
    relay.stop().await;
    let arrivals = arrivals.lock().unwrap().clone();
    assert_eq!(arrivals.len(), 4, "three refused attempts, then the one that got through");
    let gaps: Vec<Duration> = arrivals.windows(2).map(|pair| pair[1] - pair[0]).collect();
    // Without the hints the backoff (10 ms, doubling) would have retried within 40 ms.
    assert!(gaps[0] >= Duration::from_secs(1), "Retry-After: 1 {gaps:?}");
    // The date has whole seconds: three seconds on, less the part of a second already gone.
    assert!(gaps[1] >= Duration::from_secs(2), "Retry-After: a date 3 s on {gaps:?}");
    assert!(gaps[2] >= Duration::from_secs(3) && gaps[2] < Duration::from_secs(30), "an hour capped at 3 s {gaps:?}");
    let attempts: i32 = sqlx::query_scalar("SELECT attempts FROM outbox_events").fetch_one(&db.pool).await.unwrap();
    assert_eq!(attempts, 3, "each refused attempt counted");
}

/// stunnel terminating TLS on a free port of 127.0.0.1 with the harness's server certificate (`localhost`,
/// `127.0.0.1`) and forwarding to `plain`; it asks for a client certificate signed by the CA, and refuses
/// connections without one.
async fn tls_in_front_of(
    plain: &url::Url,
    tls: &outbox_tests::certificates::Certificates,
    dir: &std::path::Path,
) -> (tokio::process::Child, url::Url) {
    let port = outbox_tests::process::free_port();
    let conf = dir.join("stunnel.conf");
    std::fs::write(
        &conf,
        format!(
            "foreground = yes\npid =\n[webhook]\naccept = 127.0.0.1:{port}\nconnect = 127.0.0.1:{}\ncert = {}\n\
             key = {}\nCAfile = {}\nverifyChain = yes\nrequireCert = yes\n",
            plain.port().unwrap(),
            tls.server_cert.display(),
            tls.server_key.display(),
            tls.ca.display()
        ),
    )
    .unwrap();
    let child = tokio::process::Command::new("stunnel")
        .arg(&conf)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("stunnel not found: install it with `apt-get install stunnel4` (or `scripts/services.sh install`)");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "stunnel did not listen on 127.0.0.1:{port}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (child, format!("https://localhost:{port}/hooks/outbox").parse().unwrap())
}

#[tokio::test]
async fn an_https_receiver_with_a_private_ca_and_client_certificates_gets_events_and_an_untrusted_one_gets_none() {
    let (receiver, plain) = start_receiver().await;
    let dir = tempfile::Builder::new().prefix("outbox-webhook-tls-").tempdir().unwrap();
    let tls = outbox_tests::certificates::Certificates::generate(dir.path(), "webhook");
    let other = outbox_tests::certificates::Certificates::generate(dir.path(), "other");
    let (_stunnel, url) = tls_in_front_of(&plain, &tls, dir.path()).await;
    let builder = || WebhookPublisher::builder(url.clone()).secret(SECRET).timeout(Duration::from_secs(5));

    let trusted = builder().tls_ca(&tls.ca).tls_client_certificate(&tls.client_cert, &tls.client_key).build().unwrap();
    assert_eq!(trusted.publish(&[message(1)]).await, vec![Outcome::Published]);
    assert_eq!(receiver.requests.lock().unwrap().len(), 1, "the receiver got the event through TLS");

    // The system's authorities, or another private CA, do not vouch for the receiver's certificate.
    for untrusting in [builder().build().unwrap(), builder().tls_ca(&other.ca).build().unwrap()] {
        let outcomes = untrusting.publish(&[message(2)]).await;
        let [Outcome::Transient(error)] = outcomes.as_slice() else { panic!("{outcomes:?}") };
        assert!(error.message().contains("certificate"), "no word about the certificate: {error}");
        assert!(!error.message().contains('\n'), "one line: {error}");
    }
    // Trusted, but without the client certificate the receiver asks for.
    let anonymous = builder().tls_ca(&tls.ca).build().unwrap();
    let outcomes = anonymous.publish(&[message(3)]).await;
    assert!(matches!(outcomes.as_slice(), [Outcome::Transient(_)]), "{outcomes:?}");
    assert_eq!(receiver.requests.lock().unwrap().len(), 1, "no request got through without trust on both sides");

    let missing = builder().tls_ca(dir.path().join("missing.pem")).build().expect_err("a missing CA file is refused");
    assert!(missing.to_string().contains("missing.pem"), "{missing}");
}

#[tokio::test]
async fn the_cli_refuses_a_webhook_client_certificate_without_its_key_with_one_line_and_exit_2() {
    let db = outbox_tests::pg::TestDatabase::migrated().await;
    let output = outbox_tests::outbox!()
        .database(&db.url)
        .env("OUTBOX_WEBHOOK_SECRET", SECRET)
        .env(outbox_relay::WEBHOOK_TLS_CERT_ENV, "/etc/ssl/certs/ca-certificates.crt")
        .run(["relay", "--sink", "https://localhost:9/hooks/outbox"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.starts_with("error: ") && last.contains("OUTBOX_WEBHOOK_TLS_KEY"), "{stderr}");
}
