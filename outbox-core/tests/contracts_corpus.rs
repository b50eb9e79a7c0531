//! The table-driven corpus: every pair of schemas in `tests/contracts_corpus/*.json`, in both directions, gets
//! the expected breaking rules under backward and forward (and so full) compatibility, for tolerant readers and
//! under strict rules.
//!
//! A case is `{ name, old, new, tolerant: { backward: [RULE..], forward: [..] }, strict?: {..}, reverse: {
//! tolerant: {..}, strict?: {..}, reports?: [RULE..] } }`: `strict` defaults to `tolerant`, and `reverse` is the
//! expectation with `old` and `new` swapped.

use std::collections::BTreeSet;
use std::path::Path;

use outbox_core::contracts::{diff_schemas, ContentModel, DiffOptions, Mode, Rule};
use serde_json::Value;

struct Pair {
    name: String,
    old: Value,
    new: Value,
    expected: Value,
    reports: Vec<String>,
}

fn corpus() -> Vec<Pair> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/contracts_corpus");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let mut pairs = Vec::new();
    for file in files {
        let cases: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(&file).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
        for case in cases {
            let name = format!("{stem}: {}", case["name"].as_str().unwrap());
            let forward = expectations(&case);
            let reverse = expectations(&case["reverse"]);
            let reports = |v: &Value| {
                v["reports"].as_array().into_iter().flatten().map(|r| r.as_str().unwrap().to_owned()).collect()
            };
            pairs.push(Pair {
                name: name.clone(),
                old: case["old"].clone(),
                new: case["new"].clone(),
                expected: forward,
                reports: reports(&case),
            });
            pairs.push(Pair {
                name: format!("{name} (reversed)"),
                old: case["new"].clone(),
                new: case["old"].clone(),
                expected: reverse,
                reports: reports(&case["reverse"]),
            });
        }
    }
    pairs
}

/// `{ tolerant: {...}, strict: {...} }` with `strict` filled in from `tolerant`.
fn expectations(case: &Value) -> Value {
    let tolerant = case.get("tolerant").cloned().unwrap_or_else(|| panic!("no `tolerant` in {case}"));
    let strict = case.get("strict").cloned().unwrap_or_else(|| tolerant.clone());
    serde_json::json!({ "tolerant": tolerant, "strict": strict })
}

fn rules(value: &Value) -> BTreeSet<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("expected a list of rule ids: {value}"))
        .iter()
        .map(|r| r.as_str().unwrap().to_owned())
        .collect()
}

fn breaking(old: &Value, new: &Value, mode: Mode, content_model: ContentModel) -> BTreeSet<String> {
    let mut options = DiffOptions::default();
    options.mode = mode;
    options.content_model = content_model;
    diff_schemas(old, new, &options).breaking_rules().iter().map(|r| r.id().to_owned()).collect()
}

#[test]
fn the_corpus_has_at_least_sixty_pairs() {
    let pairs = corpus();
    assert!(pairs.len() >= 60, "only {} pairs", pairs.len());
}

#[test]
fn every_pair_gets_the_expected_verdict_under_every_mode_and_content_model() {
    let mut failures = Vec::new();
    for pair in corpus() {
        for (model, content_model) in [("tolerant", ContentModel::Tolerant), ("strict", ContentModel::Strict)] {
            let expected = &pair.expected[model];
            let backward = rules(&expected["backward"]);
            let forward = rules(&expected["forward"]);
            let full: BTreeSet<String> = backward.union(&forward).cloned().collect();
            for (mode, want) in [(Mode::Backward, backward), (Mode::Forward, forward), (Mode::Full, full)] {
                let got = breaking(&pair.old, &pair.new, mode, content_model);
                if got != want {
                    let report = diff_schemas(&pair.old, &pair.new, &{
                        let mut o = DiffOptions::default();
                        o.mode = mode;
                        o.content_model = content_model;
                        o
                    });
                    failures.push(format!("{} [{model}, {mode}]: expected {want:?}, got {got:?}\n{report}", pair.name));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} failures:\n\n{}", failures.len(), failures.join("\n\n"));
}

#[test]
fn compatible_changes_that_must_be_reported_are_reported() {
    for pair in corpus() {
        let report = diff_schemas(&pair.old, &pair.new, &DiffOptions::default());
        for rule in &pair.reports {
            assert!(
                report.findings.iter().any(|f| f.rule.id() == rule),
                "{}: {rule} not reported\n{report}",
                pair.name
            );
        }
    }
}

#[test]
fn each_schema_compared_with_itself_has_no_finding() {
    for pair in corpus() {
        for schema in [&pair.old, &pair.new] {
            for content_model in [ContentModel::Tolerant, ContentModel::Strict] {
                let mut options = DiffOptions::default();
                options.content_model = content_model;
                let report = diff_schemas(schema, schema, &options);
                assert!(report.findings.is_empty(), "{}: {report}", pair.name);
            }
        }
    }
}

#[test]
fn every_schema_rule_is_exercised_by_the_corpus() {
    let mut seen = BTreeSet::new();
    for pair in corpus() {
        for model in ["tolerant", "strict"] {
            for side in ["backward", "forward"] {
                seen.extend(rules(&pair.expected[model][side]));
            }
        }
        seen.extend(pair.reports.iter().cloned());
    }
    // Rules about whole contract sets are covered by contracts_versioning.rs.
    let set_rules = [Rule::VersionRemoved, Rule::VersionAdded, Rule::ReservedPropertyReused];
    let missing: Vec<&str> =
        Rule::ALL.iter().filter(|r| !set_rules.contains(r) && !seen.contains(r.id())).map(|r| r.id()).collect();
    assert!(missing.is_empty(), "rules no corpus case expects: {missing:?}");
}
