//! What the `bad_input_*` tests share: the real `outbox` binary as a child process whose output is collected
//! into files, waits on what it logged, SIGTERM, and ports nobody listens on.
#![allow(dead_code, unreachable_pub)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

/// A running `outbox` process, killed when dropped; stdout and stderr go to files.
pub struct Outbox {
    child: Child,
    dir: PathBuf,
}

impl Outbox {
    /// Starts `outbox ARGS` with `DATABASE_URL` and `env` set (and the log settings of the caller removed).
    pub fn start(database_url: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        let dir = std::env::temp_dir().join(format!("outbox-bad-input-{}", uuid::Uuid::now_v7().simple()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut command = Command::new(env!("CARGO_BIN_EXE_outbox"));
        command
            .args(args)
            .env("DATABASE_URL", database_url)
            .env_remove("OUTBOX_LOG")
            .env_remove("RUST_LOG")
            .env_remove("OUTBOX_LOG_FORMAT")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.join("stdout")).expect("stdout file"))
            .stderr(std::fs::File::create(dir.join("stderr")).expect("stderr file"));
        for (name, value) in env {
            command.env(name, value);
        }
        let child = command.spawn().expect("spawn outbox");
        Self { child, dir }
    }

    /// What the process wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default()
    }

    /// What the process wrote to stdout so far.
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(self.dir.join("stdout")).unwrap_or_default()
    }

    /// The stderr lines containing `text`.
    pub fn lines_with(&self, text: &str) -> Vec<String> {
        self.stderr().lines().filter(|line| line.contains(text)).map(str::to_owned).collect()
    }

    /// Waits (at most `timeout`) until `n` stderr lines contain `text`, and returns them.
    pub async fn wait_for_lines(&mut self, text: &str, n: usize, timeout: Duration) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let lines = self.lines_with(text);
            if lines.len() >= n {
                return lines;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("outbox exited with {status} before logging {n} lines with `{text}`:\n{}", self.stderr());
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "fewer than {n} lines with `{text}` after {timeout:?}:\n{}",
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits (at most `timeout`) for the process to exit by itself.
    pub async fn wait_for_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(tokio::time::Instant::now() < deadline, "still running after {timeout:?}:\n{}", self.stderr());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends SIGTERM and waits (at most 30 s) for the exit.
    pub async fn terminate(&mut self) -> ExitStatus {
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().expect("run kill");
        assert!(status.success(), "kill -TERM failed");
        self.wait_for_exit(Duration::from_secs(30)).await
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A port of 127.0.0.1 that nothing listens on (bound, then released).
pub fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1").local_addr().expect("local addr").port()
}

/// The `retry_in=...` delays of warn lines, in milliseconds, in order.
pub fn retry_delays(lines: &[String]) -> Vec<f64> {
    lines
        .iter()
        .filter_map(|line| {
            let value = line.split("retry_in=").nth(1)?.split_whitespace().next()?;
            let (number, unit) = value.split_at(value.find(|c: char| c.is_ascii_alphabetic())?);
            let number: f64 = number.parse().ok()?;
            Some(match unit {
                "ns" => number / 1e6,
                "µs" | "us" => number / 1e3,
                "ms" => number,
                "s" => number * 1e3,
                _ => return None,
            })
        })
        .collect()
}

/// `url` with `password` as the password of its user.
pub fn with_password(url: &str, password: &str) -> String {
    let mut url = url::Url::parse(url).expect("a URL");
    url.set_password(Some(password)).expect("a URL that takes a password");
    url.to_string()
}
