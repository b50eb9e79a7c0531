//! The payment example over a real NATS JetStream server (started on 127.0.0.1 by the harness), end to end on
//! PostgreSQL: payments confirmed through the HTTP API are published by the relay into the stream, the receipts
//! consumer reads them with its durable consumer and records each receipt once with `Inbox::consume`, and a
//! message redelivered with the same event id is acknowledged without a second receipt.

use std::time::Duration;

use async_nats::jetstream;
use outbox_examples::{Database, Service};
use outbox_relay::CancellationToken;
use outbox_tests::brokers::{Broker, Kind};

async fn wait_for_receipts(db: &Database, expected: usize) -> Vec<(i64, String)> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let receipts = db.receipts().await.unwrap();
        if receipts.len() == expected {
            return receipts;
        }
        assert!(tokio::time::Instant::now() < deadline, "{} receipts, expected {expected} within 30 s", receipts.len());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The durable consumer's count of messages delivered but not acknowledged yet, and not delivered yet.
async fn unacknowledged(js: &jetstream::Context) -> (usize, u64) {
    let mut consumer: jetstream::consumer::PullConsumer =
        js.get_stream("OUTBOX").await.unwrap().get_consumer("receipts").await.unwrap();
    let info = consumer.info().await.unwrap();
    (info.num_ack_pending, info.num_pending)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payment_service_over_nats_records_one_receipt_per_event_even_when_redelivered() {
    let broker = Broker::start(Kind::Nats);
    let pg = outbox_tests::pg::TestDatabase::create().await;
    let db = Database::Postgres(pg.pool.clone());
    db.migrate().await.unwrap();
    for id in 1..=10 {
        db.add_payment(id, 100 + id, 1_000 * id).await.unwrap();
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let shutdown = CancellationToken::new();
    let service =
        Service::new(db.clone()).poll_interval(Duration::from_millis(20)).over_nats(broker.url().parse().unwrap());
    let task = tokio::spawn({
        let stop = shutdown.clone();
        async move { service.run(listener, stop).await.unwrap() }
    });

    let http = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while http.get(format!("{base}/payments/1")).send().await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "the service did not start listening");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for id in 1..=10 {
        let response = http.post(format!("{base}/payments/{id}/confirm")).send().await.unwrap();
        assert_eq!(response.status(), 200, "payment {id}");
    }
    let receipts = wait_for_receipts(&db, 10).await;
    assert_eq!(receipts.iter().map(|(p, _)| *p).collect::<Vec<_>>(), (1..=10).collect::<Vec<_>>());
    // The relay marks an event published after the broker took it, so a receipt may come first.
    let published = || async {
        sqlx::query_scalar::<_, String>(
            "SELECT id::text FROM outbox_events WHERE status = 'published' ORDER BY aggregate_id::int",
        )
        .fetch_all(&pg.pool)
        .await
        .unwrap()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while published().await.len() < 10 {
        assert!(tokio::time::Instant::now() < deadline, "the relay did not mark the ten events published");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let published = published().await;
    assert_eq!(
        receipts.iter().map(|(_, e)| e.clone()).collect::<Vec<_>>(),
        published,
        "each receipt carries the event id the relay published"
    );

    // The broker redelivers payment 5's event under another message id (a second copy in the stream, as a
    // relay that crashed before settling would publish it): the inbox skips it, and the consumer acknowledges it.
    let js = jetstream::new(async_nats::connect(broker.url()).await.unwrap());
    let mut stream = js.get_stream("OUTBOX").await.unwrap();
    let first = stream.info().await.unwrap().state.first_sequence;
    let mut copy = None;
    for seq in first..first + 10 {
        let message = stream.get_raw_message(seq).await.unwrap();
        let headers = message.headers.clone();
        if headers.get("ce-id").map(|id| id.as_str()) == Some(receipts[4].1.as_str()) {
            copy = Some((message.subject.clone(), headers, message.payload.clone()));
        }
    }
    let (subject, mut headers, payload) = copy.expect("payment 5's message is in the stream");
    headers.insert("Nats-Msg-Id", uuid::Uuid::now_v7().to_string().as_str());
    js.publish_with_headers(subject.to_string(), headers, payload).await.unwrap().await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while unacknowledged(&js).await != (0, 0) {
        assert!(tokio::time::Instant::now() < deadline, "the consumer did not acknowledge the redelivery");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(stream.info().await.unwrap().state.messages, 11, "the copy reached the stream");
    assert_eq!(db.receipts().await.unwrap(), receipts, "one receipt per event, whatever was redelivered");

    shutdown.cancel();
    task.await.unwrap();
}
