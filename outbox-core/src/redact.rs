//! Blanking sensitive values: [`redact`] replaces the values that JSON pointers name, and [`Redact`] tells where a
//! payload type keeps its sensitive values.
//!
//! [`for_debug`] is what every `Debug` impl of the toolkit prints a payload with, and `#[derive(RedactedDebug)]`
//! gives an event (or a type nested in one) a `Debug` that masks its sensitive fields the same way.
//!
//! The pointers are RFC 6901 JSON pointers with one extension: a segment `*` matches every element of an array
//! and every value of an object. `""` names the whole value.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt;
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

/// A payload as the toolkit's `Debug` impls print it: compact JSON (indented with `{:#?}`) with every value the
/// sensitive paths name replaced by [`REDACTED`]. Made by [`for_debug`].
pub struct DebugPayload(Value);

impl fmt::Debug for DebugPayload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        JsonText(&self.0).fmt(f)
    }
}

/// A payload as JSON text ([`for_debug`] takes it as stored, or parsed).
#[derive(Debug, Clone, Copy)]
pub enum PayloadRef<'a> {
    /// JSON text, as the outbox table and the publishers keep it.
    Text(&'a str),
    /// Parsed JSON.
    Json(&'a Value),
}

impl<'a> From<&'a str> for PayloadRef<'a> {
    fn from(text: &'a str) -> Self {
        Self::Text(text)
    }
}

impl<'a> From<&'a String> for PayloadRef<'a> {
    fn from(text: &'a String) -> Self {
        Self::Text(text)
    }
}

impl<'a> From<&'a Value> for PayloadRef<'a> {
    fn from(value: &'a Value) -> Self {
        Self::Json(value)
    }
}

/// The payload as a `Debug` impl may print it: the one helper behind the `Debug` output of every toolkit type
/// that holds a payload (`NewEvent`, `StoredEvent` and the `ReadRow`s that hold it, `EventDetail`, the relay's `Message`).
///
/// `paths` are the event's sensitive paths, or `None` when they could not be read (a corrupted column). When in
/// doubt, hide: a payload that is not JSON, or whose paths are unknown, prints as [`REDACTED`] as a whole.
///
/// # Example
///
/// ```
/// use outbox_core::redact::for_debug;
///
/// let shown = for_debug(r#"{"email":"ana@example.com","plan":"pro"}"#, Some(&["/email"]));
/// assert_eq!(format!("{shown:?}"), r#"{"email":"[REDACTED]","plan":"pro"}"#);
/// let unknown_paths = for_debug(r#"{"email":"ana@example.com"}"#, None::<&[&str]>);
/// assert_eq!(format!("{unknown_paths:?}"), r#""[REDACTED]""#);
/// ```
pub fn for_debug<'a, P: AsRef<str>>(payload: impl Into<PayloadRef<'a>>, paths: Option<&[P]>) -> DebugPayload {
    let hidden = || Value::String(REDACTED.to_owned());
    let Some(paths) = paths else { return DebugPayload(hidden()) };
    let value = match payload.into() {
        PayloadRef::Text(text) => serde_json::from_str::<Value>(text).unwrap_or_else(|_| hidden()),
        PayloadRef::Json(value) => value.clone(),
    };
    let mut value = value;
    redact(&mut value, paths);
    DebugPayload(value)
}

/// `Debug` for a type that serializes and knows its sensitive paths, printing serde's view of it with the
/// sensitive values masked, the keys of `order` (the fields in declaration order) first: what
/// `#[derive(RedactedDebug)]` expands to.
pub(crate) fn debug_redacted<T: serde::Serialize + Redact + ?Sized>(
    value: &T,
    name: &str,
    order: &[&str],
    f: &mut fmt::Formatter<'_>,
) -> fmt::Result {
    let Ok(mut json) = serde_json::to_value(value) else {
        return f.debug_struct(name).finish_non_exhaustive();
    };
    redact(&mut json, &T::redact_paths());
    match &json {
        Value::Object(fields) => {
            let mut out = f.debug_struct(name);
            for key in order {
                if let Some(field) = fields.get(*key) {
                    out.field(key, &JsonText(field));
                }
            }
            for (key, field) in fields.iter().filter(|(key, _)| !order.contains(&key.as_str())) {
                out.field(key, &JsonText(field));
            }
            out.finish()
        }
        other => f.debug_tuple(name).field(&JsonText(other)).finish(),
    }
}

/// A JSON value printed as JSON text: compact, or indented under `{:#?}`.
struct JsonText<'a>(&'a Value);

impl fmt::Debug for JsonText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = if f.alternate() { serde_json::to_string_pretty(self.0) } else { serde_json::to_string(self.0) };
        f.write_str(&text.map_err(|_| fmt::Error)?)
    }
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
/// type, prefixed with the field's name; a `Vec`, a list, a heap, a set or a map adds a `*` segment, a tuple (of up
/// to 16) the element's index, a `Result` `Ok` or `Err`; `Option`, `Box`, the cells, locks and the other wrappers
/// add nothing. A type with nothing sensitive implements it with the default:
/// `impl outbox_core::Redact for Money {}`. An enum cannot derive it: a field whose type is an enum with sensitive
/// values inside is marked `#[outbox(sensitive)]` whole. A field written by a function of yours
/// (`#[serde(with = ...)]`, `serialize_with`) is redacted whole when its type has sensitive fields: what the
/// function writes need not have their shape.
///
/// A field whose type does not implement `Redact` is taken as holding nothing sensitive, except in a generic
/// struct: a field whose type names a type parameter requires that type to implement `Redact` (as serde requires
/// `T: Serialize`), so that `Envelope<Card>` cannot lose `Card`'s sensitive fields; and a field of type
/// `Envelope<Money>`, where `Money` does not implement `Redact`, does not compile (taken as holding nothing, it
/// would lose `Envelope`'s own sensitive fields). A derived impl of a type that holds itself (`children:
/// Vec<Unit>`) redacts the values of the type inside itself whole when the type has sensitive fields.
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

thread_local! {
    /// The derived impls running on this thread, innermost last: the type's name, whether it was met inside
    /// itself, and whether a value met so is redacted whole.
    static RUNNING: std::cell::RefCell<Vec<(&'static str, bool, bool)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Takes a derived impl off [`RUNNING`] however it ends.
struct Running;

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.with(|running| running.borrow_mut().pop());
    }
}

/// What a derived [`Redact`] impl returns for the type named `name`, computed by `paths`, which calls the impls
/// of the type's fields: for a type that holds itself (`children: Vec<Unit>`, directly or through other types)
/// those calls come back to this one, and the pointers of its values are endless. A type met again inside itself
/// adds no pointers at first; when its own fields name sensitive values, the pointers are computed again with the
/// whole of each value of the type met inside itself redacted (`/children/*`): more than needed, never less.
pub(crate) fn recursion_guarded(name: &'static str, paths: impl Fn() -> Vec<String>) -> Vec<String> {
    thread_local! {
        /// What each type's impl returned when called from outside any derived impl: the same at every call, and
        /// for types that hold each other costly to compute (each met inside itself computes twice).
        static COMPUTED: std::cell::RefCell<std::collections::HashMap<&'static str, Vec<String>>> =
            std::cell::RefCell::new(std::collections::HashMap::new());
    }
    let outermost = RUNNING.with(|running| running.borrow().is_empty());
    if outermost {
        if let Some(paths) = COMPUTED.with(|computed| computed.borrow().get(name).cloned()) {
            return paths;
        }
        let paths = recursion_guarded_uncached(name, paths);
        COMPUTED.with(|computed| computed.borrow_mut().insert(name, paths.clone()));
        return paths;
    }
    recursion_guarded_uncached(name, paths)
}

/// [`recursion_guarded`] without the memo.
fn recursion_guarded_uncached(name: &'static str, paths: impl Fn() -> Vec<String>) -> Vec<String> {
    let again = RUNNING.with(|running| {
        let mut running = running.borrow_mut();
        let found = running.iter_mut().rev().find(|(running, _, _)| *running == name);
        found.map(|(_, met, whole)| {
            *met = true;
            *whole
        })
    });
    match again {
        Some(true) => return vec![String::new()],
        Some(false) => return Vec::new(),
        None => {}
    }
    RUNNING.with(|running| running.borrow_mut().push((name, false, false)));
    let _running = Running;
    let first = paths();
    let met_inside = RUNNING.with(|running| running.borrow().last().is_some_and(|(_, met, _)| *met));
    if !met_inside || first.is_empty() {
        return first;
    }
    RUNNING.with(|running| {
        if let Some(top) = running.borrow_mut().last_mut() {
            top.2 = true;
        }
    });
    paths()
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

same_as_inner!(
    Box<T>,
    Rc<T>,
    Arc<T>,
    &T,
    &mut T,
    std::cell::Cell<T>,
    std::cell::RefCell<T>,
    std::sync::Mutex<T>,
    std::sync::RwLock<T>
);

/// Serialized as their value.
macro_rules! sized_same_as_inner {
    ($($ty:ty),* $(,)?) => {
        $(impl<T: Redact> Redact for $ty {
            fn redact_paths() -> Vec<String> {
                T::redact_paths()
            }
        })*
    };
}

sized_same_as_inner!(std::cmp::Reverse<T>, std::num::Wrapping<T>);

/// Serialized as serde writes an enum: `{"Ok": ...}` or `{"Err": ...}`.
impl<T: Redact, E: Redact> Redact for Result<T, E> {
    fn redact_paths() -> Vec<String> {
        let mut paths = prefixed("/Ok", T::redact_paths());
        paths.extend(prefixed("/Err", E::redact_paths()));
        paths
    }
}

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

every_element!(Vec<T>, VecDeque<T>, [T], BTreeSet<T>, std::collections::LinkedList<T>, std::collections::BinaryHeap<T>);

impl<T: ?Sized> Redact for std::marker::PhantomData<T> {}

/// A tuple serializes as an array: each element's pointers under its index.
macro_rules! tuple {
    ($($name:ident $index:literal),+) => {
        impl<$($name: Redact),+> Redact for ($($name,)+) {
            fn redact_paths() -> Vec<String> {
                let mut paths = Vec::new();
                $(paths.extend(prefixed(concat!("/", $index), $name::redact_paths()));)+
                paths
            }
        }
    };
}
tuple!(A 0);
tuple!(A 0, B 1);
tuple!(A 0, B 1, C 2);
tuple!(A 0, B 1, C 2, D 3);
tuple!(A 0, B 1, C 2, D 3, E 4);
tuple!(A 0, B 1, C 2, D 3, E 4, F 5);
tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);
tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12);
tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13);
tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14);
tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14, P 15);

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
    fn a_type_that_holds_itself_has_its_values_inside_itself_redacted_whole() {
        struct Unit;
        impl Redact for Unit {
            fn redact_paths() -> Vec<String> {
                super::recursion_guarded("Unit", || {
                    let mut paths = vec!["/email".to_owned()];
                    paths.extend(super::prefixed("/children", <Vec<Self>>::redact_paths()));
                    paths
                })
            }
        }
        struct Comment;
        impl Redact for Comment {
            fn redact_paths() -> Vec<String> {
                super::recursion_guarded("Comment", || {
                    super::prefixed("/reply_to", <Option<Box<Self>>>::redact_paths())
                })
            }
        }
        assert_eq!(Unit::redact_paths(), ["/email", "/children/*"]);
        assert_eq!(<Vec<Unit>>::redact_paths(), ["/*/email", "/*/children/*"]);
        assert!(Comment::redact_paths().is_empty(), "nothing sensitive anywhere: nothing redacted");
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
        assert_eq!(<Vec<(u32, Inner)>>::redact_paths(), ["/*/1/pin"]);
        assert_eq!(<std::collections::HashMap<String, Vec<Inner>>>::redact_paths(), ["/*/*/pin"]);
        assert!(<Option<String>>::redact_paths().is_empty());
        assert_eq!(<Result<Inner, Inner>>::redact_paths(), ["/Ok/pin", "/Err/pin"]);
        assert_eq!(<(u8, u8, u8, u8, Inner)>::redact_paths(), ["/4/pin"]);
        assert_eq!(<std::collections::LinkedList<std::sync::Mutex<Inner>>>::redact_paths(), ["/*/pin"]);
        assert_eq!(<std::cell::RefCell<std::cmp::Reverse<Inner>>>::redact_paths(), ["/pin"]);
    }
}
