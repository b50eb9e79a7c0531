//! The Redis Streams publisher against a real `redis-server` on 127.0.0.1 (append-only file, fsync always),
//! through the relay: 1,000 events with their CloudEvents fields and per-aggregate order, a server killed
//! mid-run, the event id for consumer-side deduplication, and an oversized event sent to `failed`.

mod broker_support;

use std::collections::BTreeMap;
use std::time::Duration;

use broker_support::{check, config, enqueue, enqueue_oversized, envelope_query, start, wait_for, Received, Spelling};
use outbox_relay::{Message, Outcome, Publisher, RedisPublisher};
use outbox_tests::brokers::{Broker, Kind};
use outbox_tests::pg::TestDatabase;
use redis::streams::StreamRangeReply;

const SPELLING: Spelling = Spelling { prefix: "ce_" };

fn publisher(broker: &Broker) -> RedisPublisher {
    let url = format!(
        "{}?stream=outbox.{{aggregate_type}}&max_message_bytes=1048576&timeout_ms=2000&{}",
        broker.url(),
        envelope_query()
    );
    RedisPublisher::from_url(&url.parse().unwrap()).unwrap()
}

/// Every entry of the stream `outbox.order`, in stream order (XRANGE - +).
async fn consume_all(broker: &Broker) -> Vec<Received> {
    let client = redis::Client::open(broker.url()).expect("redis URL");
    let mut connection = client.get_multiplexed_async_connection().await.expect("connect to Redis");
    let reply: StreamRangeReply =
        redis::cmd("XRANGE").arg("outbox.order").arg("-").arg("+").query_async(&mut connection).await.expect("XRANGE");
    reply
        .ids
        .into_iter()
        .map(|entry| {
            let mut headers = BTreeMap::new();
            let mut body = Vec::new();
            for (name, value) in entry.map {
                let redis::Value::BulkString(bytes) = value else { panic!("field {name} is not a string") };
                if name == "data" {
                    body = bytes;
                } else {
                    headers.insert(name, String::from_utf8(bytes).expect("UTF-8 field"));
                }
            }
            assert_eq!(headers.get("content-type").map(String::as_str), Some("application/json"));
            Received { headers, body }
        })
        .collect()
}

#[tokio::test]
async fn relay_publishes_1000_events_with_cloudevents_fields_in_aggregate_order() {
    let broker = Broker::start(Kind::Redis);
    let db = TestDatabase::migrated().await;
    let sent = enqueue(&db.pool, broker_support::AGGREGATES, broker_support::PER_AGGREGATE).await;
    let relay = start(&db, publisher(&broker), config());
    wait_for(&db.pool, "published", sent.len() as i64, Duration::from_secs(120)).await;
    relay.stop().await;
    let received = consume_all(&broker).await;
    assert_eq!(received.len(), sent.len(), "one entry per event");
    check(&sent, &received, SPELLING, true);
}

#[tokio::test]
async fn a_server_killed_mid_run_and_restarted_loses_nothing() {
    let broker = Broker::start(Kind::Redis);
    let db = TestDatabase::migrated().await;
    let sent = enqueue(&db.pool, broker_support::AGGREGATES, broker_support::PER_AGGREGATE).await;
    let relay = start(&db, publisher(&broker), config());
    wait_for(&db.pool, "published", 200, Duration::from_secs(60)).await;
    broker.kill();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    broker.restart();
    wait_for(&db.pool, "published", sent.len() as i64, Duration::from_secs(120)).await;
    relay.stop().await;
    // The append-only file kept every acknowledged entry; a reply lost in the crash may mean a duplicate.
    check(&sent, &consume_all(&broker).await, SPELLING, false);
}

#[tokio::test]
async fn duplicates_carry_the_event_id_and_oversized_events_fail_for_good() {
    let broker = Broker::start(Kind::Redis);
    let publisher = publisher(&broker);
    let mut message =
        Message::new(uuid::Uuid::now_v7(), "order.placed", "order", "order-1", r#"{"order":"order-1","n":0}"#);
    message.version = 2;
    assert_eq!(publisher.publish(std::slice::from_ref(&message)).await, vec![Outcome::Published]);
    assert_eq!(publisher.publish(std::slice::from_ref(&message)).await, vec![Outcome::Published]);
    let received = consume_all(&broker).await;
    assert_eq!(received.len(), 2, "Redis has no deduplication");
    assert!(received.iter().all(|r| r.headers.get("ce_id") == Some(&message.id.to_string())));

    let db = TestDatabase::migrated().await;
    let big = enqueue_oversized(&db.pool, 2 << 20).await;
    let sent = enqueue(&db.pool, 5, 2).await;
    let relay = start(&db, publisher, config());
    wait_for(&db.pool, "published", sent.len() as i64, Duration::from_secs(60)).await;
    wait_for(&db.pool, "failed", 1, Duration::from_secs(60)).await;
    relay.stop().await;
    let (status, error) = broker_support::status_of(&db.pool, big).await;
    assert_eq!(status, "failed");
    let error = error.unwrap_or_default();
    assert!(error.contains("too large") && !error.contains("xxxx"), "{error}");
    let received = consume_all(&broker).await;
    check(&sent, &received[2..], SPELLING, true);
}

#[tokio::test]
async fn a_publish_while_the_server_is_down_fails_fast_as_transient() {
    let broker = Broker::start(Kind::Redis);
    let publisher = publisher(&broker);
    let message =
        Message::new(uuid::Uuid::now_v7(), "order.placed", "order", "order-1", r#"{"order":"order-1","n":0}"#);
    assert_eq!(publisher.publish(std::slice::from_ref(&message)).await, vec![Outcome::Published]);
    broker.kill();
    let started = tokio::time::Instant::now();
    for _ in 0..3 {
        let outcome = publisher.publish(std::slice::from_ref(&message)).await.remove(0);
        assert!(matches!(outcome, Outcome::Transient(_)), "{outcome:?}");
    }
    assert!(started.elapsed() < Duration::from_secs(15), "bounded by the timeout");
}
