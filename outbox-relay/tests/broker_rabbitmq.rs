//! The RabbitMQ publisher against a real private `rabbitmq-server` node on 127.0.0.1, through the relay: 1,000
//! events with their CloudEvents headers and per-aggregate order, a broker killed mid-run, `message_id` for
//! consumer-side deduplication, unroutable events retried until a queue takes them or their attempts run out,
//! oversized events sent to `failed`; TLS with a private CA and a user, right and wrong credentials, and a missing
//! exchange reported or declared.

mod broker_support;

use std::collections::BTreeMap;
use std::time::Duration;

use broker_support::{check, config, enqueue, enqueue_oversized, envelope_query, start, wait_for, Received, Spelling};
use lapin::options::{BasicGetOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Connection, ConnectionProperties, ExchangeKind};
use outbox_relay::{AmqpPublisher, Message, Outcome, Publisher};
use outbox_tests::brokers::{Broker, Kind, Security};
use outbox_tests::certificates::Certificates;
use outbox_tests::pg::TestDatabase;

const SPELLING: Spelling = Spelling { prefix: "cloudEvents:" };

fn publisher(broker: &Broker, routing_key: &str) -> AmqpPublisher {
    let url = format!(
        "{}?exchange=outbox&routing_key={routing_key}&{}&confirm_timeout_ms=3000",
        broker.url(),
        envelope_query()
    );
    AmqpPublisher::from_url(&url.parse().unwrap()).unwrap()
}

/// Declares the durable topic exchange `outbox` and the durable queue `events` bound to it for `order.#`.
async fn declare(broker: &Broker) {
    let connection = Connection::connect(&broker.url(), ConnectionProperties::default()).await.expect("connect");
    let channel = connection.create_channel().await.expect("channel");
    let durable = ExchangeDeclareOptions { durable: true, ..Default::default() };
    channel
        .exchange_declare("outbox".into(), ExchangeKind::Topic, durable, FieldTable::default())
        .await
        .expect("exchange");
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare("events".into(), durable, FieldTable::default()).await.expect("queue");
    channel
        .queue_bind(
            "events".into(),
            "outbox".into(),
            "order.#".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bind");
    connection.close(200, "done".into()).await.ok();
}

/// Takes every message of the queue `events`.
async fn consume_all(broker: &Broker) -> Vec<Received> {
    consume_queue(broker, "events").await
}

/// Takes every message of `queue`.
async fn consume_queue(broker: &Broker, queue: &str) -> Vec<Received> {
    let connection = Connection::connect(&broker.url(), ConnectionProperties::default()).await.expect("connect");
    let channel = connection.create_channel().await.expect("channel");
    let mut received = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while let Some(message) =
        channel.basic_get(queue.into(), BasicGetOptions { no_ack: true }).await.expect("basic.get")
    {
        assert!(tokio::time::Instant::now() < deadline, "draining the queue took over 60 s");
        let properties = &message.delivery.properties;
        let mut headers = BTreeMap::new();
        if let Some(table) = properties.headers() {
            for (name, value) in table.inner() {
                if let AMQPValue::LongString(value) = value {
                    headers.insert(name.to_string(), value.to_string());
                }
            }
        }
        let message_id = properties.message_id().as_ref().map(ToString::to_string).expect("a message_id");
        assert_eq!(headers.get("cloudEvents:id"), Some(&message_id), "message_id is the event id");
        assert_eq!(properties.delivery_mode(), &Some(2), "persistent");
        assert_eq!(properties.content_type().as_ref().map(|c| c.to_string()), Some("application/json".to_owned()));
        received.push(Received { headers, body: message.delivery.data.clone() });
    }
    connection.close(200, "done".into()).await.ok();
    received
}

#[tokio::test]
async fn relay_publishes_1000_events_with_cloudevents_headers_in_aggregate_order() {
    let broker = Broker::start(Kind::RabbitMq);
    declare(&broker).await;
    let db = TestDatabase::migrated().await;
    let sent = enqueue(&db.pool, broker_support::AGGREGATES, broker_support::PER_AGGREGATE).await;
    let relay = start(&db, publisher(&broker, "{event_type}"), config());
    wait_for(&db.pool, "published", sent.len() as i64, Duration::from_secs(120)).await;
    relay.stop().await;
    let received = consume_all(&broker).await;
    assert_eq!(received.len(), sent.len(), "one message per event");
    check(&sent, &received, SPELLING, true);
}

#[tokio::test]
async fn a_broker_killed_mid_run_and_restarted_loses_nothing() {
    let broker = Broker::start(Kind::RabbitMq);
    declare(&broker).await;
    let db = TestDatabase::migrated().await;
    let sent = enqueue(&db.pool, broker_support::AGGREGATES, broker_support::PER_AGGREGATE).await;
    let relay = start(&db, publisher(&broker, "{event_type}"), config());
    wait_for(&db.pool, "published", 200, Duration::from_secs(60)).await;
    broker.kill();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    broker.restart();
    wait_for(&db.pool, "published", sent.len() as i64, Duration::from_secs(180)).await;
    relay.stop().await;
    // Durable queue, persistent messages: everything confirmed survived; an event whose confirm was lost in the
    // crash may arrive twice (consumers deduplicate by message_id).
    check(&sent, &consume_all(&broker).await, SPELLING, false);
}

#[tokio::test]
async fn duplicates_carry_the_same_message_id_and_oversized_events_fail_for_good() {
    let broker = Broker::start(Kind::RabbitMq);
    declare(&broker).await;

    // Published twice (a crash before the mark): RabbitMQ keeps both, with one message_id to deduplicate by.
    let publisher = publisher(&broker, "{event_type}");
    let mut message =
        Message::new(uuid::Uuid::now_v7(), "order.placed", "order", "order-1", r#"{"order":"order-1","n":0}"#);
    message.version = 2;
    assert_eq!(publisher.publish(std::slice::from_ref(&message)).await, vec![Outcome::Published]);
    assert_eq!(publisher.publish(std::slice::from_ref(&message)).await, vec![Outcome::Published]);
    let received = consume_all(&broker).await;
    assert_eq!(received.len(), 2);
    assert!(received.iter().all(|r| r.headers.get("cloudEvents:id") == Some(&message.id.to_string())));

    // Over the broker's max_message_size (1 MiB here): the event goes to `failed`, the rest of its batch is published.
    let db = TestDatabase::migrated().await;
    let big = enqueue_oversized(&db.pool, 2 << 20).await;
    let sent = enqueue(&db.pool, 5, 2).await;
    let relay = start(&db, publisher, config());
    wait_for(&db.pool, "published", sent.len() as i64, Duration::from_secs(60)).await;
    wait_for(&db.pool, "failed", 1, Duration::from_secs(60)).await;
    relay.stop().await;
    let (status, error) = broker_support::status_of(&db.pool, big).await;
    assert_eq!(status, "failed");
    assert!(!error.unwrap_or_default().contains("xxxx"), "errors never carry the payload");
    // The broker closes the channel on the oversized message: events of the same publish whose confirms had not
    // arrived yet have an unknown fate and are published again (at least once, same message id), in order.
    check(&sent, &consume_all(&broker).await, SPELLING, false);
}

#[tokio::test]
async fn an_oversized_message_ahead_of_many_fails_for_good_alone_and_the_many_are_published() {
    let broker = Broker::start(Kind::RabbitMq);
    declare(&broker).await;
    let publisher = publisher(&broker, "{event_type}");
    // The broker closes the channel on the oversized message while the ones behind it are still being sent: what
    // the client reports for those (a channel no longer open) must not hide the broker's reason.
    let big = Message::new(
        uuid::Uuid::now_v7(),
        "order.placed",
        "order",
        "order-big",
        format!(r#"{{"order":"order-big","note":"{}"}}"#, "x".repeat(2 << 20)),
    );
    let mut batch = vec![big];
    batch.extend((0..1500).map(|n| {
        Message::new(uuid::Uuid::now_v7(), "order.placed", "order", format!("order-{n}"), format!(r#"{{"n":{n}}}"#))
    }));
    let outcomes = publisher.publish(&batch).await;
    assert!(matches!(&outcomes[0], Outcome::Permanent(_)), "{:?}", outcomes[0]);
    let first_error = outcomes.iter().skip(1).find(|outcome| **outcome != Outcome::Published);
    // The others were either published with it or, their fate unknown when the channel closed, published one by
    // one after it: none fails.
    assert_eq!(first_error, None);
}

#[tokio::test]
async fn a_broker_that_blocks_publishers_fails_the_batch_within_its_timeouts_and_publishing_resumes_after() {
    let broker = Broker::start(Kind::RabbitMq);
    declare(&broker).await;
    let url = format!("{}?exchange=outbox&routing_key={{event_type}}&confirm_timeout_ms=1000", broker.url());
    let publisher = AmqpPublisher::from_url(&url.parse().unwrap()).unwrap();
    let message = |n: usize| {
        let payload = format!(r#"{{"n":{n},"note":"{}"}}"#, "x".repeat(10_000));
        Message::new(uuid::Uuid::now_v7(), "order.placed", "order", format!("order-{n}"), payload)
    };
    assert_eq!(publisher.publish(&[message(0)]).await, vec![Outcome::Published]);
    // A memory alarm: the broker stops reading from publishing connections.
    broker.rabbitmqctl(&["set_vm_memory_high_watermark", "0.0000001"]);
    let batch: Vec<Message> = (1..=2000).map(message).collect();
    let started = tokio::time::Instant::now();
    let outcomes = tokio::time::timeout(Duration::from_secs(30), publisher.publish(&batch))
        .await
        .expect("the publish waits on the blocked broker past its own timeouts");
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    assert!(outcomes.iter().all(|outcome| matches!(outcome, Outcome::Transient(_))), "{:?}", &outcomes[..3]);
    broker.rabbitmqctl(&["set_vm_memory_high_watermark", "0.4"]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while publisher.publish(&[message(9999)]).await != vec![Outcome::Published] {
        assert!(tokio::time::Instant::now() < deadline, "no publish within 30 s of the alarm's end");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Binds the durable queue `queue`, declared if missing, to the exchange `outbox` for `pattern`.
async fn bind(broker: &Broker, queue: &str, pattern: &str) {
    let connection = Connection::connect(&broker.url(), ConnectionProperties::default()).await.expect("connect");
    let channel = connection.create_channel().await.expect("channel");
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare(queue.into(), durable, FieldTable::default()).await.expect("queue");
    channel
        .queue_bind(queue.into(), "outbox".into(), pattern.into(), QueueBindOptions::default(), FieldTable::default())
        .await
        .expect("bind");
    connection.close(200, "done".into()).await.ok();
}

#[tokio::test]
async fn an_event_no_queue_takes_is_retried_until_a_queue_is_bound_or_its_attempts_run_out() {
    let broker = Broker::start(Kind::RabbitMq);
    declare(&broker).await;
    // No queue bound for `audit.#`: the broker returns the message (it is published mandatory), which may pass.
    let unrouted = publisher(&broker, "audit.{event_type}").publish(&[one_message()]).await.remove(0);
    match unrouted {
        Outcome::Transient(error) => assert!(error.message().contains("unroutable"), "{error}"),
        other => panic!("expected a transient failure, got {other:?}"),
    }

    // Through the relay: each aggregate's first event is retried, nothing fails, and once a queue is bound every
    // event is published, once, in order.
    let db = TestDatabase::migrated().await;
    let sent = enqueue(&db.pool, 2, 3).await;
    let relay = start(&db, publisher(&broker, "audit.{event_type}"), config());
    let retried = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM outbox_events WHERE attempts >= 2 AND status = 'pending'")
            .fetch_one(&db.pool)
            .await
            .unwrap()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while retried().await < 2 {
        assert!(tokio::time::Instant::now() < deadline, "the unroutable events were not retried");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(broker_support::count(&db.pool, "failed").await, 0);
    assert_eq!(broker_support::count(&db.pool, "published").await, 0);
    bind(&broker, "audit", "audit.#").await;
    wait_for(&db.pool, "published", sent.len() as i64, Duration::from_secs(60)).await;
    relay.stop().await;
    let received = consume_queue(&broker, "audit").await;
    assert_eq!(received.len(), sent.len(), "one message per event");
    check(&sent, &received, SPELLING, true);

    // With no queue ever bound, the event goes to `failed` when its attempts run out, with the reason.
    let db = TestDatabase::migrated().await;
    let unroutable = enqueue(&db.pool, 1, 1).await.remove(0).id;
    let few_attempts = broker_support::config_builder().max_attempts(3).build().unwrap();
    let relay = start(&db, publisher(&broker, "nowhere.{event_type}"), few_attempts);
    wait_for(&db.pool, "failed", 1, Duration::from_secs(60)).await;
    relay.stop().await;
    let (status, error) = broker_support::status_of(&db.pool, unroutable).await;
    assert_eq!(status, "failed");
    let error = error.unwrap_or_default();
    assert!(error.contains("unroutable") && error.contains("nowhere.order.placed"), "{error}");
    let attempts: i32 = sqlx::query_scalar("SELECT attempts FROM outbox_events WHERE id = $1")
        .bind(unroutable)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(attempts, 3);
}

/// An event type longer than an AMQP short string (255 bytes), with a routing key that does not carry it: its event
/// fails for good, the other event of the call is published (before, the client's conversion panicked, and the
/// whole call counted a failed attempt again and again).
#[tokio::test]
async fn an_event_type_longer_than_an_amqp_short_string_fails_its_own_event_for_good() {
    let broker = Broker::start(Kind::RabbitMq);
    declare(&broker).await;
    let publisher = publisher(&broker, "{aggregate_type}");
    let long_type = format!("order.{}", "x".repeat(300));
    let long = Message::new(uuid::Uuid::now_v7(), &long_type, "order", "order-1", r#"{"order":"order-1","n":0}"#);
    let fine = one_message();
    let outcomes = publisher.publish(&[long, fine]).await;
    assert!(
        matches!(&outcomes[0], Outcome::Permanent(error) if error.to_string().contains("255 bytes")),
        "{:?}",
        outcomes[0]
    );
    assert_eq!(outcomes[1], Outcome::Published);
}

// ---- production setups: TLS with a private CA and a user, a missing exchange ----

fn one_message() -> Message {
    Message::new(uuid::Uuid::now_v7(), "order.placed", "order", "order-1", r#"{"order":"order-1","n":0}"#)
}

/// A connection of the test's own consumer to the TLS broker, as `relay` with `password`.
async fn tls_connection(broker: &Broker, password: &str) -> Connection {
    let tls = broker.certificates().unwrap();
    let config = lapin::tcp::OwnedTLSConfig {
        cert_chain: Some(std::fs::read_to_string(&tls.ca).unwrap()),
        ..Default::default()
    };
    lapin::DefaultConnectionBuilder::new()
        .unwrap()
        .with_uri_str(format!("amqps://relay:{password}@localhost:{}/%2f", broker.port()))
        .with_tls_config(config)
        .connect()
        .await
        .expect("the consumer connects over TLS")
}

#[tokio::test]
async fn tls_with_a_user_publishes_and_an_untrusted_certificate_or_a_wrong_password_stops_at_start() {
    let password = "hunter2-rabbitmq-password";
    let security = Security { tls: true, user: Some(("relay".into(), password.into())), ..Security::default() };
    let broker = Broker::start_secured(Kind::RabbitMq, security);
    let ca = broker.certificates().unwrap().ca.clone();
    let port = broker.port();
    let consumer = tls_connection(&broker, password).await;
    let channel = consumer.create_channel().await.unwrap();
    channel.queue_declare("tls-events".into(), QueueDeclareOptions::default(), FieldTable::default()).await.unwrap();

    let file = broker.dir().join("password");
    std::fs::write(&file, format!("{password}\n")).unwrap();
    // The default exchange routes by queue name: the routing key is the queue.
    let url = format!(
        "amqps://relay@127.0.0.1:{port}/%2f?exchange=&routing_key=tls-events&password_file={}&tls_ca={}",
        file.display(),
        ca.display()
    );
    let publisher = AmqpPublisher::from_url(&url.parse().unwrap()).unwrap();
    publisher.connect().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(publisher.publish(&[one_message()]).await, vec![Outcome::Published]);
    let got = channel.basic_get("tls-events".into(), BasicGetOptions { no_ack: true }).await.unwrap();
    assert!(got.is_some(), "the message arrived over TLS");

    let other = Certificates::generate(&broker.dir().join("other"), "other");
    for (url, expected) in [
        (
            format!("amqps://relay:{password}@127.0.0.1:{port}/%2f?exchange=&tls_ca={}", other.ca.display()),
            "TLS handshake failed: invalid peer certificate",
        ),
        (format!("amqps://relay:wrong@127.0.0.1:{port}/%2f?exchange=&tls_ca={}", ca.display()), "ACCESS_REFUSED"),
    ] {
        let started = tokio::time::Instant::now();
        let error = AmqpPublisher::from_url(&url.parse().unwrap()).unwrap().connect().await.expect_err("refused");
        let message = error.to_string();
        assert!(matches!(error, outbox_relay::Error::Refused { .. }), "{message}");
        assert!(message.contains(expected) && !message.contains('\n'), "{message}");
        assert!(!message.contains(password), "{message}");
        assert!(started.elapsed() < Duration::from_secs(15), "no retries: {:?}", started.elapsed());
    }
}

#[tokio::test]
async fn a_missing_exchange_is_reported_at_start_and_declared_with_create_destinations() {
    let broker = Broker::start(Kind::RabbitMq);
    let url = format!("{}?exchange=shop&exchange_type=fanout", broker.url());
    let publisher = AmqpPublisher::from_url(&url.parse().unwrap()).unwrap();
    let message = publisher.connect().await.expect_err("no exchange yet").to_string();
    assert!(message.contains("`shop`") && message.contains("--create-destinations"), "{message}");
    assert!(message.contains("NOT_FOUND") && !message.contains('\n'), "{message}");

    publisher.with_create_destinations(true).connect().await.expect("the exchange is declared");
    let connection = Connection::connect(&broker.url(), ConnectionProperties::default()).await.unwrap();
    let channel = connection.create_channel().await.unwrap();
    let passive = ExchangeDeclareOptions { passive: true, ..Default::default() };
    channel
        .exchange_declare("shop".into(), ExchangeKind::Fanout, passive, FieldTable::default())
        .await
        .expect("the exchange `shop` exists, a fanout");
    AmqpPublisher::from_url(&url.parse().unwrap()).unwrap().connect().await.expect("it exists now");
}

#[tokio::test]
async fn a_user_without_write_permission_on_the_exchange_is_refused_at_start_and_one_with_only_write_starts() {
    let broker = Broker::start(Kind::RabbitMq);
    declare(&broker).await;
    let url = format!("{}?exchange=outbox", broker.url());
    // guest may configure and read everything, and write nothing.
    broker.rabbitmqctl(&["set_permissions", "-p", "/", "guest", ".*", "^$", ".*"]);
    let error = AmqpPublisher::from_url(&url.parse().unwrap()).unwrap().connect().await.expect_err("no write access");
    let message = error.to_string();
    assert!(matches!(error, outbox_relay::Error::Refused { .. }), "{message}");
    assert!(message.contains("may not publish to the exchange `outbox`"), "{message}");
    assert!(message.contains("ACCESS_REFUSED - access to exchange 'outbox'") && !message.contains('\n'), "{message}");

    // Write access to the exchange alone (no configure, no read) is all a relay needs.
    broker.rabbitmqctl(&["set_permissions", "-p", "/", "guest", "^$", "^outbox$", "^$"]);
    let publisher = AmqpPublisher::from_url(&url.parse().unwrap()).unwrap();
    publisher.connect().await.unwrap_or_else(|e| panic!("write access is enough: {e}"));
    assert_eq!(publisher.publish(&[one_message()]).await, vec![Outcome::Published]);
    broker.rabbitmqctl(&["set_permissions", "-p", "/", "guest", ".*", ".*", ".*"]);
    let received = consume_all(&broker).await;
    assert_eq!(received.len(), 1, "the event arrived, and the check left no message behind");
    let connection = Connection::connect(&broker.url(), ConnectionProperties::default()).await.unwrap();
    let channel = connection.create_channel().await.unwrap();
    let passive = ExchangeDeclareOptions { passive: true, ..Default::default() };
    channel
        .exchange_declare("outbox".into(), ExchangeKind::Topic, passive, FieldTable::default())
        .await
        .expect("the exchange is still there");
}

#[tokio::test]
async fn the_asyncapi_document_names_the_exchange_and_routing_key_an_event_arrives_with() {
    let broker = Broker::start(Kind::RabbitMq);
    let sink = format!("{}?exchange=shop&routing_key=shop.{{event_type}}.v{{version}}", broker.url());
    let described = broker_support::describe(&sink);
    assert_eq!(described.address, "shop.order.placed.v2");
    let channel_binding = described.document["channels"]
        .as_object()
        .and_then(|c| c.values().next())
        .map(|c| c["bindings"]["amqp"]["exchange"]["name"].clone());
    assert_eq!(channel_binding, Some(serde_json::json!("shop")), "the binding names the exchange");
    let publisher = sink.parse::<outbox_relay::Sink>().unwrap().open_with(true).unwrap();
    publisher.connect().await.expect("the exchange is declared");
    let connection = Connection::connect(&broker.url(), ConnectionProperties::default()).await.expect("connect");
    let channel = connection.create_channel().await.expect("channel");
    channel.queue_declare("described".into(), QueueDeclareOptions::default(), FieldTable::default()).await.unwrap();
    channel
        .queue_bind(
            "described".into(),
            "shop".into(),
            described.address.as_str().into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bind to the documented routing key");
    let message = broker_support::described_message();
    assert_eq!(publisher.publish(std::slice::from_ref(&message)).await, vec![Outcome::Published]);
    let received = consume_queue(&broker, "described").await;
    assert_eq!(received.len(), 1, "the event arrives with the documented routing key");
    broker_support::check_described(&described, &received[0]);
    connection.close(200, "done".into()).await.ok();
}
