//! The consumer over NATS JetStream: a durable pull consumer `receipts` on the relay's stream reads each
//! `payment.paid` message, decodes it with its NATS headers (the CloudEvents attributes the relay writes), and
//! records the receipt once per event id with [`Inbox::consume`]. A message is acknowledged only after its
//! transaction committed, so a crash between the two redelivers it and the inbox skips the repeat.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, AckKind};
use futures_util::StreamExt;
use outbox_core::consume::Received;
use outbox_core::inbox::Inbox;
use outbox_core::{DecodeError, Error};
use outbox_relay::CancellationToken;

use crate::service::ServiceError;
use crate::Database;

/// The JetStream stream the relay publishes into (the NATS publisher's default, created at start).
pub(crate) const STREAM: &str = "OUTBOX";
/// The subject of `payment.paid` under the NATS publisher's default subject template `outbox.{event_type}`.
pub(crate) const SUBJECT: &str = "outbox.payment.paid";
/// The durable consumer's name: its position survives a restart of the service.
const CONSUMER: &str = "receipts";
/// How long a message whose receipt could not be written (the database failed) waits before its redelivery.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(1);

/// Reads `payment.paid` from the stream until `shutdown` and records one receipt per event.
pub(crate) async fn run(
    db: Database,
    inbox: Arc<Inbox>,
    client: async_nats::Client,
    shutdown: CancellationToken,
) -> Result<(), ServiceError> {
    let stream = jetstream::new(client).get_stream(STREAM).await?;
    let consumer: consumer::PullConsumer = stream
        .get_or_create_consumer(
            CONSUMER,
            consumer::pull::Config {
                durable_name: Some(CONSUMER.to_owned()),
                filter_subject: SUBJECT.to_owned(),
                ack_policy: consumer::AckPolicy::Explicit,
                ..Default::default()
            },
        )
        .await?;
    let mut messages = consumer.messages().await?;
    loop {
        let message = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            next = messages.next() => match next {
                Some(message) => message?,
                None => return Ok(()),
            },
        };
        let ack = match receive(&db, &inbox, &message).await {
            Ok(_) | Err(Error::Decode(DecodeError::UnknownType { .. })) => AckKind::Ack,
            // A message that cannot be read will not be readable later: stop its redeliveries.
            Err(Error::Decode(_)) => AckKind::Term,
            Err(_) => AckKind::Nak(Some(RETRY_AFTER_FAILURE)),
        };
        message.ack_with(ack).await?;
    }
}

/// Decodes one message and records its receipt in the inbox's transaction; `Ok(false)` for a repeat.
async fn receive(db: &Database, inbox: &Inbox, message: &async_nats::Message) -> Result<bool, Error> {
    let headers: Vec<(&str, &str)> = message
        .headers
        .iter()
        .flat_map(|headers| headers.iter())
        .filter_map(|(name, values)| Some((name.as_ref(), values.first()?.as_str())))
        .collect();
    let received = Received::new(&message.payload).headers(headers);
    db.record_receipt(inbox, &received).await
}
