//! `#[derive(OutboxEvent)]`, `#[derive(Redact)]` and `#[derive(RedactedDebug)]` for [outbox-core]; depend on `outbox-core` (feature `derive`,
//! on by default), which re-exports them.
//!
//! ```
//! use outbox_core::OutboxEvent;
//! use schemars::JsonSchema;
//! use serde::Serialize;
//! use time::OffsetDateTime;
//! use uuid::Uuid;
//!
//! #[derive(Serialize, JsonSchema, OutboxEvent)]
//! #[outbox(event_type = "payment.paid", aggregate = "payment", version = 1)]
//! struct PaymentPaid {
//!     #[outbox(aggregate_id)]
//!     payment_id: Uuid,
//!     order_id: Uuid,
//!     #[outbox(sensitive)]
//!     payer_email: String,
//!     #[serde(with = "time::serde::rfc3339")]
//!     #[schemars(with = "String")] // schemars has no `time` support
//!     paid_at: OffsetDateTime,
//! }
//!
//! let event = PaymentPaid {
//!     payment_id: Uuid::nil(),
//!     order_id: Uuid::nil(),
//!     payer_email: "ana@example.com".into(),
//!     paid_at: OffsetDateTime::UNIX_EPOCH,
//! };
//! assert_eq!(PaymentPaid::EVENT_TYPE, "payment.paid");
//! assert_eq!(event.aggregate_id(), Uuid::nil().to_string());
//! assert_eq!(PaymentPaid::sensitive_paths(), ["/payer_email"]);
//! assert_eq!(event.redacted()["payer_email"], "[REDACTED]");
//! ```
//!
//! [outbox-core]: https://docs.rs/outbox-core

mod ast;
mod attr;
#[cfg(test)]
mod attribute_strings_never_panic;
mod case;
mod errors;
mod expand;
mod fallback;
mod sensitive_names;
mod serde;
mod valid;

use proc_macro::TokenStream;
use syn::{parse_macro_input, DeriveInput};

/// Implements `outbox_core::OutboxEvent` (and `outbox_core::Redact`, `outbox_core::Versioned`) for a struct with
/// named fields, and registers the event in `outbox_core::registry`.
///
/// # Struct attributes
///
/// - `event_type = "payment.paid"` (required): lowercase, dot-separated segments of `[a-z0-9_-]`, at most 255
///   characters, checked at compile time.
/// - `aggregate = "payment"` (required): the aggregate type, same grammar.
/// - `version = 1` (required): the schema version, from 1. Bump it for a change that breaks consumers.
/// - `aggregate_id = "customer.id"` or `aggregate_id = "key()"`: where the aggregate id is, when no field is
///   marked `#[outbox(aggregate_id)]`: fields and argument-less methods from `self`, separated by dots.
/// - `upcast_from = PaymentPaidV1`: the type of the version this one replaces (an event of the same event type
///   and a lower version, kept in the program). The struct must implement `From<PaymentPaidV1>`, and both must
///   implement `Deserialize`: consumers then read every older version as this type (`outbox_core::Decode`),
///   upcasting along the chain (v1 -> v2 -> v3). Checked at compile time.
/// - `crate = "path::to::outbox_core"` (or unquoted, `crate = path::to::outbox_core`): where outbox_core is, when
///   it is not a dependency named `outbox_core`.
///
/// Every value can come from a `macro_rules!` fragment: `$event_type:literal`, `$krate:path`, and
/// `$previous:path` or `$previous:ty` for `upcast_from`.
///
/// # Field attributes
///
/// - `aggregate_id`: this field identifies the aggregate; its type must implement `Display` (Uuid, integers,
///   String, a newtype). Exactly one field, unless the struct names the id with `aggregate_id = "..."`.
/// - `sensitive`: the value is redacted wherever the toolkit prints the event, and marked `x-sensitive` in the
///   schema. Works on any field (an `Option`, a `Vec`, a nested struct: the whole value is redacted).
/// - `not_sensitive`: silences the guards for a field whose name only looks like a secret or personal data.
///
/// The sensitive paths follow serde: `#[serde(rename)]`, `#[serde(rename_all)]`, `#[serde(flatten)]` (merged
/// without a prefix), `#[serde(skip)]` (absent) and `#[serde(transparent)]`. A field whose type implements
/// `outbox_core::Redact` (`#[derive(Redact)]`) adds that type's paths under the field's name, `/*` for a
/// `Vec`, a set or a map.
///
/// # Guards for secrets and personal data
///
/// A field whose name looks like a secret or like personal data is a compile error unless it is marked
/// `sensitive` (redacted everywhere the toolkit prints it) or `not_sensitive` (when the name misleads). Names match
/// by word, in any case: `customer_email` and `billingPhone` are caught, `emailed_at` is not, and a name that
/// describes the data instead of holding it (`phone_count`, `email_verified`, `has_phone`) is not either. The
/// words below are the ones the derive checks: it reads this very list (`outbox-derive/src/sensitive_names.md`).
///
#[doc = include_str!("sensitive_names.md")]
///
/// # Schema and registry
///
/// A non-generic event must also implement `schemars::JsonSchema`: it is registered with its schema
/// (`outbox_core::registry::events()`). Structs generic over types or constants are not registered, as they have no
/// single concrete type; one generic over lifetimes only is (as `Event<'static>`), and needs `JsonSchema` too.
/// In a generic struct, a field whose type names a type parameter requires that type to implement `Redact`; a
/// field of a generic type with sensitive fields of its own (`Envelope<Money>`) whose type arguments do not
/// implement `Redact` is a compile error, not a type taken as holding nothing sensitive. A type that holds itself
/// (`children: Vec<Unit>`) has its values inside itself redacted whole when it has sensitive fields.
/// `#[serde(into = "...")]` is refused: the JSON would be another type's, which is where to derive.
#[proc_macro_derive(OutboxEvent, attributes(outbox))]
pub fn derive_outbox_event(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::derive_event(&input).into()
}

/// Implements `outbox_core::Redact` for a struct nested in event payloads, from `#[outbox(sensitive)]` marks on
/// its fields; takes `#[outbox(crate = "...")]` and applies the guards for secrets and personal data
/// like `#[derive(OutboxEvent)]`.
///
/// An event does not need it: `#[derive(OutboxEvent)]` implements `Redact` too, so an event can be nested in
/// another. With `#[serde(transparent)]`, a sensitive field makes the whole value sensitive (a `Secret`
/// newtype).
///
/// ```
/// use outbox_core::Redact;
///
/// #[derive(serde::Serialize, Redact)]
/// #[serde(rename_all = "camelCase")]
/// struct Card {
///     #[outbox(sensitive)]
///     card_number: String,
///     holder_name: String,
/// }
///
/// assert_eq!(<Card as Redact>::redact_paths(), ["/cardNumber"]);
/// ```
#[proc_macro_derive(Redact, attributes(outbox))]
pub fn derive_redact(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::derive_redact(&input).into()
}

/// Implements `Debug` for an event (or a type nested in one) so that it never prints a sensitive value: use it
/// instead of `#[derive(Debug)]` on every type that has `#[outbox(sensitive)]` fields.
///
/// A plain `#[derive(Debug)]` prints every field as it is, so `tracing::debug!(?event)` or a panic message would
/// show what `#[outbox(sensitive)]` promised to hide. `RedactedDebug` prints the value as serde serializes it,
/// with every sensitive path (the type's own and those of the types nested in it) replaced by `"[REDACTED]"`,
/// exactly as the toolkit's logs and CLI show the payload. It needs `Serialize` and `outbox_core::Redact`
/// (which `#[derive(OutboxEvent)]` and `#[derive(Redact)]` implement), not `Debug` on the fields. Takes
/// `#[outbox(crate = "...")]`.
///
/// It is a derive of its own rather than an option of `#[derive(OutboxEvent)]` so that it stands where a reader
/// looks for `Debug`, in the derive list, works the same on events and nested types, and clashes with a
/// `#[derive(Debug)]` left beside it (two `Debug` impls do not compile).
///
/// ```
/// use outbox_core::{OutboxEvent, RedactedDebug};
///
/// #[derive(serde::Serialize, schemars::JsonSchema, OutboxEvent, RedactedDebug)]
/// #[outbox(event_type = "customer.registered", aggregate = "customer", version = 1)]
/// struct CustomerRegistered {
///     #[outbox(aggregate_id)]
///     customer_id: u64,
///     #[outbox(sensitive)]
///     email: String,
/// }
///
/// let event = CustomerRegistered { customer_id: 7, email: "ana@example.com".into() };
/// assert_eq!(format!("{event:?}"), r#"CustomerRegistered { customer_id: 7, email: "[REDACTED]" }"#);
/// ```
#[proc_macro_derive(RedactedDebug, attributes(outbox))]
pub fn derive_redacted_debug(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::derive_redacted_debug(&input).into()
}
