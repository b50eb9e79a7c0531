//! Every event type of the program, registered at link time by `#[derive(OutboxEvent)]`.
//!
//! A program lists its events without naming them: to export contracts, to build an AsyncAPI document, or to
//! check that no two types claim the same event type and version. Event structs generic over types or constants
//! are not registered (such a type has no single schema); list their concrete instances by hand where needed. One
//! generic over lifetimes only is registered, as `Event<'static>`.

use std::collections::BTreeMap;
use std::fmt;

use schemars::{JsonSchema, Schema};

use crate::event::OutboxEvent;
use crate::schema::{self, SchemaError};

/// What the registry knows about one event type.
#[derive(Clone, Copy)]
pub struct EventDescriptor {
    event_type: &'static str,
    aggregate_type: &'static str,
    version: u32,
    upcasts_from: Option<u32>,
    type_name: &'static str,
    sensitive_paths: fn() -> Vec<String>,
    schema: fn() -> Result<Schema, SchemaError>,
}

inventory::collect!(EventDescriptor);

impl EventDescriptor {
    /// The descriptor of `E`, named `type_name` in reports. `#[derive(OutboxEvent)]` registers it for you.
    #[must_use]
    pub const fn of<E: OutboxEvent + JsonSchema>(type_name: &'static str) -> Self {
        Self {
            event_type: E::EVENT_TYPE,
            aggregate_type: E::AGGREGATE_TYPE,
            version: E::VERSION,
            upcasts_from: None,
            type_name,
            sensitive_paths: E::sensitive_paths,
            schema: schema::event_schema::<E>,
        }
    }

    /// The same descriptor, replacing the version `upcasts_from` (`#[outbox(upcast_from = ...)]`).
    pub(crate) const fn upcasting_from(mut self, upcasts_from: Option<u32>) -> Self {
        self.upcasts_from = upcasts_from;
        self
    }

    /// The older version this one replaces and reads by upcasting (`#[outbox(upcast_from = ...)]`), if any.
    #[must_use]
    pub fn upcasts_from(&self) -> Option<u32> {
        self.upcasts_from
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

    /// The schema version.
    #[must_use]
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The Rust type, with its module path, e.g. `shop::billing::PaymentPaid`.
    #[must_use]
    pub fn type_name(&self) -> &'static str {
        self.type_name
    }

    /// The JSON pointers of the payload's sensitive values.
    #[must_use]
    pub fn sensitive_paths(&self) -> Vec<String> {
        (self.sensitive_paths)()
    }

    /// The event's JSON Schema, as [`schema::event_schema`] makes it.
    ///
    /// # Errors
    ///
    /// As [`schema::event_schema`].
    pub fn schema(&self) -> Result<Schema, SchemaError> {
        (self.schema)()
    }
}

impl fmt::Debug for EventDescriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventDescriptor")
            .field("event_type", &self.event_type)
            .field("aggregate_type", &self.aggregate_type)
            .field("version", &self.version)
            .field("upcasts_from", &self.upcasts_from)
            .field("type_name", &self.type_name)
            .finish_non_exhaustive()
    }
}

/// Every registered event of the program, sorted by event type, version and type name.
///
/// # Example
///
/// ```
/// # use outbox_core::OutboxEvent;
/// #[derive(serde::Serialize, schemars::JsonSchema, OutboxEvent)]
/// #[outbox(event_type = "order.placed", aggregate = "order", version = 1)]
/// struct OrderPlaced {
///     #[outbox(aggregate_id)]
///     order_id: u64,
/// }
///
/// let events = outbox_core::registry::events();
/// assert!(events.iter().any(|e| e.event_type() == "order.placed" && e.version() == 1));
/// ```
#[must_use]
pub fn events() -> Vec<&'static EventDescriptor> {
    let mut events: Vec<_> = inventory::iter::<EventDescriptor>.into_iter().collect();
    events.sort_by_key(|e| (e.event_type, e.version, e.type_name));
    events
}

/// The registered events of type `event_type` and version `version`: one, unless [`check`] fails.
#[must_use]
pub fn find(event_type: &str, version: u32) -> Vec<&'static EventDescriptor> {
    events().into_iter().filter(|e| e.event_type == event_type && e.version == version).collect()
}

/// Every registered version of `event_type`, oldest first: the chain a consumer of the newest one reads.
///
/// # Example
///
/// ```
/// # use outbox_core::OutboxEvent;
/// #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema, OutboxEvent)]
/// #[outbox(event_type = "seat.booked", aggregate = "seat", version = 1)]
/// struct SeatBookedV1 {
///     #[outbox(aggregate_id)]
///     seat: u32,
/// }
///
/// #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema, OutboxEvent)]
/// #[outbox(event_type = "seat.booked", aggregate = "seat", version = 2, upcast_from = SeatBookedV1)]
/// struct SeatBooked {
///     #[outbox(aggregate_id)]
///     seat: u32,
///     row: String,
/// }
///
/// impl From<SeatBookedV1> for SeatBooked {
///     fn from(v1: SeatBookedV1) -> Self {
///         Self { seat: v1.seat, row: "A".into() }
///     }
/// }
///
/// let versions = outbox_core::registry::versions("seat.booked");
/// let listed: Vec<(u32, Option<u32>)> = versions.iter().map(|e| (e.version(), e.upcasts_from())).collect();
/// assert_eq!(listed, [(1, None), (2, Some(1))]);
/// ```
#[must_use]
pub fn versions(event_type: &str) -> Vec<&'static EventDescriptor> {
    events().into_iter().filter(|e| e.event_type == event_type).collect()
}

/// Why the registered events are inconsistent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// Several types declare the same event type and version: consumers could not tell their payloads apart.
    #[error("{}", describe_duplicates(.0))]
    DuplicateEvents(Vec<DuplicateEvent>),
}

/// One event type and version declared by more than one Rust type.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DuplicateEvent {
    /// The event type declared more than once.
    pub event_type: &'static str,
    /// Its version.
    pub version: u32,
    /// The types that declare it.
    pub type_names: Vec<&'static str>,
}

fn describe_duplicates(duplicates: &[DuplicateEvent]) -> String {
    let mut text = String::from(
        "several types declare the same event type and version; give each its own event type, or bump the version of the new one:",
    );
    for duplicate in duplicates {
        text.push_str(&format!(
            "\n  `{}` v{} is declared by {}",
            duplicate.event_type,
            duplicate.version,
            duplicate.type_names.join(", ")
        ));
    }
    text
}

/// Checks that no two registered types declare the same event type and version.
///
/// # Errors
///
/// [`RegistryError::DuplicateEvents`], listing every clash and the types involved.
pub fn check() -> Result<(), RegistryError> {
    let mut by_event: BTreeMap<(&'static str, u32), Vec<&'static str>> = BTreeMap::new();
    for event in events() {
        by_event.entry((event.event_type, event.version)).or_default().push(event.type_name);
    }
    let duplicates: Vec<DuplicateEvent> = by_event
        .into_iter()
        .filter(|(_, type_names)| type_names.len() > 1)
        .map(|((event_type, version), type_names)| DuplicateEvent { event_type, version, type_names })
        .collect();
    if duplicates.is_empty() {
        Ok(())
    } else {
        Err(RegistryError::DuplicateEvents(duplicates))
    }
}

/// [`check`] for a test: call it from a `#[test]` of your application.
///
/// # Panics
///
/// When [`check`] fails, with its report.
///
/// # Example
///
/// ```
/// // the body of a `#[test] fn every_event_type_and_version_is_declared_once()` of your application:
/// outbox_core::registry::assert_unique();
/// ```
#[track_caller]
pub fn assert_unique() {
    if let Err(error) = check() {
        panic!("{error}");
    }
}
