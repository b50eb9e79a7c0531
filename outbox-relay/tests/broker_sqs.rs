//! The SQS publisher against a real moto server on 127.0.0.1 (through the real aws-sdk-sqs client with an
//! endpoint override), through the relay: 1,000 events to a FIFO queue with their CloudEvents attributes and
//! per-aggregate order, the server killed and restarted mid-run, FIFO deduplication by event id, and an
//! oversized event sent to `failed`.

mod broker_support;

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::types::QueueAttributeName;
use broker_support::{check, config, count, enqueue, enqueue_oversized, start, wait_for, Received, Sent, Spelling};
use outbox_relay::{CloudEvents, Message, Outcome, Publisher, SqsPublisher};
use outbox_tests::brokers::{Broker, Kind};
use outbox_tests::pg::TestDatabase;

const SPELLING: Spelling = Spelling { prefix: "ce_" };

/// An independent SQS client for the test's side: creating queues, receiving.
fn client(endpoint: &str) -> aws_sdk_sqs::Client {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "tests"))
        .endpoint_url(endpoint)
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}

/// Creates the FIFO queue `events.fifo` and returns its URL.
async fn create_queue(broker: &Broker) -> String {
    let created = client(&broker.url())
        .create_queue()
        .queue_name("events.fifo")
        .attributes(QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .expect("create the queue");
    created.queue_url().expect("a queue URL").to_owned()
}

fn publisher(broker: &Broker, queue_url: &str) -> SqsPublisher {
    let envelope = CloudEvents::new().source("outbox-tests").schema_base(broker_support::SCHEMA_BASE).unwrap();
    SqsPublisher::builder()
        .queue_url(queue_url)
        .endpoint(broker.url())
        .region("us-east-1")
        .credentials("test", "test")
        .timeout(Duration::from_secs(10))
        .cloud_events(envelope)
        .build()
        .unwrap()
}

/// Receives (and deletes) messages until `expected` arrived or nothing came for a while.
async fn receive(broker: &Broker, queue_url: &str, expected: usize) -> Vec<Received> {
    receive_from(&broker.url(), queue_url, expected, 25).await
}

/// Receives (and deletes) messages until `expected` arrived or nothing came for `patience` empty polls (200 ms apart).
async fn receive_from(endpoint: &str, queue_url: &str, expected: usize, patience: u32) -> Vec<Received> {
    let client = client(endpoint);
    let mut received = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    let mut empty = 0;
    while received.len() < expected && empty < patience {
        assert!(tokio::time::Instant::now() < deadline, "received only {} of {expected}", received.len());
        let output = client
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(0)
            .message_attribute_names("All")
            .send()
            .await
            .expect("receive");
        if output.messages().is_empty() {
            // Short polls: a long poll would hold one of moto's few request threads.
            empty += 1;
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        empty = 0;
        for message in output.messages() {
            let mut headers = BTreeMap::new();
            for (name, value) in message.message_attributes().into_iter().flatten() {
                headers.insert(name.clone(), value.string_value().unwrap_or_default().to_owned());
            }
            assert!(headers.len() <= 10, "SQS takes at most 10 attributes: {headers:?}");
            // Headers that do not fit one attribute each travel as one JSON object.
            if let Some(packed) = headers.remove("outbox_headers") {
                let packed: BTreeMap<String, String> = serde_json::from_str(&packed).expect("a JSON object of headers");
                headers.extend(packed);
            }
            received.push(Received { headers, body: message.body().unwrap_or_default().as_bytes().to_vec() });
            let handle = message.receipt_handle().expect("a receipt handle");
            client.delete_message().queue_url(queue_url).receipt_handle(handle).send().await.expect("delete");
        }
    }
    received
}

#[tokio::test]
async fn relay_publishes_1000_events_to_a_fifo_queue_with_cloudevents_attributes_in_aggregate_order() {
    let broker = Broker::start(Kind::Sqs);
    let queue = create_queue(&broker).await;
    let db = TestDatabase::migrated().await;
    let sent = enqueue(&db.pool, broker_support::AGGREGATES, broker_support::PER_AGGREGATE).await;
    // The consumer drains the queue while the relay publishes (moto slows down as a FIFO queue grows).
    let consumer = {
        let (endpoint, queue, expected) = (broker.url(), queue.clone(), sent.len());
        tokio::spawn(async move { receive_from(&endpoint, &queue, expected, 300).await })
    };
    let relay = start(&db, publisher(&broker, &queue), config());
    wait_for(&db.pool, "published", sent.len() as i64, Duration::from_secs(240)).await;
    relay.stop().await;
    let received = consumer.await.expect("the consumer");
    assert_eq!(received.len(), sent.len(), "one message per event");
    check(&sent, &received, SPELLING, true);
}

#[tokio::test]
async fn a_server_killed_and_restarted_mid_run_loses_nothing() {
    // moto keeps its state in memory, so the queue is drained before the kill and created again after it; what
    // is tested is the relay: events claimed while the server is down are retried, none is dropped or failed.
    let broker = Broker::start(Kind::Sqs);
    let queue = create_queue(&broker).await;
    let db = TestDatabase::migrated().await;
    let relay = start(&db, publisher(&broker, &queue), config());
    let first = enqueue(&db.pool, 10, 10).await;
    wait_for(&db.pool, "published", first.len() as i64, Duration::from_secs(60)).await;
    check(&first, &receive(&broker, &queue, first.len()).await, SPELLING, true);

    broker.kill();
    let second: Vec<Sent> = enqueue(&db.pool, 10, 10).await;
    // The relay keeps trying while the server is down (each try records its error), nothing is published,
    // nothing fails, and no attempt is counted: the endpoint could not be reached at all.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(count(&db.pool, "published").await, first.len() as i64);
    assert_eq!(count(&db.pool, "failed").await, 0);
    let (tried, attempts): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE last_error LIKE 'cannot reach SQS%'), coalesce(sum(attempts), 0)::bigint
           FROM outbox_events",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(tried > 0, "the relay tried during the outage");
    assert_eq!(attempts, 0, "no attempt is counted while the endpoint cannot be reached");
    broker.restart();
    assert_eq!(create_queue(&broker).await, queue);
    wait_for(&db.pool, "published", (first.len() + second.len()) as i64, Duration::from_secs(120)).await;
    relay.stop().await;
    assert_eq!(count(&db.pool, "failed").await, 0);
    check(&second, &receive(&broker, &queue, second.len()).await, SPELLING, true);
}

#[tokio::test]
async fn a_fifo_queue_drops_a_republished_event_and_oversized_events_fail_for_good() {
    let broker = Broker::start(Kind::Sqs);
    let queue = create_queue(&broker).await;
    let publisher = publisher(&broker, &queue);
    let mut message =
        Message::new(uuid::Uuid::now_v7(), "order.placed", "order", "order-1", r#"{"order":"order-1","n":0}"#);
    message.version = 2;
    assert_eq!(publisher.publish(std::slice::from_ref(&message)).await, vec![Outcome::Published]);
    assert_eq!(publisher.publish(std::slice::from_ref(&message)).await, vec![Outcome::Published]);
    let received = receive(&broker, &queue, 2).await;
    assert_eq!(received.len(), 1, "MessageDeduplicationId dropped the second copy");
    assert_eq!(received[0].headers.get("ce_id"), Some(&message.id.to_string()));

    let db = TestDatabase::migrated().await;
    let big = enqueue_oversized(&db.pool, 300 * 1024).await;
    let sent = enqueue(&db.pool, 5, 2).await;
    let relay = start(&db, publisher, config());
    wait_for(&db.pool, "published", sent.len() as i64, Duration::from_secs(60)).await;
    wait_for(&db.pool, "failed", 1, Duration::from_secs(60)).await;
    relay.stop().await;
    let (status, error) = broker_support::status_of(&db.pool, big).await;
    assert_eq!(status, "failed");
    let error = error.unwrap_or_default();
    assert!(error.contains("too large") && !error.contains("xxxx"), "{error}");
    check(&sent, &receive(&broker, &queue, sent.len()).await, SPELLING, true);
}

#[tokio::test]
async fn a_missing_queue_is_reported_at_start_and_created_with_create_destinations() {
    let broker = Broker::start(Kind::Sqs);
    let queue_url = format!("{}/123456789012/shop-events.fifo", broker.url());
    let error = publisher(&broker, &queue_url).connect().await.expect_err("no queue yet");
    let message = error.to_string();
    assert!(matches!(error, outbox_relay::Error::Refused { .. }), "{message}");
    assert!(message.contains("the queue `shop-events.fifo` does not exist"), "{message}");
    assert!(message.contains("--create-destinations") && !message.contains('\n'), "{message}");

    let url = format!("sqs://?queue_url={queue_url}&endpoint={}&region=us-east-1&queue_retention_s=3600", broker.url());
    std::env::set_var("AWS_ACCESS_KEY_ID", "test");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "test");
    let creating = SqsPublisher::from_url(&url.parse().unwrap()).unwrap().with_create_destinations(true);
    creating.connect().await.expect("the queue is created");
    let attributes = client(&broker.url())
        .get_queue_attributes()
        .queue_url(&queue_url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .expect("the queue exists");
    let attributes = attributes.attributes().unwrap();
    assert_eq!(attributes.get(&QueueAttributeName::FifoQueue).map(String::as_str), Some("true"));
    assert_eq!(attributes.get(&QueueAttributeName::MessageRetentionPeriod).map(String::as_str), Some("3600"));
    let message =
        Message::new(uuid::Uuid::now_v7(), "order.placed", "order", "order-1", r#"{"order":"order-1","n":0}"#);
    assert_eq!(creating.publish(&[message]).await, vec![Outcome::Published]);
    assert_eq!(receive(&broker, &queue_url, 1).await.len(), 1);
    publisher(&broker, &queue_url).connect().await.expect("it exists now");
}

#[tokio::test]
async fn a_templated_queue_missing_at_publish_is_named_in_the_outcome_or_created_with_create_destinations() {
    let broker = Broker::start(Kind::Sqs);
    let template = format!("{}/123456789012/shop-{{aggregate_type}}", broker.url());
    let event = |aggregate: &str| {
        Message::new(uuid::Uuid::now_v7(), "order.placed", aggregate, "a-1", r#"{"order":"a-1","n":0}"#)
    };
    let plain = publisher(&broker, &template);
    plain.connect().await.expect("a template's queues are known only per event");
    let outcomes = plain.publish(&[event("invoice")]).await;
    let [Outcome::Transient(error)] = outcomes.as_slice() else { panic!("a missing queue may appear: {outcomes:?}") };
    let reason = error.to_string();
    assert!(reason.contains("the SQS queue `shop-invoice` does not exist"), "names the queue: {reason}");
    assert!(reason.contains("--create-destinations"), "names the fix: {reason}");

    let url = format!("sqs://?queue_url={template}&endpoint={}&region=us-east-1", broker.url());
    std::env::set_var("AWS_ACCESS_KEY_ID", "test");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "test");
    let creating = SqsPublisher::from_url(&url.parse().unwrap()).unwrap().with_create_destinations(true);
    let batch = [event("invoice"), event("refund"), event("invoice")];
    assert_eq!(creating.publish(&batch).await, vec![Outcome::Published; 3], "each missing queue is created");
    let queue = |name: &str| format!("{}/123456789012/{name}", broker.url());
    assert_eq!(receive(&broker, &queue("shop-invoice"), 2).await.len(), 2);
    assert_eq!(receive(&broker, &queue("shop-refund"), 1).await.len(), 1);
    assert_eq!(plain.publish(&[event("refund")]).await, vec![Outcome::Published], "and stays for every publisher");
}

#[tokio::test]
async fn the_asyncapi_document_names_the_queue_an_event_arrives_in_with_its_attributes() {
    let broker = Broker::start(Kind::Sqs);
    std::env::set_var("AWS_ACCESS_KEY_ID", "test");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "test");
    let sink = format!(
        "sqs://?queue_url={}/123456789012/shop-{{aggregate_type}}-v{{version}}&endpoint={}&region=us-east-1",
        broker.url(),
        broker.url()
    );
    let described = broker_support::describe(&sink);
    assert_eq!(described.address, "shop-order-v2");
    let server = described.document["servers"]["sqs"]["host"].as_str().expect("a server").to_owned();
    assert!(broker.url().ends_with(&server), "the server is the queue's host: {server}");
    let headers = &described.document["components"]["schemas"]["outbox.headers"];
    assert!(
        headers["properties"]["outbox_headers"]["description"].as_str().is_some_and(|d| d.contains("JSON object")),
        "the packed headers attribute is described: {headers}"
    );
    assert!(!described.required_headers.iter().any(|h| h == "outbox_headers"), "and only present when needed");
    let publisher = sink.parse::<outbox_relay::Sink>().unwrap().open().unwrap();
    let message = broker_support::described_message();
    let queue_url = format!("{}/123456789012/{}", broker.url(), described.address);
    client(&broker.url()).create_queue().queue_name(&described.address).send().await.expect("create the queue");
    assert_eq!(publisher.publish(std::slice::from_ref(&message)).await, vec![Outcome::Published]);
    let received = receive(&broker, &queue_url, 1).await;
    assert_eq!(received.len(), 1, "the event is in the documented queue");
    broker_support::check_described(&described, &received[0]);
}

#[tokio::test]
async fn an_https_endpoint_with_a_private_ca_takes_events_and_an_untrusted_certificate_is_refused_at_start() {
    let broker = Broker::start_secured(Kind::Sqs, outbox_tests::brokers::Security { tls: true, ..Default::default() });
    let ca = broker.certificates().expect("TLS certificates").ca.clone();
    let queue_url = format!("{}/123456789012/tls-events", broker.url());
    let url = |extra: &str| {
        format!("sqs://?queue_url={queue_url}&endpoint={}&region=us-east-1{extra}", broker.url()).parse().unwrap()
    };
    std::env::set_var("AWS_ACCESS_KEY_ID", "test");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "test");

    let trusting =
        SqsPublisher::from_url(&url(&format!("&tls_ca={}", ca.display()))).unwrap().with_create_destinations(true);
    trusting.connect().await.expect("the queue is created over TLS");
    let batch: Vec<Message> = (0..3)
        .map(|n| Message::new(uuid::Uuid::now_v7(), "order.placed", "order", format!("o-{n}"), r#"{"n":1}"#))
        .collect();
    assert_eq!(trusting.publish(&batch).await, vec![Outcome::Published; 3]);

    let other = outbox_tests::certificates::Certificates::generate(&broker.dir().join("other"), "other");
    for untrusting in [url(""), url(&format!("&tls_ca={}", other.ca.display()))] {
        let error = SqsPublisher::from_url(&untrusting).unwrap().connect().await.expect_err("an untrusted certificate");
        let message = error.to_string();
        assert!(matches!(error, outbox_relay::Error::Refused { .. }), "retrying cannot fix it: {message}");
        assert!(message.contains("certificate"), "no word about the certificate: {message}");
        assert!(!message.contains('\n'), "one line: {message}");
    }
    let missing = SqsPublisher::from_url(&url("&tls_ca=/nonexistent/ca.pem")).expect_err("a missing CA file");
    assert!(missing.to_string().contains("/nonexistent/ca.pem"), "{missing}");
}

/// An endpoint that never answers the connection (its accept queue is full, so the kernel drops the connection
/// requests, as a host that is down or a firewall that drops packets does) is unreachable: no attempt is counted
/// (before, the connect and the call had one timeout, and it came out as a counted "timed out").
#[tokio::test]
async fn an_endpoint_that_never_answers_the_connection_is_unavailable_not_a_counted_failure() {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    let address = listener.local_addr().unwrap();
    // Never accepted: they fill the queue.
    let held: Vec<_> = (0..2).map(|_| std::net::TcpStream::connect_timeout(&address, Duration::from_secs(1))).collect();
    let endpoint = format!("http://{address}");
    let publisher = SqsPublisher::builder()
        .queue_url(format!("{endpoint}/000000000000/orders"))
        .endpoint(&endpoint)
        .region("us-east-1")
        .credentials("test", "test")
        .timeout(Duration::from_secs(4))
        .build()
        .unwrap();
    let message = Message::new(uuid::Uuid::now_v7(), "order.placed", "order", "order-1", r#"{"n":0}"#);
    let outcome = publisher.publish(&[message]).await.remove(0);
    assert!(matches!(&outcome, Outcome::Transient(error) if error.is_unavailable()), "{outcome:?}");
    drop((held, listener));
}
