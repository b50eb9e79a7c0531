//! OpenTelemetry (feature `otel`): the relay's publish span is linked to the producer span of every event, read
//! from the W3C `traceparent` stored with it at enqueue.

use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::publish::Message;

/// Adds a link from `span` to the producer span of each message that carries a valid `traceparent`.
pub(super) fn link_producers(span: &tracing::Span, batch: &[Message]) {
    for message in batch {
        if let Some(producer) = producer_context(message) {
            span.add_link(producer);
        }
    }
}

/// The remote span context of `message`'s `traceparent` (and `tracestate`), if it is a valid version-00 header.
pub(crate) fn producer_context(message: &Message) -> Option<SpanContext> {
    let traceparent = message.headers.get("traceparent")?;
    let mut parts = traceparent.trim().split('-');
    let (version, trace_id, span_id, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if version != "00" || parts.next().is_some() || trace_id.len() != 32 || span_id.len() != 16 || flags.len() != 2 {
        return None;
    }
    let trace_id = TraceId::from_hex(trace_id).ok()?;
    let span_id = SpanId::from_hex(span_id).ok()?;
    let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()?);
    let state =
        message.headers.get("tracestate").and_then(|state| state.parse::<TraceState>().ok()).unwrap_or_default();
    let context = SpanContext::new(trace_id, span_id, flags, true, state);
    context.is_valid().then_some(context)
}

#[cfg(test)]
mod tests {
    use super::producer_context;
    use crate::publish::Message;

    #[test]
    fn traceparent_headers_parse_and_bad_ones_are_ignored() {
        let mut message = Message::new(uuid::Uuid::nil(), "a.b", "a", "1", "{}");
        message.headers.insert("traceparent".into(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into());
        let context = producer_context(&message).unwrap();
        assert_eq!(context.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert!(context.is_sampled() && context.is_remote());
        for bad in [
            "",
            "00-abc-01",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        ] {
            message.headers.insert("traceparent".into(), bad.into());
            assert!(producer_context(&message).is_none(), "{bad}");
        }
    }
}
