//! Export: the registered events' contracts as files, with stable bytes.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::{asyncapi_document, ContractError, Contracts, ASYNCAPI_FILE};
use crate::registry::{self, DuplicateEvent, EventDescriptor, RegistryError};

impl Contracts {
    /// The contracts of every event registered by `#[derive(OutboxEvent)]` in this program.
    ///
    /// # Errors
    ///
    /// [`ContractError::Registry`] when two types declare the same event type and version,
    /// [`ContractError::Schema`] when a schema cannot be generated.
    ///
    /// # Example
    ///
    /// ```
    /// use outbox_core::contracts::Contracts;
    /// # use outbox_core::OutboxEvent;
    /// #[derive(serde::Serialize, schemars::JsonSchema, OutboxEvent)]
    /// #[outbox(event_type = "cart.emptied", aggregate = "cart", version = 1)]
    /// struct CartEmptied {
    ///     #[outbox(aggregate_id)]
    ///     cart_id: u64,
    /// }
    ///
    /// let contracts = Contracts::from_registry()?;
    /// assert!(contracts.get("cart.emptied", 1).is_some());
    /// # Ok::<(), outbox_core::contracts::ContractError>(())
    /// ```
    pub fn from_registry() -> Result<Self, ContractError> {
        registry::check()?;
        Self::from_events(registry::events())
    }

    /// The contracts of the given events: for tests, or for a program that publishes only some of its events.
    ///
    /// # Errors
    ///
    /// As [`from_registry`](Self::from_registry).
    ///
    /// # Example
    ///
    /// ```
    /// use outbox_core::contracts::Contracts;
    /// use outbox_core::registry::EventDescriptor;
    /// # use outbox_core::OutboxEvent;
    /// #[derive(serde::Serialize, schemars::JsonSchema, OutboxEvent)]
    /// #[outbox(event_type = "cart.checked_out", aggregate = "cart", version = 3)]
    /// struct CartCheckedOut {
    ///     #[outbox(aggregate_id)]
    ///     cart_id: u64,
    /// }
    ///
    /// let event = EventDescriptor::of::<CartCheckedOut>("CartCheckedOut");
    /// let contracts = Contracts::from_events([&event])?;
    /// assert_eq!(contracts.len(), 1);
    /// # Ok::<(), outbox_core::contracts::ContractError>(())
    /// ```
    pub fn from_events<'e>(events: impl IntoIterator<Item = &'e EventDescriptor>) -> Result<Self, ContractError> {
        let mut contracts = Self::new();
        let mut names: BTreeMap<(&str, u32), Vec<&'static str>> = BTreeMap::new();
        for event in events {
            let schema = event.schema()?;
            names.entry((event.event_type(), event.version())).or_default().push(event.type_name());
            contracts.insert(event.event_type(), event.version(), schema.to_value());
        }
        let duplicates: Vec<DuplicateEvent> = names
            .into_iter()
            .filter(|(_, type_names)| type_names.len() > 1)
            .map(|((event_type, version), type_names)| DuplicateEvent { event_type, version, type_names })
            .collect();
        if !duplicates.is_empty() {
            return Err(RegistryError::DuplicateEvents(duplicates).into());
        }
        Ok(contracts)
    }

    /// The files of a contracts folder for these contracts, by path relative to the folder: each
    /// `<event_type>/v<N>.schema.json` and the AsyncAPI document, as [`to_canonical_json`] renders them.
    ///
    /// # Example
    ///
    /// ```
    /// use std::path::Path;
    ///
    /// let mut contracts = outbox_core::contracts::Contracts::new();
    /// contracts.insert("order.placed", 1, serde_json::json!({ "type": "object" }));
    /// let files = contracts.files();
    /// assert_eq!(files[Path::new("order.placed/v1.schema.json")], "{\n  \"type\": \"object\"\n}\n");
    /// assert!(files.contains_key(Path::new("asyncapi.json")));
    /// ```
    #[must_use]
    pub fn files(&self) -> BTreeMap<PathBuf, String> {
        let mut files = BTreeMap::new();
        for (event_type, version, schema) in self.iter() {
            files.insert(Path::new(event_type).join(format!("v{version}.schema.json")), to_canonical_json(schema));
        }
        files.insert(PathBuf::from(ASYNCAPI_FILE), to_canonical_json(&asyncapi_document(self, &title())));
        files
    }

    /// Writes [`files`](Self::files) under `dir`, creating folders as needed. Files of other versions already
    /// there are left alone.
    ///
    /// # Errors
    ///
    /// [`ContractError::Io`] when a folder cannot be created or a file written.
    ///
    /// # Example
    ///
    /// ```no_run
    /// let contracts = outbox_core::contracts::Contracts::from_registry()?;
    /// contracts.write("contracts")?;
    /// # Ok::<(), outbox_core::contracts::ContractError>(())
    /// ```
    pub fn write(&self, dir: impl AsRef<Path>) -> Result<(), ContractError> {
        let dir = dir.as_ref();
        for (relative, text) in self.files() {
            let path = dir.join(relative);
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent).map_err(ContractError::io("create", parent))?;
            }
            if fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                fs::write(&path, text).map_err(ContractError::io("write", &path))?;
            }
        }
        Ok(())
    }
}

/// Writes the contracts of every registered event to `dir` (`<event_type>/v<N>.schema.json` and
/// `asyncapi.json`) and returns them.
///
/// # Errors
///
/// As [`Contracts::from_registry`] and [`Contracts::write`].
///
/// # Example
///
/// ```no_run
/// // In a `main` of your own, e.g. `cargo run --bin export-contracts`:
/// outbox_core::contracts::export("contracts")?;
/// # Ok::<(), outbox_core::contracts::ContractError>(())
/// ```
pub fn export(dir: impl AsRef<Path>) -> Result<Contracts, ContractError> {
    let contracts = Contracts::from_registry()?;
    contracts.write(dir)?;
    Ok(contracts)
}

/// `value` as pretty JSON with every object's keys sorted and a trailing newline: the same value always gives the
/// same bytes.
///
/// # Example
///
/// ```
/// let text = outbox_core::contracts::to_canonical_json(&serde_json::json!({ "b": 1, "a": [true] }));
/// assert_eq!(text, "{\n  \"a\": [\n    true\n  ],\n  \"b\": 1\n}\n");
/// ```
#[must_use]
pub fn to_canonical_json(value: &Value) -> String {
    let mut text = serde_json::to_string_pretty(&sorted(value)).unwrap_or_else(|_| "null".to_owned());
    text.push('\n');
    text
}

fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k.clone(), sorted(v))).collect::<Map<_, _>>())
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// The AsyncAPI document's title: the package whose tests or binary export the contracts.
fn title() -> String {
    match std::env::var("CARGO_PKG_NAME") {
        Ok(name) if !name.is_empty() => format!("{name} events"),
        _ => "Outbox events".to_owned(),
    }
}
