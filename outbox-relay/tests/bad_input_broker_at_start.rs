//! `outbox relay` against a RabbitMQ broker that is down, or refuses it, at start (the real binary, a private
//! `rabbitmq-server`, real PostgreSQL):
//!
//! - broker down: the relay does not exit and claims nothing; it logs a WARN line naming the broker with the
//!   password masked, repeated with a growing delay, and once the broker is back it publishes every event, none
//!   of which spent an attempt;
//! - a wrong password, or an exchange that does not exist: exit 2 at once, one line on stderr, the password
//!   masked, the table untouched; the same for Redis refusing a wrong or a missing password;
//! - a malformed or unknown sink URL holding a password: exit 2, one line, the password masked;
//! - a missing destination (a JetStream stream for the subjects, a RabbitMQ exchange, an SQS queue): exit 2
//!   naming it, nothing claimed; with `--create-destinations` the relay creates it and publishes;
//! - NATS credentials of an account without JetStream: exit 2 at once, one line naming the account problem and
//!   the fix, with or without `--create-destinations`, nothing claimed.
#![cfg(feature = "rabbitmq")]

mod bad_input_support;
mod common;

use std::time::Duration;

use bad_input_support::{retry_delays, start};
use common::{count, enqueue, event};
use lapin::options::{BasicGetOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties, ExchangeKind};
use outbox_tests::brokers::{Broker, Kind};
use outbox_tests::pg::TestDatabase;
use sqlx::PgPool;

const PASSWORD: &str = "hunter2-broker-password";

/// Declares the durable topic exchange `outbox` and the durable queue `events` bound to it for `#`.
async fn declare(broker: &Broker) {
    let connection = Connection::connect(&broker.url(), ConnectionProperties::default()).await.expect("connect");
    let channel = connection.create_channel().await.expect("channel");
    let durable = ExchangeDeclareOptions { durable: true, ..Default::default() };
    channel.exchange_declare("outbox".into(), ExchangeKind::Topic, durable, FieldTable::default()).await.unwrap();
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare("events".into(), durable, FieldTable::default()).await.unwrap();
    channel
        .queue_bind("events".into(), "outbox".into(), "#".into(), QueueBindOptions::default(), FieldTable::default())
        .await
        .unwrap();
    connection.close(200, "done".into()).await.ok();
}

/// How many messages the queue `events` holds (taking them).
async fn drain(broker: &Broker) -> usize {
    let connection = Connection::connect(&broker.url(), ConnectionProperties::default()).await.expect("connect");
    let channel = connection.create_channel().await.expect("channel");
    let mut n = 0;
    while channel.basic_get("events".into(), BasicGetOptions { no_ack: true }).await.expect("basic.get").is_some() {
        n += 1;
    }
    n
}

/// The broker's URL with the user `guest` and `password`.
fn sink(broker: &Broker, password: &str, exchange: &str) -> String {
    format!("amqp://guest:{password}@127.0.0.1:{}/%2f?exchange={exchange}&routing_key={{event_type}}", broker.port())
}

async fn untouched(pool: &PgPool, n: i64) {
    let fresh: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM outbox_events WHERE status = 'pending' AND attempts = 0 AND lease_epoch = 0",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(fresh, n, "an event was claimed or changed");
}

#[tokio::test]
async fn a_broker_down_at_start_is_waited_for_with_growing_delays_and_then_gets_every_event() {
    let broker = Broker::start(Kind::RabbitMq);
    declare(&broker).await;
    broker.kill();
    let db = TestDatabase::migrated().await;
    enqueue(&db.pool, &(0..10).map(|n| event(format!("agg-{}", n % 3), n)).collect::<Vec<_>>()).await;

    let sink = sink(&broker, "guest", "outbox");
    let mut relay = start(&db.url, &["relay", "--sink", &sink, "--poll-interval", "10ms"], &[]);
    let warnings = relay.wait_for_lines("cannot reach the sink", 4, Duration::from_secs(60)).await;
    for line in &warnings {
        assert!(line.contains("WARN"), "{line}");
        assert!(line.contains(&format!("amqp://guest:***@127.0.0.1:{}", broker.port())), "not named: {line}");
        assert!(!line.contains("guest:guest@"), "the password was printed: {line}");
    }
    let delays = retry_delays(&warnings);
    assert_eq!(delays.len(), warnings.len(), "{warnings:?}");
    assert!(delays.windows(2).all(|pair| pair[1] > pair[0]), "the delay does not grow: {delays:?}");
    untouched(&db.pool, 10).await; // nothing is claimed while the broker is away

    broker.restart();
    // A queue declared just before a SIGKILL can be lost, or come back only a while after the broker answers: its
    // topology is declared again (as a definitions file would), so the events are routed once it is.
    declare(&broker).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while count(&db.pool, "published").await < 10 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not every event was published 60 s after the broker came back ({:?}); the relay wrote:\n{}",
            common::counts(&db.pool).await,
            relay.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // No attempt was spent while the broker was down (checked above); one spent after it came back, before its
    // queue was there again, says so.
    let errors: Vec<String> = sqlx::query_scalar("SELECT last_error FROM outbox_events WHERE attempts > 0")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert!(errors.iter().all(|error| error.contains("unroutable")), "{errors:?}");
    assert_eq!(drain(&broker).await, 10);
    let status = relay.terminate().await;
    assert_eq!(status.code(), Some(0), "{}", relay.stderr());
    assert!(!relay.stderr().contains("guest:guest@"), "{}", relay.stderr());
}

#[tokio::test]
async fn a_refused_password_or_a_missing_exchange_exits_2_at_once_with_one_line() {
    let broker = Broker::start(Kind::RabbitMq);
    declare(&broker).await;
    let db = TestDatabase::migrated().await;
    enqueue(&db.pool, &[event("a", 0), event("b", 0)]).await;
    for (sink, problem) in [
        (sink(&broker, PASSWORD, "outbox"), "ACCESS_REFUSED"),
        (sink(&broker, "guest", "no_such_exchange"), "exchange `no_such_exchange`"),
    ] {
        let started = tokio::time::Instant::now();
        let mut relay = start(&db.url, &["relay", "--sink", &sink], &[]);
        let exit = relay.wait_for_exit(Duration::from_secs(30)).await;
        let stderr = relay.stderr();
        let last = stderr.lines().last().unwrap_or_default();
        assert_eq!(exit.code(), Some(2), "{sink}: {stderr}");
        assert!(started.elapsed() < Duration::from_secs(15), "not at once");
        assert_eq!(stderr.lines().filter(|line| line.starts_with("error:")).count(), 1, "{stderr}");
        assert!(last.starts_with("error: RabbitMQ at amqp://guest:***@127.0.0.1"), "{stderr}");
        assert!(last.contains("refused the relay") && last.contains(problem), "`{problem}` not in: {last}");
        assert!(!stderr.contains(PASSWORD), "the password was printed: {stderr}");
        assert!(relay.stdout().is_empty());
    }
    untouched(&db.pool, 2).await;
}

#[tokio::test]
async fn malformed_or_unknown_sink_urls_with_a_password_exit_2_with_one_line_and_the_password_masked() {
    let db = TestDatabase::migrated().await;
    enqueue(&db.pool, &[event("a", 0)]).await;
    for (sink, problem) in [
        (format!("amqp://relay:{PASSWORD}@[::1/%2f"), "malformed URL"),
        (format!("amqp://relay:{PASSWORD}@127.0.0.1:5672/%2f?exchange=a b"), "exchange name"),
        (format!("nats://relay:{PASSWORD}@127.0.0.1:4222?subjet=x"), "unknown option `subjet`"),
        (format!("redis://:{PASSWORD}@127.0.0.1:6379?stream=a b"), "stream"),
        (format!("gopher://relay:{PASSWORD}@127.0.0.1:70"), "unknown sink scheme `gopher`"),
        (format!("https://relay:{PASSWORD}@exa mple.com/hook"), "malformed URL"),
    ] {
        let mut relay = start(&db.url, &["relay", "--sink", &sink], &[]);
        let exit = relay.wait_for_exit(Duration::from_secs(30)).await;
        let stderr = relay.stderr();
        assert_eq!(exit.code(), Some(2), "{sink}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{sink}: not one line: {stderr}");
        assert!(stderr.starts_with("error: ") && stderr.contains(problem), "`{problem}` not in: {stderr}");
        assert!(!stderr.contains(PASSWORD), "the password was printed: {stderr}");
    }
    untouched(&db.pool, 1).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn redis_refusing_the_password_or_its_absence_exits_2_at_once_with_one_line() {
    let broker = Broker::start(Kind::Redis);
    let client = redis::Client::open(broker.url()).expect("a Redis URL");
    let mut connection = client.get_multiplexed_async_connection().await.expect("connect to Redis");
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("the-right-password")
        .query_async::<()>(&mut connection)
        .await
        .expect("require a password");
    let db = TestDatabase::migrated().await;
    enqueue(&db.pool, &[event("a", 0)]).await;
    let port = broker.port();
    for (sink, problem) in [
        (format!("redis://:{PASSWORD}@127.0.0.1:{port}/0?stream=outbox"), "authentication failed"),
        (format!("redis://127.0.0.1:{port}/0?stream=outbox"), "NOAUTH"),
    ] {
        let mut relay = start(&db.url, &["relay", "--sink", &sink], &[]);
        let exit = relay.wait_for_exit(Duration::from_secs(30)).await;
        let stderr = relay.stderr();
        let errors: Vec<&str> = stderr.lines().filter(|line| line.starts_with("error:")).collect();
        assert_eq!(exit.code(), Some(2), "{sink}: {stderr}");
        assert_eq!(errors.len(), 1, "{stderr}");
        assert!(errors[0].starts_with("error: Redis at redis://"), "{stderr}");
        assert!(errors[0].contains("refused the relay") && errors[0].contains(problem), "`{problem}`: {stderr}");
        assert!(!stderr.contains(PASSWORD), "the password was printed: {stderr}");
    }
    let right = format!("redis://:the-right-password@127.0.0.1:{port}/0?stream=outbox");
    let mut relay = start(&db.url, &["relay", "--sink", &right, "--poll-interval", "10ms"], &[]);
    common::wait_until(Duration::from_secs(30), "the event is published", || async {
        count(&db.pool, "published").await == 1
    })
    .await;
    assert_eq!(relay.terminate().await.code(), Some(0), "{}", relay.stderr());
}

#[cfg(feature = "nats")]
#[tokio::test]
async fn a_missing_destination_exits_2_naming_it_and_create_destinations_creates_it_and_publishes() {
    let broker = Broker::start(Kind::Nats);
    let db = TestDatabase::migrated().await;
    enqueue(&db.pool, &[event("a", 0), event("b", 0)]).await;
    let sink = format!("nats://127.0.0.1:{}?subject=shop.{{event_type}}&stream=SHOP", broker.port());
    let mut relay = start(&db.url, &["relay", "--sink", &sink], &[]);
    assert_eq!(relay.wait_for_exit(Duration::from_secs(30)).await.code(), Some(2), "{}", relay.stderr());
    let stderr = relay.stderr();
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.contains("no JetStream stream captures the subjects `shop.>`"), "{stderr}");
    assert!(last.contains("--create-destinations"), "{stderr}");
    untouched(&db.pool, 2).await;

    let mut relay =
        start(&db.url, &["relay", "--sink", &sink, "--create-destinations", "--poll-interval", "10ms"], &[]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while count(&db.pool, "published").await < 2 {
        assert!(tokio::time::Instant::now() < deadline, "not published: {}", relay.stderr());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(relay.terminate().await.code(), Some(0), "{}", relay.stderr());
    let client = async_nats::connect(format!("nats://127.0.0.1:{}", broker.port())).await.unwrap();
    let mut stream = async_nats::jetstream::new(client).get_stream("SHOP").await.expect("the stream SHOP");
    assert_eq!(stream.info().await.unwrap().state.messages, 2);
}

/// Runs `outbox relay --sink SINK` (with `env`) and checks that it exits 2 at once with one error line holding
/// `expected` and `--create-destinations`, leaving the `n` pending events untouched.
async fn missing_destination_exits_2(db: &TestDatabase, sink: &str, env: &[(&str, &str)], expected: &str, n: i64) {
    let mut relay = start(&db.url, &["relay", "--sink", sink], env);
    assert_eq!(relay.wait_for_exit(Duration::from_secs(30)).await.code(), Some(2), "{}", relay.stderr());
    let stderr = relay.stderr();
    assert_eq!(stderr.lines().filter(|line| line.starts_with("error:")).count(), 1, "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.contains(expected) && last.contains("--create-destinations"), "{stderr}");
    untouched(&db.pool, n).await;
}

#[tokio::test]
async fn a_missing_rabbitmq_exchange_exits_2_naming_it_and_create_destinations_declares_it_and_publishes() {
    let broker = Broker::start(Kind::RabbitMq);
    let db = TestDatabase::migrated().await;
    enqueue(&db.pool, &[event("a", 0), event("b", 0)]).await;
    let sink = format!("{}?exchange=shop&exchange_type=fanout", broker.url());
    missing_destination_exits_2(&db, &sink, &[], "cannot use the exchange `shop`", 2).await;

    // A fanout exchange routes to the queues bound to it: the relay of an empty outbox declares the exchange,
    // the test binds a queue, then events arrive.
    let db = TestDatabase::migrated().await;
    let mut relay =
        start(&db.url, &["relay", "--sink", &sink, "--create-destinations", "--poll-interval", "10ms"], &[]);
    let connection = Connection::connect(&broker.url(), ConnectionProperties::default()).await.unwrap();
    common::wait_until(Duration::from_secs(30), "the relay declared the exchange `shop`", || async {
        let channel = connection.create_channel().await.unwrap();
        let passive = ExchangeDeclareOptions { passive: true, ..Default::default() };
        channel.exchange_declare("shop".into(), ExchangeKind::Fanout, passive, FieldTable::default()).await.is_ok()
    })
    .await;
    let channel = connection.create_channel().await.unwrap();
    channel.queue_declare("shop-events".into(), QueueDeclareOptions::default(), FieldTable::default()).await.unwrap();
    channel
        .queue_bind("shop-events".into(), "shop".into(), "".into(), QueueBindOptions::default(), FieldTable::default())
        .await
        .unwrap();
    enqueue(&db.pool, &[event("a", 0), event("b", 0)]).await;
    common::wait_until(Duration::from_secs(30), "both events are published", || async {
        count(&db.pool, "published").await == 2
    })
    .await;
    assert_eq!(relay.terminate().await.code(), Some(0), "{}", relay.stderr());
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    let queue = channel.queue_declare("shop-events".into(), passive, FieldTable::default()).await.unwrap();
    assert_eq!(queue.message_count(), 2, "both events reached the queue bound to the declared exchange");
}

#[cfg(feature = "sqs")]
#[tokio::test]
async fn a_missing_sqs_queue_exits_2_naming_it_and_create_destinations_creates_it_and_publishes() {
    use aws_sdk_sqs::types::QueueAttributeName;

    let broker = Broker::start(Kind::Sqs);
    let db = TestDatabase::migrated().await;
    enqueue(&db.pool, &[event("a", 0), event("b", 0)]).await;
    let queue_url = format!("{}/123456789012/shop-events", broker.url());
    let sink = format!("sqs://?queue_url={queue_url}&endpoint={}&region=us-east-1", broker.url());
    let env = [("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test")];
    missing_destination_exits_2(&db, &sink, &env, "the queue `shop-events` does not exist", 2).await;

    let mut relay =
        start(&db.url, &["relay", "--sink", &sink, "--create-destinations", "--poll-interval", "10ms"], &env);
    common::wait_until(Duration::from_secs(60), "both events are published", || async {
        count(&db.pool, "published").await == 2
    })
    .await;
    assert_eq!(relay.terminate().await.code(), Some(0), "{}", relay.stderr());
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .region(aws_sdk_sqs::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new("test", "test", None, None, "tests"))
        .endpoint_url(broker.url())
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .build();
    let attributes = aws_sdk_sqs::Client::from_conf(config)
        .get_queue_attributes()
        .queue_url(&queue_url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
        .expect("the relay created the queue");
    let stored = attributes.attributes().and_then(|all| all.get(&QueueAttributeName::ApproximateNumberOfMessages));
    assert_eq!(stored.map(String::as_str), Some("2"), "both events are in the created queue");
}

#[cfg(feature = "nats")]
#[tokio::test]
async fn nats_credentials_of_an_account_without_jetstream_exit_2_at_once_naming_the_account_problem() {
    use outbox_tests::brokers::Security;
    let operator = outbox_tests::nats_operator::NatsOperator::generate();
    let broker =
        Broker::start_secured(Kind::Nats, Security { operator: Some(operator.clone()), ..Security::default() });
    let user = operator.user_without_jetstream("plain");
    let file = broker.dir().join("plain.creds");
    user.write(&file);
    let db = TestDatabase::migrated().await;
    enqueue(&db.pool, &[event("a", 0)]).await;
    let sink = format!("nats://127.0.0.1:{}?creds_file={}&subject=shop.{{event_type}}", broker.port(), file.display());
    for extra in [None, Some("--create-destinations")] {
        let args: Vec<&str> = ["relay", "--sink", &sink].into_iter().chain(extra).collect();
        let started = tokio::time::Instant::now();
        let mut relay = start(&db.url, &args, &[]);
        let exit = relay.wait_for_exit(Duration::from_secs(30)).await;
        let stderr = relay.stderr();
        let last = stderr.lines().last().unwrap_or_default();
        assert_eq!(exit.code(), Some(2), "{args:?}: {stderr}");
        assert!(started.elapsed() < Duration::from_secs(15), "not at once: {:?}", started.elapsed());
        assert_eq!(stderr.lines().filter(|line| line.starts_with("error:")).count(), 1, "{stderr}");
        assert!(last.starts_with("error: NATS at nats://127.0.0.1:"), "{stderr}");
        assert!(last.contains("refused the relay: JetStream is not enabled for the account"), "{stderr}");
        assert!(last.contains("enable JetStream for the account") && last.contains("credentials"), "{stderr}");
        assert!(!stderr.contains(&user.seed) && !stderr.contains(&user.jwt), "the credentials leaked: {stderr}");
    }
    untouched(&db.pool, 1).await;
}
