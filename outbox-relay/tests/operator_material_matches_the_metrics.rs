//! The operator material under `deploy/` stays true to the relay: the Grafana dashboard and the Prometheus alert
//! rules query only metric names the relay exports (and the dashboard shows every one of them), and the rules
//! parse and fire as their unit tests say (`promtool check rules`, `promtool test rules`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use outbox_relay::telemetry::names;
use serde_json::Value;

const PROMTOOL_HINT: &str = "promtool is missing: install it with `apt-get install prometheus` (Debian ships \
promtool in that package; scripts/test-all.sh installs it)";

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// The exported metric a series name belongs to (`outbox_x_bucket` -> `outbox_x` for histograms).
fn exported(series: &str) -> Option<&'static names::Metric> {
    names::ALL.iter().find(|metric| {
        series == metric.name
            || (metric.kind == names::Kind::Histogram
                && ["_bucket", "_sum", "_count"].iter().any(|suffix| series.strip_suffix(suffix) == Some(metric.name)))
    })
}

/// Every `outbox_...` identifier in a PromQL expression.
fn outbox_series(expr: &str) -> Vec<String> {
    let mut found = Vec::new();
    let bytes = expr.as_bytes();
    let mut start = 0;
    while let Some(at) = expr[start..].find("outbox_") {
        let begin = start + at;
        let preceded = begin > 0 && (bytes[begin - 1].is_ascii_alphanumeric() || bytes[begin - 1] == b'_');
        let end = expr[begin..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .map_or(expr.len(), |len| begin + len);
        if !preceded {
            found.push(expr[begin..end].to_owned());
        }
        start = end;
    }
    found
}

/// Label names grouped by in `by (...)` / `without (...)` clauses.
fn grouping_labels(expr: &str) -> Vec<String> {
    let mut labels = Vec::new();
    for keyword in ["by (", "by(", "without (", "without("] {
        let mut rest = expr;
        while let Some(at) = rest.find(keyword) {
            rest = &rest[at + keyword.len()..];
            if let Some(close) = rest.find(')') {
                labels.extend(rest[..close].split(',').map(|label| label.trim().to_owned()));
            }
        }
    }
    labels
}

/// Every string under a key named `expr`, `query` or `definition`, anywhere in the dashboard.
fn queries(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("expr" | "query" | "definition", Value::String(query)) => out.push(query.clone()),
                    _ => queries(value, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| queries(item, out)),
        _ => {}
    }
}

#[test]
fn the_dashboard_queries_only_exported_metrics_and_shows_every_one() {
    let path = deploy().join("grafana/outbox-dashboard.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("read the dashboard"))
        .expect("the dashboard is JSON");
    let mut exprs = Vec::new();
    queries(&dashboard, &mut exprs);
    let exprs: Vec<String> = exprs.into_iter().filter(|q| q != "prometheus").collect();
    assert!(exprs.len() >= 10, "expected a panel per figure, found {} queries", exprs.len());
    let mut shown = BTreeSet::new();
    for expr in &exprs {
        let series = outbox_series(expr);
        assert!(!series.is_empty(), "a dashboard query that reads no relay metric: {expr}");
        for name in series {
            let metric = exported(&name).unwrap_or_else(|| panic!("`{name}` is not exported by the relay: {expr}"));
            shown.insert(metric.name);
        }
        for label in grouping_labels(expr) {
            assert!(["event_type", "kind", "le"].contains(&label.as_str()), "unknown label `{label}` in {expr}");
        }
    }
    let all: BTreeSet<&str> = names::ALL.iter().map(|metric| metric.name).collect();
    assert_eq!(shown, all, "every exported metric has a panel");
    for panel in dashboard["panels"].as_array().expect("panels") {
        assert!(panel["title"].as_str().is_some_and(|title| !title.is_empty()), "{panel}");
        assert!(panel["gridPos"]["w"].as_u64().is_some(), "{panel}");
    }
}

#[test]
fn the_alert_rules_query_only_exported_metrics() {
    let rules = std::fs::read_to_string(deploy().join("prometheus/outbox-alerts.yml")).expect("read the rules");
    let exprs: Vec<&str> = rules.lines().filter_map(|line| line.trim().strip_prefix("expr:")).map(str::trim).collect();
    let alerts: Vec<&str> =
        rules.lines().filter_map(|line| line.trim().strip_prefix("- alert:")).map(str::trim).collect();
    assert_eq!(exprs.len(), alerts.len(), "one expr per alert");
    for wanted in ["OutboxBacklogTooOld", "OutboxPublishFailuresRising", "OutboxRelayDown", "OutboxRelayPausedTooLong"]
    {
        assert!(alerts.contains(&wanted), "missing alert {wanted}: {alerts:?}");
    }
    for expr in exprs {
        // Prometheus's own `up` tells whether a relay is scraped at all; everything else is the relay's.
        let series = outbox_series(expr);
        assert!(!series.is_empty() || expr.contains("up{job=\"outbox-relay\"}"), "{expr}");
        for name in series {
            assert!(exported(&name).is_some(), "`{name}` is not exported by the relay: {expr}");
        }
    }
}

fn promtool(args: &[&str]) -> String {
    let output = Command::new("promtool")
        .args(args)
        .current_dir(deploy().join("prometheus"))
        .output()
        .unwrap_or_else(|error| panic!("cannot run promtool ({error}): {PROMTOOL_HINT}"));
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

#[test]
fn the_alert_rules_parse_and_fire_as_their_unit_tests_say() {
    let checked = promtool(&["check", "rules", "outbox-alerts.yml"]);
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = promtool(&["test", "rules", "outbox-alerts.test.yml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
}
