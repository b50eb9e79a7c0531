//! [`Versioned`] and [`Decode`]: an event type's older versions, and reading a payload of any of them.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;

use super::DecodeError;
use crate::event::OutboxEvent;

/// An event type and the older version it replaces, if any: `#[derive(OutboxEvent)]` implements it, with
/// [`UpcastFrom<P>`](UpcastFrom) for `upcast_from = P` and [`NoPrevious`] otherwise.
///
/// With `upcast_from = P`, `P` must be an event of the same event type and a lower version that implements
/// `Deserialize`, and the type must implement `From<P>`: that is how a payload of `P`'s version (or of any
/// version before it) becomes the current type.
///
/// An event implemented by hand implements it by hand too:
///
/// ```
/// # use outbox_core::OutboxEvent;
/// # #[derive(serde::Serialize)] struct Tick { n: u64 }
/// # impl OutboxEvent for Tick {
/// #     const EVENT_TYPE: &'static str = "clock.ticked";
/// #     const AGGREGATE_TYPE: &'static str = "clock";
/// #     const VERSION: u32 = 1;
/// #     fn aggregate_id(&self) -> String { "clock".into() }
/// # }
/// impl outbox_core::Versioned for Tick {
///     type Previous = outbox_core::consume::NoPrevious;
/// }
/// ```
pub trait Versioned: OutboxEvent {
    /// [`NoPrevious`] for a first version, [`UpcastFrom<P>`](UpcastFrom) for a type that replaces `P`.
    type Previous: Previous<Self>;
}

/// The older versions of `T`, read as `T`. Implemented by [`NoPrevious`] and [`UpcastFrom`] only.
pub trait Previous<T: ?Sized> {
    /// The version `T` replaces directly, if any.
    const VERSION: Option<u32>;

    /// Every older version, newest first.
    fn versions() -> Vec<u32>;

    /// Reads a payload of `version` (one of [`versions`](Self::versions)) and upcasts it to `T`.
    ///
    /// # Errors
    ///
    /// As [`Decode::decode`].
    fn decode(version: u32, payload: &str) -> Result<T, DecodeError>
    where
        T: Sized;
}

/// The first version of an event type: it replaces nothing.
#[derive(Debug, Clone, Copy)]
pub struct NoPrevious;

impl<T: OutboxEvent + ?Sized> Previous<T> for NoPrevious {
    const VERSION: Option<u32> = None;

    fn versions() -> Vec<u32> {
        Vec::new()
    }

    fn decode(version: u32, _payload: &str) -> Result<T, DecodeError>
    where
        T: Sized,
    {
        Err(DecodeError::UnknownVersion { event_type: T::EVENT_TYPE, version, known: vec![T::VERSION] })
    }
}

/// A type that replaces `P`: older payloads are read as `P` (or as what `P` replaces) and converted with
/// `From<P>`.
#[derive(Debug)]
pub struct UpcastFrom<P>(PhantomData<P>);

impl<T: From<P>, P: Decode> Previous<T> for UpcastFrom<P> {
    const VERSION: Option<u32> = Some(P::VERSION);

    fn versions() -> Vec<u32> {
        P::versions()
    }

    fn decode(version: u32, payload: &str) -> Result<T, DecodeError> {
        P::decode(version, payload).map(T::from)
    }
}

/// Reads a payload of any version the event type knows as the current type, upcasting older versions.
///
/// Implemented for every [`Versioned`] event that implements `Deserialize`.
pub trait Decode: Versioned + DeserializeOwned {
    /// The versions this type reads, newest (its own) first.
    #[must_use]
    fn versions() -> Vec<u32> {
        let mut versions = vec![Self::VERSION];
        versions.extend(<Self::Previous as Previous<Self>>::versions());
        versions
    }

    /// Reads `payload`, a JSON object of schema version `version`, as this type.
    ///
    /// # Errors
    ///
    /// [`DecodeError::UnknownVersion`] when `version` is not one of [`versions`](Self::versions),
    /// [`DecodeError::Payload`] when the payload does not match the schema of its version.
    fn decode(version: u32, payload: &str) -> Result<Self, DecodeError> {
        if version == Self::VERSION {
            return serde_json::from_str(payload)
                .map_err(|error| DecodeError::payload(Self::EVENT_TYPE, version, &error));
        }
        let known = <Self as Decode>::versions();
        if !known.contains(&version) {
            return Err(DecodeError::UnknownVersion { event_type: Self::EVENT_TYPE, version, known });
        }
        <Self::Previous as Previous<Self>>::decode(version, payload)
    }
}

impl<T: Versioned + DeserializeOwned> Decode for T {}

/// Compile-time checks of `upcast_from = P` on `T`: same event type, lower version.
#[doc(hidden)]
pub const fn check_upcast<T: OutboxEvent, P: OutboxEvent>() {
    assert!(same_str(T::EVENT_TYPE, P::EVENT_TYPE), "`upcast_from` must name an older version of the same event type");
    assert!(P::VERSION < T::VERSION, "`upcast_from` must name a lower version than this event's `version`");
}

const fn same_str(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}
