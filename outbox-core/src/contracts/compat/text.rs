//! How schemas and values are written in reports, and JSON pointer escaping.

use super::*;

/// A short description of a schema for reports: its types, or its values.
pub(crate) fn summary(value: &Value) -> String {
    let (branches, nullable) = branches(value);
    types_text(&branches, nullable)
}

pub(super) fn summary_single(value: &Value) -> String {
    match as_map(value) {
        None => "nothing".to_owned(),
        Some(map) if map.is_empty() => "any".to_owned(),
        Some(map) => match allowed_values(map) {
            Some(values) if values.len() == 1 => short(&values[0]),
            _ => type_names(types_of(map) & !NULL),
        },
    }
}

pub(super) fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 48 {
        format!("{}...", text.chars().take(45).collect::<String>())
    } else {
        text
    }
}

pub(super) fn list(values: &[Value]) -> String {
    match values {
        [one] => short(one),
        _ => short(&Value::Array(values.to_vec())),
    }
}

pub(crate) fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}
