//! What the `bad_input_*` tests share: the real `outbox` binary started through the harness
//! ([`outbox_tests::process`]), and reading what the relay logged.
#![allow(dead_code, unreachable_pub)]

use outbox_tests::process::OutboxProcess;

/// Starts `outbox ARGS` with `DATABASE_URL` and `env` set (and the log settings of the caller removed); its
/// output goes to files, and it is killed when dropped.
pub fn start(database_url: &str, args: &[&str], env: &[(&str, &str)]) -> OutboxProcess {
    let mut outbox = outbox_tests::outbox!().database(database_url);
    for (name, value) in env {
        outbox = outbox.env(name, value);
    }
    outbox.spawn(args)
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
