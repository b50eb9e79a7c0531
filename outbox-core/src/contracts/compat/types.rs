//! JSON types: the `type` keyword, and the type sets every other keyword family is compared under.

use super::*;

// JSON types as bits; `number` implies `integer` once normalized.
pub(super) const NULL: u8 = 1;
pub(super) const BOOLEAN: u8 = 2;
pub(super) const INTEGER: u8 = 4;
pub(super) const NUMBER: u8 = 8;
pub(super) const STRING: u8 = 16;
pub(super) const ARRAY: u8 = 32;
pub(super) const OBJECT: u8 = 64;
pub(super) const ALL: u8 = 127;
pub(super) const TYPE_NAMES: [(u8, &str); 7] = [
    (NULL, "null"),
    (BOOLEAN, "boolean"),
    (INTEGER, "integer"),
    (NUMBER, "number"),
    (STRING, "string"),
    (ARRAY, "array"),
    (OBJECT, "object"),
];

impl Walk {
    pub(super) fn type_change(&mut self, old: u8, new: u8, old_text: String, new_text: String, at: &str) {
        let (old, new) = (normalized(old), normalized(new));
        if old == new {
            return;
        }
        if new & old == old {
            self.push(Rule::TypeWidened, at, old_text, new_text, false, true);
        } else if old & new == new {
            self.push(Rule::TypeNarrowed, at, old_text, new_text, true, false);
        } else {
            self.push(Rule::TypeChanged, at, old_text, new_text, true, true);
        }
    }
}

/// The JSON types a schema accepts, from `type`, or from its `const`/`enum` values, or all.
pub(super) fn types_of(map: &Map<String, Value>) -> u8 {
    match map.get("type") {
        Some(Value::String(name)) => type_bit(name),
        Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).map(type_bit).fold(0, |a, b| a | b),
        _ => match (map.get("const"), map.get("enum").and_then(Value::as_array)) {
            (Some(value), _) => value_type(value),
            (None, Some(values)) if !values.is_empty() => values.iter().map(value_type).fold(0, |a, b| a | b),
            _ => ALL,
        },
    }
}

/// Whether [`types_of`] reads the types off the schema (`type`, `const`, `enum`) rather than taking them all.
pub(super) fn names_types(map: &Map<String, Value>) -> bool {
    matches!(map.get("type"), Some(Value::String(_) | Value::Array(_)))
        || map.contains_key("const")
        || map.get("enum").and_then(Value::as_array).is_some_and(|values| !values.is_empty())
}

/// The JSON types a `type` keyword names, normalized (`number` includes `integer`), so two of them intersect.
pub(super) fn type_bits(names: &Value) -> u8 {
    match names {
        Value::String(name) => normalized(type_bit(name)),
        Value::Array(names) => normalized(names.iter().filter_map(Value::as_str).map(type_bit).fold(0, |a, b| a | b)),
        _ => ALL,
    }
}

/// A `type` keyword that names `types`: one name, or a list.
pub(super) fn type_value(types: u8) -> Value {
    let mut names: Vec<Value> = TYPE_NAMES
        .iter()
        .filter(|(bit, _)| types & bit != 0)
        .filter(|(bit, _)| !(*bit == INTEGER && types & NUMBER != 0))
        .map(|(_, name)| Value::String((*name).to_owned()))
        .collect();
    if names.len() == 1 {
        names.remove(0)
    } else {
        Value::Array(names)
    }
}

pub(super) fn union_types(branches: &[Value]) -> u8 {
    branches.iter().filter_map(as_map).map(types_of).fold(0, |a, b| a | b)
}

pub(super) fn type_bit(name: &str) -> u8 {
    TYPE_NAMES.iter().find(|(_, n)| *n == name).map_or(0, |(bit, _)| *bit)
}

pub(super) fn value_type(value: &Value) -> u8 {
    match value {
        Value::Null => NULL,
        Value::Bool(_) => BOOLEAN,
        Value::Number(n) if n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0) => INTEGER,
        Value::Number(_) => NUMBER,
        Value::String(_) => STRING,
        Value::Array(_) => ARRAY,
        Value::Object(_) => OBJECT,
    }
}

pub(super) fn normalized(types: u8) -> u8 {
    if types & NUMBER != 0 {
        types | INTEGER
    } else {
        types
    }
}

pub(super) fn type_names(types: u8) -> String {
    if types & !NULL == ALL & !NULL {
        return if types & NULL != 0 { "any".to_owned() } else { "any but null".to_owned() };
    }
    if types == 0 {
        return "nothing".to_owned();
    }
    let names: Vec<&str> = TYPE_NAMES
        .iter()
        .filter(|(bit, _)| types & bit != 0)
        .filter(|(bit, _)| !(*bit == INTEGER && types & NUMBER != 0))
        .map(|(_, name)| *name)
        .collect();
    names.join("|")
}

pub(super) fn types_text(branches: &[Value], nullable: bool) -> String {
    let mut parts: Vec<String> = branches.iter().map(summary_single).collect();
    parts.dedup();
    if nullable && !branches.iter().any(|b| matches!(b, Value::Bool(true))) {
        parts.push("null".to_owned());
    }
    if parts.is_empty() {
        "nothing".to_owned()
    } else {
        parts.join("|")
    }
}
