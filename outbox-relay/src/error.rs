//! The error type of `outbox-relay`.

use sqlx::error::DatabaseError;
use sqlx::sqlite::SqliteError;

/// Everything that can go wrong building or running a relay.
///
/// Errors are either **fatal** (bad configuration, missing tables, a sink that cannot be opened: retrying would
/// not help, so [`Relay::run`](crate::Relay::run) returns them) or **retryable** (a database that is restarting or
/// unreachable: the relay logs them, backs off and carries on). [`is_retryable`](Error::is_retryable) tells
/// which. No variant ever carries a payload value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    // ---- fatal ----
    /// A configuration value is out of its allowed range. Fatal; reported by
    /// [`RelayConfigBuilder::build`](crate::RelayConfigBuilder::build) before anything runs.
    #[error("invalid relay configuration: `{field}` {reason}")]
    InvalidConfig {
        /// The setting at fault, e.g. `batch_size`.
        field: &'static str,
        /// What is wrong with it, e.g. `must be between 1 and 10000, got 0`.
        reason: String,
    },

    /// A sink URL cannot be parsed or names a sink this build does not have. Fatal.
    #[error("invalid sink `{sink}`: {reason}")]
    InvalidSink {
        /// The sink as given.
        sink: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A sink could not be opened (for example the file of `file:PATH` cannot be created). Fatal.
    #[error("cannot open sink `{sink}`: {source}")]
    OpenSink {
        /// The sink as given.
        sink: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },

    /// The database refused the relay's statements for a reason retrying cannot fix: the outbox tables are
    /// missing or outdated (run `outbox migrate`), or access is denied. Fatal.
    #[error(
        "the database refused the relay ({source}); is the schema migrated (`outbox migrate`) and the role allowed?"
    )]
    Schema {
        /// What the database reported.
        #[source]
        source: outbox_core::Error,
    },

    /// A lane of the relay (one of its `concurrency` readers and publishers) stopped by itself, which only a defect
    /// does (a panic). The relay stops and hands its partitions over rather than keep partitions that nothing
    /// reads. Fatal. The panic's message is not repeated here (it is the panic hook's to print).
    #[error("a lane of the relay stopped unexpectedly ({reason}); the relay stopped and handed its partitions over")]
    LaneStopped {
        /// How it stopped: `panicked`, or `ended`.
        reason: &'static str,
    },

    /// A server the relay needs (the database, or the broker of the sink) refused it for a reason retrying with the
    /// same settings cannot fix: wrong credentials, no permission, a missing database, vhost or exchange. Fatal:
    /// `outbox relay` exits at once (exit 2).
    #[error("{target} refused the relay: {reason}")]
    Refused {
        /// What refused, password masked, e.g. `RabbitMQ at amqp://relay:***@127.0.0.1:5672/%2f`.
        target: String,
        /// What it said, e.g. `403 ACCESS_REFUSED ...`.
        reason: String,
    },

    /// The outbox table is published by the other source: a table relay started while the WAL relay publishes it,
    /// or the other way round. Fatal: `outbox relay` exits at once (exit 2), saying how to switch.
    #[error("the outbox table is published by the {active} source, not this relay's ({hint})")]
    WrongSource {
        /// The source that publishes the table.
        active: outbox_core::store::Source,
        /// How to switch, e.g. ``stop the table relays, then run `outbox wal enable` ``.
        hint: &'static str,
    },

    /// A requirement of the WAL source is missing on the database: `wal_level = logical`, the REPLICATION
    /// privilege, or the publication `outbox_wal`. Fatal: `outbox relay --source wal` exits at once (exit 2).
    #[error("{what}; {fix}")]
    WalUnavailable {
        /// What is missing, e.g. `wal_level is replica, not logical`.
        what: String,
        /// What to run, e.g. `ALTER SYSTEM SET wal_level = logical, then restart PostgreSQL`.
        fix: String,
    },

    /// Event contracts could not be described (for example an AsyncAPI document names no address for one of
    /// them). Fatal.
    #[error("{0}")]
    Contracts(#[from] outbox_core::contracts::ContractError),

    // ---- retryable ----
    /// A server the relay needs (the database, or the broker of the sink) cannot be reached: connection refused,
    /// timed out, host not found, server starting up. Retryable: `outbox relay` waits for it at start, with
    /// backoff, logging a warning for every attempt.
    #[error("cannot reach {target}: {reason}")]
    Unreachable {
        /// What cannot be reached, password masked.
        target: String,
        /// Why, e.g. `I/O error: Connection refused (os error 111)`.
        reason: String,
    },

    /// The database failed in a way that may pass (connection lost, server restarting, timeout). Retryable: the
    /// relay logs it and tries again after a backoff.
    #[error("database error (retrying): {source}")]
    Database {
        /// What the database reported.
        #[source]
        source: outbox_core::Error,
    },
}

impl Error {
    /// Whether retrying the operation later may succeed.
    ///
    /// # Example
    ///
    /// ```
    /// let error = outbox_relay::Error::InvalidConfig { field: "batch_size", reason: "must be at least 1".into() };
    /// assert!(!error.is_retryable());
    /// ```
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Database { .. } | Self::Unreachable { .. })
    }

    /// Sorts a store error into fatal ([`Error::Schema`]) or retryable ([`Error::Database`]). On PostgreSQL by
    /// its SQLSTATE: class 42 (undefined table or column, syntax), 28 (authorization) and 3D (no such database) are
    /// fatal. On SQLite by its result code: a missing table or column, a file that may not be written, opened or
    /// read as a database, or is corrupt, are fatal; a busy or locked file, a full disk, I/O errors are retryable.
    pub(crate) fn from_store(source: outbox_core::Error) -> Self {
        let fatal = match &source {
            outbox_core::Error::Database(sqlx::Error::Database(db)) => match db.try_downcast_ref::<SqliteError>() {
                Some(sqlite) => sqlite_fatal(sqlite),
                None => db
                    .code()
                    .is_some_and(|code| code.starts_with("42") || code.starts_with("28") || code.starts_with("3D")),
            },
            outbox_core::Error::Database(sqlx::Error::Configuration(_))
            | outbox_core::Error::Migrate(_)
            | outbox_core::Error::InvalidIdentifier(_) => true,
            _ => false,
        };
        if fatal {
            Self::Schema { source }
        } else {
            Self::Database { source }
        }
    }

    pub(crate) fn config(field: &'static str, reason: impl Into<String>) -> Self {
        Self::InvalidConfig { field, reason: reason.into() }
    }
}

/// Whether a SQLite error cannot pass by itself: `SQLITE_ERROR` for a missing table, column or function (SQLite's
/// generic code, which also covers statements that may pass), `SQLITE_PERM`, `SQLITE_CORRUPT`, `SQLITE_AUTH`,
/// `SQLITE_NOTADB`, a read-only file (but for the read-only states of recovery and of a lock not yet taken, which
/// pass), and a path that cannot be a database file (a directory, a path that cannot be resolved; a plain
/// `SQLITE_CANTOPEN` can be a process out of file descriptors, which passes).
fn sqlite_fatal(error: &SqliteError) -> bool {
    let Some(code) = error.code().and_then(|code| code.parse::<i32>().ok()) else {
        return false;
    };
    /// `SQLITE_READONLY_RECOVERY`, `SQLITE_READONLY_CANTLOCK`, `SQLITE_READONLY_CANTINIT`.
    const READONLY_PASSING: [i32; 3] = [264, 520, 1288];
    /// `SQLITE_CANTOPEN_ISDIR`, `SQLITE_CANTOPEN_FULLPATH`, `SQLITE_CANTOPEN_CONVPATH`, `SQLITE_CANTOPEN_SYMLINK`.
    const CANTOPEN_FATAL: [i32; 4] = [526, 782, 1038, 1550];
    match code & 0xff {
        1 => error.message().starts_with("no such "),
        3 | 11 | 23 | 26 => true,
        8 => !READONLY_PASSING.contains(&code),
        14 => CANTOPEN_FATAL.contains(&code),
        _ => false,
    }
}

/// The result type of `outbox-relay`.
pub type Result<T, E = Error> = std::result::Result<T, E>;
