//! The versioning policy across contract folders: same-version breaks fail, version bumps are notes, deleted
//! versions and reused names are caught, `--transitive` checks older versions, accepted breaks pass, and bad
//! input is a one-line error.

use std::path::Path;

use outbox_core::contracts::{diff, diff_paths, Allow, ContractError, Contracts, DiffOptions, Mode, Rule, RESERVED};
use serde_json::{json, Value};

fn object(properties: &Value, required: &[&str]) -> Value {
    json!({ "type": "object", "properties": properties, "required": required })
}

fn set(versions: &[(u32, Value)]) -> Contracts {
    let mut contracts = Contracts::new();
    for (version, schema) in versions {
        contracts.insert("order.placed", *version, schema.clone());
    }
    contracts
}

fn options(mode: Mode) -> DiffOptions {
    let mut options = DiffOptions::default();
    options.mode = mode;
    options
}

/// A new empty directory, removed when the returned guard is dropped.
fn temp_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("outbox-contracts-{name}-")).tempdir().unwrap()
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn deleting_a_committed_version_is_version_removed_in_every_mode() {
    let v1 = object(&json!({ "id": { "type": "integer" } }), &["id"]);
    let old = set(&[(1, v1.clone()), (2, v1.clone())]);
    let new = set(&[(2, v1)]);
    for mode in [Mode::Backward, Mode::Forward, Mode::Full] {
        let report = diff(&old, &new, &options(mode));
        assert_eq!(report.breaking_rules(), [Rule::VersionRemoved], "{mode}: {report}");
        assert_eq!(report.breaking().next().unwrap().line(), "VERSION_REMOVED  order.placed v1  /  v1 -> absent");
    }
}

#[test]
fn a_break_under_the_same_version_fails() {
    let old = set(&[(1, object(&json!({ "id": { "type": "integer" } }), &["id"]))]);
    let new = set(&[(1, object(&json!({ "id": { "type": "string" } }), &["id"]))]);
    let report = diff(&old, &new, &DiffOptions::default());
    assert_eq!(report.breaking_rules(), [Rule::TypeChanged]);
}

#[test]
fn a_break_with_a_version_bump_is_listed_as_notes() {
    let v1 = object(&json!({ "id": { "type": "integer" } }), &["id"]);
    let v2 = object(&json!({ "id": { "type": "string" }, "email": { "type": "string" } }), &["id", "email"]);
    let report = diff(&set(&[(1, v1.clone())]), &set(&[(1, v1), (2, v2)]), &DiffOptions::default());
    assert!(report.is_compatible(), "{report}");
    let rules: Vec<(Rule, u32, u32)> = report.findings.iter().map(|f| (f.rule, f.version, f.compared_with)).collect();
    assert!(rules.contains(&(Rule::VersionAdded, 2, 1)), "{rules:?}");
    assert!(rules.contains(&(Rule::TypeChanged, 2, 1)), "{rules:?}");
    assert!(rules.contains(&(Rule::RequiredPropertyAdded, 2, 1)), "{rules:?}");
    assert!(report.to_string().contains("(against v1)"), "{report}");
}

#[test]
fn a_name_gone_for_a_version_and_back_with_another_type_is_reserved() {
    let v1 = object(&json!({ "id": { "type": "integer" }, "note": { "type": "string" } }), &["id"]);
    let v2 = object(&json!({ "id": { "type": "integer" } }), &["id"]);
    let v3_clash = object(&json!({ "id": { "type": "integer" }, "note": { "type": "integer" } }), &["id"]);
    let v3_same = object(&json!({ "id": { "type": "integer" }, "note": { "type": "string" } }), &["id"]);
    let old = set(&[(1, v1.clone()), (2, v2.clone())]);

    let report = diff(&old, &set(&[(1, v1.clone()), (2, v2.clone()), (3, v3_clash)]), &DiffOptions::default());
    assert_eq!(report.breaking_rules(), [Rule::ReservedPropertyReused], "{report}");
    let finding = report.breaking().next().unwrap();
    assert_eq!(
        (finding.pointer.as_str(), finding.old.as_str(), finding.new.as_str()),
        ("/properties/note", "string in v1", "integer")
    );

    let report = diff(&old, &set(&[(1, v1), (2, v2), (3, v3_same)]), &DiffOptions::default());
    assert!(report.is_compatible(), "{report}");
}

#[test]
fn a_name_removed_in_place_is_remembered_under_x_outbox_reserved() {
    let mut v1 = object(&json!({ "id": { "type": "integer" } }), &["id"]);
    v1[RESERVED] = json!({ "/properties/note": { "type": "string" } });
    let readded = object(&json!({ "id": { "type": "integer" }, "note": { "type": "boolean" } }), &["id"]);
    let report = diff(&set(&[(1, v1)]), &set(&[(1, readded)]), &DiffOptions::default());
    assert_eq!(report.breaking_rules(), [Rule::ReservedPropertyReused], "{report}");
}

#[test]
fn transitive_mode_catches_a_new_break_against_an_older_version() {
    // v1 -> v2 made `a` optional (a declared break); now `a` is removed from v2 in place: compatible with v2 as
    // committed, but v1's readers, which require `a`, lose it.
    let v1 = object(&json!({ "a": { "type": "integer" }, "b": { "type": "string" } }), &["a", "b"]);
    let v2 = object(&json!({ "a": { "type": "integer" }, "b": { "type": "string" } }), &["b"]);
    let v2_changed = object(&json!({ "b": { "type": "string" } }), &["b"]);
    let old = set(&[(1, v1.clone()), (2, v2)]);
    let new = set(&[(1, v1), (2, v2_changed)]);

    assert!(diff(&old, &new, &DiffOptions::default()).is_compatible());
    let mut transitive = DiffOptions::default();
    transitive.transitive = true;
    let report = diff(&old, &new, &transitive);
    assert_eq!(report.breaking_rules(), [Rule::RequiredPropertyRemoved], "{report}");
    assert_eq!(report.breaking().next().unwrap().compared_with, 1);
}

#[test]
fn an_accepted_break_passes_and_is_marked() {
    let old =
        set(&[(1, object(&json!({ "id": { "type": "integer" }, "note": { "type": "string" } }), &["id", "note"]))]);
    let new = set(&[(1, object(&json!({ "id": { "type": "integer" } }), &["id"]))]);
    let mut options = DiffOptions::default();
    options.allow = vec!["REQUIRED_PROPERTY_REMOVED order.placed v1 /properties/note".parse().unwrap()];
    let report = diff(&old, &new, &options);
    assert!(report.is_compatible(), "{report}");
    assert!(report.findings.iter().any(|f| f.allowed && f.rule == Rule::RequiredPropertyRemoved));

    options.allow = vec!["REQUIRED_PROPERTY_REMOVED order.placed v2".parse::<Allow>().unwrap()];
    assert!(!diff(&old, &new, &options).is_compatible(), "an entry for another version accepts nothing");
}

#[test]
fn the_new_folders_allowed_breaks_file_is_read() {
    let (old_dir, new_dir) = (temp_dir("allow-old"), temp_dir("allow-new"));
    let (old, new) = (old_dir.path(), new_dir.path());
    write(&old.join("order.placed/v1.schema.json"), r#"{"type":"object","properties":{"id":{"type":"integer"}}}"#);
    write(&new.join("order.placed/v1.schema.json"), r#"{"type":"object","properties":{"id":{"type":"string"}}}"#);
    assert!(!diff_paths(old, new, &DiffOptions::default()).unwrap().is_compatible());
    write(
        &new.join("allowed-breaks.txt"),
        "# accepted in review\nTYPE_CHANGED  order.placed v1  /properties/id/type  integer -> string\n",
    );
    let report = diff_paths(old, new, &DiffOptions::default()).unwrap();
    assert!(report.is_compatible(), "{report}");
}

#[test]
fn two_single_files_are_compared_whatever_their_names() {
    let temp = temp_dir("files");
    let dir = temp.path();
    write(&dir.join("before.json"), r#"{"type":"object","properties":{"n":{"type":"integer"}}}"#);
    write(&dir.join("after.json"), r#"{"type":"object","properties":{"n":{"type":"number"}}}"#);
    let report = diff_paths(dir.join("before.json"), dir.join("after.json"), &options(Mode::Forward)).unwrap();
    assert_eq!(report.breaking_rules(), [Rule::TypeWidened]);
    assert!(diff_paths(dir.join("before.json"), dir.join("after.json"), &options(Mode::Backward))
        .unwrap()
        .is_compatible());
}

fn load_error(files: &[(&str, &str)]) -> ContractError {
    let temp = temp_dir("bad");
    let dir = temp.path();
    for (path, text) in files {
        write(&dir.join(path), text);
    }
    let error = Contracts::load(dir).expect_err("loading should fail");
    let message = error.to_string();
    assert!(!message.contains('\n'), "not one line: {message}");
    error
}

#[test]
fn malformed_contracts_are_one_line_errors() {
    let error = load_error(&[("e/v1.schema.json", "{ not json")]);
    assert!(matches!(error, ContractError::NotJson { .. }), "{error}");
    assert!(error.to_string().contains("v1.schema.json` is not JSON"), "{error}");

    let error = load_error(&[("e/v1.schema.json", "[1, 2]")]);
    assert!(matches!(error, ContractError::NotASchema { .. }), "{error}");

    let error = load_error(&[("e/v1.schema.json", r#"{"properties":{"a":{"type":"text"}}}"#)]);
    assert!(error.to_string().contains("/properties/a/type"), "{error}");

    let error = load_error(&[("e/v1.schema.json", r##"{"properties":{"a":{"$ref":"#/$defs/Gone"}}}"##)]);
    assert!(matches!(error, ContractError::DanglingRef { .. }), "{error}");

    let error = load_error(&[("e/version-1.json", "{}")]);
    assert!(matches!(error, ContractError::Layout { .. }), "{error}");

    let error = load_error(&[("e/v1.schema.json", r#"{"x-outbox-version": 2}"#)]);
    assert!(matches!(error, ContractError::Layout { .. }), "{error}");

    let error = load_error(&[("e/v1.schema.json", "{}"), ("allowed-breaks.txt", "NOT_A_RULE\n")]);
    assert!(matches!(error, ContractError::UnknownRule { .. }), "{error}");

    let error = Contracts::load("/nonexistent/contracts").unwrap_err();
    assert!(matches!(error, ContractError::Io { .. }) && !error.to_string().contains('\n'), "{error}");
}

#[test]
fn a_folder_and_a_file_cannot_be_compared() {
    let temp = temp_dir("mixed");
    let dir = temp.path();
    write(&dir.join("e/v1.schema.json"), "{}");
    let error = diff_paths(dir, dir.join("e/v1.schema.json"), &DiffOptions::default()).unwrap_err();
    assert!(matches!(error, ContractError::MixedInputs { .. }), "{error}");
}
