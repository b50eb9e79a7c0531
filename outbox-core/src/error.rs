//! The error type of `outbox-core`.

/// Everything that can go wrong while enqueueing events or migrating the outbox tables.
///
/// No variant ever carries a payload value, so an error can be logged as it is.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The payload could not be serialized to JSON (for example a map whose keys are not strings, or a
    /// `Serialize` impl that failed). Nothing was written.
    #[error("event `{event_type}` could not be serialized to JSON: {source}")]
    Serialize {
        /// The event type whose payload failed.
        event_type: &'static str,
        /// What serde_json reported.
        #[source]
        source: serde_json::Error,
    },

    /// The payload holds a number JSON cannot represent (NaN or an infinity). Nothing was written.
    #[error("event `{event_type}` has a non-finite number at `{path}`: JSON has no NaN or infinity")]
    NonFiniteNumber {
        /// The event type whose payload failed.
        event_type: &'static str,
        /// Where the value is: a JSON pointer whose map keys are replaced by their entry's place among the map's
        /// entries as serialized (`/readings/<entry 2>/value` for the third), since a key is data.
        path: String,
    },

    /// The payload holds a NUL character (`\u0000`) in a string or a map key, which PostgreSQL's `jsonb` cannot
    /// store. Nothing was written.
    #[error("event `{event_type}` has a NUL character (\\u0000) at `{path}`: PostgreSQL's jsonb cannot store one")]
    NulCharacter {
        /// The event type whose payload failed.
        event_type: &'static str,
        /// Where the string is, or the map whose key holds it: a JSON pointer whose map keys are replaced as in
        /// [`Error::NonFiniteNumber`]'s.
        path: String,
    },

    /// An event's metadata is not valid (empty aggregate id, version 0, a malformed event type, ...). Nothing was
    /// written.
    #[error("invalid event `{event_type}`: {reason}")]
    InvalidEvent {
        /// The event type of the rejected event.
        event_type: String,
        /// Why it was rejected.
        reason: String,
    },

    /// A configured SQL identifier (channel, schema or table name) is not a plain identifier. The message shows it
    /// with control characters escaped, so it stays one line.
    #[error(
        "invalid identifier `{}`: use 1 to 63 characters of [a-z0-9_], starting with a letter or `_`",
        .0.escape_debug()
    )]
    InvalidIdentifier(String),

    /// An inbox consumer name is empty, longer than 200 bytes, or has control characters.
    #[error("invalid inbox consumer name {0:?}: use 1 to 200 bytes without control characters")]
    InvalidConsumer(String),

    /// A received message could not be read as the event type a consumer asked for
    /// ([`Inbox::consume`](crate::inbox::Inbox::consume)).
    #[error(transparent)]
    Decode(#[from] crate::consume::DecodeError),

    /// A [`WalOutbox`](crate::WalOutbox) enqueue found no WAL relay slot to keep its messages: the WAL source
    /// was never started, or `outbox wal disable` / `outbox wal drop-slot` removed the slot (or is removing it).
    /// Nothing was written and the transaction can go on: enqueue with [`Outbox`](crate::Outbox) instead, or
    /// roll back.
    #[error(
        "the WAL source has no slot to keep message-mode events: run `outbox wal enable` and start `outbox relay \
         --source wal` once, or enqueue with `Outbox` (table rows); nothing was written"
    )]
    WalSourceOff,

    /// The database reported an error; the transaction is in an unknown state and should be rolled back.
    #[error(transparent)]
    Database(#[from] sqlx::Error),

    /// The connection failed while [`OutboxTransaction::commit`](crate::OutboxTransaction::commit) waited for
    /// its `COMMIT` to be answered (the connection was lost, or the server ended the session): the transaction,
    /// with its events, may have committed or not, and nobody can tell from here. Retrying it could apply the
    /// domain change twice: find out first, from the domain change itself (an idempotency key), or from one of
    /// `ids` in the outbox table (which no longer holds an event deleted once published, `--retention 0s`, and
    /// never holds those of a [`WalOutbox`](crate::WalOutbox) transaction). Every other error of `commit` means
    /// that nothing was committed.
    #[error(
        "the connection failed while the commit was under way: the transaction and its {} event(s) may have \
         committed or not ({source})",
        ids.len()
    )]
    CommitOutcomeUnknown {
        /// The ids of the transaction's events.
        ids: Vec<uuid::Uuid>,
        /// What the connection reported.
        #[source]
        source: sqlx::Error,
    },

    /// Applying the outbox migrations failed.
    #[error(transparent)]
    Migrate(#[from] sqlx::migrate::MigrateError),

    /// A migration could not take the locks it needs on the outbox tables for `waited`: another session holds
    /// them (a long transaction that read or wrote the table). Each try gave up after a short wait, so that the
    /// application's writes did not queue behind it; the migrations applied before it stay, the rest are not.
    #[error(
        "migration {version} waited {waited:?} for locks on the outbox tables that another session holds (a long \
         transaction?); it changed nothing: run the migrations again once that session has ended"
    )]
    MigrationBlocked {
        /// The version of the migration that could not run.
        version: i64,
        /// How long it tried.
        waited: std::time::Duration,
    },
}

/// The result type of `outbox-core`.
pub type Result<T, E = Error> = std::result::Result<T, E>;
