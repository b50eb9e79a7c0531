//! One replication session of the active relay: the slot (created with an exported snapshot, or resumed), the
//! rows pending at that snapshot published first, then the stream, transaction by transaction in commit order.
//! The slot's confirmed position moves only past transactions whose events are all settled.

use std::time::{Duration, SystemTime};

use outbox_core::store::{decode_wal_message, WAL_MESSAGE_PREFIX};
use outbox_core::store::{PgStore, Settlement, Source};
use pgwire_replication::{Lsn, ReplicationClient, ReplicationEvent};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::flush::{flush, Flushed, Streamed};
use super::handover::Handover;
use super::pgoutput::{Announced, Relations};
use super::read_ahead::ReadAhead;
use super::replication::{classify, create_slot_sql, sqlstate, Target};
use super::settling::{settling_ended, Queued, Settling};
use super::slot_gauges::SlotGauges;
use super::statement::{database, settle_before_stop};
use crate::error::{Error, Result};
use crate::relay::shared::Shared;
use crate::relay::summary::RunSummary;

/// PostgreSQL's epoch (2000-01-01) in Unix microseconds: the stream's commit times count from it.
const PG_EPOCH_UNIX_MICROS: u64 = 946_684_800_000_000;

/// How a session ended.
pub(crate) enum Ended {
    /// Shutdown: the relay stops.
    Shutdown,
    /// Another session holds the slot: stand by and try again.
    SlotBusy,
}

/// What the session needs.
pub(crate) struct Session<'a> {
    pub(crate) shared: &'a Shared,
    pub(crate) store: &'a PgStore,
    pub(crate) target: &'a Target,
    pub(crate) slot: &'a str,
    /// The schema of the outbox table: the stream's inserts into other tables are ignored.
    pub(crate) outbox_schema: &'a str,
    pub(crate) server_version: u32,
    pub(crate) retry_in_place: Duration,
    pub(crate) gauges: &'a SlotGauges,
    pub(crate) summary: &'a mut RunSummary,
    /// The highest position acknowledged to the client in this session.
    pub(crate) acknowledged: Lsn,
    /// The settle of published batches, while it runs.
    pub(crate) settling: Option<Settling>,
    /// The batches published while it runs, settled by the next statement.
    pub(crate) queued: Queued,
    /// The next batch to publish, its rows being read meanwhile.
    pub(crate) ahead: Option<ReadAhead>,
    /// When the server started streaming to this session.
    pub(crate) streaming_since: Option<std::time::Instant>,
    /// Once shutdown was asked for: when the stop must be over (the shutdown timeout after the signal).
    pub(crate) stop_by: &'a std::sync::OnceLock<tokio::time::Instant>,
}

impl Session<'_> {
    /// Runs the session until shutdown or an error (retryable ones: the caller starts a new session).
    pub(crate) async fn run(&mut self, shutdown: &CancellationToken) -> Result<Ended> {
        let mut client =
            self.target.connect(self.slot, self.shared.relay).await.map_err(|error| classify(&error, self.target))?;
        let backlog = self.slot_and_backlog(&mut client, shutdown).await?;
        if shutdown.is_cancelled() {
            // The backlog may not have been read: nothing of the stream may go before it.
            client.stop();
            return Ok(Ended::Shutdown);
        }
        let Some(mut handover) = Handover::rebuild(self.store, self.retry_in_place, shutdown).await? else {
            client.stop();
            return Ok(Ended::Shutdown);
        };
        // How far message-mode events are published: the slot may resume before it (PostgreSQL 14 to 16 write
        // its confirmed position to disk only now and then), and a message has no row to tell it was published.
        let Some(published_through) = database(shutdown, || self.store.wal_published_through()).await? else {
            client.stop();
            return Ok(Ended::Shutdown);
        };
        let published_through = published_through.and_then(|lsn| Lsn::parse(&lsn).ok()).unwrap_or(Lsn::ZERO);
        client.start().await.map_err(|error| classify(&error, self.target))?;
        if let Err(error) = client.wait_started().await {
            if sqlstate(&error) == Some("55006") {
                return Ok(Ended::SlotBusy);
            }
            return Err(classify(&error, self.target));
        }
        self.streaming_since = Some(std::time::Instant::now());
        tracing::info!(slot = self.slot, "streaming from the write-ahead log");
        self.gauges.streaming(self.store, self.slot, client.metrics()).await;
        if let Some((ids, through)) = backlog {
            if !self.publish_backlog(&client, &mut handover, ids, through, shutdown).await? {
                client.stop();
                return Ok(Ended::Shutdown);
            }
        }
        let mut ended = self.stream(&mut client, &mut handover, published_through, shutdown).await;
        // The last batch's settle ends before the stream does, so a graceful stop acknowledges it.
        match self.settled(&client, shutdown).await {
            Ok(true) => {}
            Ok(false) => ended = ended.map(|_| Ended::Shutdown),
            Err(error) => ended = ended.and(Err(error)),
        }
        reported(&client, self.acknowledged).await;
        client.stop();
        let _ = tokio::time::timeout(Duration::from_secs(5), client.shutdown()).await;
        ended
    }

    /// Creates the slot, reading at its snapshot the rows pending then; or, when it exists, the rows left from
    /// such a backlog by a relay that stopped before publishing them all. `None`: nothing to publish first.
    async fn slot_and_backlog(
        &self,
        client: &mut ReplicationClient,
        shutdown: &CancellationToken,
    ) -> Result<Option<(Vec<Uuid>, i64)>> {
        // One slot per table: a relay started with another `--slot` would stream beside the relay of the recorded
        // one, and message-mode events are written only while the recorded slot keeps them.
        let state = self.store.wal_state().await.map_err(Error::from_store)?;
        if let Some(recorded) = state.slot.as_deref().filter(|recorded| *recorded != self.slot) {
            return Err(other_slot_recorded(recorded, self.slot));
        }
        match client.simple_query(&create_slot_sql(self.slot, self.server_version)).await {
            Ok(rows) => {
                let snapshot = rows
                    .first()
                    .and_then(|row| row.get(2).cloned().flatten())
                    .map(|name| String::from_utf8_lossy(&name).into_owned())
                    .ok_or_else(|| Error::Unreachable {
                        target: self.target.masked.clone(),
                        reason: "the slot was created without a snapshot".to_owned(),
                    })?;
                // The session stays idle while the snapshot is read: it is valid until its next command.
                let (ids, through) = self.store.pending_at_snapshot(&snapshot).await.map_err(Error::from_store)?;
                if !self.store.record_wal_slot(self.slot, through).await.map_err(Error::from_store)? {
                    // `outbox wal disable` switched back while the slot was created, or a relay with another slot
                    // name recorded its own first: nothing may read this one.
                    if let Err(error) = client.simple_query(&format!("DROP_REPLICATION_SLOT {}", self.slot)).await {
                        tracing::warn!(slot = self.slot, error = %error, "cannot drop the slot just created");
                    }
                    let state = self.store.wal_state().await.map_err(Error::from_store)?;
                    return Err(match state.slot {
                        Some(recorded) if state.source == Source::Wal && recorded != self.slot => {
                            other_slot_recorded(&recorded, self.slot)
                        }
                        _ => super::preflight::wrong_source(Source::Table),
                    });
                }
                tracing::info!(slot = self.slot, pending = ids.len(), "created the replication slot");
                Ok(through.map(|through| (ids, through)))
            }
            Err(error) if sqlstate(&error) == Some("42710") => {
                // A slot of another database (slot names are shared by a server's databases) or of another plugin
                // is never dropped nor read: its reader's events would be lost. Invalidated while this relay ran
                // (or stood by): nothing can be streamed from it any more.
                super::preflight::refuse_unusable_slot(self.store, self.slot).await?;
                if state.slot.is_none() {
                    // Created by a relay that stopped before recording it (killed, or a database error between the
                    // two): its snapshot, and with it the rows pending then, are lost. No producer wrote for it (a
                    // message needs the recorded slot), so it is dropped and made again with a new snapshot. Only
                    // a slot of this database is dropped (should another database's relay have made one of that
                    // name since the check, none is, and the next session's check stops the relay).
                    self.store.drop_unrecorded_slot(self.slot).await.map_err(Error::from_store)?;
                    return Err(Error::Unreachable {
                        target: self.target.masked.clone(),
                        reason: format!(
                            "the replication slot `{}` existed but was never recorded (a relay stopped while creating \
                             it): dropped, to be created again with the rows pending now",
                            self.slot
                        ),
                    });
                }
                if !self.store.record_wal_slot(self.slot, state.backlog_through).await.map_err(Error::from_store)? {
                    return Err(super::preflight::wrong_source(Source::Table));
                }
                let Some(through) = state.backlog_through else { return Ok(None) };
                let Some(ids) = database(shutdown, || self.store.pending_through(through)).await? else {
                    return Ok(None);
                };
                Ok(Some((ids, through)))
            }
            Err(error) => Err(classify(&error, self.target)),
        }
    }

    /// Publishes the rows pending at the slot's creation, in `seq` order; `false` when shutdown came first.
    async fn publish_backlog(
        &mut self,
        client: &ReplicationClient,
        handover: &mut Handover,
        ids: Vec<Uuid>,
        through: i64,
        shutdown: &CancellationToken,
    ) -> Result<bool> {
        tracing::info!(events = ids.len(), "publishing the events pending when the slot was created");
        let size = self.shared.config.batch_size as usize;
        for chunk in ids.chunks(size.max(1)) {
            let events: Vec<Streamed> =
                chunk.iter().map(|&id| Streamed::Row { id, committed_at: None, xid: None }).collect();
            let Flushed::Done(rows) =
                flush(self.shared, self.store, self.summary, handover, &events, None, shutdown).await?
            else {
                return Ok(false);
            };
            if !self.settle_behind(client, rows, None, 0, shutdown).await? {
                return Ok(false);
            }
        }
        if !self.settled(client, shutdown).await? {
            return Ok(false);
        }
        let done = database(shutdown, || self.store.wal_backlog_done(through)).await?;
        Ok(done.is_some())
    }

    /// Reads the stream: the ids of each committed transaction join the batch, which is complete when it is full
    /// or when nothing more is waiting on the stream. A complete batch's rows are read while the batch before it is
    /// published ([`ReadAhead`]); its rows are settled while the next batch is published ([`Settling`]), and the
    /// slot is acknowledged past it once they are. The table's retry path runs in between when it is due, with no
    /// batch read ahead.
    ///
    /// The message-mode events of transactions that end at or before `published_through` were published before
    /// (the stream resumed behind the position their settle recorded): they are skipped.
    async fn stream(
        &mut self,
        client: &mut ReplicationClient,
        handover: &mut Handover,
        published_through: Lsn,
        shutdown: &CancellationToken,
    ) -> Result<Ended> {
        let mut relations = Relations::of(self.outbox_schema);
        let mut transaction: Vec<InTransaction> = Vec::new();
        let mut in_transaction = false;
        let mut commit_time = None;
        let mut xid = 0;
        let mut batch: Vec<Streamed> = Vec::new();
        let mut batch_end = Lsn::ZERO;
        let size = self.shared.config.batch_size as usize;
        loop {
            if handover.is_due() {
                // The table's retry path reads the table: no batch of this relay may be read ahead or settling.
                if !self.publish_ahead(client, handover, shutdown).await? || !self.settled(client, shutdown).await? {
                    return Ok(Ended::Shutdown);
                }
                if !handover.run(self.shared, self.store, self.summary, shutdown).await? {
                    return Ok(Ended::Shutdown);
                }
                self.gauges.handed_over(handover.len());
            }
            let event = if (batch.is_empty() && self.ahead.is_none()) || in_transaction {
                let retry_at = handover.next_run();
                let event = tokio::select! {
                    () = shutdown.cancelled() => return Ok(Ended::Shutdown),
                    event = client.recv() => Some(event),
                    () = sleep_until(retry_at) => continue,
                    () = settling_ended(&mut self.settling) => None,
                };
                let Some(event) = event else {
                    // A settle committed while the stream was quiet: acknowledge it now, and settle what was
                    // published meanwhile.
                    if !self.settle_queued(client, shutdown).await? {
                        return Ok(Ended::Shutdown);
                    }
                    continue;
                };
                event
            } else {
                // Something to publish: take what is already waiting, publish when nothing more is.
                tokio::select! {
                    biased;
                    event = client.recv() => event,
                    () = std::future::ready(()) => {
                        if !self.publish(&mut batch, client, batch_end, handover, shutdown).await? {
                            return Ok(Ended::Shutdown);
                        }
                        continue;
                    }
                }
            };
            let event = event.map_err(|error| classify(&error, self.target))?.ok_or_else(|| Error::Unreachable {
                target: self.target.masked.clone(),
                reason: "the replication stream ended".to_owned(),
            })?;
            match event {
                ReplicationEvent::Begin { commit_time_micros, xid: begun, .. } => {
                    xid = begun;
                    in_transaction = true;
                    commit_time = Some(commit_time_micros);
                }
                ReplicationEvent::XLogData { data, .. } => match data.first() {
                    Some(b'R') => {
                        if let Announced::Other(table) =
                            relations.apply(&data).map_err(|error| self.protocol(&error))?
                        {
                            tracing::warn!(
                                table = %table,
                                "the publication outbox_wal also publishes this table: its inserts are ignored \
                                 (ALTER PUBLICATION outbox_wal DROP TABLE ... stops decoding them)"
                            );
                        }
                    }
                    Some(b'I') => {
                        if let Some(id) = relations.inserted_id(&data).map_err(|error| self.protocol(&error))? {
                            transaction.push(InTransaction::Row(id, xid));
                        }
                    }
                    _ => {}
                },
                ReplicationEvent::Commit { end_lsn, .. } => {
                    in_transaction = false;
                    if end_lsn <= published_through {
                        let before = transaction.len();
                        transaction.retain(|event| matches!(event, InTransaction::Row(..)));
                        if transaction.len() < before {
                            tracing::debug!(
                                lsn = %end_lsn.to_pg_string(),
                                skipped = before - transaction.len(),
                                "message-mode events published before the slot's confirmed position fell back"
                            );
                        }
                    }
                    let at = commit_time.take().map(system_time);
                    if let (Some(at), false) = (at, transaction.is_empty()) {
                        self.gauges.unconfirmed(at);
                    }
                    batch.extend(transaction.drain(..).map(|event| event.committed(at)));
                    if batch.is_empty() {
                        // A transaction without events: nothing waits for it, unless a batch is read ahead or
                        // settling.
                        if self.all_settled() && self.ahead.is_none() {
                            self.acknowledge(client, end_lsn);
                        }
                    } else {
                        batch_end = end_lsn;
                        if batch.len() >= size
                            && !self.publish(&mut batch, client, batch_end, handover, shutdown).await?
                        {
                            return Ok(Ended::Shutdown);
                        }
                    }
                }
                ReplicationEvent::KeepAlive { wal_end, .. } => {
                    // Every transaction that committed before `wal_end` was sent before this keepalive: with
                    // nothing unsettled, the slot may move past the WAL of other tables.
                    self.gauges.wal_end(wal_end);
                    if batch.is_empty() && !in_transaction && self.all_settled() && self.ahead.is_none() {
                        self.acknowledge(client, wal_end);
                    }
                }
                ReplicationEvent::Message { transactional: true, lsn, prefix, content }
                    if prefix == WAL_MESSAGE_PREFIX =>
                {
                    let at = commit_time.map_or_else(SystemTime::now, system_time);
                    transaction.extend(InTransaction::message(&content, lsn, at));
                }
                ReplicationEvent::Message { .. } => {}
                ReplicationEvent::StoppedAt { .. } => return Ok(Ended::Shutdown),
            }
        }
    }

    /// Starts reading the rows of `batch` (complete, ending on the stream at `end`; none when empty) and publishes
    /// the batch read ahead before it, if any; `false` when shutdown came first (nothing of either batch is
    /// acknowledged: both are streamed again).
    async fn publish(
        &mut self,
        batch: &mut Vec<Streamed>,
        client: &ReplicationClient,
        end: Lsn,
        handover: &mut Handover,
        shutdown: &CancellationToken,
    ) -> Result<bool> {
        let next = (!batch.is_empty()).then(|| ReadAhead::start(self.store, std::mem::take(batch), end, shutdown));
        let published = self.publish_ahead(client, handover, shutdown).await?;
        self.ahead = next;
        Ok(published)
    }

    /// Publishes the batch read ahead, if any, and settles it behind; `false` when shutdown came first (nothing of
    /// the batch is acknowledged: it is streamed again).
    async fn publish_ahead(
        &mut self,
        client: &ReplicationClient,
        handover: &mut Handover,
        shutdown: &CancellationToken,
    ) -> Result<bool> {
        let Some(ahead) = self.ahead.take() else { return Ok(true) };
        let (events, end, read) = ahead.into_parts();
        let messages = events.iter().filter(|event| matches!(event, Streamed::Message(..))).count();
        let flushed = flush(self.shared, self.store, self.summary, handover, &events, read, shutdown).await?;
        let Flushed::Done(rows) = flushed else { return Ok(false) };
        self.gauges.handed_over(handover.len());
        self.settle_behind(client, rows, Some(end), messages, shutdown).await
    }

    /// Settles `rows` (all published) while the next batches are read and published: at once when no settle is
    /// running, otherwise by the next statement, with every batch published meanwhile (when more than a batch's
    /// worth of rows would wait, this waits for the running settle first). A batch without rows to settle is
    /// acknowledged through `through` once every batch before it is. A batch that carried `messages` message-mode
    /// events records with its settle that they are published (through `through`). `false` when shutdown came
    /// first.
    async fn settle_behind(
        &mut self,
        client: &ReplicationClient,
        rows: Vec<Settlement>,
        through: Option<Lsn>,
        messages: usize,
        shutdown: &CancellationToken,
    ) -> Result<bool> {
        self.queued.add(rows, through, messages);
        let running = self.settling.as_ref().is_some_and(|settling| !settling.has_ended());
        if running && self.queued.events() <= self.shared.config.batch_size as usize {
            return Ok(true);
        }
        self.settle_queued(client, shutdown).await
    }

    /// Finishes the running settle, if any (waiting for it), acknowledges the stream past its batches, and starts
    /// settling those queued meanwhile (or acknowledges them when none has rows). `false` when shutdown came
    /// first; then, as after an error, nothing of the running settle's batches or of those queued is acknowledged
    /// (they are streamed again).
    ///
    /// After shutdown, a settle is waited for until the shutdown timeout after the signal is over (a settle waiting
    /// for a row lock that a transaction holds could wait for ever); then it is left to end or fail on its own, and
    /// the stream is not acknowledged past it: its events are streamed again at the next start, and whichever of
    /// them it settled by then are found settled and not published again.
    async fn settle_queued(&mut self, client: &ReplicationClient, shutdown: &CancellationToken) -> Result<bool> {
        if let Some(settling) = self.settling.take() {
            let timeout = self.shared.config.shutdown_timeout;
            match settle_before_stop(settling.finish(self.summary), shutdown, self.stop_by, timeout).await {
                Ok(Some(Some(lsn))) => self.acknowledge(client, lsn),
                Ok(Some(None)) => {}
                unsettled => {
                    // The batches queued behind it are not settled either: settling them now would acknowledge
                    // the stream past the batch whose settle did not commit. They are streamed again.
                    self.queued = Queued::default();
                    return unsettled.map(|_| false);
                }
            }
        }
        let (rows, through, messages_through) = self.queued.take();
        if rows.is_empty() && messages_through.is_none() {
            if let Some(lsn) = through {
                self.acknowledge(client, lsn);
            }
        } else {
            let delete = self.shared.config.deletes_published();
            self.settling = Some(Settling::start(self.store, rows, delete, through, messages_through, shutdown));
        }
        Ok(true)
    }

    /// Waits until every published batch is settled and acknowledged; `false` when shutdown came first (nothing
    /// of the batches not settled then is acknowledged: they are streamed again).
    async fn settled(&mut self, client: &ReplicationClient, shutdown: &CancellationToken) -> Result<bool> {
        while !self.all_settled() {
            if !self.settle_queued(client, shutdown).await? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// No settle is running and none waits.
    fn all_settled(&self) -> bool {
        self.settling.is_none() && self.queued.is_empty()
    }

    /// Everything streamed through `lsn` is settled: the client reports it to the server at its next status
    /// interval, and the slot may move past it.
    fn acknowledge(&mut self, client: &ReplicationClient, lsn: Lsn) {
        client.update_applied_lsn(lsn);
        self.acknowledged = self.acknowledged.max(lsn);
        self.gauges.confirmed(lsn, true);
    }

    fn protocol(&self, error: &super::pgoutput::Malformed) -> Error {
        Error::Unreachable { target: self.target.masked.clone(), reason: error.to_string() }
    }
}

/// An event of the transaction being streamed, until its commit.
enum InTransaction {
    /// An insert into the outbox table: the row's id and the inserting transaction's id.
    Row(Uuid, u32),
    /// An event of the message mode, with its transaction's commit time.
    Message(Box<outbox_core::store::StoredEvent>, SystemTime),
}

impl InTransaction {
    /// The event a message of the message mode carries, at WAL position `lsn` in a transaction that commits at
    /// `at`; `None` for a message that is not an outbox event (written by hand with the outbox's prefix: there
    /// is nothing to publish, so it is logged and skipped).
    fn message(content: &[u8], lsn: Lsn, at: SystemTime) -> Option<Self> {
        let seq = i64::try_from(lsn.as_u64()).unwrap_or(i64::MAX);
        match decode_wal_message(content, time::OffsetDateTime::from(at), seq) {
            Ok(event) => match PgStore::wal_event_unwritable(&event) {
                // Published or not, it could never be written to the table if it failed, and the stream would
                // stop there for good: a permanent failure of its own, logged without its payload.
                Some(reason) => {
                    tracing::error!(
                        lsn = %lsn.to_pg_string(),
                        id = %event.id,
                        event_type = %event.event_type,
                        aggregate_type = %event.aggregate_type,
                        reason = %reason,
                        "skipped a message-mode event the table cannot hold"
                    );
                    None
                }
                None => Some(Self::Message(Box::new(event), at)),
            },
            Err(error) => {
                tracing::error!(lsn = %lsn.to_pg_string(), error = %error, "skipped a WAL message");
                None
            }
        }
    }

    /// The event to publish, now that its transaction committed at `at`.
    fn committed(self, at: Option<SystemTime>) -> Streamed {
        match self {
            Self::Row(id, xid) => Streamed::Row { id, committed_at: at, xid: Some(xid) },
            Self::Message(event, at) => Streamed::Message(event, at),
        }
    }
}

/// Waits (at most a second) until the client has reported `acknowledged` to the server, which it does at its
/// next status interval: closing the stream before would stream the last settled events again to the next
/// session, and an event of the message mode has no row to tell that it was published. A lost connection reports
/// nothing more: no wait then, so the next session starts at once.
async fn reported(client: &ReplicationClient, acknowledged: Lsn) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    while client.is_running()
        && client.metrics().last_applied_lsn() < acknowledged
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Sleeps until `at`; forever when `None`.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A commit time of the stream (microseconds since 2000-01-01) as a system time.
fn system_time(pg_micros: i64) -> SystemTime {
    let unix = PG_EPOCH_UNIX_MICROS.saturating_add_signed(pg_micros);
    SystemTime::UNIX_EPOCH + Duration::from_micros(unix)
}

/// The table's WAL source reads `recorded`, not `slot`: one slot per table.
fn other_slot_recorded(recorded: &str, slot: &str) -> Error {
    Error::WalUnavailable {
        what: format!("the WAL source of this table reads the replication slot `{recorded}`, not `{slot}`"),
        fix: format!(
            "start the relay with `--slot {recorded}`, or run `outbox wal drop-slot` first (its unpublished \
             message-mode events become pending rows)"
        ),
    }
}
