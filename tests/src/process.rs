//! The `outbox` binary as a child process of a test, and ports of 127.0.0.1.
//!
//! [`outbox!`](crate::outbox) gives an [`Outbox`] for the binary of the calling test crate
//! (`CARGO_BIN_EXE_outbox`); [`Outbox::run`] runs a command to its end, [`Outbox::spawn`] starts a long-running one
//! (`outbox relay`) as an [`OutboxProcess`], whose output goes to files and which is killed when dropped.
//!
//! ```no_run
//! # async fn run(database_url: &str) {
//! // In a test of the crate that builds the binary: `outbox_tests::outbox!()`.
//! let outbox = outbox_tests::process::Outbox::new("target/debug/outbox").database(database_url);
//! assert!(outbox.run(&["migrate"]).status.success());
//! let mut relay = outbox.spawn(&["relay", "--sink", "stdout"]);
//! relay.wait_for_lines("relay started", 1, std::time::Duration::from_secs(30)).await;
//! assert_eq!(relay.terminate().await.code(), Some(0));
//! # }
//! ```

use std::ffi::OsStr;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::Duration;

/// An [`Outbox`] for the `outbox` binary of the calling crate's tests (`env!("CARGO_BIN_EXE_outbox")`).
#[macro_export]
macro_rules! outbox {
    () => {
        $crate::process::Outbox::new(env!("CARGO_BIN_EXE_outbox"))
    };
}

/// The variables of the test's own environment that would change what the binary does: the database (the
/// harness's `DATABASE_URL` names a server, not a test's database) and the log settings. Removed unless a test
/// sets them with [`Outbox::database`] or [`Outbox::env`].
const INHERITED_SETTINGS: [&str; 4] = ["DATABASE_URL", "OUTBOX_LOG", "RUST_LOG", "OUTBOX_LOG_FORMAT"];

/// How a test runs the `outbox` binary: its path, the database and the environment of every command.
#[derive(Debug, Clone)]
pub struct Outbox {
    bin: PathBuf,
    env: Vec<(String, String)>,
}

impl Outbox {
    /// The binary at `bin`; see [`outbox!`](crate::outbox) for the tests' own.
    pub fn new(bin: impl Into<PathBuf>) -> Self {
        Self { bin: bin.into(), env: Vec::new() }
    }

    /// Commands run on the database at `url` (`DATABASE_URL`).
    #[must_use]
    pub fn database(self, url: &str) -> Self {
        self.env("DATABASE_URL", url)
    }

    /// Sets an environment variable of every command.
    #[must_use]
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// The path of the binary.
    #[must_use]
    pub fn bin(&self) -> &Path {
        &self.bin
    }

    /// `outbox ARGS` with this environment and stdin closed, to be run as the caller likes.
    pub fn command<S: AsRef<OsStr>>(&self, args: impl IntoIterator<Item = S>) -> Command {
        let mut command = Command::new(&self.bin);
        command.args(args).stdin(Stdio::null());
        self.set_environment(&mut command);
        command
    }

    fn set_environment(&self, command: &mut Command) {
        for name in INHERITED_SETTINGS {
            command.env_remove(name);
        }
        for (name, value) in &self.env {
            command.env(name, value);
        }
    }

    /// Runs `outbox ARGS` on a pseudo-terminal (util-linux `script`) with `input` typed in, for what the binary
    /// does only on a terminal (asking before it changes events). Its stdout and stderr both end up in the
    /// output's stdout, as on a terminal.
    ///
    /// # Panics
    ///
    /// When `script` cannot be run.
    #[must_use]
    pub fn run_on_a_terminal(&self, args: &[&str], input: &str) -> Output {
        let quote = |word: &str| format!("'{}'", word.replace('\'', r"'\''"));
        let line: Vec<String> =
            std::iter::once(quote(&self.bin.to_string_lossy())).chain(args.iter().map(|arg| quote(arg))).collect();
        let mut command = Command::new("script");
        command.args(["--quiet", "--return", "--command", &line.join(" "), "/dev/null"]);
        self.set_environment(&mut command);
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|error| panic!("run `script` (util-linux) to give outbox a terminal: {error}"));
        if let Some(stdin) = child.stdin.as_mut() {
            std::io::Write::write_all(stdin, input.as_bytes()).expect("type the input");
        }
        child.wait_with_output().expect("wait for `script`")
    }

    /// Runs `outbox ARGS` to its end and returns its exit status and output.
    ///
    /// # Panics
    ///
    /// When the binary cannot be started.
    pub fn run<S: AsRef<OsStr>>(&self, args: impl IntoIterator<Item = S>) -> Output {
        self.command(args).output().unwrap_or_else(|error| panic!("run {}: {error}", self.bin.display()))
    }

    /// Starts `outbox ARGS`; its stdout and stderr go to files ([`OutboxProcess::stdout`], `stderr`), removed
    /// with the process.
    ///
    /// # Panics
    ///
    /// When the binary cannot be started.
    pub fn spawn<S: AsRef<OsStr>>(&self, args: impl IntoIterator<Item = S>) -> OutboxProcess {
        let dir = tempfile::Builder::new()
            .prefix("outbox-process-")
            .tempdir()
            .expect("a temporary directory for the process's output");
        let (stdout, stderr) = (dir.path().join("stdout"), dir.path().join("stderr"));
        self.start(args, &stdout, &stderr, Some(dir))
    }

    /// Starts `outbox ARGS` with stdout and stderr both appended to `log`, which outlives the process (for
    /// a test that reads the logs of every process it started, killed ones included).
    ///
    /// # Panics
    ///
    /// When the binary cannot be started or `log` cannot be created.
    pub fn spawn_logging_to<S: AsRef<OsStr>>(&self, args: impl IntoIterator<Item = S>, log: &Path) -> OutboxProcess {
        self.start(args, log, log, None)
    }

    fn start<S: AsRef<OsStr>>(
        &self,
        args: impl IntoIterator<Item = S>,
        stdout: &Path,
        stderr: &Path,
        dir: Option<tempfile::TempDir>,
    ) -> OutboxProcess {
        let open = |path: &Path| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .unwrap_or_else(|error| panic!("a file for the process's output, {}: {error}", path.display()))
        };
        let child = self
            .command(args)
            .stdout(open(stdout))
            .stderr(open(stderr))
            .spawn()
            .unwrap_or_else(|error| panic!("start {}: {error}", self.bin.display()));
        OutboxProcess { child, stdout: stdout.to_owned(), stderr: stderr.to_owned(), _dir: dir }
    }
}

/// A running `outbox` process: its output in files, waits on what it logged, signals. Killed when dropped.
#[derive(Debug)]
pub struct OutboxProcess {
    child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
    /// The directory of the output files, removed on drop once the process is killed (a field is dropped after
    /// [`Drop::drop`] has run); none for [`Outbox::spawn_logging_to`].
    _dir: Option<tempfile::TempDir>,
}

impl OutboxProcess {
    /// The process id.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the process wrote to stdout so far.
    #[must_use]
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    /// What the process wrote to stderr (its logs) so far.
    #[must_use]
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Everything the process wrote so far: stdout, then stderr (once, when both go to one log).
    #[must_use]
    pub fn output(&self) -> String {
        if self.stdout == self.stderr {
            return self.stderr();
        }
        format!("{}{}", self.stdout(), self.stderr())
    }

    /// The stderr lines containing `text`.
    pub fn lines_with(&self, text: &str) -> Vec<String> {
        self.stderr().lines().filter(|line| line.contains(text)).map(str::to_owned).collect()
    }

    /// Waits (at most `timeout`) until `n` stderr lines contain `text`, and returns them.
    ///
    /// # Panics
    ///
    /// When the process exits before, or the time is up.
    pub async fn wait_for_lines(&mut self, text: &str, n: usize, timeout: Duration) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let lines = self.lines_with(text);
            if lines.len() >= n {
                return lines;
            }
            if let Some(status) = self.exit_status() {
                panic!("outbox exited with {status} before logging {n} lines with `{text}`:\n{}", self.stderr());
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "fewer than {n} lines with `{text}` after {timeout:?}:\n{}",
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The exit status, if the process has exited.
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("wait for the outbox process")
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        self.exit_status().is_none()
    }

    /// Waits (at most `timeout`) for the process to exit by itself.
    ///
    /// # Panics
    ///
    /// When it still runs after `timeout`.
    pub async fn wait_for_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.exit_status() {
                return status;
            }
            assert!(tokio::time::Instant::now() < deadline, "still running after {timeout:?}:\n{}", self.stderr());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sends `signal` (as `kill` names it: `-TERM`, `-STOP`, `-CONT`) to the process, if it still runs.
    pub fn signal(&mut self, signal: &str) {
        // Only a process not yet reaped: its pid cannot have been reused.
        if self.is_running() {
            let _ = send_signal(self.pid(), signal);
        }
    }

    /// SIGTERM, and waits (at most 30 s) for the exit.
    pub async fn terminate(&mut self) -> ExitStatus {
        self.signal("-TERM");
        self.wait_for_exit(Duration::from_secs(30)).await
    }

    /// SIGSTOP: the process stalls (as in a GC pause or a paused VM) until [`resume`](Self::resume). A stopped
    /// process cannot exit, so its pid stays its own.
    pub fn pause(&self) {
        let _ = send_signal(self.pid(), "-STOP");
    }

    /// SIGCONT (harmless to a process that runs).
    pub fn resume(&self) {
        let _ = send_signal(self.pid(), "-CONT");
    }

    /// SIGKILL, and waits until the process is gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for OutboxProcess {
    fn drop(&mut self) {
        if self.is_running() {
            self.resume();
            self.kill();
        }
        // (A reaped process gets no signal: its pid may be another process's by now.) The output directory is
        // removed after this, when `_dir` is dropped.
    }
}

/// Sends `signal` (`-TERM`, `-KILL`, `-STOP`, `-CONT`) to the process `pid` with `kill`; whether it was sent.
#[must_use]
pub fn send_signal(pid: u32, signal: &str) -> bool {
    Command::new("kill").args([signal, &pid.to_string()]).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Kills the process group `pgid` with SIGKILL: a server and whatever it spawned.
pub fn kill_group(pgid: u32) {
    let _ = Command::new("kill").args(["-KILL", "--", &format!("-{pgid}")]).stderr(Stdio::null()).status();
}

/// A port of 127.0.0.1 that was free a moment ago (bound, then released): for a server a test starts, or as a
/// port nothing listens on.
///
/// # Panics
///
/// When 127.0.0.1 cannot be bound.
#[must_use]
pub fn free_port() -> u16 {
    free_addr().port()
}

/// [`free_port`] as an address of 127.0.0.1.
///
/// # Panics
///
/// When 127.0.0.1 cannot be bound.
#[must_use]
pub fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").and_then(|listener| listener.local_addr()).expect("a free port on 127.0.0.1")
}
