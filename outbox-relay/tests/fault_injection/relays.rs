//! The real `outbox relay` binary as a child process: started with `RUST_LOG=trace` and JSON logs captured to a
//! file, a metrics endpoint of its own, and the signals a test sends it (SIGKILL, SIGSTOP/SIGCONT, SIGTERM).

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

use outbox_tests::process::{free_addr, OutboxProcess};

use serde_json::Value;
use uuid::Uuid;

/// The options every relay of the suite runs with, unless a scenario overrides them.
const DEFAULTS: &[(&str, &str)] = &[
    ("--batch-size", "50"),
    ("--lease", "2s"),
    ("--poll-interval", "10ms"),
    ("--max-attempts", "1000"),
    ("--backoff-base", "100ms"),
    ("--backoff-max", "2s"),
    ("--shutdown-timeout", "5s"),
];

/// The batch size of [`DEFAULTS`]: the most events one claim holds.
pub(crate) const BATCH_SIZE: usize = 50;

/// How to start a relay: the sink, options (replacing the defaults of the same name), flags and environment.
#[derive(Debug, Clone)]
pub(crate) struct RelaySpec {
    database_url: String,
    sink: String,
    options: Vec<(String, String)>,
    flags: Vec<String>,
    env: Vec<(String, String)>,
}

impl RelaySpec {
    /// A relay of `database_url` (the least-privileged role's URL) publishing to `sink`.
    pub(crate) fn new(database_url: &str, sink: &str) -> Self {
        Self {
            database_url: database_url.to_owned(),
            sink: sink.to_owned(),
            options: DEFAULTS.iter().map(|(name, value)| ((*name).to_owned(), (*value).to_owned())).collect(),
            flags: Vec::new(),
            env: Vec::new(),
        }
    }

    /// Sets `--name value`, replacing the default.
    #[must_use]
    pub(crate) fn option(mut self, name: &str, value: &str) -> Self {
        self.options.retain(|(existing, _)| existing != name);
        self.options.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Adds a flag such as `--notify`.
    #[must_use]
    pub(crate) fn flag(mut self, flag: &str) -> Self {
        self.flags.push(flag.to_owned());
        self
    }

    /// Sets an environment variable of the process.
    #[must_use]
    pub(crate) fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }
}

/// A running `outbox relay` with a name and a metrics endpoint, SIGKILLed when dropped.
pub(crate) struct RelayProcess {
    pub(crate) name: String,
    process: OutboxProcess,
    metrics: SocketAddr,
}

impl RelayProcess {
    /// Starts a relay named `name`; its stdout and stderr go to `DIR/NAME.log`, kept after the process.
    pub(crate) fn spawn(dir: &Path, name: &str, spec: &RelaySpec) -> Self {
        let metrics = free_addr();
        let mut outbox = outbox_tests::outbox!()
            .database(&spec.database_url)
            // The level comes from RUST_LOG (OUTBOX_LOG would win over it; the harness leaves it unset).
            .env("RUST_LOG", "trace");
        for (name, value) in &spec.env {
            outbox = outbox.env(name, value);
        }
        let metrics_addr = metrics.to_string();
        let mut args = vec!["relay", "--sink", &spec.sink, "--log-format", "json", "--metrics-addr", &metrics_addr];
        args.extend(spec.options.iter().flat_map(|(name, value)| [name.as_str(), value.as_str()]));
        args.extend(spec.flags.iter().map(String::as_str));
        let process = outbox.spawn_logging_to(args, &dir.join(format!("{name}.log")));
        Self { name: name.to_owned(), process, metrics }
    }

    /// Everything the process wrote so far.
    pub(crate) fn output(&self) -> String {
        self.process.output()
    }

    /// The JSON log lines written so far (a line cut short by a SIGKILL is skipped).
    pub(crate) fn lines(&self) -> Vec<Value> {
        self.output().lines().filter_map(|line| serde_json::from_str(line).ok()).collect()
    }

    /// The log lines whose message is `message`.
    pub(crate) fn lines_saying(&self, message: &str) -> Vec<Value> {
        self.lines().into_iter().filter(|line| line["message"].as_str().is_some_and(|m| m.contains(message))).collect()
    }

    /// Waits until the relay logged `relay started` (at most `timeout`) and returns its id, the owner of
    /// the rows it claims.
    pub(crate) async fn wait_started(&mut self, timeout: Duration) -> Uuid {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let started = self.lines_saying("relay started").into_iter().next();
            if let Some(id) = started.and_then(|line| line["relay_id"].as_str().and_then(|id| id.parse().ok())) {
                return id;
            }
            if let Some(status) = self.process.exit_status() {
                panic!("relay {} exited with {status}:\n{}", self.name, tail(&self.output()));
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "relay {} did not start within {timeout:?}:\n{}",
                self.name,
                tail(&self.output())
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether the process still runs.
    pub(crate) fn is_running(&mut self) -> bool {
        self.process.is_running()
    }

    /// SIGKILL, and waits until the process is gone.
    pub(crate) fn kill(&mut self) {
        self.process.kill();
    }

    /// SIGSTOP: the process stalls (as in a GC pause or a paused VM) until [`resume`](Self::resume).
    pub(crate) fn pause(&self) {
        self.process.pause();
    }

    /// SIGCONT.
    pub(crate) fn resume(&self) {
        self.process.resume();
    }

    /// SIGTERM, and waits (at most 30 s) for the exit.
    pub(crate) async fn terminate(&mut self) -> ExitStatus {
        self.process.terminate().await
    }

    /// SIGTERM and asserts a graceful exit (code 0).
    pub(crate) async fn stop_gracefully(&mut self) {
        let status = self.terminate().await;
        assert_eq!(status.code(), Some(0), "relay {} on SIGTERM: {status}\n{}", self.name, tail(&self.output()));
    }

    /// `GET /metrics`, if the endpoint answers.
    pub(crate) async fn scrape(&self) -> Option<String> {
        let response = reqwest::get(format!("http://{}/metrics", self.metrics)).await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        response.text().await.ok()
    }
}

/// The value of the sample `name` whose labels include every `name="value"` of `labels`, in a `/metrics` text.
pub(crate) fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().filter(|line| !line.starts_with('#')).find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let (series_name, series_labels) = series.split_once('{').unwrap_or((series, ""));
        let matches = series_name == name
            && labels.iter().all(|(label, value)| series_labels.contains(&format!("{label}=\"{value}\"")));
        matches.then(|| value.parse().ok()).flatten()
    })
}

/// The last lines of a log, for failure messages.
pub(crate) fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
