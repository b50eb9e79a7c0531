//! Broker end to end: pending events drained by one relay (default settings but the batch size) into a real
//! broker started on 127.0.0.1 by the test harness, counted in the database and checked on the broker.

use std::str::FromStr;
use std::time::{Duration, Instant};

use outbox_relay::{CancellationToken, Relay, RelayConfig, Sink};
use outbox_tests::brokers::{Broker, Kind};
use outbox_tests::pg::TestDatabase;

use crate::{filled, Figure, Report, Sizes, Yardstick};

pub(crate) async fn end_to_end(admin: &str, sizes: Sizes, yard: Yardstick, report: &mut Report) {
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
        let url = format!("{}?subject=outbox.{{event_type}}", broker.url());
        let rate = drain_into(admin, sizes, &url).await;
        let stored =
            js.get_stream("OUTBOX").await.expect("the stream").info().await.expect("stream info").state.messages;
        add(report, "NATS JetStream (file storage)", sizes, rate, yard, stored);
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
        let url = format!("kafka://{}?topic=outbox.{{aggregate_type}}", broker.url());
        let rate = drain_into(admin, sizes, &url).await;
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
        while stored < sizes.broker_events.unsigned_abs() && Instant::now() < deadline {
            if let Some(Ok(_)) = consumer.poll(Duration::from_millis(200)) {
                stored += 1;
            }
        }
        add(report, "Kafka protocol (tansu, memory storage)", sizes, rate, yard, stored);
    }
    #[cfg(not(any(feature = "nats", feature = "kafka")))]
    {
        let _ = (admin, sizes, yard);
        report.note("broker: not run; build the bench with `--features nats,kafka`".to_owned());
    }
}

/// Drains `sizes.broker_events` pending events into the sink at `url`; returns events/s.
async fn drain_into(admin: &str, sizes: Sizes, url: &str) -> f64 {
    let events = sizes.broker_events;
    let db: TestDatabase = filled(admin, events, (events / 100).max(10), 0).await;
    let publisher = Sink::from_str(url).expect("sink URL").open().expect("open the sink");
    let config = RelayConfig::builder().batch_size(1_000).build().expect("config");
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let relay = tokio::spawn(
        Relay::new(outbox_core::store::PgStore::new(db.pool.clone()), publisher, config).run(shutdown.clone()),
    );
    let deadline = Instant::now() + Duration::from_secs(1_800);
    loop {
        let published: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE status = 'published'")
            .fetch_one(&db.pool)
            .await
            .expect("count");
        if published >= events {
            break;
        }
        assert!(Instant::now() < deadline, "the broker drain did not finish within 30 minutes");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rate = events as f64 / started.elapsed().as_secs_f64();
    shutdown.cancel();
    relay.await.expect("relay task").expect("relay");
    db.pool.close().await;
    rate
}

fn add(report: &mut Report, broker: &str, sizes: Sizes, rate: f64, yard: Yardstick, stored: u64) {
    assert!(stored >= sizes.broker_events.unsigned_abs(), "{broker} holds {stored} of {} events", sizes.broker_events);
    report.add(Figure {
        scenario: "broker",
        case: format!("{} pending -> {broker}, 1 relay, defaults, batch 1000", sizes.broker_events),
        value: rate,
        unit: "events/s",
        ratio: Some(rate / yard.rows_per_sec_100),
        ratio_of: "x plain 100-row INSERT rows/s",
        target: "(reported)",
    });
}
