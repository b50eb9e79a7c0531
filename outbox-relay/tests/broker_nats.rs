//! The NATS JetStream publisher against a real `nats-server -js` on 127.0.0.1, through the relay: 1,000 events
//! with their CloudEvents headers and per-aggregate order, a broker killed mid-run, deduplication by
//! `Nats-Msg-Id`, and an oversized event sent to `failed`; TLS with a private CA, user and password, token,
//! nkey and `.creds` (operator mode, JWTs) authentication, an account without JetStream refused at start, and a
//! missing stream reported at start or created.

mod broker_support;

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use broker_support::{check, config, enqueue, enqueue_oversized, envelope_query, start, wait_for, Received, Spelling};
use futures_util::StreamExt;
use outbox_relay::{Message, NatsPublisher, Outcome, Publisher};
use outbox_tests::brokers::{Broker, Kind, Security};
use outbox_tests::certificates::Certificates;
use outbox_tests::nats_operator::NatsOperator;
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

/// A message's headers (the first value of each) and body.
fn received_of(message: &async_nats::Message) -> Received {
    let mut headers = BTreeMap::new();
    for (name, values) in message.headers.iter().flat_map(|map| map.iter()) {
        if let Some(value) = values.first() {
            headers.insert(name.to_string(), value.to_string());
        }
    }
    Received { headers, body: message.payload.to_vec() }
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
            received.push(received_of(&message.expect("a message")));
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
async fn a_broker_down_for_longer_than_every_attempt_lasts_sends_nothing_to_failed_and_uses_up_no_attempt() {
    let broker = Broker::start(Kind::Nats);
    create_stream(&broker).await;
    let db = TestDatabase::migrated().await;
    let sent = broker_support::ride_out_an_outage(&db, &broker, publisher(&broker)).await;
    let received = consume_all(&broker).await;
    check(&sent, &received, SPELLING, false);
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
async fn an_aggregate_id_with_a_line_break_fails_its_own_event_for_good_and_the_rest_of_the_call_is_published() {
    let broker = Broker::start(Kind::Nats);
    create_stream(&broker).await;
    let publisher = publisher(&broker);
    // A row written by plain SQL can hold any aggregate id; NATS headers (`ce-subject`) cannot carry a line break.
    let broken = Message::new(uuid::Uuid::now_v7(), "order.placed", "order", "order\n7", r#"{"order":"x","n":0}"#);
    let fine = Message::new(uuid::Uuid::now_v7(), "order.placed", "order", "order-8", r#"{"order":"order-8","n":0}"#);
    let outcomes = publisher.publish(&[broken, fine]).await;
    assert!(
        matches!(&outcomes[0], Outcome::Permanent(error) if error.message().contains("`ce-subject` has a line break")),
        "{outcomes:?}"
    );
    assert_eq!(outcomes[1], Outcome::Published);
    assert_eq!(consume_all(&broker).await.len(), 1);
    // A source with a line break would fail every event: refused when the publisher is built.
    let url = format!("{}?subject=outbox.{{event_type}}&source=%2Fshop%0Aevil", broker.url());
    let error = NatsPublisher::from_url(&url.parse().unwrap()).expect_err("refused").to_string();
    assert!(error.contains("line break"), "{error}");
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

// ---- production setups: TLS with a private CA, credentials, destinations checked and created ----

/// The subject every production-setup test publishes to.
const SUBJECTS: &str = "subject=outbox.{event_type}&ack_timeout_ms=2000&connect_timeout_ms=2000";

fn one_message() -> Message {
    Message::new(uuid::Uuid::now_v7(), "order.placed", "order", "order-1", r#"{"order":"order-1","n":0}"#)
}

/// A publisher from `url`, connected (stream created if missing), that publishes one message.
async fn publishes(url: &str) {
    let publisher = nats_with_create(url);
    publisher.connect().await.unwrap_or_else(|e| panic!("connect with {url}: {e}"));
    assert_eq!(publisher.publish(&[one_message()]).await, vec![Outcome::Published]);
}

/// The publisher of `url` with `--create-destinations` on.
fn nats_with_create(url: &str) -> NatsPublisher {
    // The URL's options are read by from_url; the builder adds what the CLI flag sets.
    let parsed: url::Url = url.parse().unwrap();
    NatsPublisher::from_url(&parsed).unwrap_or_else(|e| panic!("{e}")).with_create_destinations(true)
}

/// `connect` fails with [`outbox_relay::Error::Refused`]: one line, never `secret`; returns the message.
async fn refused(url: &str, expected: &str, secret: &str) -> String {
    let started = tokio::time::Instant::now();
    let error = nats_with_create(url).connect().await.expect_err("refused");
    let message = error.to_string();
    assert!(matches!(error, outbox_relay::Error::Refused { .. }), "{message}");
    assert!(!error.is_retryable(), "{message}");
    assert!(message.contains(expected), "expected `{expected}` in: {message}");
    assert!(!message.contains('\n'), "one line: {message}");
    assert!(secret.is_empty() || !message.contains(secret), "the secret leaked: {message}");
    assert!(started.elapsed() < Duration::from_secs(10), "no retries at start: {:?}", started.elapsed());
    message
}

#[tokio::test]
async fn tls_with_the_private_ca_publishes_and_an_untrusted_certificate_is_refused_at_start() {
    let broker = Broker::start_secured(Kind::Nats, Security { tls: true, ..Security::default() });
    let ca = broker.certificates().unwrap().ca.display().to_string();
    let port = broker.port();
    publishes(&format!("nats://127.0.0.1:{port}?tls=true&tls_ca={ca}&{SUBJECTS}")).await;
    publishes(&format!("tls://localhost:{port}?tls_ca={ca}&{SUBJECTS}")).await;

    let other = Certificates::generate(&broker.dir().join("other"), "other");
    let untrusted = format!("nats://127.0.0.1:{port}?tls=true&tls_ca={}&{SUBJECTS}", other.ca.display());
    refused(&untrusted, "TLS", "").await;
    // Without the CA the system's authorities do not know the private one either.
    refused(&format!("tls://127.0.0.1:{port}?{SUBJECTS}"), "TLS", "").await;
}

#[tokio::test]
async fn user_and_password_from_a_file_publish_and_a_wrong_password_is_refused_at_start() {
    let password = "hunter2-nats-password";
    let security = Security { user: Some(("relay".into(), password.into())), ..Security::default() };
    let broker = Broker::start_secured(Kind::Nats, security);
    let file = broker.dir().join("password");
    std::fs::write(&file, format!("{password}\n")).unwrap();
    let port = broker.port();
    publishes(&format!("nats://relay@127.0.0.1:{port}?password_file={}&{SUBJECTS}", file.display())).await;
    publishes(&format!("nats://relay:{password}@127.0.0.1:{port}?{SUBJECTS}")).await;
    refused(&format!("nats://relay:wrong-{password}@127.0.0.1:{port}?{SUBJECTS}"), "authorization violation", password)
        .await;
}

#[tokio::test]
async fn a_token_from_the_environment_publishes_and_a_wrong_token_is_refused_at_start() {
    let token = "s3cr3t-nats-token";
    let broker = Broker::start_secured(Kind::Nats, Security { token: Some(token.into()), ..Security::default() });
    std::env::set_var("OUTBOX_TEST_NATS_TOKEN", token);
    std::env::set_var("OUTBOX_TEST_NATS_WRONG_TOKEN", "not-the-token");
    let port = broker.port();
    publishes(&format!("nats://127.0.0.1:{port}?token_env=OUTBOX_TEST_NATS_TOKEN&{SUBJECTS}")).await;
    refused(
        &format!("nats://127.0.0.1:{port}?token_env=OUTBOX_TEST_NATS_WRONG_TOKEN&{SUBJECTS}"),
        "authorization",
        token,
    )
    .await;
    // A token as the URL's user name is never shown.
    let url = format!("nats://{token}@127.0.0.1:{port}?{SUBJECTS}");
    let publisher = NatsPublisher::from_url(&url.parse().unwrap()).unwrap();
    assert!(!format!("{publisher} {publisher:?}").contains(token), "{publisher}");
}

#[tokio::test]
async fn an_nkey_seed_publishes_and_an_unknown_seed_is_refused_at_start() {
    let user = nkeys::KeyPair::new_user();
    let broker = Broker::start_secured(Kind::Nats, Security { nkey: Some(user.public_key()), ..Security::default() });
    let seed = user.seed().unwrap();
    let file = broker.dir().join("relay.nk");
    std::fs::write(&file, &seed).unwrap();
    let port = broker.port();
    publishes(&format!("nats://127.0.0.1:{port}?nkey_seed_file={}&{SUBJECTS}", file.display())).await;
    let stranger = nkeys::KeyPair::new_user().seed().unwrap();
    let other = broker.dir().join("stranger.nk");
    std::fs::write(&other, &stranger).unwrap();
    refused(
        &format!("nats://127.0.0.1:{port}?nkey_seed_file={}&{SUBJECTS}", other.display()),
        "authorization",
        &stranger,
    )
    .await;
}

#[tokio::test]
async fn a_creds_file_publishes_and_a_user_of_an_account_the_server_does_not_know_is_refused_at_start() {
    let operator = NatsOperator::generate();
    let broker =
        Broker::start_secured(Kind::Nats, Security { operator: Some(operator.clone()), ..Security::default() });
    let file = broker.dir().join("relay.creds");
    operator.user("relay").write(&file);
    let port = broker.port();
    let url = format!("nats://127.0.0.1:{port}?creds_file={}&{SUBJECTS}", file.display());
    let publisher = nats_with_create(&url);
    publisher.connect().await.unwrap_or_else(|e| panic!("connect with the .creds file: {e}"));
    let db = TestDatabase::migrated().await;
    let sent = enqueue(&db.pool, 5, 4).await;
    let relay = start(&db, publisher, config());
    wait_for(&db.pool, "published", sent.len() as i64, Duration::from_secs(60)).await;
    relay.stop().await;
    // The stream of the operator's account has them: read by another user of that account.
    let reader = operator.user("reader").creds();
    let client = async_nats::ConnectOptions::with_credentials(&reader)
        .expect("the reader's .creds")
        .connect(broker.url())
        .await
        .expect("connect as the reader");
    let mut stream = jetstream::new(client).get_stream("OUTBOX").await.expect("the stream OUTBOX");
    assert_eq!(stream.info().await.expect("stream info").state.messages, sent.len() as u64);

    let stranger = operator.user_of_an_unknown_account("stranger");
    let other = broker.dir().join("stranger.creds");
    stranger.write(&other);
    let message = refused(
        &format!("nats://127.0.0.1:{port}?creds_file={}&{SUBJECTS}", other.display()),
        "authorization",
        &stranger.seed,
    )
    .await;
    assert!(!message.contains(&stranger.jwt), "the JWT leaked: {message}");
    // Operator mode takes no client without a user JWT.
    refused(&format!("nats://127.0.0.1:{port}?{SUBJECTS}"), "authorization", "").await;
}

#[tokio::test]
async fn an_account_without_jetstream_is_refused_at_start_naming_the_account_and_the_fix() {
    let operator = NatsOperator::generate();
    let broker =
        Broker::start_secured(Kind::Nats, Security { operator: Some(operator.clone()), ..Security::default() });
    let user = operator.user_without_jetstream("plain");
    let file = broker.dir().join("plain.creds");
    user.write(&file);
    let url = format!("nats://127.0.0.1:{}?creds_file={}&{SUBJECTS}", broker.port(), file.display());
    // With `--create-destinations` as without: nothing to create in an account that may not use JetStream.
    let message = refused(&url, "JetStream is not enabled for the account", &user.seed).await;
    assert!(message.contains("enable JetStream for the account"), "{message}");
    assert!(message.contains("credentials"), "{message}");
    assert!(!message.contains(&user.jwt), "the JWT leaked: {message}");
    let error = NatsPublisher::from_url(&url.parse().unwrap()).unwrap().connect().await.expect_err("refused");
    assert!(matches!(error, outbox_relay::Error::Refused { .. }), "{error}");
    assert_eq!(error.to_string(), message);
}

#[tokio::test]
async fn a_missing_stream_is_reported_at_start_and_created_with_create_destinations() {
    let broker = Broker::start(Kind::Nats);
    let url = format!("{}?subject=shop.{{event_type}}&stream=SHOP&stream_storage=file", broker.url());
    let publisher = NatsPublisher::from_url(&url.parse().unwrap()).unwrap();
    let error = publisher.connect().await.expect_err("no stream yet");
    let message = error.to_string();
    assert!(matches!(error, outbox_relay::Error::Refused { .. }), "{message}");
    assert!(message.contains("no JetStream stream captures the subjects `shop.>`"), "{message}");
    assert!(message.contains("--create-destinations") && !message.contains('\n'), "{message}");

    let creating = publisher.with_create_destinations(true);
    creating.connect().await.expect("the stream is created");
    assert_eq!(creating.publish(&[one_message()]).await, vec![Outcome::Published]);
    let client = async_nats::connect(broker.url()).await.unwrap();
    let mut stream = jetstream::new(client).get_stream("SHOP").await.expect("the stream SHOP exists");
    let info = stream.info().await.unwrap();
    assert_eq!(info.config.subjects, vec!["shop.>".to_owned()]);
    assert_eq!(info.config.storage, stream::StorageType::File);
    assert_eq!(info.state.messages, 1);
    // An existing stream is kept as it is.
    NatsPublisher::from_url(&url.parse().unwrap()).unwrap().connect().await.expect("the stream exists now");
}

#[tokio::test]
async fn a_sealed_stream_or_one_without_acknowledgements_is_refused_at_start() {
    let broker = Broker::start(Kind::Nats);
    let client = async_nats::connect(broker.url()).await.unwrap();
    let js = jetstream::new(client);
    let config = |name: &str, subject: &str| stream::Config {
        name: name.to_owned(),
        subjects: vec![subject.to_owned()],
        ..Default::default()
    };
    js.create_stream(config("SEALED", "sealed.>")).await.unwrap();
    js.update_stream(stream::Config { sealed: true, ..config("SEALED", "sealed.>") }).await.expect("seal the stream");
    js.create_stream(stream::Config { no_ack: true, ..config("SILENT", "silent.>") }).await.unwrap();
    js.create_stream(config("OPEN", "open.>")).await.unwrap();

    for (subject, expected) in [
        ("sealed.{event_type}", "the JetStream stream `SEALED` for `sealed.>` is sealed"),
        ("silent.orders", "the JetStream stream `SILENT` for `silent.orders` does not acknowledge messages (`no_ack`)"),
    ] {
        let url = format!("{}?subject={subject}", broker.url());
        refused(&url, expected, "").await;
    }
    let open =
        NatsPublisher::from_url(&format!("{}?subject=open.{{event_type}}", broker.url()).parse().unwrap()).unwrap();
    open.connect().await.expect("a stream that takes messages");
    assert_eq!(open.publish(&[one_message()]).await, vec![Outcome::Published]);
    let mut stream = js.get_stream("OPEN").await.unwrap();
    assert_eq!(stream.info().await.unwrap().state.messages, 1, "the event, and nothing from the check");
}

#[tokio::test]
async fn a_client_certificate_is_presented_when_the_server_requires_one() {
    let security = Security { tls: true, client_certificates: true, ..Security::default() };
    let broker = Broker::start_secured(Kind::Nats, security);
    let tls = broker.certificates().unwrap().clone();
    let port = broker.port();
    let (ca, cert, key) = (tls.ca.display(), tls.client_cert.display(), tls.client_key.display());
    publishes(&format!("nats://127.0.0.1:{port}?tls_ca={ca}&tls_cert={cert}&tls_key={key}&{SUBJECTS}")).await;
    refused(&format!("nats://127.0.0.1:{port}?tls_ca={ca}&{SUBJECTS}"), "TLS", "").await;
}

#[tokio::test]
async fn the_asyncapi_document_names_the_subject_an_event_arrives_on_with_its_headers() {
    let broker = Broker::start(Kind::Nats);
    let sink = format!("{}?subject=shop.{{aggregate_type}}.{{event_type}}.v{{version}}", broker.url());
    let described = broker_support::describe(&sink);
    assert_eq!(described.address, "shop.order.order.placed.v2");
    let client = async_nats::connect(broker.url()).await.expect("connect to NATS");
    let mut subscriber = client.subscribe(described.address.clone()).await.expect("subscribe");
    client.flush().await.expect("flush");
    let publisher = sink.parse::<outbox_relay::Sink>().unwrap().open_with(true).unwrap();
    publisher.connect().await.expect("the stream is created");
    let message = broker_support::described_message();
    assert_eq!(publisher.publish(std::slice::from_ref(&message)).await, vec![Outcome::Published]);
    let arrived = tokio::time::timeout(Duration::from_secs(10), subscriber.next())
        .await
        .expect("the event arrives on the documented subject")
        .expect("a message");
    broker_support::check_described(&described, &received_of(&arrived));
}

/// A call that waits for more acknowledgements than async-nats' default allows (5,000; `--batch-size` goes to
/// 10,000, and lanes' calls share one connection) is published at once (before, its sends waited for a free slot,
/// which only its own unawaited acknowledgements held, until the publish timeout failed the call).
#[tokio::test]
async fn a_call_waiting_for_more_than_five_thousand_acknowledgements_is_published() {
    let broker = Broker::start(Kind::Nats);
    create_stream(&broker).await;
    let publisher = publisher(&broker);
    let batch: Vec<Message> = (0..6000)
        .map(|n| {
            let aggregate = format!("order-{n}");
            Message::new(uuid::Uuid::now_v7(), "order.placed", "order", &aggregate, r#"{"n":0}"#)
        })
        .collect();
    let outcomes = tokio::time::timeout(Duration::from_secs(30), publisher.publish(&batch))
        .await
        .expect("the call finishes within 30 s");
    assert_eq!(outcomes.len(), 6000);
    assert!(
        outcomes.iter().all(|outcome| *outcome == Outcome::Published),
        "{:?}",
        outcomes.iter().find(|o| **o != Outcome::Published)
    );
    assert_eq!(consume_all(&broker).await.len(), 6000);
}
