//! `outbox`: run the relay and operate the outbox from the command line.
//!
//! Exit codes: 0 success, 1 a runtime failure (database unreachable, some ids not changed), 2 bad input
//! (unknown sink scheme, malformed URL or duration, unknown status, missing database): a one-line error on
//! stderr and nothing written.

use std::process::ExitCode;

use clap::Parser;

mod args;
mod connect;
mod contracts;
mod control;
mod events;
mod migrate;
mod relay;
mod status;
mod telemetry;

use args::{Cli, Command, LogFormat};

/// A failure of a command: what to print and how to exit.
#[derive(Debug)]
enum Failure {
    /// Bad input: exit 2, nothing was written.
    Usage(String),
    /// The command ran and failed: exit 1.
    Runtime(String),
}

impl Failure {
    fn runtime(error: impl std::fmt::Display) -> Self {
        Failure::Runtime(error.to_string())
    }
}

type Outcome = Result<(), Failure>;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return args::report_parse_error(&error),
    };
    if let Command::Contracts { command } = cli.command {
        return contracts::run(command); // needs no database nor async runtime
    }
    let level = cli.log_level.or_else(|| std::env::var("RUST_LOG").ok()?.trim().parse().ok());
    init_logging(level.unwrap_or(tracing::Level::INFO), cli.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(message)) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
        Err(Failure::Runtime(message)) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Outcome {
    let database_url = cli.database_url;
    match cli.command {
        Command::Migrate => migrate::run(database_url.as_deref()).await,
        Command::Relay(relay) => relay::run(database_url.as_deref(), relay).await,
        Command::Status(status) => status::run(database_url.as_deref(), status).await,
        Command::Events { command } => events::run(database_url.as_deref(), command).await,
        Command::Pause => control::run(database_url.as_deref(), true).await,
        Command::Resume => control::run(database_url.as_deref(), false).await,
        Command::Contracts { .. } => Ok(()), // run by `main` before the runtime starts
    }
}

fn init_logging(level: tracing::Level, format: LogFormat) {
    use std::io::IsTerminal;
    let logs = tracing_subscriber::fmt().with_writer(std::io::stderr).with_max_level(level).with_target(false);
    match format {
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => logs.json().flatten_event(true).with_current_span(true).with_span_list(false).init(),
    }
}
