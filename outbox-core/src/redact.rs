//! Blanking sensitive values: [`redact`] replaces the values that JSON pointers name, and [`Redact`] tells where a
//! payload type keeps its sensitive values.
//!
//! The pointers are RFC 6901 JSON pointers with one extension: a segment `*` matches every element of an array
//! and every value of an object. `""` names the whole value.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::rc::Rc;
use std::sync::Arc;

use serde_json::Value;

/// What a redacted value is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// Replaces every value of `value` that one of `paths` names with the string [`REDACTED`].
///
/// A path that names nothing in `value` (an absent field, an index past the end) is ignored. A path that is not a
/// JSON pointer at all (not empty and not starting with `/`) redacts the whole value: when in doubt, hide.
///
/// # Example
///
/// ```
/// use serde_json::json;
///
/// let mut payload = json!({"email": "ana@example.com", "cards": [{"number": "4111"}, {"number": "5500"}]});
/// outbox_core::redact::redact(&mut payload, &["/email", "/cards/*/number", "/not/there"]);
/// assert_eq!(payload, json!({"email": "[REDACTED]", "cards": [{"number": "[REDACTED]"}, {"number": "[REDACTED]"}]}));
/// ```
pub fn redact<P: AsRef<str>>(value: &mut Value, paths: &[P]) {
    for path in paths {
        let path = path.as_ref();
        match path.strip_prefix('/') {
            _ if path.is_empty() => blank(value),
            Some(rest) => {
                let segments: Vec<String> = rest.split('/').map(unescape).collect();
                redact_at(value, &segments);
            }
            None => blank(value),
        }
    }
}

/// A redacted copy of `value`: [`redact`] on a clone.
///
/// # Example
///
/// ```
/// let payload = serde_json::json!({"token": "s3cr3t", "user": 7});
/// let shown = outbox_core::redact::redacted(&payload, &["/token"]);
/// assert_eq!(shown.to_string(), r#"{"token":"[REDACTED]","user":7}"#);
/// ```
pub fn redacted<P: AsRef<str>>(value: &Value, paths: &[P]) -> Value {
    let mut copy = value.clone();
    redact(&mut copy, paths);
    copy
}

fn blank(value: &mut Value) {
    *value = Value::String(REDACTED.to_owned());
}

fn unescape(segment: &str) -> String {
    segment.replace("~1", "/").replace("~0", "~")
}

fn redact_at(value: &mut Value, segments: &[String]) {
    let Some((segment, rest)) = segments.split_first() else {
        blank(value);
        return;
    };
    match value {
        Value::Object(map) if segment == "*" => map.values_mut().for_each(|v| redact_at(v, rest)),
        Value::Object(map) => {
            if let Some(v) = map.get_mut(segment.as_str()) {
                redact_at(v, rest);
            }
        }
        Value::Array(items) if segment == "*" => items.iter_mut().for_each(|v| redact_at(v, rest)),
        Value::Array(items) => {
            if let Some(v) = segment.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                redact_at(v, rest);
            }
        }
        _ => {}
    }
}

/// A payload type that knows where its sensitive values are, so that an event holding it can redact them.
///
/// `#[derive(OutboxEvent)]` implements it for events, `#[derive(Redact)]` for the types nested in them (feature
/// `derive`): mark fields `#[outbox(sensitive)]` in either. A field of an event contributes the pointers of its
/// type, prefixed with the field's name; a `Vec`, a set or a map adds a `*` segment; `Option`, `Box` and the
/// other wrappers add nothing. A type with nothing sensitive implements it with the default:
/// `impl outbox_core::Redact for Money {}`.
///
/// A field whose type does not implement `Redact` is taken as holding nothing sensitive, except in a generic
/// struct: a field whose type names a type parameter requires that type to implement `Redact` (as serde requires
/// `T: Serialize`), so that `Envelope<Card>` cannot lose `Card`'s sensitive fields.
///
/// # Example
///
/// ```
/// use outbox_core::{OutboxEvent, Redact};
/// use schemars::JsonSchema;
/// use serde::Serialize;
///
/// #[derive(Serialize, JsonSchema, Redact)]
/// struct Card {
///     #[outbox(sensitive)]
///     number: String,
///     last4: String,
/// }
///
/// #[derive(Serialize, JsonSchema, OutboxEvent)]
/// #[outbox(event_type = "wallet.updated", aggregate = "wallet", version = 1)]
/// struct WalletUpdated {
///     #[outbox(aggregate_id)]
///     wallet_id: u64,
///     cards: Vec<Card>,
/// }
///
/// assert_eq!(<Card as Redact>::redact_paths(), ["/number"]);
/// assert_eq!(WalletUpdated::sensitive_paths(), ["/cards/*/number"]);
/// ```
pub trait Redact {
    /// JSON pointers to the sensitive values inside a value of this type, relative to it (`""` is the whole
    /// value). The default: nothing is sensitive.
    #[must_use]
    fn redact_paths() -> Vec<String> {
        Vec::new()
    }
}

/// `prefix` + each of `paths`: the pointers of a nested value, seen from its parent.
pub(crate) fn prefixed(prefix: &str, paths: Vec<String>) -> Vec<String> {
    if prefix.is_empty() {
        return paths;
    }
    paths.into_iter().map(|path| format!("{prefix}{path}")).collect()
}

macro_rules! nothing_sensitive {
    ($($ty:ty),* $(,)?) => {
        $(impl Redact for $ty {})*
    };
}

nothing_sensitive!(
    bool,
    char,
    str,
    String,
    (),
    i8,
    i16,
    i32,
    i64,
    i128,
    isize,
    u8,
    u16,
    u32,
    u64,
    u128,
    usize,
    f32,
    f64,
    std::num::NonZeroI32,
    std::num::NonZeroI64,
    std::num::NonZeroU32,
    std::num::NonZeroU64,
    std::net::IpAddr,
    std::net::Ipv4Addr,
    std::net::Ipv6Addr,
    std::time::Duration,
    uuid::Uuid,
    time::OffsetDateTime,
    time::PrimitiveDateTime,
    time::UtcDateTime,
    time::Date,
    time::Time,
    serde_json::Value,
    serde_json::Number,
);

macro_rules! same_as_inner {
    ($($ty:ty),* $(,)?) => {
        $(impl<T: Redact + ?Sized> Redact for $ty {
            fn redact_paths() -> Vec<String> {
                T::redact_paths()
            }
        })*
    };
}

same_as_inner!(Box<T>, Rc<T>, Arc<T>, &T, &mut T);

impl<T: Redact> Redact for Option<T> {
    fn redact_paths() -> Vec<String> {
        T::redact_paths()
    }
}

impl<T: Redact + ToOwned + ?Sized> Redact for Cow<'_, T> {
    fn redact_paths() -> Vec<String> {
        T::redact_paths()
    }
}

macro_rules! every_element {
    ($($ty:ty),* $(,)?) => {
        $(impl<T: Redact> Redact for $ty {
            fn redact_paths() -> Vec<String> {
                prefixed("/*", T::redact_paths())
            }
        })*
    };
}

every_element!(Vec<T>, VecDeque<T>, [T], BTreeSet<T>);

impl<T: Redact, const N: usize> Redact for [T; N] {
    fn redact_paths() -> Vec<String> {
        prefixed("/*", T::redact_paths())
    }
}

impl<T: Redact, S> Redact for HashSet<T, S> {
    fn redact_paths() -> Vec<String> {
        prefixed("/*", T::redact_paths())
    }
}

impl<K, V: Redact> Redact for BTreeMap<K, V> {
    fn redact_paths() -> Vec<String> {
        prefixed("/*", V::redact_paths())
    }
}

impl<K, V: Redact, S> Redact for HashMap<K, V, S> {
    fn redact_paths() -> Vec<String> {
        prefixed("/*", V::redact_paths())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{redact, Redact, REDACTED};

    #[test]
    fn wildcard_matches_every_array_element_and_every_map_value() {
        let mut value = json!({"list": [{"s": 1}, {"s": 2}], "map": {"a": {"s": 3}, "b": {"s": 4}}});
        redact(&mut value, &["/list/*/s", "/map/*/s"]);
        assert_eq!(
            value,
            json!({"list": [{"s": REDACTED}, {"s": REDACTED}], "map": {"a": {"s": REDACTED}, "b": {"s": REDACTED}}})
        );
    }

    #[test]
    fn escaped_segments_and_array_indexes_are_followed() {
        let mut value = json!({"a/b": {"~k": [0, 1]}});
        redact(&mut value, &["/a~1b/~0k/1"]);
        assert_eq!(value, json!({"a/b": {"~k": [0, REDACTED]}}));
    }

    #[test]
    fn missing_paths_leave_the_value_unchanged() {
        let original = json!({"a": [1], "b": "x"});
        let mut value = original.clone();
        redact(&mut value, &["/c", "/a/5", "/b/x", "/a/*/deeper"]);
        assert_eq!(value, original);
    }

    #[test]
    fn empty_or_malformed_pointer_redacts_the_whole_value() {
        for pointer in ["", "email"] {
            let mut value = json!({"email": "ana@example.com"});
            redact(&mut value, &[pointer]);
            assert_eq!(value, json!(REDACTED), "{pointer:?}");
        }
    }

    #[test]
    fn containers_add_a_wildcard_and_wrappers_add_nothing() {
        struct Inner;
        impl Redact for Inner {
            fn redact_paths() -> Vec<String> {
                vec!["/pin".to_owned()]
            }
        }
        assert_eq!(<Vec<Option<Box<Inner>>>>::redact_paths(), ["/*/pin"]);
        assert_eq!(<std::collections::HashMap<String, Vec<Inner>>>::redact_paths(), ["/*/*/pin"]);
        assert!(<Option<String>>::redact_paths().is_empty());
    }
}
