//! Events a broker cannot take, through the relay, against real brokers (a private `rabbitmq-server` and
//! `nats-server -js`) and real PostgreSQL:
//!
//! - RabbitMQ, an event type no queue is bound for (published `mandatory`, returned unroutable): retried, and
//!   `failed` when its attempts run out, with an error naming the exchange and the routing key; a payload over the
//!   broker's `max_message_size`: `failed` at once, with an error naming the size; every other event is published;
//! - NATS, an event type whose subject no JetStream stream captures: retried with backoff (the stream may be
//!   being created), with an error naming the subject, and published once a stream captures it.
//!
//! No error ever carries the payload, and the `outbox` binary run at trace level never logs the payload of a
//! message the broker returned (the AMQP client would print it). (Oversized events on every broker:
//! `broker_*.rs`.)
#![cfg(all(feature = "rabbitmq", feature = "nats"))]

mod bad_input_support;
mod broker_support;
mod common;

use std::time::Duration;

use broker_support::{config_builder, enqueue, enqueue_oversized, envelope_query, start, wait_for};
use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties, ExchangeKind};
use outbox_core::{Outbox, OutboxEvent};
use outbox_relay::{AmqpPublisher, NatsPublisher, RelayConfig};
use outbox_tests::brokers::{Broker, Kind};
use outbox_tests::pg::TestDatabase;
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

/// A payload value that must never show up in an error.
const SECRET_NOTE: &str = "payload-marker-never-in-errors";

/// An event type the brokers below do not route (`order.placed`, the other type, they do).
#[derive(Serialize)]
struct InvoiceSent {
    invoice: u32,
    note: &'static str,
}

impl OutboxEvent for InvoiceSent {
    const EVENT_TYPE: &'static str = "invoice.sent";
    const AGGREGATE_TYPE: &'static str = "invoice";
    const VERSION: u32 = 1;

    fn aggregate_id(&self) -> String {
        self.invoice.to_string()
    }
}

/// Invoices `ids`, one event each, in one transaction.
async fn enqueue_invoices(pool: &PgPool, ids: std::ops::Range<u32>) -> Vec<Uuid> {
    let mut tx = pool.begin().await.unwrap();
    let invoices: Vec<InvoiceSent> = ids.map(|invoice| InvoiceSent { invoice, note: SECRET_NOTE }).collect();
    let ids = Outbox::new().enqueue_all(&mut tx, &invoices).await.unwrap();
    tx.commit().await.unwrap();
    ids
}

async fn row(pool: &PgPool, id: Uuid) -> (String, String, i32, bool) {
    sqlx::query_as(
        "SELECT status, COALESCE(last_error, ''), attempts, next_attempt_at > now() FROM outbox_events WHERE id = $1",
    )
    .bind(id)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Two attempts: an event RabbitMQ returns as unroutable fails for good on its second.
fn two_attempts() -> RelayConfig {
    config_builder().max_attempts(2).build().expect("config")
}

#[tokio::test]
async fn rabbitmq_unroutable_events_fail_when_their_attempts_run_out_oversized_ones_at_once_and_the_rest_is_published()
{
    let broker = Broker::start(Kind::RabbitMq);
    let connection = Connection::connect(&broker.url(), ConnectionProperties::default()).await.expect("connect");
    let channel = connection.create_channel().await.unwrap();
    let durable = ExchangeDeclareOptions { durable: true, ..Default::default() };
    channel.exchange_declare("outbox".into(), ExchangeKind::Topic, durable, FieldTable::default()).await.unwrap();
    channel.queue_declare("orders".into(), QueueDeclareOptions::default(), FieldTable::default()).await.unwrap();
    let bind = QueueBindOptions::default();
    channel.queue_bind("orders".into(), "outbox".into(), "order.#".into(), bind, FieldTable::default()).await.unwrap();
    connection.close(200, "done".into()).await.ok();

    let db = TestDatabase::migrated().await;
    let orders = enqueue(&db.pool, 5, 2).await;
    let invoices = enqueue_invoices(&db.pool, 0..3).await;
    let big = enqueue_oversized(&db.pool, 2 << 20).await;
    let url = format!("{}?exchange=outbox&routing_key={{event_type}}&{}", broker.url(), envelope_query());
    let relay = start(&db, AmqpPublisher::from_url(&url.parse().unwrap()).unwrap(), two_attempts());
    wait_for(&db.pool, "published", orders.len() as i64, Duration::from_secs(60)).await;
    wait_for(&db.pool, "failed", invoices.len() as i64 + 1, Duration::from_secs(60)).await;
    relay.stop().await;

    for id in &invoices {
        let (status, error, attempts, _) = row(&db.pool, *id).await;
        assert_eq!((status.as_str(), attempts), ("failed", 2), "{error}");
        assert!(error.contains("unroutable"), "{error}");
        assert!(error.contains("exchange `outbox`") && error.contains("routing key `invoice.sent`"), "{error}");
        assert!(!error.contains(SECRET_NOTE), "the error carries the payload: {error}");
    }
    let (status, error, attempts, _) = row(&db.pool, big).await;
    assert_eq!((status.as_str(), attempts), ("failed", 1), "{error}");
    assert!(error.contains("size") || error.contains("large"), "no word about the size: {error}");
    assert!(!error.contains("xxxx"), "the error carries the payload: {error}");
}

#[tokio::test]
async fn rabbitmq_unroutable_events_of_concurrent_batches_each_fail_and_no_routable_event_takes_their_return() {
    let broker = Broker::start(Kind::RabbitMq);
    let connection = Connection::connect(&broker.url(), ConnectionProperties::default()).await.expect("connect");
    let channel = connection.create_channel().await.unwrap();
    let durable = ExchangeDeclareOptions { durable: true, ..Default::default() };
    channel.exchange_declare("outbox".into(), ExchangeKind::Topic, durable, FieldTable::default()).await.unwrap();
    channel.queue_declare("orders".into(), QueueDeclareOptions::default(), FieldTable::default()).await.unwrap();
    let bind = QueueBindOptions::default();
    channel.queue_bind("orders".into(), "outbox".into(), "order.#".into(), bind, FieldTable::default()).await.unwrap();

    // Many small batches in flight at once, routable and unroutable events mixed in each.
    let db = TestDatabase::migrated().await;
    let mut invoices = Vec::new();
    let mut orders = Vec::new();
    for round in 0..20 {
        orders.extend(enqueue(&db.pool, 10, 1).await);
        invoices.extend(enqueue_invoices(&db.pool, round * 10..round * 10 + 10).await);
    }
    let url = format!("{}?exchange=outbox&routing_key={{event_type}}&{}", broker.url(), envelope_query());
    let config = config_builder().max_attempts(2).batch_size(3).concurrency(8).build().expect("config");
    let relay = start(&db, AmqpPublisher::from_url(&url.parse().unwrap()).unwrap(), config);
    wait_for(&db.pool, "published", orders.len() as i64, Duration::from_secs(60)).await;
    wait_for(&db.pool, "failed", invoices.len() as i64, Duration::from_secs(60)).await;
    relay.stop().await;

    for id in &invoices {
        let (status, error, _, _) = row(&db.pool, *id).await;
        assert_eq!(status, "failed", "an unroutable event counted as {status}: {error}");
        assert!(error.contains("unroutable"), "{error}");
    }
    let queued = channel
        .queue_declare(
            "orders".into(),
            QueueDeclareOptions { passive: true, ..Default::default() },
            FieldTable::default(),
        )
        .await
        .unwrap()
        .message_count();
    assert_eq!(queued as usize, orders.len(), "every routable event reaches its queue once");
    connection.close(200, "done".into()).await.ok();
}

#[tokio::test]
async fn a_nats_subject_without_a_stream_is_retried_with_a_clear_error_until_a_stream_captures_it() {
    let broker = Broker::start(Kind::Nats);
    let client = async_nats::connect(broker.url()).await.expect("connect to NATS");
    let js = async_nats::jetstream::new(client);
    let stream = |name: &str, subject: &str| async_nats::jetstream::stream::Config {
        name: name.to_owned(),
        subjects: vec![subject.to_owned()],
        ..Default::default()
    };
    js.create_stream(stream("ORDERS", "outbox.order.>")).await.expect("create the orders stream");

    let db = TestDatabase::migrated().await;
    let orders = enqueue(&db.pool, 5, 2).await;
    let invoices = enqueue_invoices(&db.pool, 0..2).await;
    let url = format!("{}?subject=outbox.{{event_type}}&ack_timeout_ms=2000&{}", broker.url(), envelope_query());
    // Full jitter may draw a delay near zero for any one retry, so backoff is proven over several: at least one
    // sample between failures finds the event waiting for its next attempt.
    let config = RelayConfig::builder()
        .poll_interval(Duration::from_millis(10))
        .backoff(Duration::from_millis(200), Duration::from_secs(2))
        .max_attempts(100_000)
        .build()
        .expect("config");
    let relay = start(&db, NatsPublisher::from_url(&url.parse().unwrap()).unwrap(), config);
    wait_for(&db.pool, "published", orders.len() as i64, Duration::from_secs(60)).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut seen_waiting = false;
    loop {
        let (status, error, attempts, backing_off) = row(&db.pool, invoices[0]).await;
        assert_ne!(status, "failed", "a missing stream is not a permanent failure: {error}");
        assert_ne!(status, "published", "published with no stream to take it");
        seen_waiting |= attempts >= 1 && backing_off;
        if attempts >= 3 {
            assert!(error.contains("no JetStream stream captures the subject `outbox.invoice.sent`"), "{error}");
            assert!(!error.contains(SECRET_NOTE), "the error carries the payload: {error}");
            assert!(seen_waiting, "retried {attempts} times and never waited for a next attempt");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no retries within 60 s: {status} {attempts} {error}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    js.create_stream(stream("INVOICES", "outbox.invoice.>")).await.expect("create the invoices stream");
    wait_for(&db.pool, "published", (orders.len() + invoices.len()) as i64, Duration::from_secs(60)).await;
    relay.stop().await;
    let stored = js.get_stream("INVOICES").await.unwrap().info().await.unwrap().state.messages;
    assert_eq!(stored, invoices.len() as u64);
}

#[tokio::test]
async fn the_binary_at_trace_level_never_logs_the_payload_of_a_returned_message() {
    let broker = Broker::start(Kind::RabbitMq);
    let connection = Connection::connect(&broker.url(), ConnectionProperties::default()).await.expect("connect");
    let channel = connection.create_channel().await.unwrap();
    channel
        .exchange_declare(
            "outbox".into(),
            ExchangeKind::Topic,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    connection.close(200, "done".into()).await.ok();
    let db = TestDatabase::migrated().await;
    common::enqueue(&db.pool, &[common::event("a", 0), common::event("b", 0)]).await;
    let sink = format!("{}?exchange=outbox&routing_key={{event_type}}", broker.url());
    let mut relay = bad_input_support::start(
        &db.url,
        &["relay", "--sink", &sink, "--log-level", "trace", "--poll-interval", "10ms", "--max-attempts", "1"],
        &[],
    );
    common::wait_until(Duration::from_secs(60), "both events failed as unroutable", || async {
        common::count(&db.pool, "failed").await == 2
    })
    .await;
    assert_eq!(relay.terminate().await.code(), Some(0));
    let logs = relay.stderr();
    assert!(logs.contains("unroutable"), "the failure is not logged:\n{logs}");
    // As text, or as the bytes a frame or a message is printed as.
    let as_bytes = "4111111111111111".bytes().map(|b| b.to_string()).collect::<Vec<_>>().join(", ");
    assert!(!logs.contains("4111111111111111"), "a payload's sensitive value was logged");
    assert!(!logs.contains(&as_bytes), "a payload's sensitive value was logged as bytes");
}
