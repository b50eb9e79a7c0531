//! The command line: every command, argument and value parser.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use outbox_core::store::EventStatus;
use outbox_relay::Sink;
use uuid::Uuid;

/// Run the outbox relay and operate the outbox table.
#[derive(Debug, Parser)]
#[command(name = "outbox", version, about, long_about = None, propagate_version = true)]
pub(crate) struct Cli {
    /// The database holding the outbox tables: `postgres://USER@HOST/DB`, or `sqlite://PATH` (embedded).
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true, value_name = "URL")]
    pub(crate) database_url: Option<String>,

    /// Log level on stderr: error, warn, info, debug or trace [default: RUST_LOG if it is one of these, else info].
    #[arg(long, env = "OUTBOX_LOG", global = true, value_name = "LEVEL")]
    pub(crate) log_level: Option<tracing::Level>,

    /// Log format on stderr: `text`, or `json` (one object per line, the event's fields at the top level).
    #[arg(long, env = "OUTBOX_LOG_FORMAT", global = true, value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,

    #[command(subcommand)]
    pub(crate) command: Command,
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Create or upgrade the outbox tables (safe to run at every deploy, and concurrently).
    Migrate,
    /// Publish committed events to a sink until SIGINT/SIGTERM.
    Relay(Box<RelayArgs>),
    /// Backlog, in-flight, failed and recently published counts, and whether publishing is paused.
    Status(StatusArgs),
    /// List, show, retry, cancel or purge events.
    Events {
        #[command(subcommand)]
        command: EventsCommand,
    },
    /// Switch the outbox table between the table source and the write-ahead-log source (`relay --source wal`).
    Wal {
        #[command(subcommand)]
        command: WalCommand,
    },
    /// Pause publishing: every relay on the database stops reading new batches (in-flight batches finish).
    Pause,
    /// Resume publishing after `outbox pause`.
    Resume,
    /// Compare event contracts (`outbox contracts diff OLD NEW`: exit 0 compatible, 1 breaking, 2 bad input).
    Contracts {
        #[command(subcommand)]
        command: crate::contracts::ContractsCommand,
    },
}

/// `outbox relay`.
#[derive(Debug, Args)]
pub(crate) struct RelayArgs {
    /// Where to publish: `stdout`, `file:PATH` (JSON lines), `http(s)://...` (webhooks, secret in
    /// OUTBOX_WEBHOOK_SECRET), `kafka://HOST:PORT?topic=outbox.{aggregate_type}`,
    /// `nats://[USER:PASS@]HOST:PORT?subject=outbox.{event_type}`,
    /// `amqp://USER:PASS@HOST:PORT/VHOST?exchange=outbox&routing_key={event_type}`,
    /// `sqs://?queue_url=https://sqs.REGION.amazonaws.com/ACCOUNT/QUEUE[.fifo][&endpoint=URL&region=R]`
    /// (credentials from AWS_*), `redis://[:PASS@]HOST:PORT[/DB]?stream=outbox.{aggregate_type}[&maxlen=N]`.
    /// Broker URLs also take `source=`, `schema_base=` (dataschema base URI) and `mode=binary|structured`;
    /// templates use {event_type}, {aggregate_type} and {version}. TLS: the scheme `tls://` or `?tls=true`
    /// (NATS), `amqps://`, `rediss://`, `kafka://...?security_protocol=ssl|sasl_ssl`, plus `tls_ca=PATH` (CA
    /// bundle to trust), `tls_cert=PATH` and `tls_key=PATH` (client certificate); server certificates are always
    /// verified. Secrets stay out of the query: `password_file=PATH` or `password_env=VAR` (for the URL's user),
    /// `token_file=`/`token_env=`, `nkey_seed_file=`/`nkey_seed_env=`, `creds_file=PATH` (NATS); Kafka SASL:
    /// `kafka://USER@...?sasl_mechanism=plain|scram-sha-256|scram-sha-512&password_env=VAR`.
    #[arg(long, value_parser = parse_sink, value_name = "URL")]
    pub(crate) sink: Sink,

    /// Where events come from: `table` (relays read the pending rows) or `wal` (one relay streams the inserts
    /// from PostgreSQL's write-ahead log, in commit order; needs `wal_level = logical`, the REPLICATION privilege
    /// and `outbox wal enable` first).
    #[arg(long, value_enum, default_value_t = SourceArg::Table)]
    pub(crate) source: SourceArg,

    /// The replication slot of `--source wal` [default: the slot recorded by the WAL relay before, else
    /// outbox_events_DATABASE, with a short hash of the name when it has characters a slot name cannot hold].
    #[arg(long, value_parser = parse_slot, value_name = "NAME")]
    pub(crate) slot: Option<String>,

    /// With `--source wal`: how long a failing event is retried where it stands, holding the stream, before it
    /// and the later events of its aggregate go to the table's retry path and the stream moves on (at most 24h)
    /// [default: 10s].
    #[arg(long, value_parser = parse_retry_in_place, value_name = "DURATION")]
    pub(crate) retry_in_place: Option<Duration>,

    /// Create a missing destination at start, with the settings of the sink URL, instead of stopping with an
    /// error naming it: the JetStream stream of the subjects (`stream=OUTBOX`, `stream_storage=file|memory`,
    /// `stream_replicas=1`), the RabbitMQ exchange (`exchange_type=topic|direct|fanout|headers`), the Kafka topic
    /// (`partitions=3`, `replication_factor=1`), the SQS queue (FIFO for `.fifo`, `queue_retention_s=SECONDS`).
    #[arg(long)]
    pub(crate) create_destinations: bool,

    /// The most events per batch (split evenly over the partitions a lane reads).
    #[arg(long, default_value_t = 2000, value_name = "N")]
    pub(crate) batch_size: u32,

    /// Lanes per relay: each reads, publishes and settles its share of the relay's partitions.
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub(crate) concurrency: usize,

    /// The longest wait between two reads when idle (adaptive polling: tighter while events flow).
    #[arg(long, value_parser = parse_duration, default_value = "20ms", value_name = "DURATION")]
    pub(crate) poll_interval: Duration,

    /// How long the relay stays a member without a heartbeat (sent every tenth of it, at most every second);
    /// after it, the other relays take its partitions over.
    #[arg(long, value_parser = parse_duration, default_value = "10s", value_name = "DURATION")]
    pub(crate) lease: Duration,

    /// How long one publish call may take before its events count a failed attempt.
    #[arg(long, value_parser = parse_duration, default_value = "60s", value_name = "DURATION")]
    pub(crate) publish_timeout: Duration,

    /// Attempts before an event that keeps failing goes to `failed`.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub(crate) max_attempts: u32,

    /// First retry delay ceiling (exponential backoff with full jitter).
    #[arg(long, value_parser = parse_duration, default_value = "500ms", value_name = "DURATION")]
    pub(crate) backoff_base: Duration,

    /// Longest retry delay.
    #[arg(long, value_parser = parse_duration, default_value = "5m", value_name = "DURATION")]
    pub(crate) backoff_max: Duration,

    /// Keep the events of one aggregate in order (`aggregate`), or not (`none`, fastest).
    #[arg(long, value_enum, default_value_t = OrderingArg::Aggregate)]
    pub(crate) ordering: OrderingArg,

    /// Delete published and cancelled events older than this (e.g. `7d`); `0s` deletes published events as
    /// they are published. Kept forever when absent.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) retention: Option<Duration>,

    /// Also wake up on PostgreSQL NOTIFY on this channel (producers must enqueue with notifications on).
    #[arg(long, value_name = "CHANNEL", num_args = 0..=1, default_missing_value = outbox_core::DEFAULT_CHANNEL)]
    pub(crate) notify: Option<String>,

    /// How long shutdown waits for the batches in flight before handing the partitions over (with `--source wal`,
    /// for the settles of published batches; a settle still running then is streamed again at the next start).
    #[arg(long, value_parser = parse_duration, default_value = "10s", value_name = "DURATION")]
    pub(crate) shutdown_timeout: Duration,

    /// Serve Prometheus metrics (`/metrics`), liveness (`/healthz`) and readiness (`/readyz`) on this address,
    /// e.g. 127.0.0.1:9464.
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics_addr: Option<SocketAddr>,
}

/// `--source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum SourceArg {
    /// Relays read the table's pending rows.
    Table,
    /// One relay streams the table's inserts from the write-ahead log.
    Wal,
}

/// `outbox wal ...`.
#[derive(Debug, Clone, Copy, Subcommand)]
pub(crate) enum WalCommand {
    /// Publish from the write-ahead log: refused while table relays are live (stop them first).
    Enable,
    /// Publish from the table again: drops the WAL relay's slot; refused while the WAL relay reads it.
    Disable,
    /// Drop the WAL relay's slot (the next WAL relay creates a new one, publishing first what is pending).
    DropSlot,
}

/// `--ordering`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OrderingArg {
    /// Events of one aggregate are published in commit order.
    Aggregate,
    /// No ordering guarantee; maximum throughput.
    None,
}

/// `outbox status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `outbox events ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum EventsCommand {
    /// List events, oldest first, a page at a time (`--after` the last id of a page gives the next one).
    List {
        #[command(flatten)]
        filter: FilterArgs,
        /// Only events after this one (the last id of the previous page).
        #[arg(long, value_name = "ID")]
        after: Option<Uuid>,
        /// The most events to list.
        #[arg(long, default_value_t = 100, value_name = "N")]
        limit: u32,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one event, its payload with sensitive values masked.
    Show {
        /// The event id.
        id: Uuid,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Make failed events pending again (attempts reset): by id, or every failed event the filters match.
    Retry {
        /// The events to retry.
        #[arg(
            required_unless_present_any = ["all_failed", "status", "event_type", "aggregate_id", "older_than"],
            conflicts_with_all = ["all_failed", "status", "event_type", "aggregate_id", "older_than"],
            value_name = "ID"
        )]
        ids: Vec<Uuid>,
        /// Retry every failed event (the filters narrow it down).
        #[arg(long)]
        all_failed: bool,
        #[command(flatten)]
        filter: FilterArgs,
        #[command(flatten)]
        change: ChangeArgs,
    },
    /// Cancel pending or failed events: they will never be published. By id, or what the filters match (with
    /// `--status pending` or `--status failed`).
    Cancel {
        /// The events to cancel.
        #[arg(
            required_unless_present_any = ["status", "event_type", "aggregate_id", "older_than"],
            conflicts_with_all = ["status", "event_type", "aggregate_id", "older_than"],
            value_name = "ID"
        )]
        ids: Vec<Uuid>,
        #[command(flatten)]
        filter: FilterArgs,
        #[command(flatten)]
        change: ChangeArgs,
    },
    /// Delete published and cancelled events older than an age, in small batches.
    Purge {
        /// The age, e.g. `7d`.
        #[arg(long, value_parser = parse_age, value_name = "DURATION")]
        older_than: Duration,
    },
}

/// Which events `events list`, `retry` and `cancel` take: every filter given must hold.
#[derive(Debug, Args)]
pub(crate) struct FilterArgs {
    /// Only events in this status: pending, in_flight, published, failed or cancelled.
    #[arg(long, value_parser = parse_status, value_name = "STATUS")]
    pub(crate) status: Option<EventStatus>,
    /// Only events of this type.
    #[arg(long, value_name = "TYPE")]
    pub(crate) event_type: Option<String>,
    /// Only events of aggregates with this id.
    #[arg(long, value_name = "ID")]
    pub(crate) aggregate_id: Option<String>,
    /// Only events enqueued more than this long ago, e.g. `30m`, `7d`.
    #[arg(long, value_parser = parse_age, value_name = "DURATION")]
    pub(crate) older_than: Option<Duration>,
}

/// How `events retry` and `cancel` change what they select.
#[derive(Debug, Args)]
pub(crate) struct ChangeArgs {
    /// With filters: change at most this many events, oldest first (default: every match).
    #[arg(long, value_name = "N")]
    pub(crate) limit: Option<u32>,
    /// Print the events that would change, and change nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Do not ask for confirmation (asked on a terminal when more than one event would change).
    #[arg(long, short = 'y')]
    pub(crate) yes: bool,
}

fn parse_sink(sink: &str) -> Result<Sink, String> {
    sink.parse::<Sink>().map_err(|error| match error {
        outbox_relay::Error::InvalidSink { reason, .. } => reason,
        other => other.to_string(),
    })
}

fn parse_duration(duration: &str) -> Result<Duration, String> {
    humantime::parse_duration(duration)
        .map_err(|error| format!("malformed duration ({error}); use e.g. 500ms, 30s, 7d"))
}

/// The longest age an event filter takes: the databases count the time it names back from now, and SQLite's dates
/// end at year 0 (PostgreSQL's a few thousand years earlier). (`--retention` has its own range.)
const MAX_AGE: Duration = Duration::from_secs(1000 * 31_557_600); // humantime's `1000y` (years of 365.25 days)

/// An age (`--older-than`): a duration of at most [`MAX_AGE`].
fn parse_age(age: &str) -> Result<Duration, String> {
    let age = parse_duration(age)?;
    if age > MAX_AGE {
        return Err("an age of more than 1000 years names no event; use e.g. 30d".to_owned());
    }
    Ok(age)
}

/// The longest `--retry-in-place`: as long as the longest `--lease` and `--publish-timeout`. A failing event holds
/// the whole stream meanwhile, so a longer wait only stops publishing.
const MAX_RETRY_IN_PLACE: Duration = Duration::from_secs(24 * 3600);

/// `--retry-in-place`: a duration of at most [`MAX_RETRY_IN_PLACE`].
fn parse_retry_in_place(duration: &str) -> Result<Duration, String> {
    let duration = parse_duration(duration)?;
    if duration > MAX_RETRY_IN_PLACE {
        return Err("must be at most 24h (a failing event holds the stream meanwhile); use e.g. 10s".to_owned());
    }
    Ok(duration)
}

/// `--slot`: a name PostgreSQL takes for a replication slot.
fn parse_slot(slot: &str) -> Result<String, String> {
    outbox_relay::WalRelay::check_slot_name(slot).map_err(|error| error.to_string())?;
    Ok(slot.to_owned())
}

fn parse_status(status: &str) -> Result<EventStatus, String> {
    status.parse::<EventStatus>().map_err(|error| error.to_string())
}

/// Prints a parse error as one line (exit 2), or the help or version it asked for (exit 0).
pub(crate) fn report_parse_error(error: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match error.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = error.print();
            ExitCode::SUCCESS
        }
        _ => {
            let rendered = error.render().to_string();
            let line: Vec<&str> = rendered
                .lines()
                .map(str::trim)
                .take_while(|line| !line.is_empty() && !line.starts_with("Usage:"))
                .collect();
            let mut line = line.join(" ");
            // A refused value or an unexpected argument may be a URL holding a password (`--sink`, or a database
            // URL given without `--database-url`): every text the error quotes is shown masked.
            for (_, value) in error.context() {
                let texts = match value {
                    clap::error::ContextValue::String(text) => std::slice::from_ref(text),
                    clap::error::ContextValue::Strings(texts) => texts.as_slice(),
                    _ => &[],
                };
                for text in texts {
                    line = line.replace(text.as_str(), &outbox_relay::masked_url(text));
                }
            }
            let line = line.strip_prefix("error: ").unwrap_or(&line);
            eprintln!("error: {line} (see `outbox --help`)");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    //! The value parsers of the command line, fuzzed: any text gives a value or a one-line error, never a panic,
    //! and a valid rendering parses back to the value it renders, through every flag that takes it.

    use std::time::Duration;

    use clap::Parser;
    use proptest::prelude::*;

    use super::{parse_duration, Cli, Command, RelayArgs};

    const DURATION_FLAGS: [&str; 7] = [
        "--poll-interval",
        "--lease",
        "--backoff-base",
        "--backoff-max",
        "--retention",
        "--shutdown-timeout",
        "--publish-timeout",
    ];
    const NUMBER_FLAGS: [&str; 3] = ["--batch-size", "--concurrency", "--max-attempts"];

    fn relay(flag: &str, value: &str) -> Result<RelayArgs, clap::Error> {
        let value = format!("{flag}={value}"); // `=`: a value starting with `-` is a value, not a flag
        match Cli::try_parse_from(["outbox", "relay", "--sink", "stdout", value.as_str()])?.command {
            Command::Relay(args) => Ok(*args),
            other => panic!("parsed as {other:?}"),
        }
    }

    fn duration_of(args: &RelayArgs, flag: &str) -> Option<Duration> {
        match flag {
            "--poll-interval" => Some(args.poll_interval),
            "--lease" => Some(args.lease),
            "--publish-timeout" => Some(args.publish_timeout),
            "--backoff-base" => Some(args.backoff_base),
            "--backoff-max" => Some(args.backoff_max),
            "--retention" => args.retention,
            "--shutdown-timeout" => Some(args.shutdown_timeout),
            other => panic!("not a duration flag: {other}"),
        }
    }

    fn number_of(args: &RelayArgs, flag: &str) -> u64 {
        match flag {
            "--batch-size" => u64::from(args.batch_size),
            "--concurrency" => args.concurrency as u64,
            "--max-attempts" => u64::from(args.max_attempts),
            other => panic!("not a number flag: {other}"),
        }
    }

    /// Whether clap takes `text` for `flag`: a `usize` as Rust parses it; a `u32` as an `i64` in range (so `-0`
    /// is 0, and is refused later as out of range where 0 is).
    fn fits(flag: &str, text: &str) -> bool {
        match flag {
            "--concurrency" => text.parse::<usize>().is_ok(),
            _ => text.parse::<i64>().is_ok_and(|n| u32::try_from(n).is_ok()),
        }
    }

    #[test]
    fn retry_in_place_takes_up_to_24h_and_refuses_longer() {
        let parse = |value: &str| {
            let value = format!("--retry-in-place={value}");
            Cli::try_parse_from(["outbox", "relay", "--source", "wal", "--sink", "stdout", value.as_str()]).map(|cli| {
                match cli.command {
                    Command::Relay(args) => args.retry_in_place,
                    other => panic!("parsed as {other:?}"),
                }
            })
        };
        assert_eq!(parse("0s").unwrap(), Some(Duration::ZERO));
        assert_eq!(parse("24h").unwrap(), Some(Duration::from_secs(24 * 3600)));
        for value in ["24h 1ms", "25h", "300000000000y"] {
            let error = parse(value).expect_err(value).to_string();
            // What the binary prints of it (`report_parse_error`): the first line.
            assert!(error.lines().next().is_some_and(|line| line.contains("at most 24h")), "{value}: {error}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1_000))]

        #[test]
        fn any_text_is_a_duration_or_a_one_line_error(text in "\\PC{0,40}|[0-9]{1,30}[a-z ]{0,8}") {
            if let Err(error) = parse_duration(&text) {
                prop_assert!(!error.contains('\n'), "{error}");
                prop_assert!(error.starts_with("malformed duration"), "{error}");
            }
            for flag in DURATION_FLAGS {
                if let Err(error) = relay(flag, &text) {
                    prop_assert!(!error.render().to_string().trim().is_empty());
                }
            }
        }

        #[test]
        fn rendered_durations_parse_back_through_every_flag(millis in 0u64..=400 * 365 * 24 * 3_600_000) {
            let duration = Duration::from_millis(millis);
            let text = humantime::format_duration(duration).to_string();
            prop_assert_eq!(parse_duration(&text), Ok(duration), "{}", text);
            for flag in DURATION_FLAGS {
                let args = relay(flag, &text).map_err(|e| TestCaseError::fail(format!("{flag} {text}: {e}")))?;
                prop_assert_eq!(duration_of(&args, flag), Some(duration), "{} {}", flag, text);
            }
        }

        #[test]
        fn number_flags_take_exactly_the_text_that_is_a_number_in_range(
            text in "\\PC{0,24}|[+-]?[0-9]{1,25}| [0-9]{1,3}|[0-9]{1,3}[.e][0-9]"
        ) {
            for flag in NUMBER_FLAGS {
                prop_assert_eq!(relay(flag, &text).is_ok(), fits(flag, &text), "{} {:?}", flag, text);
            }
        }

        #[test]
        fn rendered_numbers_parse_back_through_every_flag(n in any::<u32>()) {
            for flag in NUMBER_FLAGS {
                let args = relay(flag, &n.to_string()).map_err(|e| TestCaseError::fail(format!("{flag} {n}: {e}")))?;
                prop_assert_eq!(number_of(&args, flag), u64::from(n));
            }
        }
    }
}
