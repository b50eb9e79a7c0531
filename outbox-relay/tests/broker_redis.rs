//! The Redis Streams publisher against a real `redis-server` on 127.0.0.1 (append-only file, fsync always),
//! through the relay: 1,000 events with their CloudEvents fields and per-aggregate order, a server killed
//! mid-run, the event id for consumer-side deduplication, and an oversized event sent to `failed`; TLS with a
//! private CA and an ACL user, right and wrong credentials.

mod broker_support;

use std::collections::BTreeMap;
use std::time::Duration;

use broker_support::{check, config, enqueue, enqueue_oversized, envelope_query, start, wait_for, Received, Spelling};
use outbox_relay::{Message, Outcome, Publisher, RedisPublisher};
use outbox_tests::brokers::{Broker, Kind, Security};
use outbox_tests::certificates::Certificates;
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
    consume_stream(broker, "outbox.order").await
}

/// Every entry of `stream`, in stream order (XRANGE - +).
async fn consume_stream(broker: &Broker, stream: &str) -> Vec<Received> {
    let client = redis::Client::open(broker.url()).expect("redis URL");
    let mut connection = client.get_multiplexed_async_connection().await.expect("connect to Redis");
    let reply: StreamRangeReply =
        redis::cmd("XRANGE").arg(stream).arg("-").arg("+").query_async(&mut connection).await.expect("XRANGE");
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
async fn a_server_down_for_longer_than_every_attempt_lasts_sends_nothing_to_failed_and_uses_up_no_attempt() {
    let broker = Broker::start(Kind::Redis);
    let db = TestDatabase::migrated().await;
    let sent = broker_support::ride_out_an_outage(&db, &broker, publisher(&broker)).await;
    check(&sent, &consume_all(&broker).await, SPELLING, false);
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

// ---- production setups: TLS with a private CA, an ACL user ----

fn one_message() -> Message {
    Message::new(uuid::Uuid::now_v7(), "order.placed", "order", "order-1", r#"{"order":"order-1","n":0}"#)
}

/// A publisher of `url` that connects and publishes one message.
async fn publishes(url: &str) {
    let publisher = RedisPublisher::from_url(&url.parse().unwrap()).unwrap_or_else(|e| panic!("{e}"));
    publisher.connect().await.unwrap_or_else(|e| panic!("connect with {url}: {e}"));
    assert_eq!(publisher.publish(&[one_message()]).await, vec![Outcome::Published]);
}

/// `connect` fails for good with one line naming `expected`, never showing `secret`, without retrying; returns
/// the message.
async fn refused(url: &str, expected: &str, secret: &str) -> String {
    let started = tokio::time::Instant::now();
    let publisher = RedisPublisher::from_url(&url.parse().unwrap()).unwrap_or_else(|e| panic!("{e}"));
    let error = publisher.connect().await.expect_err("refused");
    let message = error.to_string();
    assert!(matches!(error, outbox_relay::Error::Refused { .. }), "{message}");
    assert!(message.contains(expected), "expected `{expected}` in: {message}");
    assert!(!message.contains('\n'), "{message}");
    assert!(secret.is_empty() || !message.contains(secret), "the secret leaked: {message}");
    assert!(started.elapsed() < Duration::from_secs(10), "no retries: {:?}", started.elapsed());
    message
}

#[tokio::test]
async fn tls_with_the_private_ca_publishes_and_an_untrusted_certificate_is_refused_at_start() {
    let broker = Broker::start_secured(Kind::Redis, Security { tls: true, ..Security::default() });
    let tls = broker.certificates().unwrap().clone();
    let port = broker.port();
    publishes(&format!("rediss://127.0.0.1:{port}/?tls_ca={}&timeout_ms=2000", tls.ca.display())).await;
    publishes(&format!(
        "rediss://localhost:{port}/?tls_ca={}&tls_cert={}&tls_key={}&timeout_ms=2000",
        tls.ca.display(),
        tls.client_cert.display(),
        tls.client_key.display()
    ))
    .await;
    let other = Certificates::generate(&broker.dir().join("other"), "other");
    refused(&format!("rediss://127.0.0.1:{port}/?tls_ca={}&timeout_ms=2000", other.ca.display()), "certificate", "")
        .await;
    let insecure = format!("rediss://127.0.0.1:{port}/#insecure");
    let error = RedisPublisher::from_url(&insecure.parse().unwrap()).unwrap_err().to_string();
    assert!(error.contains("certificate verification"), "{error}");
}

#[tokio::test]
async fn an_acl_user_with_its_password_from_a_file_publishes_and_a_wrong_password_is_refused_at_start() {
    let password = "hunter2-redis-acl";
    let broker = Broker::start_secured(
        Kind::Redis,
        Security { user: Some(("relay".into(), password.into())), ..Security::default() },
    );
    let file = broker.dir().join("password");
    std::fs::write(&file, format!("{password}\n")).unwrap();
    let port = broker.port();
    publishes(&format!("redis://relay@127.0.0.1:{port}/?password_file={}&timeout_ms=2000", file.display())).await;
    std::env::set_var("OUTBOX_TEST_REDIS_WRONG_PASSWORD", "wrong");
    refused(
        &format!("redis://relay@127.0.0.1:{port}/?password_env=OUTBOX_TEST_REDIS_WRONG_PASSWORD&timeout_ms=2000"),
        "authentication failed",
        password,
    )
    .await;
    refused(&format!("redis://127.0.0.1:{port}/?timeout_ms=2000"), "NOAUTH", "").await;
}

#[tokio::test]
async fn a_client_certificate_is_presented_when_the_server_requires_one() {
    let security = Security { tls: true, client_certificates: true, ..Security::default() };
    let broker = Broker::start_secured(Kind::Redis, security);
    let tls = broker.certificates().unwrap().clone();
    let port = broker.port();
    let (ca, cert, key) = (tls.ca.display(), tls.client_cert.display(), tls.client_key.display());
    publishes(&format!("rediss://127.0.0.1:{port}/?tls_ca={ca}&tls_cert={cert}&tls_key={key}&timeout_ms=2000")).await;
    let publisher =
        RedisPublisher::from_url(&format!("rediss://127.0.0.1:{port}/?tls_ca={ca}&timeout_ms=2000").parse().unwrap())
            .unwrap();
    let started = tokio::time::Instant::now();
    let error = publisher.connect().await.expect_err("no client certificate");
    let message = error.to_string();
    assert!(matches!(error, outbox_relay::Error::Refused { .. }), "start is refused, not waited for: {message}");
    assert!(message.contains("TLS handshake failed") && message.contains("Certificate"), "{message}");
    assert!(!message.contains('\n'), "{message}");
    assert!(started.elapsed() < Duration::from_secs(10), "no retries: {:?}", started.elapsed());
}

/// Runs `args` on `broker` as its default user.
async fn admin(broker: &Broker, args: &[&str]) -> redis::Value {
    let client = redis::Client::open(broker.url()).expect("redis URL");
    let mut connection = client.get_multiplexed_async_connection().await.expect("connect to Redis");
    redis::cmd(args[0]).arg(&args[1..]).query_async(&mut connection).await.unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// The connections `broker` has accepted so far (each [`admin`] call opens one).
async fn connections_received(broker: &Broker) -> u64 {
    let redis::Value::BulkString(info) = admin(broker, &["INFO", "stats"]).await else { panic!("INFO is text") };
    let info = String::from_utf8(info).unwrap();
    let line = info.lines().find_map(|line| line.strip_prefix("total_connections_received:")).expect(&info);
    line.trim().parse().unwrap()
}

#[tokio::test]
async fn a_server_that_answers_readonly_after_a_failover_is_reconnected_to_at_the_next_publish() {
    let broker = Broker::start(Kind::Redis);
    let publisher = publisher(&broker);
    assert_eq!(publisher.publish(&[one_message()]).await, vec![Outcome::Published]);
    let before = connections_received(&broker).await;
    // Demoted: a replica (of a primary that is not there) answers every write READONLY.
    let port = outbox_tests::process::free_port().to_string();
    admin(&broker, &["REPLICAOF", "127.0.0.1", &port]).await;
    let outcome = publisher.publish(&[one_message()]).await.remove(0);
    assert!(matches!(&outcome, Outcome::Transient(e) if e.message().contains("read only")), "{outcome:?}");
    admin(&broker, &["REPLICAOF", "NO", "ONE"]).await;
    assert_eq!(publisher.publish(&[one_message()]).await, vec![Outcome::Published]);
    // Three admin connections (the two REPLICAOF and this INFO), and the publisher's new one: where a failover
    // moved the primary behind the same name, the new connection reaches it.
    assert_eq!(connections_received(&broker).await - before, 4, "the publisher reconnected after READONLY");
}

#[tokio::test]
async fn a_fixed_stream_whose_key_holds_another_type_is_refused_at_start_and_a_template_waits_for_its_publish() {
    let broker = Broker::start(Kind::Redis);
    admin(&broker, &["SET", "outbox.order", "not a stream"]).await;
    let fixed = format!("{}?stream=outbox.order&timeout_ms=2000", broker.url());
    refused(&fixed, "the key `outbox.order` holds a string, not a stream", "").await;
    // A template names its streams per event: checked by the first publish, which fails for good.
    let publisher = RedisPublisher::from_url(&format!("{}?timeout_ms=2000", broker.url()).parse().unwrap()).unwrap();
    publisher.connect().await.expect("a template's streams are not checked at start");
    let outcome = publisher.publish(&[one_message()]).await.remove(0);
    assert!(matches!(&outcome, Outcome::Permanent(e) if e.message().contains("WRONGTYPE")), "{outcome:?}");
}

#[tokio::test]
async fn a_user_that_may_not_append_to_the_stream_is_refused_at_start_and_one_that_may_only_append_starts() {
    let broker = Broker::start(Kind::Redis);
    let port = broker.port();
    admin(&broker, &["ACL", "SETUSER", "no-xadd", "on", ">pw-1", "~*", "+@all", "-xadd"]).await;
    admin(&broker, &["ACL", "SETUSER", "other-keys", "on", ">pw-2", "~audit.*", "+@all"]).await;
    admin(&broker, &["ACL", "SETUSER", "writer", "on", ">pw-3", "~outbox.*", "+@connection", "+xadd"]).await;
    for (user, expected) in [
        ("no-xadd:pw-1", "no permissions to run the 'xadd' command"),
        ("other-keys:pw-2", "no permissions to access one of the keys"),
    ] {
        let url = format!("redis://{user}@127.0.0.1:{port}/?stream=outbox.order&timeout_ms=2000");
        let message = refused(&url, "the user may not append to the stream `outbox.order`", "pw-").await;
        assert!(message.contains(expected), "{message}");
    }
    // XADD on its keys and the connection commands are all a relay needs (not even TYPE).
    let writer = format!("redis://writer:pw-3@127.0.0.1:{port}/?stream=outbox.order&timeout_ms=2000");
    publishes(&writer).await;
    assert_eq!(consume_all(&broker).await.len(), 1, "the event, and nothing from the check");
}

#[tokio::test]
async fn a_read_only_replica_is_refused_at_start() {
    let primary = Broker::start(Kind::Redis);
    let replica = Broker::start(Kind::Redis);
    admin(&replica, &["REPLICAOF", "127.0.0.1", &primary.port().to_string()]).await;
    let url = format!("{}?stream=outbox.order&timeout_ms=2000", replica.url());
    refused(&url, "the server is a read-only replica", "").await;
    admin(&replica, &["REPLICAOF", "NO", "ONE"]).await;
    publishes(&url).await;
}

#[tokio::test]
async fn the_asyncapi_document_names_the_stream_an_event_arrives_on_with_its_fields() {
    let broker = Broker::start(Kind::Redis);
    let sink = format!("{}?stream=shop.{{aggregate_type}}.v{{version}}", broker.url());
    let described = broker_support::describe(&sink);
    assert_eq!(described.address, "shop.order.v2");
    let publisher = sink.parse::<outbox_relay::Sink>().unwrap().open().unwrap();
    publisher.connect().await.expect("connect");
    let message = broker_support::described_message();
    assert_eq!(publisher.publish(std::slice::from_ref(&message)).await, vec![Outcome::Published]);
    let received = consume_stream(&broker, &described.address).await;
    assert_eq!(received.len(), 1, "the event is in the documented stream");
    broker_support::check_described(&described, &received[0]);
}
