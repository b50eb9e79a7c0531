//! The NATS JetStream publisher against a real `nats-server -js` on 127.0.0.1, through the relay: 1,000 events
//! with their CloudEvents headers and per-aggregate order, a broker killed mid-run, deduplication by
//! `Nats-Msg-Id`, and an oversized event sent to `failed`.

mod broker_support;

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use broker_support::{check, config, enqueue, enqueue_oversized, envelope_query, start, wait_for, Received, Spelling};
use futures_util::StreamExt;
use outbox_relay::{Message, NatsPublisher, Outcome, Publisher};
use outbox_tests::brokers::{Broker, Kind};
use outbox_tests::pg::TestDatabase;

const SPELLING: Spelling = Spelling { prefix: "ce-" };

fn publisher(broker: &Broker) -> NatsPublisher {
    let url = format!("{}?subject=outbox.{{event_type}}&{}&ack_timeout_ms=2000", broker.url(), envelope_query());
    NatsPublisher::from_url(&url.parse().unwrap()).unwrap()
}

/// Creates the stream `OUTBOX` capturing `outbox.>`, file storage.
async fn create_stream(broker: &Broker) -> jetstream::Context {
    let client = async_nats::connect(broker.url()).await.expect("connect to NATS");
    let js = jetstream::new(client);
    js.create_stream(stream::Config {
        name: "OUTBOX".to_owned(),
        subjects: vec!["outbox.>".to_owned()],
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .expect("create the stream");
    js
}

/// Reads every message of the stream, in stream order, with an ephemeral pull consumer.
async fn consume_all(broker: &Broker) -> Vec<Received> {
    let client = async_nats::connect(broker.url()).await.expect("connect to NATS");
    let js = jetstream::new(client);
    let mut stream = js.get_stream("OUTBOX").await.expect("the stream");
    let total = stream.info().await.expect("stream info").state.messages as usize;
    let consumer: consumer::PullConsumer = stream
        .create_consumer(consumer::pull::Config { ack_policy: consumer::AckPolicy::None, ..Default::default() })
        .await
        .expect("create a consumer");
    let mut received = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while received.len() < total {
        assert!(tokio::time::Instant::now() < deadline, "read only {} of {total} messages", received.len());
        let mut batch =
            consumer.fetch().max_messages(500).expires(Duration::from_secs(1)).messages().await.expect("fetch");
        while let Some(message) = batch.next().await {
            let message = message.expect("a message");
            let mut headers = BTreeMap::new();
            if let Some(map) = &message.headers {
                for (name, values) in map.iter() {
                    if let Some(value) = values.first() {
                        headers.insert(name.to_string(), value.to_string());
                    }
                }
            }
            received.push(Received { headers, body: message.payload.to_vec() });
        }
    }
    received
}

#[tokio::test]
async fn relay_publishes_1000_events_with_cloudevents_headers_in_aggregate_order() {
    let broker = Broker::start(Kind::Nats);
    create_stream(&broker).await;
    let db = TestDatabase::migrated().await;
    let sent = enqueue(&db.pool, broker_support::AGGREGATES, broker_support::PER_AGGREGATE).await;
    let relay = start(&db, publisher(&broker), config());
    wait_for(&db.pool, "published", sent.len() as i64, Duration::from_secs(120)).await;
    relay.stop().await;

    let received = consume_all(&broker).await;
    assert_eq!(received.len(), sent.len(), "one message per event");
    for message in &received {
        assert_eq!(message.headers.get("Nats-Msg-Id"), message.headers.get("ce-id"), "Nats-Msg-Id is the event id");
        assert_eq!(message.headers.get("content-type").map(String::as_str), Some("application/json"));
    }
    check(&sent, &received, SPELLING, true);
}

#[tokio::test]
async fn a_broker_killed_mid_run_and_restarted_loses_nothing() {
    let broker = Broker::start(Kind::Nats);
    create_stream(&broker).await;
    let db = TestDatabase::migrated().await;
    let sent = enqueue(&db.pool, broker_support::AGGREGATES, broker_support::PER_AGGREGATE).await;
    let relay = start(&db, publisher(&broker), config());
    wait_for(&db.pool, "published", 200, Duration::from_secs(60)).await;
    broker.kill();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    broker.restart();
    wait_for(&db.pool, "published", sent.len() as i64, Duration::from_secs(120)).await;
    relay.stop().await;

    // Deduplication by Nats-Msg-Id makes republished events disappear too.
    let received = consume_all(&broker).await;
    check(&sent, &received, SPELLING, true);
    assert_eq!(received.len(), sent.len());
}

#[tokio::test]
async fn an_event_published_twice_is_stored_once() {
    let broker = Broker::start(Kind::Nats);
    create_stream(&broker).await;
    let publisher = publisher(&broker);
    let mut message =
        Message::new(uuid::Uuid::now_v7(), "order.placed", "order", "order-1", r#"{"order":"order-1","n":0}"#);
    message.version = 2;
    // A relay crashing after the publish and before marking the event publishes it again.
    assert_eq!(publisher.publish(std::slice::from_ref(&message)).await, vec![Outcome::Published]);
    assert_eq!(publisher.publish(std::slice::from_ref(&message)).await, vec![Outcome::Published]);
    let received = consume_all(&broker).await;
    assert_eq!(received.len(), 1, "JetStream dropped the duplicate");
    assert_eq!(received[0].headers.get("Nats-Msg-Id"), Some(&message.id.to_string()));
}

#[tokio::test]
async fn an_oversized_event_goes_to_failed_and_the_others_are_published() {
    let broker = Broker::start(Kind::Nats);
    create_stream(&broker).await;
    let db = TestDatabase::migrated().await;
    let big = enqueue_oversized(&db.pool, 2 << 20).await;
    let sent = enqueue(&db.pool, 5, 2).await;
    let relay = start(&db, publisher(&broker), config());
    wait_for(&db.pool, "published", sent.len() as i64, Duration::from_secs(60)).await;
    wait_for(&db.pool, "failed", 1, Duration::from_secs(60)).await;
    relay.stop().await;
    let (status, error) = broker_support::status_of(&db.pool, big).await;
    assert_eq!(status, "failed");
    let error = error.unwrap_or_default();
    assert!(error.contains("too large"), "{error}");
    assert!(!error.contains("xxxx"), "errors never carry the payload: {error}");
    check(&sent, &consume_all(&broker).await, SPELLING, true);
}

#[tokio::test]
async fn a_publish_while_the_server_is_down_fails_fast_as_transient() {
    let broker = Broker::start(Kind::Nats);
    create_stream(&broker).await;
    let publisher = publisher(&broker);
    let message =
        Message::new(uuid::Uuid::now_v7(), "order.placed", "order", "order-1", r#"{"order":"order-1","n":0}"#);
    assert_eq!(publisher.publish(std::slice::from_ref(&message)).await, vec![Outcome::Published]);
    broker.kill();
    let started = tokio::time::Instant::now();
    let outcome = publisher.publish(&[message]).await.remove(0);
    assert!(matches!(outcome, Outcome::Transient(_)), "{outcome:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "bounded by the ack timeout");
}
