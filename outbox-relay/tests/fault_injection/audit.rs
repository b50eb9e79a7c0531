//! The security check every scenario ends with: no sensitive value, secret or password, and no payload, in
//! anything the toolkit printed while the faults ran: the relays' logs at trace level (killed incarnations
//! included), the CLI's output and errors, the errors stored in the table, and the `/metrics` scrapes.

use std::path::Path;

use sqlx::PgPool;
use uuid::Uuid;

use crate::events::{PAYLOAD_PREFIX, SENSITIVE_PREFIX};

/// What a text is, which decides what it may contain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Logs, errors, metrics, `status`, `events list`: neither sensitive values nor payloads.
    NoPayload,
    /// `events show`: the payload, with its sensitive values as `[REDACTED]`.
    RedactedPayload,
}

/// Texts collected for the check.
#[derive(Default)]
pub(crate) struct Audit {
    texts: Vec<(String, Kind, String)>,
    secrets: Vec<String>,
}

impl Audit {
    /// An audit that also looks for each of `secrets` (passwords, the webhook secret).
    pub(crate) fn new(secrets: &[&str]) -> Self {
        Self { texts: Vec::new(), secrets: secrets.iter().map(|s| (*s).to_owned()).collect() }
    }

    /// Adds a log, an error or a scrape.
    pub(crate) fn add(&mut self, what: impl Into<String>, text: impl Into<String>) {
        self.texts.push((what.into(), Kind::NoPayload, text.into()));
    }

    /// Adds every `*.log` file of `dir` (one per relay process, killed ones included).
    pub(crate) fn add_logs(&mut self, dir: &Path) {
        let mut logs: Vec<_> = std::fs::read_dir(dir)
            .expect("the scenario's directory")
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
            .collect();
        logs.sort();
        assert!(!logs.is_empty(), "no relay logs in {}", dir.display());
        for path in logs {
            let text = std::fs::read_to_string(&path).expect("a log file");
            self.add(path.display().to_string(), text);
        }
    }

    /// Adds the `last_error` of every row.
    pub(crate) async fn add_stored_errors(&mut self, pool: &PgPool) {
        let errors: Vec<String> =
            sqlx::query_scalar("SELECT last_error FROM outbox_events WHERE last_error IS NOT NULL")
                .fetch_all(pool)
                .await
                .expect("read last_error");
        self.add("outbox_events.last_error", errors.join("\n"));
    }

    /// Runs `outbox status`, `outbox events list` and `outbox events show` (text and JSON, for `ids`, and for an
    /// unknown id, an error) on `database_url` and adds their output.
    pub(crate) fn add_cli(&mut self, database_url: &str, ids: &[Uuid]) {
        for args in [
            vec!["status"],
            vec!["status", "--json"],
            vec!["events", "list", "--status", "published", "--limit", "50"],
            vec!["events", "list", "--status", "published", "--limit", "50", "--json"],
            vec!["events", "list", "--status", "failed"],
        ] {
            let output = run_cli(database_url, &args, true);
            self.add(format!("outbox {}", args.join(" ")), output);
        }
        for id in ids {
            for json in [false, true] {
                let id = id.to_string();
                let mut args = vec!["events", "show", id.as_str()];
                if json {
                    args.push("--json");
                }
                let output = run_cli(database_url, &args, true);
                assert!(
                    output.contains("[REDACTED]"),
                    "`outbox {}` shows no redacted value:\n{output}",
                    args.join(" ")
                );
                self.texts.push((format!("outbox {}", args.join(" ")), Kind::RedactedPayload, output));
            }
        }
        let unknown = Uuid::now_v7().to_string();
        let output = run_cli(database_url, &["events", "show", &unknown], false);
        self.add("outbox events show UNKNOWN", output);
    }

    /// Asserts that no text leaks, and that the relays really logged at trace level; prints what was read.
    pub(crate) fn check(&self, scenario: &str) {
        let mut bytes = 0;
        let mut lines = 0;
        let mut trace_lines = 0;
        let mut verbose_lines = 0;
        for (what, kind, text) in &self.texts {
            bytes += text.len();
            lines += text.lines().count();
            trace_lines += text.lines().filter(|line| line.contains(r#""level":"TRACE""#)).count();
            verbose_lines += text.lines().filter(|line| line.contains(r#""level":"DEBUG""#)).count();
            if let Some(line) = text.lines().find(|line| line.contains(SENSITIVE_PREFIX)) {
                panic!("{what}: a sensitive value leaked: {line}");
            }
            if *kind == Kind::NoPayload {
                if let Some(line) = text.lines().find(|line| line.contains(PAYLOAD_PREFIX)) {
                    panic!("{what}: a payload leaked: {line}");
                }
            }
            for secret in &self.secrets {
                if let Some(line) = text.lines().find(|line| line.contains(secret.as_str())) {
                    panic!("{what}: a secret leaked: {line}");
                }
            }
        }
        // Below `info`, the default: the relays logged at the level RUST_LOG asked for (some sinks log nothing
        // at TRACE itself; the webhook client and the NATS client do).
        assert!(
            trace_lines + verbose_lines > 0,
            "no DEBUG or TRACE line in the relays' logs: was RUST_LOG=trace in effect?"
        );
        println!(
            "    [{scenario}] audit: {} texts, {lines} lines ({verbose_lines} at DEBUG, {trace_lines} at TRACE), {:.1} MB: no sensitive value, \
             secret or payload",
            self.texts.len(),
            bytes as f64 / 1e6
        );
    }
}

/// Runs the `outbox` CLI; returns stdout and stderr. Asserts the exit status (success, or failure when
/// `succeeds` is false).
pub(crate) fn run_cli(database_url: &str, args: &[&str], succeeds: bool) -> String {
    let output = outbox_tests::outbox!().database(database_url).env("RUST_LOG", "trace").run(args);
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert_eq!(output.status.success(), succeeds, "`outbox {}`: {}\n{text}", args.join(" "), output.status);
    text
}
