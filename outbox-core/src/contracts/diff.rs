//! [`diff`]: the check across two contract sets, and its forms for two schemas ([`diff_schemas`]) and two
//! folders or files ([`diff_paths`]). Which versions are compared with which is decided here; the versioning
//! policy it applies (reserved names, accepted breaks) is in `policy.rs`, the comparison of two schemas in
//! `compat/`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;

use super::compat::{compare, Change};
use super::policy::{breaking, comparable, reserved_names, reused};
use super::{ContractError, Contracts, DiffOptions, Finding, Report, Rule};
use crate::schema::{EVENT_TYPE, VERSION};

/// Compares two contract sets.
///
/// Each version of `new` is compared with the same version of `old`: a break there fails the check. A version
/// only `new` has is a version bump: its differences to the latest older version of `old` are listed as notes
/// (`VERSION_ADDED` and the changes, never breaking), since bumping is how a break is declared. A version only
/// `old` has is `VERSION_REMOVED`. With [`DiffOptions::transitive`], a changed version must also not add breaks
/// against any older committed version of its event type. Property names used by an older version (or kept in
/// [`RESERVED`](super::RESERVED)) that come back with an incompatible type are `RESERVED_PROPERTY_REUSED`.
///
/// # Example
///
/// ```
/// use outbox_core::contracts::{diff, Contracts, DiffOptions, Rule};
/// use serde_json::json;
///
/// let mut old = Contracts::new();
/// old.insert("user.created", 1, json!({ "type": "object", "properties": { "id": { "type": "integer" } } }));
/// let mut new = Contracts::new();
/// new.insert("user.created", 1, json!({
///     "type": "object",
///     "properties": { "id": { "type": "integer" }, "email": { "type": "string" } },
///     "required": ["email"]
/// }));
///
/// let report = diff(&old, &new, &DiffOptions::default());
/// assert_eq!(report.breaking_rules(), [Rule::RequiredPropertyAdded]);
/// println!("{report}"); // REQUIRED_PROPERTY_ADDED  user.created v1  /properties/email  absent -> string (required)
/// ```
#[must_use]
pub fn diff(old: &Contracts, new: &Contracts, options: &DiffOptions) -> Report {
    let mut findings = Vec::new();
    let model = options.content_model;
    let mut push = |change: Change, event_type: &str, version: u32, compared_with: u32, counts: bool| {
        let would_break = counts
            && (change.rule.is_policy() && (change.backward || change.forward)
                || options.mode.is_broken_by(change.backward, change.forward));
        let mut finding = Finding {
            rule: change.rule,
            event_type: event_type.to_owned(),
            version,
            compared_with,
            pointer: change.pointer,
            old: change.old,
            new: change.new,
            breaks_backward: change.backward,
            breaks_forward: change.forward,
            breaking: would_break,
            allowed: false,
        };
        if would_break && options.allow.iter().chain(new.allowed()).any(|allow| allow.matches(&finding)) {
            finding.allowed = true;
            finding.breaking = false;
        }
        findings.push(finding);
    };

    for (event_type, version, _) in old.iter() {
        if new.get(event_type, version).is_none() {
            let change = Change {
                rule: Rule::VersionRemoved,
                pointer: String::new(),
                old: format!("v{version}"),
                new: "absent".into(),
                backward: true,
                forward: true,
            };
            push(change, event_type, version, version, true);
        }
    }

    for event_type in new.event_types() {
        let old_versions: BTreeMap<u32, Value> =
            old.versions(event_type).map(|(version, schema)| (version, comparable(schema))).collect();
        let reserved = reserved_names(old.versions(event_type));
        for (version, schema) in new.versions(event_type) {
            let new_schema = comparable(schema);
            if let Some(old_schema) = old_versions.get(&version) {
                for change in compare(old_schema, &new_schema, model) {
                    push(change, event_type, version, version, true);
                }
                if options.transitive {
                    for (older, older_schema) in old_versions.range(..version) {
                        let before: BTreeSet<(Rule, String)> =
                            breaking(compare(older_schema, old_schema, model), options)
                                .map(|c| (c.rule, c.pointer))
                                .collect();
                        for change in breaking(compare(older_schema, &new_schema, model), options) {
                            if !before.contains(&(change.rule, change.pointer.clone())) {
                                push(change, event_type, version, *older, true);
                            }
                        }
                    }
                }
                for change in reused(&reserved, Some(old_schema), &new_schema, model) {
                    push(change, event_type, version, version, true);
                }
            } else {
                let previous = old_versions.range(..version).next_back();
                let added = Change {
                    rule: Rule::VersionAdded,
                    pointer: String::new(),
                    old: previous.map_or_else(|| "absent".to_owned(), |(v, _)| format!("v{v}")),
                    new: format!("v{version}"),
                    backward: false,
                    forward: false,
                };
                push(added, event_type, version, previous.map_or(version, |(v, _)| *v), false);
                let against: Vec<(&u32, &Value)> = if options.transitive {
                    old_versions.range(..version).collect()
                } else {
                    previous.into_iter().collect()
                };
                for (older, older_schema) in against {
                    for change in compare(older_schema, &new_schema, model) {
                        // The bump declares the break; a policy finding still counts.
                        let counts = change.rule == Rule::SensitiveFlagRemoved;
                        push(change, event_type, version, *older, counts);
                    }
                }
                for change in reused(&reserved, previous.map(|(_, s)| s), &new_schema, model) {
                    push(change, event_type, version, previous.map_or(version, |(v, _)| *v), true);
                }
            }
        }
    }

    let mut report =
        Report { findings, mode: options.mode, content_model: options.content_model, transitive: options.transitive };
    report.sort();
    report
}

/// Compares two single schemas as two states of the same event version (see [`diff`]).
///
/// # Example
///
/// ```
/// use outbox_core::contracts::{diff_schemas, DiffOptions, Mode, Rule};
/// use serde_json::json;
///
/// let old = json!({ "type": "object", "properties": { "amount": { "type": "integer" } } });
/// let new = json!({ "type": "object", "properties": { "amount": { "type": "number" } } });
/// let mut options = DiffOptions::default();
/// options.mode = Mode::Backward; // new readers, old events: integers are numbers
/// assert!(diff_schemas(&old, &new, &options).is_compatible());
/// options.mode = Mode::Forward; // old readers get 1.5
/// assert_eq!(diff_schemas(&old, &new, &options).breaking_rules(), [Rule::TypeWidened]);
/// ```
pub fn diff_schemas(old: &Value, new: &Value, options: &DiffOptions) -> Report {
    let event_type = old.get(EVENT_TYPE).and_then(Value::as_str).unwrap_or("schema").to_owned();
    let version = old.get(VERSION).and_then(Value::as_u64).and_then(|v| u32::try_from(v).ok()).unwrap_or(1);
    let (mut old_set, mut new_set) = (Contracts::new(), Contracts::new());
    old_set.insert(event_type.clone(), version, old.clone());
    new_set.insert(event_type, version, new.clone());
    diff(&old_set, &new_set, options)
}

/// Reads `old` and `new` (two contracts folders, or two schema files) and compares them: what
/// `outbox contracts diff OLD NEW` does. The breaks accepted in the new folder's `allowed-breaks.txt` count.
/// Two files are compared as two states of the same event version, whatever their names.
///
/// # Errors
///
/// What [`Contracts::load`] returns, and [`ContractError::MixedInputs`] for a folder and a file.
///
/// # Example
///
/// ```no_run
/// use outbox_core::contracts::{diff_paths, DiffOptions};
///
/// let report = diff_paths("main/contracts", "contracts", &DiffOptions::default())?;
/// if !report.is_compatible() {
///     eprintln!("{report}");
///     std::process::exit(1);
/// }
/// # Ok::<(), outbox_core::contracts::ContractError>(())
/// ```
pub fn diff_paths(
    old: impl AsRef<Path>,
    new: impl AsRef<Path>,
    options: &DiffOptions,
) -> Result<Report, ContractError> {
    let (old, new) = (old.as_ref(), new.as_ref());
    let old_set = Contracts::load(old)?;
    let new_set = Contracts::load(new)?;
    if old.is_dir() != new.is_dir() {
        return Err(ContractError::MixedInputs { old: old.to_owned(), new: new.to_owned() });
    }
    if old.is_dir() {
        return Ok(diff(&old_set, &new_set, options));
    }
    // Two files: the same event and version, so the new one is compared with the old one whatever it says.
    let (event_type, version, _) =
        old_set.iter().next().map(|(e, v, s)| (e.to_owned(), v, s.clone())).unwrap_or_default();
    let new_schema = new_set.iter().next().map(|(_, _, s)| s.clone()).unwrap_or(Value::Bool(true));
    let mut renamed = Contracts::new();
    renamed.insert(event_type, version, new_schema);
    Ok(diff(&old_set, &renamed, options))
}
