//! Why contracts could not be loaded, exported or compared.

use std::path::PathBuf;

/// Why contracts could not be loaded, exported or compared. Every message is one line and names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ContractError {
    /// A file or folder could not be read or written.
    #[error("cannot {action} `{}`: {source}", path.display())]
    Io {
        /// What was being done: `read`, `write`, `create`, `list`.
        action: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },
    /// A contract file is not JSON.
    #[error("`{}` is not JSON: {source}", path.display())]
    NotJson {
        /// The file.
        path: PathBuf,
        /// Where and why parsing failed.
        #[source]
        source: serde_json::Error,
    },
    /// A contract file is JSON but not a JSON Schema (or uses a keyword with a value of the wrong kind).
    #[error("`{}` is not a JSON Schema: {reason}", path.display())]
    NotASchema {
        /// The file.
        path: PathBuf,
        /// What is wrong, with a JSON pointer.
        reason: String,
    },
    /// A `$ref` names nothing in its document (only references inside the document, `#/...`, are supported).
    #[error("`{}`: the reference `{reference}` points to nothing in the document", path.display())]
    DanglingRef {
        /// The file.
        path: PathBuf,
        /// The reference as written.
        reference: String,
    },
    /// A file or folder inside a contracts folder does not follow `<event_type>/v<version>.schema.json`, or
    /// its `x-outbox-*` keywords disagree with its place.
    #[error("`{}`: {reason}", path.display())]
    Layout {
        /// The file or folder.
        path: PathBuf,
        /// What is wrong and what is expected.
        reason: String,
    },
    /// An `allowed-breaks.txt` line or an `--allow` value could not be read.
    #[error("bad allow entry `{entry}`: {reason}")]
    BadAllow {
        /// The entry as written.
        entry: String,
        /// What is wrong.
        reason: String,
    },
    /// A rule id that no rule has.
    #[error("unknown rule id `{id}` (the ids are listed in docs/contract-rules.md)")]
    UnknownRule {
        /// The id as written.
        id: String,
    },
    /// The two sides of a diff are not of the same kind (a folder and a file).
    #[error("cannot compare `{}` with `{}`: both must be contract folders, or both single schema files", old.display(), new.display())]
    MixedInputs {
        /// The old side.
        old: PathBuf,
        /// The new side.
        new: PathBuf,
    },
    /// The snapshot found no registered event: nothing derives `OutboxEvent`, or the crate that does is not
    /// linked into the test binary.
    #[error("no event is registered in this program: derive `OutboxEvent` on the event types, and from an integration test link the crate that defines them (`extern crate your_app;`)")]
    NoEvents,
    /// An AsyncAPI document for a broker was asked for, but the broker description gives no channel address for
    /// one of the contracts.
    #[error("no channel address for `{event_type}` v{version}: the broker description must name where every contract is published")]
    NoAddress {
        /// The event type.
        event_type: String,
        /// The schema version.
        version: u32,
    },
    /// An event's schema could not be generated.
    #[error(transparent)]
    Schema(#[from] crate::schema::SchemaError),
    /// The registered events are inconsistent (two types claim the same event type and version).
    #[error("{}", .0.to_string().replace('\n', " "))]
    Registry(#[from] crate::registry::RegistryError),
}

impl ContractError {
    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { action, path, source }
    }
}
