//! The NATS JetStream side: a stream capturing the relay's subjects, and reading back everything it stored, in
//! stream order.

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use futures_util::StreamExt;
use outbox_tests::brokers::Broker;

use crate::deliveries::Delivered;
use crate::events::OrderPlaced;

const STREAM: &str = "FAULTS";

/// Creates the stream, with file storage (it survives a broker kill) and JetStream's smallest duplicate window
/// (100 ms): a republished event is stored again, so the test sees every duplicate the relay sends, as a
/// consumer of a broker without deduplication would. (Production streams keep the 2-minute default, which
/// drops republished events by `Nats-Msg-Id`.)
pub(crate) async fn create(broker: &Broker) {
    let client = async_nats::connect(broker.url()).await.expect("connect to NATS");
    jetstream::new(client)
        .create_stream(stream::Config {
            name: STREAM.to_owned(),
            subjects: vec!["outbox.>".to_owned()],
            storage: stream::StorageType::File,
            duplicate_window: Duration::from_millis(100),
            ..Default::default()
        })
        .await
        .expect("create the stream");
}

/// The `--sink` URL of the broker.
pub(crate) fn sink(broker: &Broker) -> String {
    format!("{}?subject=outbox.{{event_type}}&ack_timeout_ms=2000", broker.url())
}

/// Every message of the stream, in stream order (the order in which the broker accepted them).
pub(crate) async fn read_all(broker: &Broker) -> Vec<Delivered> {
    let client = async_nats::connect(broker.url()).await.expect("connect to NATS");
    let js = jetstream::new(client);
    let mut stream = js.get_stream(STREAM).await.expect("the stream");
    let total = usize::try_from(stream.info().await.expect("stream info").state.messages).expect("a count");
    let consumer: consumer::PullConsumer = stream
        .create_consumer(consumer::pull::Config { ack_policy: consumer::AckPolicy::None, ..Default::default() })
        .await
        .expect("create a consumer");
    let mut delivered = Vec::with_capacity(total);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while delivered.len() < total {
        assert!(tokio::time::Instant::now() < deadline, "read only {} of {total} messages", delivered.len());
        let mut batch =
            consumer.fetch().max_messages(1000).expires(Duration::from_secs(1)).messages().await.expect("fetch");
        while let Some(message) = batch.next().await {
            let message = message.expect("a message");
            assert_eq!(message.subject.as_str(), crate::events::subject());
            let id = message
                .headers
                .as_ref()
                .and_then(|headers| headers.get("Nats-Msg-Id"))
                .map(|id| id.as_str().parse().expect("Nats-Msg-Id is the event id"))
                .expect("a Nats-Msg-Id header");
            let payload: OrderPlaced = serde_json::from_slice(&message.payload).expect("the payload");
            delivered.push(Delivered::new(id, &payload));
        }
    }
    delivered
}
