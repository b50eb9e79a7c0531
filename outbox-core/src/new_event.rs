//! [`NewEvent`]: one event serialized and ready to be inserted.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::error::{Error, Result};
use crate::event::OutboxEvent;
use crate::payload;

/// Message headers stored with an event and sent with it by the relay (for example the W3C `traceparent`).
pub type Headers = BTreeMap<String, String>;

/// One event, serialized and validated, ready to be written by [`Outbox::enqueue_all`](crate::Outbox::enqueue_all).
///
/// Building it serializes the payload, so every serialization error surfaces here, before anything is written.
/// Events of different types can be enqueued together as `NewEvent`s.
///
/// # Example
///
/// ```
/// # use outbox_core::{NewEvent, OutboxEvent};
/// # #[derive(serde::Serialize)] struct PaymentPaid { payment_id: u64 }
/// # impl OutboxEvent for PaymentPaid {
/// #     const EVENT_TYPE: &'static str = "payment.paid";
/// #     const AGGREGATE_TYPE: &'static str = "payment";
/// #     const VERSION: u32 = 1;
/// #     fn aggregate_id(&self) -> String { self.payment_id.to_string() }
/// # }
/// let event = NewEvent::new(&PaymentPaid { payment_id: 7 })?
///     .with_header("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
/// assert_eq!(event.event_type(), "payment.paid");
/// assert_eq!(event.aggregate_id(), "7");
/// assert_eq!(event.id().get_version_num(), 7); // UUID v7: ids sort by creation time
/// # Ok::<(), outbox_core::Error>(())
/// ```
#[derive(Clone)]
pub struct NewEvent {
    pub(crate) id: Uuid,
    pub(crate) event_type: &'static str,
    pub(crate) aggregate_type: &'static str,
    pub(crate) aggregate_id: String,
    pub(crate) version: i32,
    pub(crate) payload: String,
    pub(crate) headers: Headers,
    pub(crate) sensitive_paths: Vec<String>,
    /// The first header refused by [`check_header`](crate::check_header): the enqueue fails with it, before
    /// anything is written.
    pub(crate) invalid_header: Option<String>,
    /// The `tracestate` header was captured with a trace context, not set by hand: it belongs to the captured
    /// `traceparent`, and goes when another one replaces it.
    tracestate_captured: bool,
}

/// Prints the metadata and the payload with its sensitive values redacted.
impl std::fmt::Debug for NewEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let payload = crate::redact::for_debug(&self.payload, Some(&self.sensitive_paths));
        f.debug_struct("NewEvent")
            .field("id", &self.id)
            .field("event_type", &self.event_type)
            .field("aggregate_type", &self.aggregate_type)
            .field("aggregate_id", &self.aggregate_id)
            .field("version", &self.version)
            .field("payload", &payload)
            .field("headers", &self.headers)
            .field("sensitive_paths", &self.sensitive_paths)
            .finish()
    }
}

impl NewEvent {
    /// Serializes `event` and takes its metadata from its [`OutboxEvent`] impl.
    ///
    /// With the `otel` feature, the W3C trace context of the active OpenTelemetry context
    /// ([`opentelemetry::Context::current`], which a `tracing` span carries when a `tracing-opentelemetry` layer is
    /// installed) is stored in the headers as `traceparent` (and `tracestate` when it has one), so the relay and
    /// every publisher send it on and the consumer's span joins the producer's trace. Headers added afterwards with
    /// [`with_header`](Self::with_header) replace the captured ones: an explicit `traceparent` wins, and the
    /// captured `tracestate`, which belongs to the captured trace, goes with it. A `tracestate` longer than a header
    /// may be ([`MAX_HEADER_VALUE_BYTES`](crate::MAX_HEADER_VALUE_BYTES)) is not captured (it is optional).
    ///
    /// # Errors
    ///
    /// [`Error::Serialize`] or [`Error::NonFiniteNumber`] when the payload is not representable as JSON,
    /// [`Error::NulCharacter`] when one of its strings or keys holds a NUL character, and
    /// [`Error::InvalidEvent`] when it is not a JSON object (a struct or a map: the relay fails any other payload as
    /// a corrupted row), the aggregate id is empty or holds a NUL character, or the version is 0 or too large.
    pub fn new<E: OutboxEvent + ?Sized>(event: &E) -> Result<Self> {
        let invalid =
            |reason: &str| Error::InvalidEvent { event_type: E::EVENT_TYPE.to_owned(), reason: reason.to_owned() };
        let aggregate_id = event.aggregate_id();
        let version = checked_identity(E::EVENT_TYPE, E::AGGREGATE_TYPE, &aggregate_id, E::VERSION).map_err(invalid)?;
        let payload = payload::to_json(E::EVENT_TYPE, event)?;
        if !payload.starts_with('{') {
            return Err(invalid("the payload must serialize to a JSON object (a struct or a map)"));
        }
        Ok(Self {
            id: Uuid::now_v7(),
            event_type: E::EVENT_TYPE,
            aggregate_type: E::AGGREGATE_TYPE,
            aggregate_id,
            version,
            payload,
            sensitive_paths: E::sensitive_paths(),
            invalid_header: None,
            tracestate_captured: false,
            headers: Headers::new(),
        }
        .with_captured(captured_headers()))
    }

    /// Adds a message header, replacing an earlier one of the same name. Every broker publisher sends it on (see
    /// the relay's header mapping); the name must be one every broker accepts ([`check_header`](crate::check_header):
    /// lowercase `a-z 0-9 - _ .`, not a name the publishers write themselves). A header that breaks the rules is
    /// not added, and enqueueing the event fails with [`Error::InvalidEvent`] naming it, before anything is
    /// written.
    ///
    /// # Example
    ///
    /// ```
    /// # use outbox_core::{NewEvent, OutboxEvent};
    /// # #[derive(serde::Serialize)] struct PaymentPaid { payment_id: u64 }
    /// # impl OutboxEvent for PaymentPaid {
    /// #     const EVENT_TYPE: &'static str = "payment.paid";
    /// #     const AGGREGATE_TYPE: &'static str = "payment";
    /// #     const VERSION: u32 = 1;
    /// #     fn aggregate_id(&self) -> String { self.payment_id.to_string() }
    /// # }
    /// let event = NewEvent::new(&PaymentPaid { payment_id: 7 })?.with_header("tenant", "acme");
    /// assert_eq!(event.headers()["tenant"], "acme");
    /// assert!(event.check().is_ok());
    /// let bad = NewEvent::new(&PaymentPaid { payment_id: 7 })?.with_header("Tenant ID", "acme");
    /// assert!(bad.check().unwrap_err().to_string().contains("header `Tenant ID`"));
    /// # Ok::<(), outbox_core::Error>(())
    /// ```
    #[must_use]
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        let (name, value) = (name.into(), value.into());
        match crate::header_rules::check_header(&name, &value) {
            Ok(()) => {
                match name.as_str() {
                    // A captured `tracestate` is the captured trace's: it does not go with another `traceparent`.
                    TRACEPARENT if self.tracestate_captured => {
                        self.headers.remove(TRACESTATE);
                        self.tracestate_captured = false;
                    }
                    TRACESTATE => self.tracestate_captured = false,
                    _ => {}
                }
                self.headers.insert(name, value);
            }
            Err(reason) => {
                self.invalid_header.get_or_insert(reason);
            }
        }
        self
    }

    /// Whether the event can be written: every header added passed [`check_header`](crate::check_header).
    /// Enqueueing calls it before writing anything.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidEvent`] naming the first refused header and the rule it breaks (never its value).
    pub fn check(&self) -> Result<()> {
        match &self.invalid_header {
            None => Ok(()),
            Some(reason) => Err(Error::InvalidEvent { event_type: self.event_type.to_owned(), reason: reason.clone() }),
        }
    }

    /// Stores the W3C trace context of `cx` (`traceparent`, and `tracestate` when it has one) in the headers,
    /// replacing the one there before, its `tracestate` included; a context without a valid span changes nothing.
    ///
    /// # Example
    ///
    /// ```
    /// # use outbox_core::{NewEvent, OutboxEvent};
    /// # #[derive(serde::Serialize)] struct PaymentPaid { payment_id: u64 }
    /// # impl OutboxEvent for PaymentPaid {
    /// #     const EVENT_TYPE: &'static str = "payment.paid";
    /// #     const AGGREGATE_TYPE: &'static str = "payment";
    /// #     const VERSION: u32 = 1;
    /// #     fn aggregate_id(&self) -> String { self.payment_id.to_string() }
    /// # }
    /// use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
    ///
    /// let remote = SpanContext::new(
    ///     TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
    ///     SpanId::from_hex("00f067aa0ba902b7").unwrap(),
    ///     TraceFlags::SAMPLED,
    ///     true,
    ///     TraceState::default(),
    /// );
    /// let cx = opentelemetry::Context::new().with_remote_span_context(remote);
    /// let event = NewEvent::new(&PaymentPaid { payment_id: 7 })?.with_trace_context(&cx);
    /// assert_eq!(event.headers()["traceparent"], "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    /// # Ok::<(), outbox_core::Error>(())
    /// ```
    #[cfg(feature = "otel")]
    #[must_use]
    pub fn with_trace_context(self, cx: &opentelemetry::Context) -> Self {
        self.with_captured(trace_headers(cx))
    }

    /// The trace context `captured` (`traceparent`, and `tracestate` when it has one), replacing the one before,
    /// its `tracestate` included; nothing when `captured` is empty.
    fn with_captured(mut self, captured: Headers) -> Self {
        if !captured.is_empty() {
            self.headers.remove(TRACESTATE);
            self.tracestate_captured = captured.contains_key(TRACESTATE);
            self.headers.extend(captured);
        }
        self
    }

    /// Adds every header of `headers`, as [`with_header`](Self::with_header) does.
    #[must_use]
    pub fn with_headers(self, headers: impl IntoIterator<Item = (String, String)>) -> Self {
        headers.into_iter().fold(self, |event, (name, value)| event.with_header(name, value))
    }

    /// The event's id (UUID v7, so ids sort by creation time). Consumers deduplicate by it.
    #[must_use]
    pub fn id(&self) -> Uuid {
        self.id
    }

    /// The event type, e.g. `payment.paid`.
    #[must_use]
    pub fn event_type(&self) -> &'static str {
        self.event_type
    }

    /// The aggregate type, e.g. `payment`.
    #[must_use]
    pub fn aggregate_type(&self) -> &'static str {
        self.aggregate_type
    }

    /// The aggregate id the event is about.
    #[must_use]
    pub fn aggregate_id(&self) -> &str {
        &self.aggregate_id
    }

    /// The payload's schema version.
    #[must_use]
    pub fn version(&self) -> u32 {
        self.version.unsigned_abs()
    }

    /// The headers stored with the event.
    #[must_use]
    pub fn headers(&self) -> &Headers {
        &self.headers
    }

    /// The JSON pointers of the payload's sensitive values.
    #[must_use]
    pub fn sensitive_paths(&self) -> &[String] {
        &self.sensitive_paths
    }
}

/// The W3C Trace Context headers.
const TRACEPARENT: &str = "traceparent";
const TRACESTATE: &str = "tracestate";

/// The headers a new event starts with: the active trace context with the `otel` feature, none without.
fn captured_headers() -> Headers {
    #[cfg(feature = "otel")]
    {
        trace_headers(&opentelemetry::Context::current())
    }
    #[cfg(not(feature = "otel"))]
    {
        Headers::new()
    }
}

/// `traceparent` (W3C Trace Context, version 00) and `tracestate` of the span in `cx`, if it is valid.
#[cfg(feature = "otel")]
fn trace_headers(cx: &opentelemetry::Context) -> Headers {
    use opentelemetry::trace::TraceContextExt;
    let span = cx.span();
    let context = span.span_context();
    let mut headers = Headers::new();
    if context.is_valid() {
        let traceparent =
            format!("00-{}-{}-{:02x}", context.trace_id(), context.span_id(), context.trace_flags().to_u8());
        headers.insert(TRACEPARENT.to_owned(), traceparent);
        let state = context.trace_state().header();
        // Optional, and up to 32 members of 256 bytes each: one longer than a header may be is left out rather than
        // stored and then dropped by the relay.
        if !state.is_empty() && crate::header_rules::check_header(TRACESTATE, &state).is_ok() {
            headers.insert(TRACESTATE.to_owned(), state);
        }
    }
    headers
}

/// Checks what the table requires of an event's type, aggregate and version (the relay's decoding of a message-mode
/// event checks the same, so that any event it may have to write to the table fits there); returns the version as
/// the table stores it, or why the event is refused.
pub(crate) fn checked_identity(
    event_type: &str,
    aggregate_type: &str,
    aggregate_id: &str,
    version: u32,
) -> std::result::Result<i32, &'static str> {
    if event_type.is_empty() || aggregate_type.is_empty() {
        return Err("the event type and the aggregate type must not be empty");
    }
    let version = i32::try_from(version)
        .ok()
        .filter(|version| *version >= 1)
        .ok_or("the version must be between 1 and 2147483647")?;
    if aggregate_id.is_empty() {
        return Err("the aggregate id must not be empty");
    }
    if [event_type, aggregate_type, aggregate_id].iter().any(|text| text.contains('\0')) {
        return Err("the event type, aggregate type and aggregate id must not contain a NUL character (a database \
                    text cannot hold one)");
    }
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::NewEvent;
    use crate::event::OutboxEvent;

    #[derive(serde::Serialize)]
    struct Signup {
        user_id: u32,
        email: String,
    }

    impl OutboxEvent for Signup {
        const EVENT_TYPE: &'static str = "user.signed_up";
        const AGGREGATE_TYPE: &'static str = "user";
        const VERSION: u32 = 1;
        fn aggregate_id(&self) -> String {
            self.user_id.to_string()
        }
        fn sensitive_paths() -> Vec<String> {
            vec!["/email".to_owned()]
        }
    }

    #[cfg(feature = "otel")]
    fn context_with_state(span: &str, state: &str) -> opentelemetry::Context {
        use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
        let state = if state.is_empty() { TraceState::default() } else { state.parse::<TraceState>().unwrap() };
        let remote = SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
            SpanId::from_hex(span).unwrap(),
            TraceFlags::SAMPLED,
            true,
            state,
        );
        opentelemetry::Context::new().with_remote_span_context(remote)
    }

    #[cfg(feature = "otel")]
    #[test]
    fn a_captured_tracestate_goes_with_its_traceparent_and_one_set_by_hand_stays() {
        let signup = || Signup { user_id: 3, email: "ana@example.com".into() };
        let captured = {
            let _attached = context_with_state("00f067aa0ba902b7", "vendor=x").attach();
            NewEvent::new(&signup()).unwrap()
        };
        assert_eq!(captured.headers()["tracestate"], "vendor=x");
        // Another traceparent by hand: the captured trace's vendor state does not travel with it.
        let replaced =
            captured.clone().with_header("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        assert!(!replaced.headers().contains_key("tracestate"), "{:?}", replaced.headers());
        // Another context without a state replaces the captured state too.
        let other = captured.clone().with_trace_context(&context_with_state("b7ad6b7169203331", ""));
        assert_eq!(other.headers()["traceparent"], "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01");
        assert!(!other.headers().contains_key("tracestate"), "{:?}", other.headers());
        // Both set by hand, in either order, stay.
        let by_hand = captured
            .clone()
            .with_header("tracestate", "mine=1")
            .with_header("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        assert_eq!(by_hand.headers()["tracestate"], "mine=1");
        let by_hand = captured
            .with_header("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
            .with_header("tracestate", "mine=1");
        assert_eq!(by_hand.headers()["tracestate"], "mine=1");
        // A state longer than a header may be is left out, not stored to be dropped by the relay.
        let long: String = (0..32).map(|n| format!("v{n}={}", "x".repeat(200))).collect::<Vec<_>>().join(",");
        let event =
            NewEvent::new(&signup()).unwrap().with_trace_context(&context_with_state("00f067aa0ba902b7", &long));
        assert!(event.headers().contains_key("traceparent") && !event.headers().contains_key("tracestate"));
        assert!(event.check().is_ok());
    }

    #[test]
    fn debug_output_redacts_sensitive_values() {
        let event = NewEvent::new(&Signup { user_id: 3, email: "ana@example.com".into() }).unwrap();
        let debug = format!("{event:?}");
        assert!(!debug.contains("ana@example.com"), "{debug}");
        assert!(debug.contains("[REDACTED]") && debug.contains("user.signed_up"), "{debug}");
    }

    #[test]
    fn empty_aggregate_id_is_refused() {
        let error = NewEvent::new(&Signup { user_id: 3, email: String::new() }).map(|_| ());
        assert!(error.is_ok());
        struct Nameless;
        impl serde::Serialize for Nameless {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_unit()
            }
        }
        impl OutboxEvent for Nameless {
            const EVENT_TYPE: &'static str = "thing.happened";
            const AGGREGATE_TYPE: &'static str = "thing";
            const VERSION: u32 = 1;
            fn aggregate_id(&self) -> String {
                String::new()
            }
        }
        let error = NewEvent::new(&Nameless).unwrap_err();
        assert_eq!(error.to_string(), "invalid event `thing.happened`: the aggregate id must not be empty");
    }

    #[test]
    fn an_aggregate_id_with_a_nul_character_is_refused_without_showing_it() {
        struct Nul;
        impl serde::Serialize for Nul {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                serde::Serialize::serialize(&std::collections::BTreeMap::<String, u8>::new(), s)
            }
        }
        impl OutboxEvent for Nul {
            const EVENT_TYPE: &'static str = "thing.happened";
            const AGGREGATE_TYPE: &'static str = "thing";
            const VERSION: u32 = 1;
            fn aggregate_id(&self) -> String {
                "secret-7\0x".to_owned()
            }
        }
        let error = NewEvent::new(&Nul).unwrap_err().to_string();
        assert!(error.contains("must not contain a NUL character") && !error.contains("secret-7"), "{error}");
    }

    #[test]
    fn a_payload_that_is_not_a_json_object_is_refused() {
        #[derive(serde::Serialize)]
        struct Scores(Vec<u32>);
        impl OutboxEvent for Scores {
            const EVENT_TYPE: &'static str = "scores.updated";
            const AGGREGATE_TYPE: &'static str = "scores";
            const VERSION: u32 = 1;
            fn aggregate_id(&self) -> String {
                "1".to_owned()
            }
        }
        let error = NewEvent::new(&Scores(vec![1, 2])).unwrap_err();
        assert_eq!(
            error.to_string(),
            "invalid event `scores.updated`: the payload must serialize to a JSON object (a struct or a map)"
        );
    }

    #[cfg(feature = "otel")]
    #[test]
    fn the_active_trace_context_is_captured_and_an_explicit_header_wins() {
        use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
        let remote = SpanContext::new(
            TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").unwrap(),
            SpanId::from_hex("b7ad6b7169203331").unwrap(),
            TraceFlags::SAMPLED,
            true,
            "vendor=opaque".parse::<TraceState>().unwrap(),
        );
        let guard = opentelemetry::Context::new().with_remote_span_context(remote).attach();
        let signup = Signup { user_id: 3, email: "ana@example.com".into() };
        let captured = NewEvent::new(&signup).unwrap();
        assert_eq!(captured.headers()["traceparent"], "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        assert_eq!(captured.headers()["tracestate"], "vendor=opaque");
        let explicit = NewEvent::new(&signup).unwrap().with_header("traceparent", "00-explicit");
        assert_eq!(explicit.headers()["traceparent"], "00-explicit");
        drop(guard);
        assert!(NewEvent::new(&signup).unwrap().headers().is_empty(), "no active trace: no trace headers");
    }
}
