//! Serializing payloads to JSON text, with NaN and infinities rejected instead of silently written as `null`, and
//! NUL characters rejected before the database refuses them.

use std::fmt::{self, Display};

use serde::ser::{self, Serialize};

use crate::error::{Error, Result};

/// Serializes `value` to JSON text. Fails, before anything is written anywhere, when the value holds a map with
/// non-string keys (serde_json's own check), a NaN or infinite float (which serde_json would turn into `null`), or
/// a string or key with a NUL character (`\u0000`, which PostgreSQL's `jsonb` refuses).
pub(crate) fn to_json<T: Serialize + ?Sized>(event_type: &'static str, value: &T) -> Result<String> {
    let mut finite = FiniteCheck { path: Vec::new() };
    // A `Serialize` impl that fails on its own (`NonFinite::Custom`) reports the same failure below, with
    // serde_json's message.
    match value.serialize(&mut finite) {
        Err(NonFinite::Number(path)) => return Err(Error::NonFiniteNumber { event_type, path }),
        Err(NonFinite::Nul(path)) => return Err(Error::NulCharacter { event_type, path }),
        Err(NonFinite::RawText(path)) => {
            return Err(Error::InvalidEvent {
                event_type: event_type.to_owned(),
                reason: format!(
                    "the raw JSON at `{path}` holds a lone UTF-16 surrogate escape (such as `\\ud800`), which a \
                     database cannot store"
                ),
            })
        }
        Ok(()) | Err(NonFinite::Custom) => {}
    }
    serde_json::to_string(value).map_err(|source| Error::Serialize { event_type, source })
}

/// The name serde_json gives a `RawValue` and its one field, its JSON text, when it serializes one.
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// Walks a value the way a serializer sees it and stops at the first value JSON or `jsonb` cannot hold (a
/// non-finite float, a string with a NUL character), keeping its JSON pointer. The pointer names struct fields,
/// enum variants and array indexes as they are, and a map's entry by its place among the entries serialized
/// (`<entry 2>` for the third), never by its key: a key is data.
struct FiniteCheck {
    path: Vec<String>,
}

/// Why the walk stopped.
#[derive(Debug)]
enum NonFinite {
    /// A non-finite float, at this pointer.
    Number(String),
    /// A string or map key with a NUL character, at this pointer (a key's is its map's).
    Nul(String),
    /// A `RawValue` whose text serde_json writes as it is but cannot read back (a lone surrogate escape such as
    /// `"\ud800"`, which `jsonb` refuses, failing the transaction), at this pointer.
    RawText(String),
    /// The value's own `Serialize` impl failed.
    Custom,
}

impl Display for NonFinite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Number(_) => "non-finite number",
            Self::Nul(_) => "NUL character",
            Self::RawText(_) => "unreadable raw JSON",
            Self::Custom => "serialization failed",
        })
    }
}

impl std::error::Error for NonFinite {}

impl ser::Error for NonFinite {
    fn custom<T: Display>(_msg: T) -> Self {
        Self::Custom
    }
}

impl FiniteCheck {
    fn pointer(&self) -> String {
        self.path.iter().map(|segment| format!("/{}", segment.replace('~', "~0").replace('/', "~1"))).collect()
    }

    fn float(&self, finite: bool) -> Result<(), NonFinite> {
        if finite {
            Ok(())
        } else {
            Err(NonFinite::Number(self.pointer()))
        }
    }

    /// A `RawValue`'s JSON text, walked as the JSON it holds: there a NUL is the escape `\u0000`. Text serde_json
    /// cannot read back is left as it is (a number beyond `f64`, deep nesting: the database reads those), unless it
    /// holds a lone surrogate escape, which serde_json would write as it is and the database would refuse.
    fn raw<T: Serialize + ?Sized>(&mut self, text: &T) -> Result<(), NonFinite> {
        let Ok(serde_json::Value::String(text)) = serde_json::to_value(text) else { return Ok(()) };
        match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(json) => json.serialize(self),
            Err(_) if has_lone_surrogate(&text) => Err(NonFinite::RawText(self.pointer())),
            Err(_) => Ok(()),
        }
    }

    fn text(&self, text: &str) -> Result<(), NonFinite> {
        if text.contains('\0') {
            Err(NonFinite::Nul(self.pointer()))
        } else {
            Ok(())
        }
    }

    fn nested<T: Serialize + ?Sized>(&mut self, segment: String, value: &T) -> Result<(), NonFinite> {
        self.path.push(segment);
        value.serialize(&mut *self)?;
        self.path.pop();
        Ok(())
    }
}

/// Whether JSON `text` holds, in a string, a `\u` escape of a UTF-16 surrogate that is not half of a pair.
fn has_lone_surrogate(text: &str) -> bool {
    let bytes = text.as_bytes();
    let unit = |at: usize| {
        let hex = bytes.get(at..at + 4)?;
        u16::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
    };
    let (mut i, mut in_string) = (0, false);
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                in_string = !in_string;
                i += 1;
            }
            b'\\' if in_string && bytes.get(i + 1) == Some(&b'u') => match unit(i + 2) {
                Some(0xD800..=0xDBFF) => {
                    let low = bytes.get(i + 6..i + 8) == Some(b"\\u".as_slice())
                        && matches!(unit(i + 8), Some(0xDC00..=0xDFFF));
                    if !low {
                        return true;
                    }
                    i += 12;
                }
                Some(0xDC00..=0xDFFF) => return true,
                _ => i += 6,
            },
            // Any other escape, `\"` and `\\` included: its second character is not the string's end.
            b'\\' if in_string => i += 2,
            _ => i += 1,
        }
    }
    false
}

/// A sequence or map being walked: counts elements or entries so the pointer names their place.
struct Compound<'a> {
    check: &'a mut FiniteCheck,
    index: usize,
    key: Option<String>,
}

impl<'a> Compound<'a> {
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), NonFinite> {
        let segment = self.index.to_string();
        self.index += 1;
        self.check.nested(segment, value)
    }
}

impl<'a> ser::Serializer for &'a mut FiniteCheck {
    type Ok = ();
    type Error = NonFinite;
    type SerializeSeq = Compound<'a>;
    type SerializeTuple = Compound<'a>;
    type SerializeTupleStruct = Compound<'a>;
    type SerializeTupleVariant = Compound<'a>;
    type SerializeMap = Compound<'a>;
    type SerializeStruct = Compound<'a>;
    type SerializeStructVariant = Compound<'a>;

    fn serialize_bool(self, _: bool) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_i8(self, _: i8) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_i16(self, _: i16) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_i32(self, _: i32) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_i64(self, _: i64) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_i128(self, _: i128) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_u8(self, _: u8) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_u16(self, _: u16) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_u32(self, _: u32) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_u64(self, _: u64) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_u128(self, _: u128) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Result<(), NonFinite> {
        self.float(v.is_finite())
    }
    fn serialize_f64(self, v: f64) -> Result<(), NonFinite> {
        self.float(v.is_finite())
    }
    fn serialize_char(self, v: char) -> Result<(), NonFinite> {
        self.text(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> Result<(), NonFinite> {
        self.text(v)
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_none(self) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), NonFinite> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Result<(), NonFinite> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), NonFinite> {
        self.nested(variant.to_owned(), value)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Compound<'a>, NonFinite> {
        Ok(Compound { check: self, index: 0, key: None })
    }
    fn serialize_tuple(self, _: usize) -> Result<Compound<'a>, NonFinite> {
        Ok(Compound { check: self, index: 0, key: None })
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Compound<'a>, NonFinite> {
        Ok(Compound { check: self, index: 0, key: None })
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Compound<'a>, NonFinite> {
        self.path.push(variant.to_owned());
        Ok(Compound { check: self, index: 0, key: Some(String::new()) })
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Compound<'a>, NonFinite> {
        Ok(Compound { check: self, index: 0, key: None })
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Compound<'a>, NonFinite> {
        Ok(Compound { check: self, index: 0, key: None })
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Compound<'a>, NonFinite> {
        self.path.push(variant.to_owned());
        Ok(Compound { check: self, index: 0, key: Some(String::new()) })
    }
}

impl ser::SerializeSeq for Compound<'_> {
    type Ok = ();
    type Error = NonFinite;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), NonFinite> {
        self.element(value)
    }
    fn end(self) -> Result<(), NonFinite> {
        Ok(())
    }
}

impl ser::SerializeTuple for Compound<'_> {
    type Ok = ();
    type Error = NonFinite;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), NonFinite> {
        self.element(value)
    }
    fn end(self) -> Result<(), NonFinite> {
        Ok(())
    }
}

impl ser::SerializeTupleStruct for Compound<'_> {
    type Ok = ();
    type Error = NonFinite;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), NonFinite> {
        self.element(value)
    }
    fn end(self) -> Result<(), NonFinite> {
        Ok(())
    }
}

impl ser::SerializeTupleVariant for Compound<'_> {
    type Ok = ();
    type Error = NonFinite;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), NonFinite> {
        self.element(value)
    }
    fn end(self) -> Result<(), NonFinite> {
        self.check.path.pop();
        Ok(())
    }
}

impl ser::SerializeMap for Compound<'_> {
    type Ok = ();
    type Error = NonFinite;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), NonFinite> {
        key.serialize(&mut *self.check)?;
        // A key is data, perhaps sensitive (an email address as a key): the pointer names the entry by its place.
        self.key = Some(format!("<entry {}>", self.index));
        self.index += 1;
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), NonFinite> {
        let key = self.key.take().unwrap_or_default();
        self.check.nested(key, value)
    }
    fn end(self) -> Result<(), NonFinite> {
        Ok(())
    }
}

impl ser::SerializeStruct for Compound<'_> {
    type Ok = ();
    type Error = NonFinite;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), NonFinite> {
        if key == RAW_VALUE_TOKEN {
            return self.check.raw(value);
        }
        self.check.nested(key.to_owned(), value)
    }
    fn end(self) -> Result<(), NonFinite> {
        Ok(())
    }
}

impl ser::SerializeStructVariant for Compound<'_> {
    type Ok = ();
    type Error = NonFinite;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), NonFinite> {
        self.check.nested(key.to_owned(), value)
    }
    fn end(self) -> Result<(), NonFinite> {
        self.check.path.pop();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Serialize;

    use super::to_json;
    use crate::error::Error;

    #[derive(Serialize)]
    struct Reading {
        sensor: &'static str,
        values: Vec<f64>,
        extra: BTreeMap<&'static str, f32>,
    }

    #[test]
    fn finite_payload_serializes_like_serde_json() {
        let reading = Reading { sensor: "a", values: vec![1.5, 2.0], extra: BTreeMap::from([("t", 3.0)]) };
        assert_eq!(to_json("r", &reading).unwrap(), serde_json::to_string(&reading).unwrap());
    }

    #[test]
    fn nan_inside_an_array_is_rejected_with_its_pointer() {
        let reading = Reading { sensor: "a", values: vec![1.0, f64::NAN], extra: BTreeMap::new() };
        match to_json("r", &reading) {
            Err(Error::NonFiniteNumber { path, .. }) => assert_eq!(path, "/values/1"),
            other => panic!("expected NonFiniteNumber, got {other:?}"),
        }
    }

    #[test]
    fn infinity_as_a_map_value_is_rejected_with_the_place_of_its_entry_and_not_its_key() {
        let extra = BTreeMap::from([("alice@example.com", 1.0), ("bob@example.com", f32::INFINITY)]);
        let reading = Reading { sensor: "a", values: vec![], extra };
        match to_json("r", &reading) {
            Err(error @ Error::NonFiniteNumber { .. }) => {
                assert!(
                    matches!(&error, Error::NonFiniteNumber { path, .. } if path == "/extra/<entry 1>"),
                    "{error:?}"
                );
                assert!(!error.to_string().contains("example"), "{error}");
            }
            other => panic!("expected NonFiniteNumber, got {other:?}"),
        }
    }

    #[test]
    fn a_nul_character_in_a_string_or_a_key_is_rejected_with_its_pointer_and_not_its_value() {
        #[derive(Serialize)]
        struct Note {
            lines: Vec<String>,
            tags: BTreeMap<String, String>,
            initial: char,
        }
        let note = |lines: &[&str], tag: &str, initial| Note {
            lines: lines.iter().map(|line| (*line).to_owned()).collect(),
            tags: BTreeMap::from([(tag.to_owned(), "secret-value".to_owned())]),
            initial,
        };
        for (value, pointer) in [
            (note(&["ok", "secret\0x"], "k", 'a'), "/lines/1"),
            (note(&[], "secret\0key", 'a'), "/tags"),
            (note(&[], "k", '\0'), "/initial"),
        ] {
            match to_json("n", &value) {
                Err(error @ Error::NulCharacter { .. }) => {
                    let Error::NulCharacter { path, .. } = &error else { unreachable!() };
                    assert_eq!(path, pointer);
                    assert!(!error.to_string().contains("secret"), "{error}");
                }
                other => panic!("expected NulCharacter, got {other:?}"),
            }
        }
        // An escaped backslash followed by `u0000` is text, not a NUL.
        assert!(to_json("n", &note(&["\\u0000"], "k", 'a')).is_ok());
    }

    /// Serializes as serde_json's `RawValue` does: a struct of one field, both named by its token, holding JSON text.
    struct Raw(&'static str);

    impl Serialize for Raw {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            use serde::ser::SerializeStruct;
            let mut raw = serializer.serialize_struct(super::RAW_VALUE_TOKEN, 1)?;
            raw.serialize_field(super::RAW_VALUE_TOKEN, self.0)?;
            raw.end()
        }
    }

    #[test]
    fn a_nul_escape_inside_raw_json_is_rejected_with_its_pointer() {
        #[derive(Serialize)]
        struct Wrapper {
            raw: Raw,
        }
        let nul = Wrapper { raw: Raw(r#"{"secret-key":["x","secret\u0000"]}"#) };
        match to_json("w", &nul) {
            Err(error @ Error::NulCharacter { .. }) => {
                assert!(matches!(&error, Error::NulCharacter { path, .. } if path == "/raw/<entry 0>/1"), "{error:?}");
                assert!(!error.to_string().contains("secret"), "{error}");
            }
            other => panic!("expected NulCharacter, got {other:?}"),
        }
        let text = Wrapper { raw: Raw(r#"{"a":"\\u0000 is text"}"#) };
        assert!(to_json("w", &text).is_ok());
    }

    #[test]
    fn raw_json_serde_json_cannot_read_back_is_refused_with_its_pointer_and_without_its_text() {
        #[derive(Serialize)]
        struct Wrapper {
            email: &'static str,
            extra: Raw,
        }
        // serde_json keeps a lone surrogate escape in a `RawValue` and writes it out; `jsonb` refuses it (and
        // quotes the text before it in its error, which is how a sensitive value would reach a log).
        let lone = Wrapper { email: "ana@example.com", extra: Raw(r#"{"note":"\ud800"}"#) };
        match to_json("w", &lone) {
            Err(error @ Error::InvalidEvent { .. }) => {
                let text = error.to_string();
                assert!(text.contains("`/extra`") && text.contains("surrogate"), "{text}");
                assert!(!text.contains("ana@") && !text.contains("note"), "{text}");
            }
            other => panic!("expected InvalidEvent, got {other:?}"),
        }
        // What serde_json cannot read back but a database stores is left as it was: a number beyond `f64`; and a
        // surrogate pair, or escaped backslashes before a `u`, are no lone surrogates.
        for raw in [r#"{"n":1e400}"#, r#"{"s":"\ud83d\ude00"}"#, r#"{"s":"\\ud800"}"#] {
            let wrapper = Wrapper { email: "ana@example.com", extra: Raw(raw) };
            assert!(to_json("w", &wrapper).is_ok(), "{raw}");
        }
        for raw in [r#"{"s":"\udc00"}"#, r#"{"s":"\ud800x"}"#, r#"["\ud800\u0041"]"#] {
            let wrapper = Wrapper { email: "ana@example.com", extra: Raw(raw) };
            assert!(to_json("w", &wrapper).is_err(), "{raw}");
        }
    }

    #[test]
    fn map_with_non_string_keys_is_a_serialize_error() {
        let map = BTreeMap::from([((1, 2), "x")]);
        assert!(matches!(to_json("m", &map), Err(Error::Serialize { event_type: "m", .. })));
    }
}
