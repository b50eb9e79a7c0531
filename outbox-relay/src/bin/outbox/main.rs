//! `outbox`: run the relay and operate the outbox from the command line.
//!
//! Exit codes: 0 success, 1 a runtime failure (database unreachable, some ids not changed), 2 bad input
//! (unknown sink scheme, malformed URL or duration, unknown status, missing database; for `outbox relay`, outbox
//! tables it cannot use): a one-line error on stderr and nothing written; 130 `outbox relay` ended at once by a
//! second SIGINT/SIGTERM while it stopped.

use std::process::ExitCode;

use clap::Parser;

#[macro_use]
mod output;

mod args;
mod connect;
mod contracts;
mod control;
mod events;
mod migrate;
mod relay;
mod status;
mod telemetry;
mod wal;

use args::{Cli, Command, LogFormat};

/// The relay allocates a few small buffers per event on every worker thread; mimalloc serves them from
/// thread-local pages where glibc's allocator took a quarter of the relay's CPU time in a drain.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A failure of a command: what to print and how to exit.
#[derive(Debug)]
enum Failure {
    /// Bad input: exit 2, nothing was written.
    Usage(String),
    /// The command ran and failed: exit 1.
    Runtime(String),
    /// A second signal ended `outbox relay` without waiting for its graceful stop: exit 130 (128 + SIGINT, what a
    /// shell reports for a process that Ctrl-C ended).
    Forced(String),
    /// The reader of the command's output went away (`| head -1`): exit 0, nothing more printed.
    OutputClosed,
}

impl Failure {
    fn runtime(error: impl std::fmt::Display) -> Self {
        Self::Runtime(error.to_string())
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
    let relay = matches!(cli.command, Command::Relay(_));
    init_logging(level.unwrap_or(tracing::Level::INFO), cli.log_format, relay);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(run(cli));
    if let Err(Failure::Forced(_)) = outcome {
        runtime.shutdown_background(); // at once: nothing is waited for
    } else {
        // Clients' background tasks (a broker connection closing, say) log as they end: let them end first, so a
        // failure's one-line error is the last thing the command prints.
        runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    }
    match outcome {
        Ok(()) | Err(Failure::OutputClosed) => ExitCode::SUCCESS,
        Err(Failure::Usage(message)) => {
            eprintln!("error: {}", one_line(&message));
            ExitCode::from(2)
        }
        Err(Failure::Runtime(message)) => {
            eprintln!("error: {}", one_line(&message));
            ExitCode::FAILURE
        }
        Err(Failure::Forced(message)) => {
            eprintln!("error: {}", one_line(&message));
            ExitCode::from(130)
        }
    }
}

/// A message as one line: a server's multi-line text (a detail, a hint) is joined with spaces.
fn one_line(message: &str) -> String {
    message.split(['\r', '\n']).map(str::trim).filter(|line| !line.is_empty()).collect::<Vec<_>>().join(" ")
}

async fn run(cli: Cli) -> Outcome {
    let database_url = cli.database_url;
    match cli.command {
        Command::Migrate => migrate::run(database_url.as_deref()).await,
        Command::Relay(relay) => relay::run(database_url.as_deref(), *relay).await,
        Command::Status(status) => status::run(database_url.as_deref(), status).await,
        Command::Events { command } => events::run(database_url.as_deref(), command).await,
        Command::Wal { command } => wal::run(database_url.as_deref(), command).await,
        Command::Pause => control::run(database_url.as_deref(), true).await,
        Command::Resume => control::run(database_url.as_deref(), false).await,
        Command::Contracts { .. } => Ok(()), // run by `main` before the runtime starts
    }
}

/// `relay`: the command runs the relay, whose slow statements an operator wants to see; the other commands end with
/// their own one-line result or error, which sqlx's slow-statement warning (the statement's whole text) would
/// bury, so they show it at the debug level only.
fn init_logging(level: tracing::Level, format: LogFormat, relay: bool) {
    use std::io::IsTerminal;
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    // The AMQP client logs every connection failure at ERROR itself, which the relay reports in its own words
    // (one line, password masked): its lines are shown at the debug and trace levels only, and at most at debug,
    // and never those about returned messages: its trace lines and those print frames, payloads included.
    let quiet = if level >= tracing::Level::DEBUG { LevelFilter::DEBUG } else { LevelFilter::OFF };
    // sqlx logs a database URL's unrecognised query parameter with its value (which may be a secret:
    // `?sslpassword=...`) at WARN. The CLI refuses such a URL before sqlx reads it (`connect::options`); this keeps
    // the value out of the logs should sqlx read one anyway.
    let targets = Targets::new()
        .with_default(level)
        .with_target("lapin", quiet)
        .with_target("lapin::returned_messages", LevelFilter::OFF)
        .with_target("sqlx_postgres::options::parse", LevelFilter::OFF)
        .with_target("sqlx::query", if relay { LevelFilter::from_level(level) } else { quiet });
    let logs = tracing_subscriber::fmt().with_writer(std::io::stderr).with_max_level(level).with_target(false);
    match format {
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).finish().with(targets).init(),
        LogFormat::Json => {
            logs.json().flatten_event(true).with_current_span(true).with_span_list(false).finish().with(targets).init()
        }
    }
}
