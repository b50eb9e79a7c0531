//! The consumer side: reading a received message ([`Received`]: each broker's headers as the relay writes them,
//! or a CloudEvents structured envelope) as `(event id, typed event)`, a payload of any version an event type
//! knows as the current type ([`Decode`], upcasting older versions through `From`), and the errors of doing so.
//! [`Inbox::consume`](crate::inbox::Inbox::consume) runs a handler once per (consumer, event id) on top.
//!
//! An event type that replaces an older version declares it with `#[outbox(version = 2, upcast_from =
//! PaymentPaidV1)]` and implements `From<PaymentPaidV1> for PaymentPaid`; the older type stays in the program,
//! derived as an event of its own version, so the registry and the contracts know every version. Chains have any
//! length: v3 upcasts from v2, which upcasts from v1.
//!
//! # Example
//!
//! ```
//! use outbox_core::{Decode, OutboxEvent};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize, schemars::JsonSchema, OutboxEvent)]
//! #[outbox(event_type = "payment.paid", aggregate = "payment", version = 1)]
//! struct PaymentPaidV1 {
//!     #[outbox(aggregate_id)]
//!     payment_id: u64,
//!     amount: u64,
//! }
//!
//! #[derive(Serialize, Deserialize, schemars::JsonSchema, OutboxEvent)]
//! #[outbox(event_type = "payment.paid", aggregate = "payment", version = 2, upcast_from = PaymentPaidV1)]
//! struct PaymentPaid {
//!     #[outbox(aggregate_id)]
//!     payment_id: u64,
//!     amount_cents: u64,
//!     currency: String,
//! }
//!
//! impl From<PaymentPaidV1> for PaymentPaid {
//!     fn from(v1: PaymentPaidV1) -> Self {
//!         Self { payment_id: v1.payment_id, amount_cents: v1.amount * 100, currency: "EUR".into() }
//!     }
//! }
//!
//! let paid = PaymentPaid::decode(1, r#"{"payment_id":7,"amount":12}"#)?;
//! assert_eq!((paid.amount_cents, paid.currency.as_str()), (1200, "EUR"));
//! assert_eq!(PaymentPaid::versions(), [2, 1]);
//! # Ok::<(), outbox_core::consume::DecodeError>(())
//! ```

mod error;
mod received;
pub(crate) mod upcast;

pub use error::DecodeError;
pub use received::{Metadata, Received};
pub use upcast::{Decode, NoPrevious, Previous, UpcastFrom, Versioned};
