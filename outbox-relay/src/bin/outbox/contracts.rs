//! `outbox contracts`: compare event contracts, list the compatibility rules, and write the AsyncAPI document of
//! the broker a relay publishes to.
//!
//! `outbox contracts diff OLD NEW` exits 0 when NEW is compatible with OLD, 1 when a change breaks consumers, 2
//! on bad input (unknown option or rule id, unreadable folder, a file that is not a JSON Schema), with a
//! one-line error on stderr. `outbox contracts asyncapi CONTRACTS --sink URL` exits 0, or 2 on bad input. Self-contained: wire it with `Command::Contracts { command }` and [`run`].

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};
use outbox_core::contracts::{self, Allow, ContentModel, DiffOptions, Mode, Rule};

/// `outbox contracts ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum ContractsCommand {
    /// Compare two contract folders (or two schema files) and report every change that breaks consumers.
    ///
    /// Exit code 0: compatible; 1: breaking; 2: bad input.
    Diff(DiffArgs),
    /// Write the AsyncAPI 3.0 document of the contracts as the relay publishes them to a broker: channel
    /// addresses rendered by the sink's templates, the broker as the server (credentials stripped), and the
    /// headers that broker carries.
    ///
    /// Exit code 0: written; 2: bad input.
    Asyncapi(AsyncapiArgs),
    /// List the rule ids with what each detects and which readers it breaks.
    Rules {
        /// Only this rule.
        #[arg(value_name = "RULE_ID")]
        rule: Option<String>,
    },
}

/// `outbox contracts diff`.
#[derive(Debug, Args)]
pub(crate) struct DiffArgs {
    /// The committed contracts: a contracts folder (`<event_type>/v<N>.schema.json`), or one schema file.
    #[arg(value_name = "OLD")]
    pub(crate) old: PathBuf,

    /// The contracts to check: a folder (its `allowed-breaks.txt` is read), or one schema file.
    #[arg(value_name = "NEW")]
    pub(crate) new: PathBuf,

    /// Which readers must keep working: `backward` (new readers, old events), `forward` (old readers, new
    /// events) or `full` (both).
    #[arg(long, value_enum, default_value_t = ModeArg::Full)]
    pub(crate) mode: ModeArg,

    /// Also check each changed version against every older committed version of its event type.
    #[arg(long)]
    pub(crate) transitive: bool,

    /// Confluent Schema Registry's rules (open and closed content models) instead of tolerant readers.
    #[arg(long)]
    pub(crate) strict: bool,

    /// Accept a known break: `RULE_ID`, or `RULE_ID event_type vN /pointer` to accept only that finding.
    #[arg(long, value_name = "RULE_ID")]
    pub(crate) allow: Vec<String>,

    /// A file of accepted breaks, one `--allow` entry per line (`#` comments), like `allowed-breaks.txt`.
    #[arg(long, value_name = "FILE")]
    pub(crate) allow_file: Option<PathBuf>,

    /// `text` (one line per finding) or `json`.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,

    /// Same as `--format json`.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `outbox contracts asyncapi`.
#[derive(Debug, Args)]
pub(crate) struct AsyncapiArgs {
    /// The contracts: a contracts folder (`<event_type>/v<N>.schema.json`), or one schema file.
    #[arg(value_name = "CONTRACTS")]
    pub(crate) contracts: PathBuf,

    /// The sink URL the relay runs with (`outbox relay --sink`), e.g. `kafka://broker:9092?topic=shop.{event_type}`.
    /// Secrets in it, or in the files and variables it names, are never written.
    #[arg(long, value_name = "URL")]
    pub(crate) sink: String,

    /// The document's title.
    #[arg(long, default_value = "Outbox events")]
    pub(crate) title: String,

    /// Write the document to this file instead of standard output.
    #[arg(long, short, value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
}

/// `--mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ModeArg {
    /// New readers read old events.
    Backward,
    /// Old readers read new events.
    Forward,
    /// Both.
    Full,
}

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// One line per finding, then a summary.
    Text,
    /// One JSON document.
    Json,
}

/// Runs `outbox contracts ...`, printing to stdout and stderr.
pub(crate) fn run(command: ContractsCommand) -> ExitCode {
    let code = run_with(command, &mut std::io::stdout().lock(), &mut std::io::stderr().lock());
    ExitCode::from(code)
}

/// Runs `outbox contracts ...`; returns the exit code: 0 compatible, 1 breaking, 2 bad input.
pub(crate) fn run_with(command: ContractsCommand, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let result = match command {
        ContractsCommand::Diff(args) => diff(&args, out),
        ContractsCommand::Asyncapi(args) => asyncapi(&args, out),
        ContractsCommand::Rules { rule } => rules(rule.as_deref(), out),
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            let _ = writeln!(err, "error: {message}");
            2
        }
    }
}

fn diff(args: &DiffArgs, out: &mut dyn Write) -> Result<u8, String> {
    let mut options = DiffOptions::default();
    options.mode = match args.mode {
        ModeArg::Backward => Mode::Backward,
        ModeArg::Forward => Mode::Forward,
        ModeArg::Full => Mode::Full,
    };
    options.transitive = args.transitive;
    options.content_model = if args.strict { ContentModel::Strict } else { ContentModel::Tolerant };
    for entry in &args.allow {
        options.allow.push(entry.parse::<Allow>().map_err(|e| e.to_string())?);
    }
    if let Some(file) = &args.allow_file {
        let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read `{}`: {e}", file.display()))?;
        options.allow.extend(contracts::parse_allow_list(&text).map_err(|e| format!("`{}`: {e}", file.display()))?);
    }
    let report = contracts::diff_paths(&args.old, &args.new, &options).map_err(|e| e.to_string())?;
    let written = if args.json || args.format == Format::Json {
        writeln!(out, "{}", report.to_json())
    } else {
        writeln!(out, "{report}")
    };
    written.map_err(|e| format!("cannot write the report: {e}"))?;
    Ok(if report.is_compatible() { 0 } else { 1 })
}

fn asyncapi(args: &AsyncapiArgs, out: &mut dyn Write) -> Result<u8, String> {
    let sink: outbox_relay::Sink = args.sink.parse().map_err(|e: outbox_relay::Error| e.to_string())?;
    let contracts = contracts::Contracts::load(&args.contracts).map_err(|e| e.to_string())?;
    if contracts.is_empty() {
        return Err(format!("`{}` holds no contract", args.contracts.display()));
    }
    let document = document(&contracts, &args.title, &sink)?;
    let text = contracts::to_canonical_json(&document);
    match &args.output {
        Some(path) => std::fs::write(path, text).map_err(|e| format!("cannot write `{}`: {e}", path.display()))?,
        None => out.write_all(text.as_bytes()).map_err(|e| format!("cannot write the document: {e}"))?,
    }
    Ok(0)
}

/// The document of `sink`, from the publisher the relay would run.
#[cfg(any(feature = "kafka", feature = "nats", feature = "rabbitmq", feature = "sqs", feature = "redis"))]
fn document(
    contracts: &contracts::Contracts,
    title: &str,
    sink: &outbox_relay::Sink,
) -> Result<serde_json::Value, String> {
    outbox_relay::asyncapi_document(contracts, title, sink).map_err(|e| e.to_string())
}

/// Without a broker feature there is no broker to describe.
#[cfg(not(any(feature = "kafka", feature = "nats", feature = "rabbitmq", feature = "sqs", feature = "redis")))]
fn document(
    _contracts: &contracts::Contracts,
    _title: &str,
    _sink: &outbox_relay::Sink,
) -> Result<serde_json::Value, String> {
    Err("this build has no broker sinks (cargo features `kafka`, `nats`, `rabbitmq`, `sqs`, `redis`)".to_owned())
}

fn rules(only: Option<&str>, out: &mut dyn Write) -> Result<u8, String> {
    let selected: Vec<Rule> = match only {
        Some(id) => vec![id.parse::<Rule>().map_err(|e| e.to_string())?],
        None => Rule::ALL.to_vec(),
    };
    for rule in selected {
        let doc = rule.doc().lines().map(|line| format!("    {}", line.trim())).collect::<Vec<_>>().join("\n");
        writeln!(out, "{}\n{doc}\n", rule.id()).map_err(|e| format!("cannot write: {e}"))?;
    }
    Ok(0)
}
