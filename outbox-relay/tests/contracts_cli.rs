//! `outbox contracts diff`: exit codes 0 compatible, 1 breaking, 2 bad input; text and JSON reports; `--mode`,
//! `--strict`, `--transitive`, `--allow`.
//!
//! The command's module is compiled here as it is in the binary, and run in-process; the tests at the end run
//! the `outbox` binary itself.
#![cfg(feature = "cli")]

use std::path::Path;

use clap::Parser;

#[allow(dead_code)]
#[path = "../src/bin/outbox/contracts.rs"]
mod contracts;

#[derive(Parser)]
#[command(name = "outbox")]
struct Cli {
    #[command(subcommand)]
    command: Top,
}

#[derive(clap::Subcommand)]
enum Top {
    Contracts {
        #[command(subcommand)]
        command: contracts::ContractsCommand,
    },
}

/// Runs `outbox <args>` in-process: (exit code, stdout, stderr).
fn outbox(args: &[&str]) -> (u8, String, String) {
    let cli = match Cli::try_parse_from(std::iter::once("outbox").chain(args.iter().copied())) {
        Ok(cli) => cli,
        Err(error) => return (2, String::new(), error.to_string()),
    };
    let Top::Contracts { command } = cli.command;
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = contracts::run_with(command, &mut out, &mut err);
    (code, String::from_utf8(out).unwrap(), String::from_utf8(err).unwrap())
}

/// A new empty directory, removed when the returned guard is dropped.
fn temp_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("outbox-contracts-cli-{name}-")).tempdir().unwrap()
}

fn contract(dir: &Path, event_type: &str, version: u32, schema: &str) {
    let path = dir.join(event_type).join(format!("v{version}.schema.json"));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, schema).unwrap();
}

const V1: &str =
    r#"{"type":"object","properties":{"id":{"type":"integer"},"note":{"type":"string"}},"required":["id"]}"#;
const NOTE_REQUIRED: &str =
    r#"{"type":"object","properties":{"id":{"type":"integer"},"note":{"type":"string"}},"required":["id","note"]}"#;
const NOTE_ADDED_LABEL: &str = r#"{"type":"object","properties":{"id":{"type":"integer"},"note":{"type":"string"},"label":{"type":"string"}},"required":["id"]}"#;

/// Two contract folders, the old with [`V1`] and the new with `new_schema`, as command-line arguments; the
/// directories are removed when the returned guards are dropped.
fn folders(new_schema: &str) -> (String, String, [tempfile::TempDir; 2]) {
    let (old, new) = (temp_dir("old"), temp_dir("new"));
    contract(old.path(), "order.placed", 1, V1);
    contract(new.path(), "order.placed", 1, new_schema);
    (old.path().display().to_string(), new.path().display().to_string(), [old, new])
}

#[test]
fn asyncapi_for_a_sink_names_its_channels_and_server_and_never_its_password() {
    let dir = temp_dir("asyncapi");
    contract(dir.path(), "order.placed", 1, V1);
    contract(dir.path(), "order.placed", 2, V1);
    let sink =
        "amqps://relay:s3cret-pass@mq.example.com:5671/prod?exchange=events&routing_key=shop.{event_type}.v{version}";
    let (code, out, err) = outbox(&["contracts", "asyncapi", &dir.path().display().to_string(), "--sink", sink]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("s3cret-pass") && !out.contains("relay:"), "{out}");
    let document: serde_json::Value = serde_json::from_str(&out).expect("one JSON document");
    assert_eq!(document["servers"]["amqps"]["host"], "mq.example.com:5671");
    let description = document["info"]["description"].as_str().unwrap();
    assert!(!description.contains("names no broker") && description.contains("servers"), "{description}");
    assert_eq!(document["servers"]["amqps"]["pathname"], "/prod");
    let addresses: Vec<&str> =
        document["channels"].as_object().unwrap().values().filter_map(|c| c["address"].as_str()).collect();
    assert_eq!(addresses, ["shop.order.placed.v1", "shop.order.placed.v2"]);
    let headers = &document["components"]["schemas"]["outbox.headers"]["properties"];
    assert!(headers.get("cloudEvents:id").is_some(), "AMQP's attribute names: {headers}");
    assert!(headers.get("traceparent").is_some(), "the trace context travels under its own name: {headers}");
    let required = &document["components"]["schemas"]["outbox.headers"]["required"];
    assert!(!required.as_array().unwrap().contains(&"traceparent".into()), "only traced events carry it: {required}");
}

/// A contract of `aggregate`'s events, as `outbox contracts export` writes it (the aggregate under
/// `x-outbox-aggregate`).
fn contract_of(dir: &Path, event_type: &str, aggregate: &str) {
    let schema = serde_json::json!({
        "type": "object",
        "x-outbox-aggregate": aggregate,
        "properties": { "id": { "type": "integer" } },
        "required": ["id"],
    });
    contract(dir, event_type, 1, &schema.to_string());
}

/// The channel addresses (sorted, without repeats) and the server of the AsyncAPI document for `sink`.
fn channels_and_server(folder: &str, sink: &str) -> (Vec<String>, serde_json::Value) {
    let (code, out, err) = outbox(&["contracts", "asyncapi", folder, "--sink", sink]);
    assert_eq!(code, 0, "{sink}: {err}");
    let document: serde_json::Value = serde_json::from_str(&out).expect("one JSON document");
    let mut addresses: Vec<String> = document["channels"]
        .as_object()
        .unwrap()
        .values()
        .map(|c| c["address"].as_str().expect("every channel has an address").to_owned())
        .collect();
    addresses.sort_unstable();
    addresses.dedup();
    let servers = document["servers"].as_object().expect("a servers section");
    assert_eq!(servers.len(), 1, "{sink}: one server, the broker: {servers:?}");
    (addresses, servers.values().next().unwrap().clone())
}

/// A sink URL without a destination of its own gets the publisher's default template: Kafka topics and Redis
/// streams per aggregate (`outbox.{aggregate_type}`), NATS subjects per event type (`outbox.{event_type}`). No
/// broker is needed: the publisher is built, not connected.
#[test]
fn asyncapi_for_a_broker_url_alone_names_the_publishers_default_channels_and_the_host() {
    let dir = temp_dir("asyncapi-defaults");
    contract_of(dir.path(), "order.placed", "order");
    contract_of(dir.path(), "order.shipped", "order");
    contract_of(dir.path(), "payment.paid", "payment");
    let folder = dir.path().display().to_string();
    let mut cases: Vec<(&str, &str, &str, &[&str])> = Vec::new();
    if cfg!(feature = "kafka") {
        cases.push(("kafka://127.0.0.1:9092", "kafka", "127.0.0.1:9092", &["outbox.order", "outbox.payment"]));
    }
    if cfg!(feature = "nats") {
        cases.push((
            "nats://127.0.0.1:4222",
            "nats",
            "127.0.0.1:4222",
            &["outbox.order.placed", "outbox.order.shipped", "outbox.payment.paid"],
        ));
    }
    if cfg!(feature = "redis") {
        cases.push(("redis://127.0.0.1:6379", "redis", "127.0.0.1:6379", &["outbox.order", "outbox.payment"]));
    }
    assert!(!cases.is_empty(), "build with at least one of the kafka, nats and redis features");
    for (sink, protocol, host, expected) in cases {
        let (addresses, server) = channels_and_server(&folder, sink);
        assert_eq!(addresses, expected, "{sink}: the channel addresses");
        assert_eq!(server["host"], host, "{sink}: {server}");
        assert_eq!(server["protocol"], protocol, "{sink}: {server}");
    }
}

#[test]
fn asyncapi_refuses_sinks_without_channels_and_bad_urls_with_one_line() {
    let dir = temp_dir("asyncapi-bad");
    contract(dir.path(), "order.placed", 1, V1);
    let folder = dir.path().display().to_string();
    for (sink, expected) in [
        ("stdout", "has no channels to describe"),
        ("file:/tmp/events.jsonl", "has no channels to describe"),
        ("gopher://x", "unknown sink scheme"),
        ("nats://127.0.0.1:4222?subject=a.{nope}", "unknown placeholder"),
    ] {
        let (code, out, err) = outbox(&["contracts", "asyncapi", &folder, "--sink", sink]);
        assert_eq!(code, 2, "{sink}: {err}");
        assert!(out.is_empty(), "{sink}: nothing written: {out}");
        assert!(err.contains(expected) && err.trim_end().lines().count() == 1, "{sink}: {err}");
    }
    let (code, _, err) = outbox(&["contracts", "asyncapi", "/nonexistent/contracts", "--sink", "nats://127.0.0.1"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("/nonexistent/contracts"), "{err}");
}

#[test]
fn a_compatible_change_exits_0() {
    let (old, new, _dirs) = folders(NOTE_ADDED_LABEL);
    let (code, out, err) = outbox(&["contracts", "diff", &old, &new]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("OPTIONAL_PROPERTY_ADDED  order.placed v1  /properties/label"), "{out}");
    assert!(out.lines().last().unwrap().starts_with("compatible:"), "{out}");
}

#[test]
fn a_breaking_change_exits_1_with_one_line_per_finding() {
    let (old, new, _dirs) = folders(NOTE_REQUIRED);
    let (code, out, _) = outbox(&["contracts", "diff", &old, &new]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(
        out.lines().next(),
        Some("PROPERTY_MADE_REQUIRED  order.placed v1  /properties/note  optional -> required")
    );
}

#[test]
fn the_mode_decides_which_side_counts() {
    let (old, new, _dirs) = folders(NOTE_REQUIRED);
    assert_eq!(outbox(&["contracts", "diff", "--mode", "forward", &old, &new]).0, 0);
    assert_eq!(outbox(&["contracts", "diff", "--mode", "backward", &old, &new]).0, 1);
    assert_eq!(outbox(&["contracts", "diff", "--mode", "full", &old, &new]).0, 1);
}

#[test]
fn strict_rules_treat_open_schemas_as_accepting_anything() {
    let (old, new, _dirs) = folders(NOTE_ADDED_LABEL);
    assert_eq!(outbox(&["contracts", "diff", &old, &new]).0, 0);
    let (code, out, _) = outbox(&["contracts", "diff", "--strict", &old, &new]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("strict content model"), "{out}");
}

#[test]
fn an_allowed_rule_passes() {
    let (old, new, _dirs) = folders(NOTE_REQUIRED);
    let (code, out, _) = outbox(&["contracts", "diff", "--allow", "PROPERTY_MADE_REQUIRED", &old, &new]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("[allowed]"), "{out}");

    let allow = temp_dir("allow");
    let file = allow.path().join("allow.txt");
    std::fs::write(&file, "PROPERTY_MADE_REQUIRED  order.placed v1  /properties/note\n").unwrap();
    assert_eq!(outbox(&["contracts", "diff", "--allow-file", file.to_str().unwrap(), &old, &new]).0, 0);
}

#[test]
fn json_output_is_one_document_for_machines() {
    let (old, new, _dirs) = folders(NOTE_REQUIRED);
    for flags in [&["--format", "json"][..], &["--json"][..]] {
        let mut args = vec!["contracts", "diff"];
        args.extend_from_slice(flags);
        args.extend([old.as_str(), new.as_str()]);
        let (code, out, _) = outbox(&args);
        assert_eq!(code, 1);
        let report: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(report["compatible"], false);
        assert_eq!(report["findings"][0]["rule"], "PROPERTY_MADE_REQUIRED");
        assert_eq!(report["findings"][0]["breaks"], serde_json::json!(["backward"]));
    }
}

#[test]
fn transitive_checks_older_versions() {
    let (old_dir, new_dir) = (temp_dir("t-old"), temp_dir("t-new"));
    let v1 = r#"{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}"#;
    let v2 = r#"{"type":"object","properties":{"a":{"type":"integer"}}}"#;
    let v2_changed = r#"{"type":"object","properties":{}}"#;
    for (dir, second) in [(old_dir.path(), v2), (new_dir.path(), v2_changed)] {
        contract(dir, "order.placed", 1, v1);
        contract(dir, "order.placed", 2, second);
    }
    let (old, new) = (old_dir.path().display().to_string(), new_dir.path().display().to_string());
    assert_eq!(outbox(&["contracts", "diff", &old, &new]).0, 0);
    let (code, out, _) = outbox(&["contracts", "diff", "--transitive", &old, &new]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "REQUIRED_PROPERTY_REMOVED  order.placed v2  /properties/a  integer (required) -> absent  (against v1)"
        ),
        "{out}"
    );
}

#[test]
fn single_schema_files_can_be_compared() {
    let temp = temp_dir("files");
    let dir = temp.path();
    std::fs::write(dir.join("old.json"), V1).unwrap();
    std::fs::write(dir.join("new.json"), NOTE_REQUIRED).unwrap();
    let (code, out, _) =
        outbox(&["contracts", "diff", dir.join("old.json").to_str().unwrap(), dir.join("new.json").to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
}

#[test]
fn bad_input_exits_2_with_one_line() {
    let (old, new, _dirs) = folders(V1);
    let not_json_dir = temp_dir("not-json");
    contract(not_json_dir.path(), "order.placed", 1, "{ nope");
    let not_json = not_json_dir.path().display().to_string();
    for args in [
        vec!["contracts", "diff", &old, "/nonexistent/contracts"],
        vec!["contracts", "diff", &old, &not_json],
        vec!["contracts", "diff", "--allow", "NOT_A_RULE", &old, &new],
        vec!["contracts", "diff", "--allow-file", "/nonexistent/allow.txt", &old, &new],
    ] {
        let (code, out, err) = outbox(&args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("error: "), "{err}");
        assert!(out.is_empty());
    }
    assert_eq!(outbox(&["contracts", "diff", "--mode", "sideways", &old, &new]).0, 2);
    assert_eq!(outbox(&["contracts", "diff", &old]).0, 2);
}

#[test]
fn rules_lists_every_rule_with_its_doc() {
    let (code, out, _) = outbox(&["contracts", "rules"]);
    assert_eq!(code, 0);
    for rule in outbox_core::contracts::Rule::ALL {
        assert!(out.contains(rule.id()), "{} missing", rule.id());
    }
    let (code, out, _) = outbox(&["contracts", "rules", "VERSION_REMOVED"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("VERSION_REMOVED\n"), "{out}");
    assert_eq!(outbox(&["contracts", "rules", "NOPE"]).0, 2);
}

/// The real `outbox` binary, as a CI job runs it.
mod binary {

    use super::{contract, folders, temp_dir, NOTE_ADDED_LABEL, NOTE_REQUIRED, V1};

    fn exit_code(args: &[&str]) -> i32 {
        let output = outbox_tests::outbox!().run(args);
        output.status.code().unwrap()
    }

    #[test]
    fn the_binary_exits_0_1_and_2() {
        let (old, new, _dirs) = folders(NOTE_ADDED_LABEL);
        assert_eq!(exit_code(&["contracts", "diff", &old, &new]), 0);
        let (old, new, _dirs) = folders(NOTE_REQUIRED);
        assert_eq!(exit_code(&["contracts", "diff", &old, &new]), 1);
        assert_eq!(exit_code(&["contracts", "diff", &old, "/nonexistent"]), 2);
    }

    /// A new version beside the one CI last saw, as `outbox contracts export` writes an event that declares
    /// `version = 2, upcast_from = ...`: a declared bump, so the binary exits 0, reports `VERSION_ADDED` and lists
    /// what changed against v1 as notes; changing v1 itself in the same commit still breaks.
    #[test]
    fn the_binary_reports_a_new_version_as_a_bump_against_the_previous_one() {
        let (old, new) = (temp_dir("bump-old"), temp_dir("bump-new"));
        contract(old.path(), "order.placed", 1, V1);
        contract(new.path(), "order.placed", 1, V1);
        contract(new.path(), "order.placed", 2, NOTE_REQUIRED);
        let (old_dir, new_dir) = (old.path().display().to_string(), new.path().display().to_string());
        let output = outbox_tests::outbox!().run(["contracts", "diff", &old_dir, &new_dir]);
        let (out, err) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert_eq!(output.status.code(), Some(0), "{out}{err}");
        assert!(out.contains("VERSION_ADDED  order.placed v2  /  v1 -> v2  (against v1)"), "{out}");
        assert!(
            out.contains(
                "PROPERTY_MADE_REQUIRED  order.placed v2  /properties/note  optional -> required  (against v1)"
            ),
            "the change against the previous version is listed: {out}"
        );
        assert!(out.lines().last().unwrap().starts_with("compatible:"), "{out}");

        let output = outbox_tests::outbox!().run(["contracts", "diff", "--json", &old_dir, &new_dir]);
        assert_eq!(output.status.code(), Some(0));
        let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("one JSON document");
        let added = report["findings"].as_array().unwrap().iter().find(|f| f["rule"] == "VERSION_ADDED").unwrap();
        assert_eq!((&added["version"], &added["breaks"]), (&serde_json::json!(2), &serde_json::json!([])), "{report}");

        // The bump does not excuse a breaking change to the version consumers already read.
        contract(new.path(), "order.placed", 1, NOTE_REQUIRED);
        let output = outbox_tests::outbox!().run(["contracts", "diff", &old_dir, &new_dir]);
        let out = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.code(), Some(1), "{out}");
        assert!(out.contains("PROPERTY_MADE_REQUIRED  order.placed v1  /properties/note"), "{out}");
    }
}
