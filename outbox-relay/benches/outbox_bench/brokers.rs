//! Broker end to end, as a user runs it: pending events drained by one release `outbox relay` process with the
//! CLI's default settings into a real broker started on 127.0.0.1 by the test harness, the clock stopped when
//! nothing is pending, and the broker's own count checked.

use std::process::Stdio;
use std::time::{Duration, Instant};

#[cfg(any(feature = "nats", feature = "kafka", feature = "rabbitmq", feature = "redis", feature = "sqs"))]
use outbox_tests::brokers::{Broker, Kind};
use tokio::process::Command;

use crate::{filled, Figure, Report, Sizes, Yardstick};

pub(crate) async fn end_to_end(admin: &str, sizes: Sizes, yard: Yardstick, report: &mut Report) {
    let Some(binary) = crate::cli_drain::THIS_DESIGN else {
        report.note("broker: skipped (build the bench with the `cli` feature for the `outbox` binary)".into());
        return;
    };
    let drain = Drain { admin, binary };
    let events = sizes.broker_events;
    #[cfg(feature = "nats")]
    {
        let broker = Broker::start(Kind::Nats);
        let client = async_nats::connect(broker.url()).await.expect("connect to NATS");
        let js = async_nats::jetstream::new(client);
        js.create_stream(async_nats::jetstream::stream::Config {
            name: "OUTBOX".to_owned(),
            subjects: vec!["outbox.>".to_owned()],
            storage: async_nats::jetstream::stream::StorageType::File,
            ..Default::default()
        })
        .await
        .expect("create the stream");
        let rate = drain.run(events, &broker.url(), &[]).await;
        let stored =
            js.get_stream("OUTBOX").await.expect("the stream").info().await.expect("stream info").state.messages;
        add(report, "NATS JetStream (file storage)", events, rate, yard, stored, ">= 20000 events/s");
    }
    #[cfg(feature = "kafka")]
    {
        use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
        use rdkafka::consumer::{BaseConsumer, Consumer};
        use rdkafka::{ClientConfig, Offset, TopicPartitionList};

        let broker = Broker::start(Kind::Kafka);
        let admin_client: AdminClient<rdkafka::client::DefaultClientContext> =
            ClientConfig::new().set("bootstrap.servers", broker.url()).create().expect("admin client");
        let topic = NewTopic::new("outbox.account", 3, TopicReplication::Fixed(1));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let created = admin_client.create_topics([&topic], &AdminOptions::new()).await;
            if matches!(created, Ok(results) if results.iter().all(Result::is_ok)) {
                break;
            }
            assert!(Instant::now() < deadline, "cannot create the Kafka topic");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let rate = drain.run(events, &format!("kafka://{}", broker.url()), &[]).await;
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", broker.url())
            .set("group.id", "outbox-bench")
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
        let mut assignment = TopicPartitionList::new();
        for partition in 0..3 {
            assignment.add_partition_offset("outbox.account", partition, Offset::Beginning).expect("assignment");
        }
        consumer.assign(&assignment).expect("assign");
        let mut stored = 0_u64;
        let deadline = Instant::now() + Duration::from_secs(120);
        while stored < events.unsigned_abs() && Instant::now() < deadline {
            if let Some(Ok(_)) = consumer.poll(Duration::from_millis(200)) {
                stored += 1;
            }
        }
        add(report, "Kafka protocol (tansu, memory storage)", events, rate, yard, stored, ">= 20000 events/s");
    }
    #[cfg(feature = "rabbitmq")]
    {
        use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
        use lapin::types::FieldTable;

        let broker = Broker::start(Kind::RabbitMq);
        let connection = lapin::Connection::connect(&broker.url(), lapin::ConnectionProperties::default())
            .await
            .expect("connect to RabbitMQ");
        let channel = connection.create_channel().await.expect("channel");
        let durable = ExchangeDeclareOptions { durable: true, ..Default::default() };
        channel
            .exchange_declare("outbox".into(), lapin::ExchangeKind::Topic, durable, FieldTable::default())
            .await
            .expect("declare the exchange");
        let queue = QueueDeclareOptions { durable: true, ..Default::default() };
        channel.queue_declare("outbox-bench".into(), queue, FieldTable::default()).await.expect("declare the queue");
        channel
            .queue_bind(
                "outbox-bench".into(),
                "outbox".into(),
                "#".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("bind the queue");
        let rate = drain.run(events, &broker.url(), &[]).await;
        let passive = QueueDeclareOptions { passive: true, ..Default::default() };
        let stored = channel
            .queue_declare("outbox-bench".into(), passive, FieldTable::default())
            .await
            .expect("the queue")
            .message_count();
        add(report, "RabbitMQ (durable queue, publisher confirms)", events, rate, yard, stored.into(), "(reported)");
    }
    #[cfg(feature = "redis")]
    {
        let broker = Broker::start(Kind::Redis);
        let rate = drain.run(events, &broker.url(), &[]).await;
        let client = redis::Client::open(broker.url()).expect("redis URL");
        let mut connection = client.get_multiplexed_async_connection().await.expect("connect to Redis");
        let stored: u64 = redis::cmd("XLEN").arg("outbox.account").query_async(&mut connection).await.expect("XLEN");
        add(report, "Redis Streams", events, rate, yard, stored, "(reported)");
    }
    #[cfg(feature = "sqs")]
    {
        use aws_sdk_sqs::types::QueueAttributeName;

        // moto is a test double of the service, far slower than SQS: a tenth of the events.
        let events = (events / 10).max(100);
        let broker = Broker::start(Kind::Sqs);
        let config = aws_sdk_sqs::Config::builder()
            .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
            .region(aws_sdk_sqs::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_sqs::config::Credentials::new("test", "test", None, None, "bench"))
            .endpoint_url(broker.url())
            .http_client(aws_smithy_http_client::Builder::new().build_http())
            .build();
        let client = aws_sdk_sqs::Client::from_conf(config);
        let queue_url = client
            .create_queue()
            .queue_name("outbox-bench")
            .send()
            .await
            .expect("create the queue")
            .queue_url()
            .expect("a queue URL")
            .to_owned();
        let sink = format!("sqs://?queue_url={queue_url}&endpoint={}&region=us-east-1", broker.url());
        let rate = drain.run(events, &sink, &[("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test")]).await;
        let attributes = client
            .get_queue_attributes()
            .queue_url(&queue_url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .send()
            .await
            .expect("queue attributes");
        let stored = attributes
            .attributes()
            .and_then(|all| all.get(&QueueAttributeName::ApproximateNumberOfMessages))
            .and_then(|count| count.parse().ok())
            .unwrap_or(0);
        add(report, "SQS (moto, standard queue)", events, rate, yard, stored, "(reported)");
    }
    #[cfg(not(any(feature = "nats", feature = "kafka", feature = "rabbitmq", feature = "redis", feature = "sqs")))]
    {
        let _ = (drain, events, yard);
        report.note("broker: not run; build the bench with the broker features (`--all-features`)".to_owned());
    }
}

/// What every drain shares: the admin URL of the bench's server and the `outbox` binary.
#[cfg_attr(
    not(any(feature = "nats", feature = "kafka", feature = "rabbitmq", feature = "redis", feature = "sqs")),
    allow(dead_code)
)]
#[derive(Clone, Copy)]
struct Drain<'a> {
    admin: &'a str,
    binary: &'a str,
}

#[cfg_attr(
    not(any(feature = "nats", feature = "kafka", feature = "rabbitmq", feature = "redis", feature = "sqs")),
    allow(dead_code)
)]
impl Drain<'_> {
    /// Drains `events` pending events (100 per aggregate) with `outbox relay --sink SINK` and no other flag;
    /// returns events/s from the relay's start until nothing is pending.
    async fn run(&self, events: i64, sink: &str, env: &[(&str, &str)]) -> f64 {
        let db = filled(self.admin, events, (events / 100).max(10), 0).await;
        let started = Instant::now();
        let mut relay = Command::new(self.binary)
            .args(["relay", "--database-url", &db.url, "--sink", sink])
            .envs(env.iter().copied())
            .env("OUTBOX_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start outbox relay");
        let deadline = Instant::now() + Duration::from_secs(1_800);
        loop {
            let pending: bool = sqlx::query_scalar(crate::PENDING_LEFT).fetch_one(&db.pool).await.expect("poll");
            if !pending {
                break;
            }
            assert!(relay.try_wait().expect("relay status").is_none(), "outbox relay --sink {sink} exited early");
            assert!(Instant::now() < deadline, "the broker drain did not finish within 30 minutes");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let rate = events as f64 / started.elapsed().as_secs_f64();
        let _ = relay.start_kill();
        let _ = relay.wait().await;
        let published: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE status = 'published'")
            .fetch_one(&db.pool)
            .await
            .expect("count");
        assert_eq!(published, events, "every event is published, none failed");
        db.pool.close().await;
        rate
    }
}

#[cfg_attr(
    not(any(feature = "nats", feature = "kafka", feature = "rabbitmq", feature = "redis", feature = "sqs")),
    allow(dead_code)
)]
fn add(report: &mut Report, broker: &str, events: i64, rate: f64, yard: Yardstick, stored: u64, target: &'static str) {
    assert!(stored >= events.unsigned_abs(), "{broker} holds {stored} of {events} events");
    report.add(Figure {
        scenario: "broker",
        case: format!("{events} pending -> {broker}, 1 `outbox relay`, CLI defaults"),
        value: rate,
        unit: "events/s",
        ratio: Some(rate / yard.rows_per_sec_100),
        ratio_of: "x plain 100-row INSERT rows/s",
        target,
    });
}
