//! Event contracts: export every event's JSON Schema, publish them as an AsyncAPI document, and fail CI when a
//! change would break consumers.
//!
//! A *contract* is the JSON Schema of one version of one event type, as `#[derive(OutboxEvent)]` generates it.
//! The contracts of a program live in a folder that you commit:
//!
//! ```text
//! contracts/
//!   asyncapi.json                 AsyncAPI 3.0: one channel per event type, one message per version
//!   allowed-breaks.txt            optional: breaks accepted on purpose, one per line
//!   payment.paid/v1.schema.json   JSON Schema 2020-12, keys sorted, so unchanged code exports the same bytes
//!   payment.paid/v2.schema.json
//! ```
//!
//! Three ways in:
//!
//! - [`assert_compatible`] from a test of your own, like a snapshot test: it exports the registered events and
//!   compares them with the committed folder; `OUTBOX_CONTRACTS=overwrite cargo test` writes the new contracts
//!   when the change is compatible (or comes with a new version).
//! - `outbox contracts diff OLD NEW` in CI, e.g. the contracts of `main` against the pull request's; exit code 0
//!   compatible, 1 breaking, 2 bad input.
//! - [`diff`], [`diff_paths`] and [`diff_schemas`] as a library.
//!
//! The differ resolves `$ref`s first (renaming a Rust type is not a change), then walks both schemas and names
//! each difference with a stable [`Rule`] id, a JSON pointer and the [`Side`]s it breaks. Readers are
//! *tolerant* by default (they ignore unknown properties, as serde does), or *strict*
//! ([`ContentModel::Strict`], Confluent Schema Registry's rules). `docs/contract-rules.md` documents every rule.
//!
//! # Example
//!
//! ```
//! use outbox_core::contracts::{diff_schemas, DiffOptions, Rule};
//! use serde_json::json;
//!
//! let old = json!({
//!     "type": "object",
//!     "properties": { "id": { "type": "integer" }, "note": { "type": "string" } },
//!     "required": ["id"]
//! });
//! let new = json!({
//!     "type": "object",
//!     "properties": { "id": { "type": "integer" }, "note": { "type": "string" } },
//!     "required": ["id", "note"]
//! });
//! let report = diff_schemas(&old, &new, &DiffOptions::default());
//! assert!(!report.is_compatible());
//! assert_eq!(report.breaking_rules(), [Rule::PropertyMadeRequired]);
//! assert_eq!(
//!     report.breaking().next().unwrap().line(),
//!     "PROPERTY_MADE_REQUIRED  schema v1  /properties/note  optional -> required"
//! );
//! ```

mod asyncapi;
mod compat;
mod diff;
mod error;
mod export;
mod load;
mod options;
mod policy;
mod report;
mod resolve;
mod rules;
mod snapshot;
mod wire;

pub use asyncapi::{asyncapi_document, asyncapi_document_for, ASYNCAPI_FILE, SCHEMA_FORMAT};
pub use diff::{diff, diff_paths, diff_schemas};
pub use error::ContractError;
pub use export::{export, to_canonical_json};
pub use load::{Contracts, ALLOW_FILE};
pub use options::{parse_allow_list, Allow, ContentModel, DiffOptions, Mode};
pub use policy::RESERVED;
pub use report::{Finding, Report};
pub use rules::{Rule, Side};
pub use snapshot::{assert_compatible, Outcome, Snapshot, OVERWRITE_ENV};
pub use wire::{attribute_description, Wire, WireHeader, CLOUDEVENTS_ATTRIBUTES, TRACE_CONTEXT_HEADERS};
