//! The write-ahead-log source: publishes the outbox table's inserts from PostgreSQL's logical replication stream,
//! in the order their transactions committed, with no polling.
//!
//! - [`replication`]: the replication connection, the slot's name, why this client;
//! - [`preflight`]: `wal_level`, the REPLICATION privilege, the publication, the table's source;
//! - [`leader`]: one relay reads a slot, standbys wait to take over;
//! - [`restart`]: how long the relay waits after a failed session, and when the wait starts over;
//! - [`session`]: the slot and its snapshot, the rows pending then, the stream and its acknowledgements;
//! - [`pgoutput`]: the two `pgoutput` messages decoded here; [`flush`]: reading by id, publishing and settling, with
//!   retries in place; [`publish_settle`]: one batch published and its rows settled; [`read_ahead`]: the next
//!   batch's rows read while a batch is published;
//! - [`handover`]: events that keep failing leave the stream for the table's retry path;
//! - [`slot_gauges`]: the slot's lag and confirmed age, from the stream;
//! - [`statement`]: the database statements, retried while the database is unreachable.

mod flush;
mod handover;
mod leader;
mod pgoutput;
mod preflight;
mod publish_settle;
mod read_ahead;
mod replication;
mod restart;
mod session;
mod settling;
mod slot_gauges;
mod statement;

use std::sync::Arc;
use std::time::Duration;

use outbox_core::store::PgStore;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::config::RelayConfig;
use crate::error::{Error, Result};
use crate::publish::Publisher;
use crate::relay::shared::Shared;
use crate::relay::summary::RunSummary;

/// How long a failing event holds the stream by default ([`WalRelay::retry_in_place`]).
const DEFAULT_RETRY_IN_PLACE: Duration = Duration::from_secs(10);

/// Publishes committed outbox events from PostgreSQL's write-ahead log (`outbox relay --source wal`): one
/// relay streams the inserts into `outbox_events` through a logical replication slot, in the order their
/// transactions committed, and settles each batch by id in one statement (`published`, or deleted with
/// [`Retention::Immediately`](crate::Retention::Immediately)), so `outbox status` and `outbox events` work as with the table source.
///
/// - **Commit order**: events are published in the order their transactions committed (per aggregate, and
///   across aggregates the stream's order), also when two transactions commit in the reverse of their inserts.
/// - **At least once, restartable**: the slot's confirmed position moves only past transactions whose events are
///   settled; after a crash the stream resumes there, and events settled since are skipped.
/// - **No gap when switching**: the slot is created with an exported snapshot; the rows pending at that snapshot
///   are published first (in `seq` order), then the stream continues from the slot's consistent point.
/// - **One bad event does not stop the stream**: a failing event is retried in place with the backoff policy for
///   [`retry_in_place`](Self::retry_in_place); then it and the later events of its aggregate are published from
///   the table (pending, with `next_attempt_at`), in order, while the stream moves on. An event that fails for
///   good (`max_attempts`) holds its aggregate there until an operator retries or cancels it.
/// - **One reader**: relays started with the same slot stand by and one takes over within a second or so after
///   the active relay dies or loses its connection.
///
/// It needs `wal_level = logical`, a role with the REPLICATION privilege, the publication `outbox_wal` (created by
/// [`outbox_core::migrate`]) and the table switched to the WAL source (`outbox wal enable`); otherwise
/// [`run`](Self::run) stops at once with [`Error::WalUnavailable`] or [`Error::WrongSource`].
///
/// # Example
///
/// ```no_run
/// # use outbox_relay::{RelayConfig, StdoutPublisher, WalRelay};
/// # async fn run() -> Result<(), outbox_relay::Error> {
/// let url = "postgres://relay@127.0.0.1/shop";
/// let pool = sqlx::PgPool::connect(url).await.expect("database");
/// let relay = WalRelay::new(pool, url, StdoutPublisher::new(), RelayConfig::builder().build()?)?;
/// let summary = relay.run(outbox_relay::CancellationToken::new()).await?;
/// println!("published {} events", summary.published);
/// # Ok(())
/// # }
/// ```
pub struct WalRelay {
    shared: Arc<Shared>,
    store: PgStore,
    target: replication::Target,
    /// The leader's connection (an ordinary one, holding the slot's lock): made as the pool makes its connections.
    options: sqlx::postgres::PgConnectOptions,
    slot: String,
    /// Whether [`slot`](Self::slot) named the slot; otherwise the recorded slot, if any, is read.
    slot_given: bool,
    retry_in_place: Duration,
}

impl std::fmt::Debug for WalRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WalRelay").field("slot", &self.slot).field("database", &self.target).finish_non_exhaustive()
    }
}

impl WalRelay {
    /// A WAL relay of the database `pool` connects to, streaming over a replication connection to
    /// `database_url` (the same database), publishing with `publisher`. Its slot is the one the table's WAL
    /// source records, if any; otherwise `outbox_events_DATABASE`, with the database's name in the characters a
    /// slot name may have and, when that changed or cut it, `_` and 8 hexadecimal digits of a hash of the exact name
    /// (slot names are shared by a server's databases: `orders-eu` and `orders_eu` get one slot each).
    /// [`slot`](Self::slot) names another. Its other connections are made as the pool makes its own.
    ///
    /// The replication connection uses TLS as the URL's `sslmode` says (libpq's six modes, `prefer` when none is
    /// given), trusting the authorities of `sslrootcert` and sending the client certificate of `sslcert` and
    /// `sslkey`; the environment's `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT` and `PGSSLKEY` fill what the URL
    /// leaves out, as for sqlx's connections. Over a Unix socket it uses none, as libpq.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] when `database_url` is not a `postgres://` URL, or its TLS settings are not
    /// valid (an unknown `sslmode`, `sslcert` without `sslkey`).
    pub fn new(pool: sqlx::PgPool, database_url: &str, publisher: impl Publisher, config: RelayConfig) -> Result<Self> {
        crate::crypto_provider::install_default();
        let target = replication::Target::from_url(database_url)?;
        let _: sqlx::postgres::PgConnectOptions = database_url
            .parse()
            .map_err(|_| Error::InvalidConfig { field: "database_url", reason: "is not a postgres:// URL".into() })?;
        let options = (*pool.connect_options()).clone();
        let publisher: Arc<dyn crate::publish::ErasedPublisher> =
            Arc::new(crate::telemetry::Instrumented::new(Arc::new(publisher)));
        let store = PgStore::new(pool);
        let shared = Arc::new(Shared {
            store: Arc::new(store.clone()),
            publisher,
            config,
            relay: Uuid::now_v7(),
            destination: Default::default(),
            call_size: Default::default(),
        });
        let slot = replication::default_slot(&target.database);
        Ok(Self { shared, store, target, options, slot, slot_given: false, retry_in_place: DEFAULT_RETRY_IN_PLACE })
    }

    /// Reads the replication slot `slot` (lower-case letters, digits and `_`, at most 63) instead of the default.
    /// A slot of that name that belongs to another database of the server stops the relay (it is never dropped or
    /// read), as does one that differs from the slot the table's WAL source records.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a name PostgreSQL does not take.
    pub fn slot(mut self, slot: &str) -> Result<Self> {
        Self::check_slot_name(slot)?;
        slot.clone_into(&mut self.slot);
        self.slot_given = true;
        Ok(self)
    }

    /// Whether `slot` can name a replication slot, as [`slot`](Self::slot) checks it (for a configuration checked
    /// before anything is opened).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] unless it is 1 to 63 lower-case letters, digits or `_`.
    pub fn check_slot_name(slot: &str) -> Result<()> {
        if replication::valid_slot(slot) {
            return Ok(());
        }
        Err(Error::InvalidConfig {
            field: "slot",
            reason: format!("must be 1 to 63 lower-case letters, digits or `_`, got `{slot}`"),
        })
    }

    /// How long a failing event is retried where it stands, holding back the stream, before it and the later
    /// events of its aggregate go to the table's retry path (pending, with `next_attempt_at`) and the stream
    /// moves on; default 10 s. `Duration::ZERO` hands a failing event over at its first failure.
    #[must_use]
    pub fn retry_in_place(mut self, retry_in_place: Duration) -> Self {
        self.retry_in_place = retry_in_place;
        self
    }

    /// The replication slot this relay reads: the one [`slot`](Self::slot) named, else the default (which gives
    /// way, when the relay runs, to the slot the table's WAL source records).
    #[must_use]
    pub fn slot_name(&self) -> &str {
        &self.slot
    }

    /// Streams until `shutdown` is cancelled, then returns the totals. Events streamed but not settled at
    /// shutdown are not acknowledged: the next relay on the slot streams them again, and publishes those still
    /// pending.
    ///
    /// Retryable errors (the database restarting, a lost replication connection) are logged and the session is
    /// started again with backoff. While another relay reads the slot, this one stands by.
    ///
    /// # Errors
    ///
    /// Fatal errors only: [`Error::WalUnavailable`] (no `wal_level = logical`, no REPLICATION privilege, no
    /// publication, a slot of that name that belongs to another database of the server or is not a `pgoutput`
    /// slot, an invalidated slot), [`Error::WrongSource`] (the table source publishes the table),
    /// [`Error::Refused`] (the server refused the replication connection) and [`Error::Schema`] (tables missing:
    /// `outbox migrate`).
    pub async fn run(mut self, shutdown: CancellationToken) -> Result<RunSummary> {
        let checked = preflight::check(&self.store, &self.slot, self.slot_given).await.inspect_err(|error| {
            tracing::error!(error = %error, "cannot publish from the write-ahead log; stopping");
        })?;
        let preflight::Checked { server_version, slot, outbox_schema } = checked;
        self.slot = slot;
        tracing::info!(relay_id = %self.shared.relay, slot = %self.slot, "WAL relay started");
        let mut summary = RunSummary::default();
        let mut restarts = restart::Restarts::new();
        let gauges = slot_gauges::SlotGauges::start();
        // As beside the table source: retention of published rows kept (`--retention D`), and the backlog, failed
        // and paused gauges, each a task of its own until the relay stops.
        let background = CancellationToken::new();
        let _stop_background = background.clone().drop_guard();
        let mut tasks = tokio::task::JoinSet::new();
        let config = self.shared.config.clone();
        tasks.spawn(crate::maintenance::run(Arc::clone(&self.shared.store), config, background.clone()));
        tasks.spawn(crate::telemetry::refresh_backlog(Arc::clone(&self.shared.store), background.clone()));
        // When the stop must be over, fixed by the first wait that sees the signal.
        let stop_by = std::sync::OnceLock::new();
        loop {
            let Some(_leader) = leader::acquire(&self.options, &self.slot, &shutdown).await? else { break };
            let mut session = session::Session {
                shared: &self.shared,
                store: &self.store,
                target: &self.target,
                slot: &self.slot,
                outbox_schema: &outbox_schema,
                server_version,
                retry_in_place: self.retry_in_place,
                gauges: &gauges,
                summary: &mut summary,
                acknowledged: pgwire_replication::Lsn::ZERO,
                settling: None,
                queued: settling::Queued::default(),
                ahead: None,
                streaming_since: None,
                stop_by: &stop_by,
            };
            let timeout = self.shared.config.shutdown_timeout;
            let ended = statement::until_stopped(
                session.run(&shutdown),
                &shutdown,
                &stop_by,
                timeout,
                session::Ended::Shutdown,
                "stopping before the batch in flight ended; its events will be streamed again",
            );
            let wait = match ended.await {
                Ok(session::Ended::Shutdown) => break,
                Ok(session::Ended::SlotBusy) => {
                    tracing::info!(slot = %self.slot, "the slot is still held by a session that is ending; retrying");
                    Duration::from_millis(500)
                }
                Err(error) if error.is_retryable() => {
                    let wait = restarts.after_failure(session.streaming_since.map(|since| since.elapsed()));
                    tracing::warn!(retry_in = ?wait, error = %error, "replication session failed; starting a new one");
                    wait
                }
                Err(error) => {
                    tracing::error!(error = %error, "cannot publish from the write-ahead log; stopping");
                    return Err(error);
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(wait) => {}
            }
        }
        background.cancel();
        while tasks.join_next().await.is_some() {}
        tracing::info!(relay_id = %self.shared.relay, published = summary.published, "WAL relay stopped");
        Ok(summary)
    }
}
