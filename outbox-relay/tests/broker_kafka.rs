//! The Kafka publisher against a real Kafka-protocol broker on 127.0.0.1 (tansu, memory storage) through the
//! relay: 1,000 events over 3 partitions with their CloudEvents headers, one partition per aggregate and
//! per-aggregate order, the broker killed and restarted mid-run, republished events keyed alike, and an
//! oversized event sent to `failed`; a missing topic reported or created (a template's at its first publish), and
//! TLS with a private CA (stunnel in front of tansu), also with a client certificate the broker requires: without
//! it `connect()` and `outbox relay` (exit 2) stop at start. SCRAM-SHA-256 and SCRAM-SHA-512 credentials the broker refuses stop
//! them at start too, the password never shown; tansu 0.6 cannot be given SCRAM users (it keeps them in memory
//! and takes new ones only from authenticated clients) and offers no `PLAIN`, so a successful SASL login is not
//! tested here.

mod broker_support;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use broker_support::{
    check, config, count, enqueue, enqueue_oversized, envelope_query, start, wait_for, Received, Spelling,
};
use outbox_relay::{KafkaPublisher, Message, Outcome, Publisher};
use outbox_tests::brokers::{Broker, Kind, Security};
use outbox_tests::certificates::Certificates;
use outbox_tests::pg::TestDatabase;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message as _};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

const SPELLING: Spelling = Spelling { prefix: "ce_" };
const TOPIC: &str = "outbox.order";
const PARTITIONS: i32 = 3;

fn publisher(broker: &Broker) -> KafkaPublisher {
    let url = format!(
        "kafka://{}?topic=outbox.{{aggregate_type}}&message_timeout_ms=5000&{}",
        broker.url(),
        envelope_query()
    );
    KafkaPublisher::from_url(&url.parse().unwrap()).unwrap()
}

async fn create_topic(broker: &Broker, name: &str) {
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", broker.url()).create().expect("admin client");
    let topic = NewTopic::new(name, PARTITIONS, TopicReplication::Fixed(1));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match admin.create_topics([&topic], &AdminOptions::new()).await {
            Ok(results) if results.iter().all(Result::is_ok) => return,
            other => {
                assert!(tokio::time::Instant::now() < deadline, "cannot create the topic: {other:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// A received record and its partition.
struct Record {
    received: Received,
    partition: i32,
    key: String,
}

/// A consumed record's headers, body, partition and key.
fn record_of(message: &rdkafka::message::BorrowedMessage<'_>) -> Record {
    let mut headers = BTreeMap::new();
    for header in message.headers().iter().flat_map(|list| list.iter()) {
        let value = header.value.map(|v| String::from_utf8_lossy(v).into_owned()).unwrap_or_default();
        headers.insert(header.key.to_owned(), value);
    }
    let key = String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned();
    let body = message.payload().unwrap_or_default().to_vec();
    Record { received: Received { headers, body }, partition: message.partition(), key }
}

/// Reads `expected` records from every partition of the topic, from the beginning, with an independent consumer.
fn consume(broker: &Broker, expected: usize) -> Vec<Record> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.url())
        .set("group.id", format!("outbox-tests-{}", uuid::Uuid::now_v7()))
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    for partition in 0..PARTITIONS {
        assignment.add_partition_offset(TOPIC, partition, Offset::Beginning).expect("assignment");
    }
    consumer.assign(&assignment).expect("assign");
    let mut records = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut idle = 0;
    while records.len() < expected || idle < 10 {
        assert!(std::time::Instant::now() < deadline, "read only {} of {expected} records", records.len());
        let Some(message) = consumer.poll(Duration::from_millis(200)) else {
            idle += 1;
            continue;
        };
        idle = 0;
        records.push(record_of(&message.expect("a record")));
    }
    records
}

/// Records in partition order are what a consumer sees; every aggregate stays in one partition.
fn received_in_partition_order(records: &[Record]) -> Vec<Received> {
    let mut partition_of: HashMap<&str, i32> = HashMap::new();
    for record in records {
        assert_eq!(record.received.headers.get("ce_subject"), Some(&record.key), "the key is the aggregate id");
        let partition = *partition_of.entry(&record.key).or_insert(record.partition);
        assert_eq!(partition, record.partition, "aggregate {} spread over partitions", record.key);
        assert_eq!(record.received.headers.get("content-type").map(String::as_str), Some("application/json"));
    }
    records.iter().map(|r| r.received.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_publishes_1000_events_keyed_by_aggregate_with_cloudevents_headers() {
    let broker = Broker::start(Kind::Kafka);
    create_topic(&broker, TOPIC).await;
    let db = TestDatabase::migrated().await;
    let sent = enqueue(&db.pool, broker_support::AGGREGATES, broker_support::PER_AGGREGATE).await;
    let relay = start(&db, publisher(&broker), config());
    wait_for(&db.pool, "published", sent.len() as i64, Duration::from_secs(120)).await;
    relay.stop().await;
    let records = tokio::task::block_in_place(|| consume(&broker, sent.len()));
    assert_eq!(records.len(), sent.len(), "one record per event (the idempotent producer never duplicates)");
    check(&sent, &received_in_partition_order(&records), SPELLING, true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_killed_and_restarted_mid_run_loses_nothing() {
    // tansu runs on memory storage here, so the topic is read before the kill and created again after it; what
    // is tested is the relay and the producer: events claimed while the broker is down are retried, none fails.
    let broker = Broker::start(Kind::Kafka);
    create_topic(&broker, TOPIC).await;
    let db = TestDatabase::migrated().await;
    let relay = start(&db, publisher(&broker), config());
    let first = enqueue(&db.pool, 10, 10).await;
    wait_for(&db.pool, "published", first.len() as i64, Duration::from_secs(60)).await;
    let records = tokio::task::block_in_place(|| consume(&broker, first.len()));
    check(&first, &received_in_partition_order(&records), SPELLING, true);

    broker.kill();
    let second = enqueue(&db.pool, 10, 10).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(count(&db.pool, "published").await, first.len() as i64, "nothing is published while it is down");
    broker.restart();
    create_topic(&broker, TOPIC).await;
    wait_for(&db.pool, "published", (first.len() + second.len()) as i64, Duration::from_secs(120)).await;
    relay.stop().await;
    assert_eq!(count(&db.pool, "failed").await, 0);
    let records = tokio::task::block_in_place(|| consume(&broker, second.len()));
    // Deliveries that timed out during the outage may have reached the broker after all: duplicates allowed.
    check(&second, &received_in_partition_order(&records), SPELLING, false);
}

/// While no broker answers, a delivery that timed out is an outage, which uses up no attempt (before, every one
/// counted, and a cluster down for a few minutes sent the backlog to `failed`), and the next calls fail fast
/// instead of waiting out the message timeout; once a broker is back, events are published again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_every_broker_is_down_deliveries_use_up_no_attempt_and_fail_fast() {
    let broker = Broker::start(Kind::Kafka);
    create_topic(&broker, TOPIC).await;
    let publisher = publisher(&broker);
    let message = || Message::new(uuid::Uuid::now_v7(), "order.placed", "order", "order-1", r#"{"n":0}"#);
    assert_eq!(publisher.publish(&[message()]).await, vec![Outcome::Published]);
    broker.kill();
    let unavailable = |outcome: &Outcome| matches!(outcome, Outcome::Transient(error) if error.is_unavailable());
    let outcome = publisher.publish(&[message()]).await.remove(0);
    assert!(unavailable(&outcome), "the delivery that timed out: {outcome:?}");
    let started = tokio::time::Instant::now();
    let outcome = publisher.publish(&[message()]).await.remove(0);
    assert!(unavailable(&outcome), "the next call: {outcome:?}");
    assert!(started.elapsed() < Duration::from_secs(4), "fails fast: {:?}", started.elapsed());
    broker.restart();
    create_topic(&broker, TOPIC).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if publisher.publish(&[message()]).await == vec![Outcome::Published] {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "nothing published within 60 s of the restart");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_republished_event_keeps_its_key_and_id_and_an_oversized_event_fails_for_good() {
    let broker = Broker::start(Kind::Kafka);
    create_topic(&broker, TOPIC).await;
    let publisher = publisher(&broker);
    let mut message =
        Message::new(uuid::Uuid::now_v7(), "order.placed", "order", "order-1", r#"{"order":"order-1","n":0}"#);
    message.version = 2;
    // A crash between publish and mark republishes the event; the idempotent producer dedupes only its own
    // retries, so a consumer sees the same ce_id twice, on the same partition, and deduplicates by it.
    assert_eq!(publisher.publish(std::slice::from_ref(&message)).await, vec![Outcome::Published]);
    assert_eq!(publisher.publish(std::slice::from_ref(&message)).await, vec![Outcome::Published]);
    let records = tokio::task::block_in_place(|| consume(&broker, 2));
    assert_eq!(records.len(), 2);
    assert!(records.iter().all(|r| r.received.headers.get("ce_id") == Some(&message.id.to_string())));
    assert_eq!(records[0].partition, records[1].partition);

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
    assert!(error.contains("too large") || error.contains("size"), "{error}");
    assert!(!error.contains("xxxx"), "errors never carry the payload");
}

#[tokio::test]
async fn a_missing_topic_is_reported_at_start_and_created_with_create_destinations() {
    let broker = Broker::start(Kind::Kafka);
    let url = format!("kafka://{}?topic=shop.orders&partitions=2&message_timeout_ms=5000", broker.url());
    let publisher = KafkaPublisher::from_url(&url.parse().unwrap()).unwrap();
    let error = publisher.connect().await.expect_err("no topic yet");
    let message = error.to_string();
    assert!(matches!(error, outbox_relay::Error::Refused { .. }), "{message}");
    assert!(message.contains("the topic `shop.orders` does not exist"), "{message}");
    assert!(message.contains("--create-destinations") && !message.contains('\n'), "{message}");

    let creating = publisher.with_create_destinations(true);
    creating.connect().await.expect("the topic is created");
    let message =
        Message::new(uuid::Uuid::now_v7(), "order.placed", "order", "order-1", r#"{"order":"order-1","n":0}"#);
    assert_eq!(creating.publish(&[message]).await, vec![Outcome::Published]);
    let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", broker.url()).create().unwrap();
    let metadata = consumer.fetch_metadata(Some("shop.orders"), Duration::from_secs(10)).unwrap();
    assert_eq!(metadata.topics()[0].partitions().len(), 2, "created with `partitions=2`");
    KafkaPublisher::from_url(&url.parse().unwrap()).unwrap().connect().await.expect("it exists now");
}

#[tokio::test]
async fn topics_of_a_template_are_created_at_their_first_publish_with_create_destinations() {
    let broker = Broker::start(Kind::Kafka);
    let url = format!("kafka://{}?topic=shop.{{aggregate_type}}&partitions=5&message_timeout_ms=5000", broker.url());
    let publisher = KafkaPublisher::from_url(&url.parse().unwrap()).unwrap().with_create_destinations(true);
    publisher.connect().await.expect("a template's topics are known only per event");
    let event = |aggregate: &str, n: u32| {
        Message::new(uuid::Uuid::now_v7(), "order.placed", aggregate, format!("{aggregate}-{n}"), r#"{"n":0}"#)
    };
    let batch = [event("invoice", 1), event("refund", 1), event("invoice", 2)];
    assert_eq!(publisher.publish(&batch).await, vec![Outcome::Published; 3]);
    let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", broker.url()).create().unwrap();
    for topic in ["shop.invoice", "shop.refund"] {
        let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
        assert_eq!(metadata.topics()[0].partitions().len(), 5, "`{topic}` created with `partitions=5`");
    }
    assert_eq!(publisher.publish(&[event("invoice", 3)]).await, vec![Outcome::Published], "known topics stay");
}

#[tokio::test]
async fn a_missing_topic_of_a_template_is_named_at_its_first_publish_unless_the_brokers_create_it() {
    let broker = Broker::start(Kind::Kafka);
    let event = |aggregate: &str| {
        Message::new(uuid::Uuid::now_v7(), "order.placed", aggregate, format!("{aggregate}-1"), r#"{"n":0}"#)
    };
    // A cluster that does not create topics on first use (`auto.create.topics.enable=false`, as on MSK by default
    // or Confluent Cloud): here the client asks tansu not to, as such a cluster would answer.
    let publisher = KafkaPublisher::builder([broker.url()])
        .topic("shop.{aggregate_type}")
        .message_timeout(Duration::from_secs(5))
        .property("allow.auto.create.topics", "false")
        .build()
        .unwrap();
    publisher.connect().await.expect("a template's topics are known only per event");
    let started = tokio::time::Instant::now();
    let outcomes = publisher.publish(&[event("invoice"), event("invoice")]).await;
    assert_eq!(outcomes.len(), 2);
    for outcome in &outcomes {
        let Outcome::Transient(error) = outcome else { panic!("not a transient failure: {outcome:?}") };
        let reason = error.to_string();
        assert!(reason.contains("the Kafka topic `shop.invoice` does not exist"), "{reason}");
        assert!(reason.contains("--create-destinations") && !reason.contains('\n'), "{reason}");
    }
    assert!(started.elapsed() < Duration::from_secs(5), "named at once, not after the delivery timeout");
    // Once the topic exists, the same publisher delivers to it.
    create_topic(&broker, "shop.invoice").await;
    assert_eq!(publisher.publish(&[event("invoice")]).await, vec![Outcome::Published]);

    // Brokers that create topics on first use (Kafka's default, and tansu) create it at the first publish.
    let url = format!("kafka://{}?topic=shop.{{aggregate_type}}&message_timeout_ms=5000", broker.url());
    let publisher = KafkaPublisher::from_url(&url.parse().unwrap()).unwrap();
    assert_eq!(publisher.publish(&[event("refund")]).await, vec![Outcome::Published]);
}

#[tokio::test]
async fn an_unreachable_cluster_at_start_is_waited_for_not_refused() {
    let url = format!("kafka://127.0.0.1:{}?topic=shop.orders", free_port());
    let error = KafkaPublisher::from_url(&url.parse().unwrap()).unwrap().connect().await.expect_err("nobody there");
    assert!(error.is_retryable(), "{error}");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[tokio::test]
async fn tls_with_the_private_ca_publishes_and_an_untrusted_certificate_is_refused_at_start() {
    let broker = Broker::start_secured(Kind::Kafka, Security { tls: true, ..Security::default() });
    let ca = broker.certificates().unwrap().ca.clone();
    let port = broker.port();
    let url = format!(
        "kafka://localhost:{port}?topic=secure.orders&security_protocol=ssl&tls_ca={}&message_timeout_ms=5000",
        ca.display()
    );
    let publisher = KafkaPublisher::from_url(&url.parse().unwrap()).unwrap().with_create_destinations(true);
    publisher.connect().await.unwrap_or_else(|e| panic!("{e}"));
    let message =
        Message::new(uuid::Uuid::now_v7(), "order.placed", "order", "order-1", r#"{"order":"order-1","n":0}"#);
    assert_eq!(publisher.publish(&[message]).await, vec![Outcome::Published]);

    let other = Certificates::generate(&broker.dir().join("other"), "other");
    let untrusted =
        format!("kafka://localhost:{port}?topic=secure.orders&security_protocol=ssl&tls_ca={}", other.ca.display());
    let started = tokio::time::Instant::now();
    let error = KafkaPublisher::from_url(&untrusted.parse().unwrap()).unwrap().connect().await.expect_err("untrusted");
    let text = error.to_string();
    assert!(matches!(error, outbox_relay::Error::Refused { .. }), "{text}");
    assert!(text.contains("certificate verify failed") && !text.contains('\n'), "{text}");
    assert!(started.elapsed() < Duration::from_secs(15), "{:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_asyncapi_document_names_the_topic_and_key_an_event_arrives_with() {
    let broker = Broker::start(Kind::Kafka);
    let sink = format!("kafka://{}?topic=shop.{{aggregate_type}}.v{{version}}&message_timeout_ms=5000", broker.url());
    let described = broker_support::describe(&sink);
    assert_eq!(described.address, "shop.order.v2");
    let message_object = &described.document["components"]["messages"]["order.placed.v2"];
    assert_eq!(message_object["bindings"]["kafka"]["key"]["type"], "string", "the key binding is documented");
    let publisher = sink.parse::<outbox_relay::Sink>().unwrap().open_with(true).unwrap();
    publisher.connect().await.expect("the topic is created");
    let message = broker_support::described_message();
    assert_eq!(publisher.publish(std::slice::from_ref(&message)).await, vec![Outcome::Published]);
    let address = described.address.clone();
    let url = broker.url();
    let (key, received) = tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &url)
            .set("group.id", format!("outbox-tests-{}", uuid::Uuid::now_v7()))
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
        let metadata = consumer.fetch_metadata(Some(&address), Duration::from_secs(10)).expect("metadata");
        let mut assignment = TopicPartitionList::new();
        for partition in metadata.topics().iter().flat_map(|t| t.partitions()) {
            assignment.add_partition_offset(&address, partition.id(), Offset::Beginning).expect("assignment");
        }
        consumer.assign(&assignment).expect("assign");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            assert!(std::time::Instant::now() < deadline, "nothing arrived on the documented topic");
            let Some(record) = consumer.poll(Duration::from_millis(200)) else { continue };
            let record = record_of(&record.expect("a record"));
            return (record.key, record.received);
        }
    })
    .await
    .expect("the consumer");
    assert_eq!(key, "o-1", "the key is the aggregate id, as the binding says");
    broker_support::check_described(&described, &received);
}

/// A broker behind TLS that takes only clients presenting a certificate of its private CA (stunnel in front of
/// tansu, as `ssl.client.auth=required` on a Kafka broker), and a sink URL to it for `topic` with the CA trusted:
/// `with_certificate` adds the harness's client certificate and key.
fn mutual_tls(topic: &str, with_certificate: bool) -> (Broker, String) {
    let security = Security { tls: true, client_certificates: true, ..Security::default() };
    let broker = Broker::start_secured(Kind::Kafka, security);
    let sink = mutual_tls_sink(&broker, topic, with_certificate);
    (broker, sink)
}

fn mutual_tls_sink(broker: &Broker, topic: &str, with_certificate: bool) -> String {
    let tls = broker.certificates().expect("a TLS broker");
    let mut sink = format!(
        "kafka://localhost:{}?topic={topic}&security_protocol=ssl&tls_ca={}&message_timeout_ms=5000",
        broker.port(),
        tls.ca.display()
    );
    if with_certificate {
        sink.push_str(&format!("&tls_cert={}&tls_key={}", tls.client_cert.display(), tls.client_key.display()));
    }
    sink
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_client_certificate_publishes_and_without_one_start_is_refused() {
    let (broker, sink) = mutual_tls("mtls.orders", true);
    let publisher = KafkaPublisher::from_url(&sink.parse().unwrap()).unwrap().with_create_destinations(true);
    publisher.connect().await.unwrap_or_else(|e| panic!("{e}"));
    let message =
        Message::new(uuid::Uuid::now_v7(), "order.placed", "order", "order-1", r#"{"order":"order-1","n":0}"#);
    assert_eq!(publisher.publish(std::slice::from_ref(&message)).await, vec![Outcome::Published]);
    let tls = broker.certificates().unwrap().clone();
    let url = format!("localhost:{}", broker.port());
    let received = tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &url)
            .set("security.protocol", "ssl")
            .set("ssl.ca.location", tls.ca.display().to_string())
            .set("ssl.certificate.location", tls.client_cert.display().to_string())
            .set("ssl.key.location", tls.client_key.display().to_string())
            .set("group.id", format!("outbox-tests-{}", uuid::Uuid::now_v7()))
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
        let metadata = consumer.fetch_metadata(Some("mtls.orders"), Duration::from_secs(10)).expect("metadata");
        let mut assignment = TopicPartitionList::new();
        for partition in metadata.topics().iter().flat_map(|t| t.partitions()) {
            assignment.add_partition_offset("mtls.orders", partition.id(), Offset::Beginning).expect("assignment");
        }
        consumer.assign(&assignment).expect("assign");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            assert!(std::time::Instant::now() < deadline, "the event never arrived");
            let Some(record) = consumer.poll(Duration::from_millis(200)) else { continue };
            return record_of(&record.expect("a record")).received;
        }
    })
    .await
    .expect("the consumer");
    assert_eq!(received.headers.get("ce_id"), Some(&message.id.to_string()));

    // Without a certificate, or with one of another CA, the broker ends the TLS 1.3 handshake with an alert once
    // the client's side of it is done: refused at start all the same, not waited for as an unreachable broker.
    let other = Certificates::generate(&broker.dir().join("other"), "other");
    let untrusted = format!(
        "{}&tls_cert={}&tls_key={}",
        mutual_tls_sink(&broker, "mtls.orders", false),
        other.client_cert.display(),
        other.client_key.display()
    );
    for (sink, problem) in [
        (mutual_tls_sink(&broker, "mtls.orders", false), "the broker asks for a client certificate: give `tls_cert`"),
        // Which alert depends on the server (stunnel: `certificate required`; a Kafka broker's JSSE: `bad
        // certificate` or `certificate unknown`); the hint at `tls_cert` is only for a relay that gave none.
        (untrusted, "SSL routines::"),
    ] {
        let started = tokio::time::Instant::now();
        let error = KafkaPublisher::from_url(&sink.parse().unwrap()).unwrap().connect().await.expect_err("refused");
        let text = error.to_string();
        assert!(matches!(error, outbox_relay::Error::Refused { .. }), "{text}");
        assert!(text.contains(problem) && !text.contains('\n'), "`{problem}` not in: {text}");
        assert_eq!(text.contains("give `tls_cert`"), !sink.contains("tls_cert="), "{text}");
        assert!(started.elapsed() < Duration::from_secs(15), "not at once: {:?}", started.elapsed());
    }
}

#[cfg(feature = "cli")]
#[tokio::test]
async fn outbox_relay_without_the_client_certificate_the_broker_asks_for_exits_2_at_once_with_one_line() {
    let (broker, _) = mutual_tls("mtls.cli", true);
    let sink = mutual_tls_sink(&broker, "mtls.cli", false);
    let db = TestDatabase::migrated().await;
    let sent = enqueue(&db.pool, 1, 2).await;
    let started = tokio::time::Instant::now();
    let mut relay = outbox_tests::outbox!().database(&db.url).spawn(["relay", "--sink", &sink]);
    let exit = relay.wait_for_exit(Duration::from_secs(30)).await;
    let stderr = relay.stderr();
    assert_eq!(exit.code(), Some(2), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(15), "not at once: {:?}", started.elapsed());
    let errors: Vec<&str> = stderr.lines().filter(|line| line.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(errors[0].contains("refused the relay") && errors[0].contains("client certificate"), "{stderr}");
    assert_eq!(count(&db.pool, "pending").await, sent.len() as i64, "nothing is claimed");
}

const SASL_PASSWORD: &str = "hunter2-kafka-password";

/// A tansu broker that requires SASL SCRAM and has no user that can pass it: every credential is wrong there.
fn sasl_broker() -> Broker {
    Broker::start_secured(Kind::Kafka, Security { sasl_with_no_users: true, ..Security::default() })
}

#[tokio::test]
async fn scram_credentials_the_broker_refuses_stop_connect_at_start_with_one_line_without_the_password() {
    let broker = sasl_broker();
    for mechanism in ["scram-sha-256", "scram-sha-512"] {
        let sink = format!(
            "kafka://relay:{SASL_PASSWORD}@{}?topic=sasl.orders&security_protocol=sasl_plaintext&sasl_mechanism={mechanism}",
            broker.url()
        );
        let started = tokio::time::Instant::now();
        let error = KafkaPublisher::from_url(&sink.parse().unwrap()).unwrap().connect().await.expect_err("refused");
        let text = error.to_string();
        assert!(matches!(error, outbox_relay::Error::Refused { .. }), "{mechanism}: {text}");
        assert!(text.contains("SASL SCRAM authentication failed"), "{mechanism}: {text}");
        assert!(text.contains("kafka://relay:***@"), "the password is masked: {text}");
        assert!(!text.contains('\n') && !text.contains(SASL_PASSWORD), "{text}");
        assert!(started.elapsed() < Duration::from_secs(15), "not at once: {:?}", started.elapsed());
    }
}

#[cfg(feature = "cli")]
#[tokio::test]
async fn outbox_relay_with_scram_credentials_the_broker_refuses_exits_2_at_once_without_the_password() {
    let broker = sasl_broker();
    let db = TestDatabase::migrated().await;
    let sent = enqueue(&db.pool, 1, 2).await;
    let sink = format!(
        "kafka://relay@{}?topic=sasl.orders&security_protocol=sasl_plaintext&sasl_mechanism=scram-sha-512\
         &password_env=OUTBOX_TEST_KAFKA_PASSWORD",
        broker.url()
    );
    let started = tokio::time::Instant::now();
    let mut relay = outbox_tests::outbox!()
        .database(&db.url)
        .env("OUTBOX_TEST_KAFKA_PASSWORD", SASL_PASSWORD)
        .spawn(["relay", "--sink", &sink]);
    let exit = relay.wait_for_exit(Duration::from_secs(30)).await;
    let output = relay.output();
    assert_eq!(exit.code(), Some(2), "{output}");
    assert!(started.elapsed() < Duration::from_secs(15), "not at once: {:?}", started.elapsed());
    let errors: Vec<&str> = output.lines().filter(|line| line.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{output}");
    assert!(
        errors[0].contains("refused the relay") && errors[0].contains("SASL SCRAM authentication failed"),
        "{output}"
    );
    assert!(!output.contains(SASL_PASSWORD), "the password was printed: {output}");
    assert_eq!(count(&db.pool, "pending").await, sent.len() as i64, "nothing is claimed");
}
