//! What each broker publisher puts on the wire, described for the AsyncAPI document of a sink
//! (`outbox contracts asyncapi CONTRACTS --sink URL`): the same templates and header names the publisher uses, so
//! the document names the destinations events really arrive at.

use outbox_core::contracts::{asyncapi_document_for, attribute_description, Contracts, Wire, TRACE_CONTEXT_HEADERS};
use outbox_core::schema::AGGREGATE;
use serde_json::Value;

use super::cloudevents::{Binding, CloudEvents, ContentMode};
use super::name_template::Template;
use super::Message;
use crate::error::{Error, Result};
use crate::sink::{Sink, SinkPublisher};

/// How one publisher shapes its messages.
pub(crate) struct Shape<'a> {
    /// The AsyncAPI protocol name.
    pub(crate) protocol: &'static str,
    /// Where the events of one event type and version go.
    pub(crate) destination: &'a Template,
    /// How CloudEvents attributes are named on this broker.
    pub(crate) binding: Binding,
    pub(crate) envelope: &'a CloudEvents,
    /// Headers of the publisher's own beside the CloudEvents attributes: name, what it holds, and whether every
    /// message carries it.
    pub(crate) own_headers: &'static [(&'static str, &'static str, bool)],
    /// The server's path (an AMQP virtual host), if it has one.
    pub(crate) pathname: Option<String>,
    /// Whether the message key is the aggregate id.
    pub(crate) keyed_by_aggregate: bool,
    /// The channels' protocol bindings, if the broker has any to state.
    pub(crate) channel_bindings: Option<Value>,
    /// What the relay does there, for the server's description.
    pub(crate) description: &'static str,
}

/// The AsyncAPI document of `contracts` as the publisher of `sink` publishes them, titled `title`: channel
/// addresses rendered by the sink's own destination template, the broker as the server (credentials stripped),
/// and the headers that broker carries. The publisher is built but not connected.
///
/// # Errors
///
/// [`Error::InvalidSink`] for a sink URL the relay would refuse, a sink that is not a broker (`stdout`, files and
/// webhooks have no channels to describe), or a contract whose destination the broker would refuse (for example
/// an event type with a `.` in an SQS queue name); [`Error::Contracts`] when the document cannot be built.
///
/// # Example
///
/// ```
/// # #[cfg(feature = "nats")] {
/// use outbox_core::contracts::Contracts;
/// use serde_json::json;
///
/// let mut contracts = Contracts::new();
/// contracts.insert("order.placed", 1, json!({ "type": "object", "x-outbox-aggregate": "order" }));
/// let sink = "nats://127.0.0.1:4222?subject=shop.{aggregate_type}.{event_type}".parse()?;
/// let document = outbox_relay::asyncapi_document(&contracts, "Shop events", &sink)?;
/// assert_eq!(document["channels"]["shop.order.order.placed"]["address"], "shop.order.order.placed");
/// assert_eq!(document["servers"]["nats"]["host"], "127.0.0.1:4222");
/// # }
/// # Ok::<(), outbox_relay::Error>(())
/// ```
pub fn asyncapi_document(contracts: &Contracts, title: &str, sink: &Sink) -> Result<Value> {
    let not_a_broker = |what: &str| Error::InvalidSink {
        sink: sink.to_string(),
        reason: format!("{what} has no channels to describe: give the broker URL the relay publishes to"),
    };
    let url = match sink {
        Sink::Broker(url) => url,
        Sink::Stdout => return Err(not_a_broker("`stdout`")),
        Sink::File(_) => return Err(not_a_broker("a file sink")),
        Sink::Webhook(_) => return Err(not_a_broker("a webhook sink")),
    };
    let publisher = sink.open()?;
    let shape = publisher.shape().ok_or_else(|| not_a_broker("this sink"))?;
    let mut server = host(url);
    let mut addresses = Vec::new();
    for event_type in contracts.event_types() {
        for (version, schema) in contracts.versions(event_type) {
            let aggregate = schema.get(AGGREGATE).and_then(Value::as_str).unwrap_or("aggregate");
            let mut sample = Message::new(uuid::Uuid::nil(), event_type, aggregate, "", "{}");
            sample.version = version;
            let mut address = shape.destination.render(&sample).map_err(|reason| Error::InvalidSink {
                sink: sink.to_string(),
                reason: format!("`{event_type}` v{version}: {reason}"),
            })?;
            if let Some(queue) = (shape.protocol == "sqs").then(|| url::Url::parse(&address).ok()).flatten() {
                // A queue URL (checked by the template): the server is its host, the channel its queue name.
                server = host(&queue);
                address = queue.path_segments().and_then(|mut s| s.next_back()).unwrap_or_default().to_owned();
            }
            addresses.push((event_type, version, address));
        }
    }
    let mut wire = Wire::new(shape.protocol, server).description(shape.description);
    if let Some(pathname) = shape.pathname {
        wire = wire.pathname(pathname);
    }
    for (event_type, version, address) in addresses {
        wire = wire.address(event_type, version, address);
    }
    for (name, description, always) in shape.own_headers {
        wire = wire.header(*name, *description, *always);
    }
    let sample = Message::new(uuid::Uuid::nil(), "order.placed", "order", "1", "{}");
    let prefix = shape.binding.prefix();
    for (name, _) in shape.envelope.attribute_headers(&sample, shape.binding) {
        let description = attribute_description(name.trim_start_matches(prefix)).unwrap_or("A CloudEvents attribute.");
        wire = wire.header(name, description, true);
    }
    for (name, description) in TRACE_CONTEXT_HEADERS {
        // Only on events whose transaction was traced.
        wire = wire.header(*name, *description, false);
    }
    wire = if shape.envelope.content_mode() == ContentMode::Structured {
        wire.structured_envelope()
    } else {
        wire.correlation_header(format!("{prefix}subject"))
    };
    if shape.keyed_by_aggregate {
        wire = wire.keyed_by_aggregate();
    }
    if let Some(bindings) = shape.channel_bindings {
        wire = wire.channel_bindings(bindings);
    }
    Ok(asyncapi_document_for(contracts, title, &wire)?)
}

/// `host:port` of `url`, never its credentials.
fn host(url: &url::Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    }
}

impl SinkPublisher {
    /// How this publisher shapes its messages; `None` for sinks that are not brokers.
    pub(crate) fn shape(&self) -> Option<Shape<'_>> {
        match self {
            #[cfg(feature = "kafka")]
            Self::Kafka(publisher) => Some(publisher.shape()),
            #[cfg(feature = "nats")]
            Self::Nats(publisher) => Some(publisher.shape()),
            #[cfg(feature = "rabbitmq")]
            Self::Amqp(publisher) => Some(publisher.shape()),
            #[cfg(feature = "sqs")]
            Self::Sqs(publisher) => Some(publisher.shape()),
            #[cfg(feature = "redis")]
            Self::Redis(publisher) => Some(publisher.shape()),
            _ => None,
        }
    }
}
