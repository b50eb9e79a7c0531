//! A set of contracts in memory, and reading it from a contracts folder or a single schema file.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::resolve::resolve;
use super::{parse_allow_list, Allow, ContractError};
use crate::schema::{EVENT_TYPE, VERSION};

/// The file of accepted breaks at the root of a contracts folder, read by [`diff_paths`](super::diff_paths) (from
/// the new side) and by the [snapshot](super::Snapshot): one [`Allow`] per line.
pub const ALLOW_FILE: &str = "allowed-breaks.txt";

/// The JSON Schemas of a program's events, by event type and version: what a contracts folder holds.
///
/// # Example
///
/// ```
/// use outbox_core::contracts::Contracts;
/// use serde_json::json;
///
/// let mut contracts = Contracts::new();
/// contracts.insert("order.placed", 1, json!({ "type": "object" }));
/// assert_eq!(contracts.get("order.placed", 1), Some(&json!({ "type": "object" })));
/// assert_eq!(contracts.versions("order.placed").map(|(v, _)| v).collect::<Vec<_>>(), [1]);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Contracts {
    events: BTreeMap<String, BTreeMap<u32, Value>>,
    allowed: Vec<Allow>,
}

impl Contracts {
    /// No contracts.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) the schema of `event_type` version `version`; returns the one it replaced.
    pub fn insert(&mut self, event_type: impl Into<String>, version: u32, schema: Value) -> Option<Value> {
        self.events.entry(event_type.into()).or_default().insert(version, schema)
    }

    /// The schema of `event_type` version `version`.
    #[must_use]
    pub fn get(&self, event_type: &str, version: u32) -> Option<&Value> {
        self.events.get(event_type)?.get(&version)
    }

    /// Removes a version; returns its schema.
    pub fn remove(&mut self, event_type: &str, version: u32) -> Option<Value> {
        let versions = self.events.get_mut(event_type)?;
        let removed = versions.remove(&version);
        if versions.is_empty() {
            self.events.remove(event_type);
        }
        removed
    }

    /// The event types, sorted.
    pub fn event_types(&self) -> impl Iterator<Item = &str> {
        self.events.keys().map(String::as_str)
    }

    /// The versions of `event_type` with their schemas, oldest first.
    pub fn versions(&self, event_type: &str) -> impl Iterator<Item = (u32, &Value)> {
        self.events.get(event_type).into_iter().flatten().map(|(version, schema)| (*version, schema))
    }

    /// Every `(event_type, version, schema)`, sorted.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u32, &Value)> {
        self.events.iter().flat_map(|(event_type, versions)| {
            versions.iter().map(move |(v, schema)| (event_type.as_str(), *v, schema))
        })
    }

    /// How many contracts (event type and version pairs) there are.
    pub fn len(&self) -> usize {
        self.events.values().map(BTreeMap::len).sum()
    }

    /// Whether there is none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The breaks the folder's [`ALLOW_FILE`] accepts.
    #[must_use]
    pub fn allowed(&self) -> &[Allow] {
        &self.allowed
    }

    /// Replaces the accepted breaks.
    pub fn set_allowed(&mut self, allowed: Vec<Allow>) {
        self.allowed = allowed;
    }

    /// Reads a contracts folder (`<event_type>/v<version>.schema.json` files, an optional [`ALLOW_FILE`]; other
    /// files at the root, such as `asyncapi.json`, are skipped) or a single schema file, whose event type and
    /// version come from its `x-outbox-event-type`/`x-outbox-version`, else from its name.
    ///
    /// # Errors
    ///
    /// [`ContractError::Io`] when something cannot be read, [`ContractError::NotJson`],
    /// [`ContractError::NotASchema`], [`ContractError::DanglingRef`] for a bad file, [`ContractError::Layout`]
    /// for a file that does not follow the layout, [`ContractError::BadAllow`] for a bad allow file.
    ///
    /// # Example
    ///
    /// ```no_run
    /// let committed = outbox_core::contracts::Contracts::load("contracts")?;
    /// println!("{} contracts", committed.len());
    /// # Ok::<(), outbox_core::contracts::ContractError>(())
    /// ```
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ContractError> {
        let path = path.as_ref();
        let metadata = fs::metadata(path).map_err(ContractError::io("read", path))?;
        if metadata.is_dir() {
            Self::load_dir(path)
        } else {
            let schema = read_schema(path)?;
            let (event_type, version) = single_file_key(path, &schema);
            let mut contracts = Self::new();
            contracts.insert(event_type, version, schema);
            Ok(contracts)
        }
    }

    fn load_dir(dir: &Path) -> Result<Self, ContractError> {
        let mut contracts = Self::new();
        for entry in list(dir)? {
            let name = file_name(&entry);
            if name.starts_with('.') {
                continue;
            }
            if entry.is_dir() {
                for file in list(&entry)? {
                    let file_name = file_name(&file);
                    if file_name.starts_with('.') || !file_name.ends_with(".json") {
                        continue;
                    }
                    let Some(version) = parse_version(&file_name) else {
                        return Err(ContractError::Layout {
                            path: file,
                            reason: "expected a file named `v<version>.schema.json`, e.g. `v1.schema.json`".into(),
                        });
                    };
                    let schema = read_schema(&file)?;
                    check_metadata(&file, &schema, &name, version)?;
                    contracts.insert(name.clone(), version, schema);
                }
            } else if name == ALLOW_FILE {
                let text = fs::read_to_string(&entry).map_err(ContractError::io("read", &entry))?;
                contracts.allowed = parse_allow_list(&text)?;
            }
        }
        Ok(contracts)
    }
}

fn list(dir: &Path) -> Result<Vec<PathBuf>, ContractError> {
    let mut entries = Vec::new();
    for entry in fs::read_dir(dir).map_err(ContractError::io("list", dir))? {
        entries.push(entry.map_err(ContractError::io("list", dir))?.path());
    }
    entries.sort();
    Ok(entries)
}

fn file_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// `v12.schema.json` -> 12.
pub(crate) fn parse_version(file_name: &str) -> Option<u32> {
    let digits = file_name.strip_prefix('v')?.strip_suffix(".schema.json")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.starts_with('0') {
        return None;
    }
    digits.parse().ok()
}

fn single_file_key(path: &Path, schema: &Value) -> (String, u32) {
    let name = file_name(path);
    let version = schema
        .get(VERSION)
        .and_then(Value::as_u64)
        .and_then(|v| u32::try_from(v).ok())
        .or_else(|| parse_version(&name))
        .unwrap_or(1);
    let event_type = schema.get(EVENT_TYPE).and_then(Value::as_str).map(str::to_owned).unwrap_or_else(|| {
        if parse_version(&name).is_some() {
            path.parent().map(file_name).filter(|n| !n.is_empty()).unwrap_or(name)
        } else {
            name.trim_end_matches(".json").trim_end_matches(".schema").to_owned()
        }
    });
    (event_type, version)
}

fn check_metadata(path: &Path, schema: &Value, event_type: &str, version: u32) -> Result<(), ContractError> {
    if let Some(declared) = schema.get(EVENT_TYPE) {
        if declared.as_str() != Some(event_type) {
            return Err(ContractError::Layout {
                path: path.to_owned(),
                reason: format!("`{EVENT_TYPE}` is {declared} but the folder is `{event_type}`"),
            });
        }
    }
    if let Some(declared) = schema.get(VERSION) {
        if declared.as_u64() != Some(u64::from(version)) {
            return Err(ContractError::Layout {
                path: path.to_owned(),
                reason: format!("`{VERSION}` is {declared} but the file is for version {version}"),
            });
        }
    }
    Ok(())
}

/// Reads, parses and checks one schema file.
pub(crate) fn read_schema(path: &Path) -> Result<Value, ContractError> {
    let text = fs::read_to_string(path).map_err(ContractError::io("read", path))?;
    let schema: Value =
        serde_json::from_str(&text).map_err(|source| ContractError::NotJson { path: path.to_owned(), source })?;
    check_schema(&schema).map_err(|reason| ContractError::NotASchema { path: path.to_owned(), reason })?;
    if let Some(reference) = resolve(&schema).dangling.into_iter().next() {
        return Err(ContractError::DanglingRef { path: path.to_owned(), reference });
    }
    Ok(schema)
}

/// Checks that `schema` is a JSON Schema whose keywords have values of the right kind; the reason names the
/// JSON pointer of the first bad keyword.
pub(crate) fn check_schema(schema: &Value) -> Result<(), String> {
    if !(schema.is_object() || schema.is_boolean()) {
        return Err(format!("a schema is an object or a boolean, found {}", kind(schema)));
    }
    check_node(schema, "", 0)
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn check_node(node: &Value, at: &str, depth: usize) -> Result<(), String> {
    let Value::Object(map) = node else {
        return if node.is_boolean() { Ok(()) } else { Err(format!("{at}: expected a schema, found {}", kind(node))) };
    };
    if depth > 200 {
        return Err(format!("{at}: nested too deeply"));
    }
    const TYPES: [&str; 7] = ["null", "boolean", "integer", "number", "string", "array", "object"];
    for (key, value) in map {
        let here = format!("{at}/{}", super::compat::escape(key));
        let bad = |expected: &str| Err(format!("{here}: expected {expected}, found {}", kind(value)));
        match key.as_str() {
            "type" => match value {
                Value::String(name) if TYPES.contains(&name.as_str()) => {}
                Value::Array(names) if names.iter().all(|n| n.as_str().is_some_and(|n| TYPES.contains(&n))) => {}
                _ => return Err(format!("{here}: expected a JSON type name or a list of them, found {value}")),
            },
            "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas" => {
                let Value::Object(children) = value else { return bad("an object of schemas") };
                for (name, child) in children {
                    check_node(child, &format!("{here}/{}", super::compat::escape(name)), depth + 1)?;
                }
            }
            "anyOf" | "oneOf" | "allOf" | "prefixItems" => {
                let Value::Array(children) = value else { return bad("an array of schemas") };
                if children.is_empty() {
                    return Err(format!("{here}: must not be empty"));
                }
                for (index, child) in children.iter().enumerate() {
                    check_node(child, &format!("{here}/{index}"), depth + 1)?;
                }
            }
            "items" if value.is_array() => {
                for (index, child) in value.as_array().into_iter().flatten().enumerate() {
                    check_node(child, &format!("{here}/{index}"), depth + 1)?;
                }
            }
            "items"
            | "additionalProperties"
            | "additionalItems"
            | "contains"
            | "not"
            | "if"
            | "then"
            | "else"
            | "propertyNames"
            | "unevaluatedProperties"
            | "unevaluatedItems" => check_node(value, &here, depth + 1)?,
            "required" if !value.as_array().is_some_and(|names| names.iter().all(Value::is_string)) => {
                return bad("an array of property names")
            }
            "enum" if !value.is_array() => return bad("an array"),
            "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" | "multipleOf"
                if !(value.is_number() || value.is_boolean() && key.starts_with("exclusive")) =>
            {
                return bad("a number")
            }
            "minLength" | "maxLength" | "minItems" | "maxItems" | "minProperties" | "maxProperties"
                if value.as_u64().is_none() =>
            {
                return bad("a non-negative integer")
            }
            "pattern" | "format" | "$ref" if !value.is_string() => return bad("a string"),
            "uniqueItems" if !value.is_boolean() => return bad("a boolean"),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{check_schema, parse_version};

    #[test]
    fn version_file_names_are_strict() {
        assert_eq!(parse_version("v1.schema.json"), Some(1));
        assert_eq!(parse_version("v12.schema.json"), Some(12));
        for bad in ["v0.schema.json", "v01.schema.json", "1.schema.json", "v1.json", "v.schema.json", "vx.schema.json"]
        {
            assert_eq!(parse_version(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_keyword_of_the_wrong_kind_is_named_by_its_pointer() {
        let error = check_schema(&json!({ "properties": { "a": { "type": "strin" } } })).unwrap_err();
        assert!(error.starts_with("/properties/a/type:"), "{error}");
        assert!(check_schema(&json!([1, 2])).is_err());
        assert!(check_schema(&json!({ "required": "a" })).is_err());
        assert!(check_schema(&json!({ "type": ["string", "null"], "required": ["a"] })).is_ok());
    }
}
