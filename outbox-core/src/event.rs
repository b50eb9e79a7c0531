//! The [`OutboxEvent`] trait: what the outbox needs to know about an event type.

use serde::Serialize;

use crate::redact;

/// An event payload that can be written to the outbox.
///
/// The metadata is declared once, on the payload type; `#[derive(OutboxEvent)]` (feature `derive`, on by default)
/// implements this trait from attributes and checks them at compile time. Implementing it by hand is supported for
/// types the derive cannot see.
///
/// # Example
///
/// ```
/// use outbox_core::OutboxEvent;
/// use serde::Serialize;
///
/// #[derive(Serialize)]
/// struct PaymentPaid {
///     payment_id: u64,
///     payer_email: String,
/// }
///
/// impl OutboxEvent for PaymentPaid {
///     const EVENT_TYPE: &'static str = "payment.paid";
///     const AGGREGATE_TYPE: &'static str = "payment";
///     const VERSION: u32 = 1;
///
///     fn aggregate_id(&self) -> String {
///         self.payment_id.to_string()
///     }
///
///     fn sensitive_paths() -> Vec<String> {
///         vec!["/payer_email".to_owned()]
///     }
/// }
///
/// let event = PaymentPaid { payment_id: 7, payer_email: "ana@example.com".into() };
/// assert_eq!(event.aggregate_id(), "7");
/// assert_eq!(PaymentPaid::EVENT_TYPE, "payment.paid");
/// ```
pub trait OutboxEvent: Serialize {
    /// The event's type name, e.g. `payment.paid`: lowercase, dot-separated segments of `[a-z0-9_-]`.
    const EVENT_TYPE: &'static str;

    /// The type of the aggregate (entity) the event is about, e.g. `payment`.
    const AGGREGATE_TYPE: &'static str;

    /// The schema version of the payload, starting at 1. Bump it for a change that would break consumers.
    const VERSION: u32;

    /// The id of the aggregate instance the event is about. Events of one aggregate are published in order.
    fn aggregate_id(&self) -> String;

    /// JSON pointers (RFC 6901) to the payload's sensitive values. A segment `*` matches every element of an
    /// array (or every value of a map). These values never appear in anything the toolkit prints.
    #[must_use]
    fn sensitive_paths() -> Vec<String> {
        Vec::new()
    }

    /// The payload as JSON with every value named by [`sensitive_paths`](Self::sensitive_paths) replaced by
    /// `"[REDACTED]"`: the only form of a payload to log or show.
    ///
    /// A payload that cannot be serialized to JSON (see [`Error::Serialize`](crate::Error::Serialize)) gives
    /// `"[REDACTED]"` as a whole.
    ///
    /// # Example
    ///
    /// ```
    /// # use outbox_core::OutboxEvent;
    /// # #[derive(serde::Serialize)] struct PaymentPaid { payment_id: u64, payer_email: String }
    /// # impl OutboxEvent for PaymentPaid {
    /// #     const EVENT_TYPE: &'static str = "payment.paid";
    /// #     const AGGREGATE_TYPE: &'static str = "payment";
    /// #     const VERSION: u32 = 1;
    /// #     fn aggregate_id(&self) -> String { self.payment_id.to_string() }
    /// #     fn sensitive_paths() -> Vec<String> { vec!["/payer_email".to_owned()] }
    /// # }
    /// let event = PaymentPaid { payment_id: 7, payer_email: "ana@example.com".into() };
    /// assert_eq!(event.redacted(), serde_json::json!({"payment_id": 7, "payer_email": "[REDACTED]"}));
    /// ```
    fn redacted(&self) -> serde_json::Value {
        let Ok(mut value) = serde_json::to_value(self) else {
            return serde_json::Value::String(redact::REDACTED.to_owned());
        };
        redact::redact(&mut value, &Self::sensitive_paths());
        value
    }
}
