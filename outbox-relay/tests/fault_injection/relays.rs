//! The real `outbox relay` binary as a child process: started with `RUST_LOG=trace` and JSON logs captured to a
//! file, a metrics endpoint of its own, and the signals a test sends it (SIGKILL, SIGSTOP/SIGCONT, SIGTERM).

use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

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

/// A running `outbox relay`, SIGKILLed when dropped.
pub(crate) struct RelayProcess {
    pub(crate) name: String,
    child: Child,
    log: PathBuf,
    metrics: SocketAddr,
}

impl RelayProcess {
    /// Starts a relay named `name`; its stdout and stderr go to `DIR/NAME.log`.
    pub(crate) fn spawn(dir: &Path, name: &str, spec: &RelaySpec) -> Self {
        let log = dir.join(format!("{name}.log"));
        let out = File::create(&log).expect("create the relay's log file");
        let metrics = free_addr();
        let mut command = Command::new(env!("CARGO_BIN_EXE_outbox"));
        command
            .args(["relay", "--sink", &spec.sink, "--log-format", "json", "--metrics-addr", &metrics.to_string()])
            .args(spec.options.iter().flat_map(|(name, value)| [name, value]))
            .args(&spec.flags)
            .env("DATABASE_URL", &spec.database_url)
            // The level comes from RUST_LOG (OUTBOX_LOG would win over it).
            .env("RUST_LOG", "trace")
            .env_remove("OUTBOX_LOG")
            .env_remove("OUTBOX_LOG_FORMAT")
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("clone the log handle"))
            .stderr(out);
        for (name, value) in &spec.env {
            command.env(name, value);
        }
        let child = command.spawn().expect("spawn outbox relay");
        Self { name: name.to_owned(), child, log, metrics }
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the process wrote so far.
    pub(crate) fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
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
            if let Ok(Some(status)) = self.child.try_wait() {
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
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL, and waits until the process is gone.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGSTOP: the process stalls (as in a GC pause or a paused VM) until [`resume`](Self::resume).
    pub(crate) fn pause(&self) {
        signal(self.pid(), "-STOP");
    }

    /// SIGCONT.
    pub(crate) fn resume(&self) {
        signal(self.pid(), "-CONT");
    }

    /// SIGTERM, and waits (at most 30 s) for the exit.
    pub(crate) async fn terminate(&mut self) -> ExitStatus {
        signal(self.pid(), "-TERM");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for the relay") {
                return status;
            }
            assert!(tokio::time::Instant::now() < deadline, "relay {} ignored SIGTERM for 30 s", self.name);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
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

impl Drop for RelayProcess {
    fn drop(&mut self) {
        // Only a process not yet reaped: its pid cannot have been reused.
        if self.is_running() {
            self.resume();
            self.kill();
        }
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

fn signal(pid: u32, signal: &str) {
    let _ = Command::new("kill").args([signal, &pid.to_string()]).stderr(Stdio::null()).status();
}

fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").and_then(|listener| listener.local_addr()).expect("a free port on 127.0.0.1")
}

/// The last lines of a log, for failure messages.
pub(crate) fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
