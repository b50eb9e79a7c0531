//! The statements of the WAL source: the control row's source and slot, the rows pending when the slot was
//! created, reading streamed events by id and settling them by id (one relay reads a slot: no partition fence).

use sqlx::{Connection, PgConnection, PgPool, Row};
use uuid::Uuid;

use super::jit::{jit_off, without_jit};
use super::pending::pending_rows;
use super::read::widened_xid;
use super::settle::{all_published, columns, delete_published, mark_published, outcome_counts, outcomes_sql, report};
use super::wal_close::{ClosedToProducers, ProducersShut};
use crate::error::Result;
use crate::store::wal_message::WAL_EMIT_LOCK;
use crate::store::{
    decode_wal_message, PendingById, PgStore, SettleOutcome, SettleReport, Settlement, SlotStatus, Source,
    SourceSwitch, StoredEvent, WalState, SOURCE_SWITCH_LOCK, WAL_LEADER_LOCK_CLASS, WAL_MESSAGE_PREFIX,
};

const STATE: &str = "SELECT source, wal_slot, wal_backlog_through FROM outbox_control WHERE id";
/// Waits for a change of source in progress ([`SOURCE_SWITCH_LOCK`]); a later statement of the transaction reads
/// what it committed.
const AWAIT_SWITCH: &str = "SELECT pg_advisory_xact_lock_shared($1)";
const LOCK_SWITCH: &str = "SELECT pg_advisory_xact_lock($1)";
const STATE_FOR_UPDATE: &str = "SELECT source, wal_slot, wal_backlog_through FROM outbox_control WHERE id FOR UPDATE";

/// The source only changes while no relay of the other source is live: a table relay is live while its
/// membership has not expired; the WAL relay while a session holds its slot.
const TO_WAL: &str = "\
UPDATE outbox_control SET source = 'wal', changed_at = now()
 WHERE id AND source = 'table' AND NOT EXISTS (SELECT 1 FROM outbox_relays WHERE expires_at > now())";
const LIVE_TABLE_RELAYS: &str = "SELECT relay_id FROM outbox_relays WHERE expires_at > now() ORDER BY relay_id";
const SLOT_ACTIVE: &str = "SELECT active, wal_status = 'lost' FROM pg_replication_slots
 WHERE slot_name = $1 AND database = current_database()";
/// Whether a WAL relay leads the slot ([`WAL_LEADER_LOCK_CLASS`]): it may not stream it yet.
const SLOT_LED: &str = "\
SELECT EXISTS (SELECT 1 FROM pg_locks
                WHERE locktype = 'advisory' AND granted AND objsubid = 2
                  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                  AND classid = ($1::int4)::oid AND objid = hashtext($2)::oid)";

/// Dropping the slot fails (SQLSTATE 55006) while a session reads it: the transaction then changes nothing.
const DROP_SLOT: &str = "\
SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()";
/// Waits for every transaction that wrote message-mode events for the slot to end, and keeps new ones from
/// writing (theirs fail with `Error::WalSourceOff`) until the slot is gone.
const LOCK_EMITS: &str = "SELECT pg_advisory_xact_lock($1)";

/// Logical decoding reads only flushed WAL, and with `synchronous_commit = off` a commit returns before its WAL
/// is flushed (the WAL writer flushes it within three `wal_writer_delay`s): the slot's messages are read once the
/// WAL written before the emit lock was taken is flushed.
const WAL_WRITTEN: &str = "SELECT pg_current_wal_insert_lsn()::text";
const WAL_FLUSHED_THROUGH: &str = "SELECT pg_current_wal_flush_lsn() >= $1::text::pg_lsn";

/// The message-mode events the slot holds and has not confirmed, in commit order: a pgoutput `M` message is
/// `'M'`, flags (1: transactional), its LSN (8 bytes), the prefix ending in a zero byte, the content's length
/// (4 bytes), the content. Rolled-back transactions are not decoded. Those of a transaction whose commit (`'C'`,
/// at the end of its transaction) ends at or before the position the relay recorded as published (migration 15)
/// are left out: the slot's confirmed position may lag behind it.
const SLOT_MESSAGES: &str = "\
WITH changes AS (
SELECT c.lsn, c.xid, c.data, c.n
  FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
       'proto_version', '1', 'publication_names', 'outbox_wal', 'messages', 'true') WITH ORDINALITY AS c(lsn, xid, data, n)
)
SELECT substring(m.data FROM 22) AS content
  FROM changes m
 WHERE get_byte(m.data, 0) = 77 AND get_byte(m.data, 1) = 1 AND substring(m.data FROM 11 FOR 7) = $2
   AND NOT EXISTS (SELECT 1 FROM changes c, outbox_control o
                    WHERE o.id AND c.xid = m.xid AND get_byte(c.data, 0) = 67 AND c.lsn <= o.wal_published_through)
 ORDER BY m.n";

const FORGET_SLOT: &str =
    "UPDATE outbox_control SET wal_slot = NULL, wal_backlog_through = NULL, wal_published_through = NULL WHERE id";
const TO_TABLE: &str = "UPDATE outbox_control SET source = 'table', changed_at = now() WHERE id AND source = 'wal'";

/// Only while the WAL source publishes the table: a slot created while `outbox wal disable` switched back is not
/// recorded (the caller drops it).
/// Only over no slot or the same one: two relays started at once with different slot names both create theirs, and
/// only the first to record it may stream.
const RECORD_SLOT: &str = "UPDATE outbox_control SET wal_slot = $1, wal_backlog_through = $2
 WHERE id AND source = 'wal' AND (wal_slot IS NULL OR wal_slot = $1)";
const BACKLOG_DONE: &str = "UPDATE outbox_control SET wal_backlog_through = NULL WHERE id AND wal_backlog_through = $1";

/// The recorded slot as the server sees it; `pg_stat_replication` shows the reader's last report.
const SLOT_STATUS: &str = "\
SELECT s.slot_name, s.active,
       GREATEST(0, pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn))::int8 AS lag_bytes,
       EXTRACT(EPOCH FROM now() - r.reply_time)::float8 AS report_age_secs
  FROM outbox_control c
  JOIN pg_replication_slots s ON s.slot_name = c.wal_slot AND s.database = current_database()
  LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid
 WHERE c.id";

const PENDING_IDS: &str = concat!("WITH ", pending_rows!(), "\nSELECT id, seq FROM pending ORDER BY seq");
const PENDING_IDS_THROUGH: &str =
    concat!("WITH ", pending_rows!(), "\nSELECT id FROM pending WHERE seq <= $1 ORDER BY seq");

/// The streamed rows still pending, each with its index in `$1` (`n`; the lookups return them in that order, which
/// the caller checks instead of a sort of wide rows here) and the columns [`super::read::read_row`] takes
/// (how long ago their transaction committed the relay knows from the stream), under one row of flags that is
/// there also when no row matches: whether publishing is paused, and whether every transaction of `$2` is visible
/// to this statement's snapshot. The stream names transactions by their 32-bit ids: each is widened to the full id nearest to the
/// snapshot's `xmax` (a transaction still committing may be at or past it, as `xmax` moves only when one ends).
/// The rows are looked up by `outbox_wal_pending_by_id` (migration 10, renamed by 16), whose plan uses the
/// primary key at any table size; planned here, the read kept a scan of the whole table per id, made while the
/// table was small, until the next `ANALYZE`.
const BY_ID: &str = concat!(
    "WITH snap AS (SELECT pg_current_snapshot() AS s),
flags AS (
SELECT COALESCE((SELECT paused FROM outbox_control WHERE id), false) AS paused,
       NOT EXISTS (
         SELECT 1 FROM snap, UNNEST($2::int8[]) AS t(xid),
                LATERAL (SELECT pg_snapshot_xmax(snap.s)::text::int8 AS xmax) m
          WHERE NOT pg_visible_in_snapshot((",
    widened_xid!("t.xid", "m.xmax"),
    ")::text::xid8, snap.s)) AS visible
)
SELECT f.paused, f.visible, r.*
  FROM flags f
  LEFT JOIN LATERAL (
SELECT r.n, r.id, r.seq, r.partition, r.event_type, r.aggregate_type, r.aggregate_id, r.schema_version, r.payload,
       r.headers, r.sensitive_paths, r.created_at, r.attempts, r.next_attempt_at, r.created_at AS committed_at,
       now() AS read_at, r.row_version
  FROM outbox_wal_pending_by_id($1::uuid[]) r
 WHERE f.visible AND NOT f.paused
  ) r ON true"
);

/// Records how far message-mode events are published (migration 15) when `$N` is not NULL; a data-modifying
/// `WITH` runs whether or not the statement reads it, so the settle and the record commit together.
macro_rules! record_published_through {
    ($param:literal) => {
        concat!(
            "recorded AS (UPDATE outbox_control SET wal_published_through = ",
            $param,
            "::text::pg_lsn WHERE id AND ",
            $param,
            "::text IS NOT NULL)"
        )
    };
}

/// How far message-mode events are published, alone (a batch of messages only, with no row to settle).
const PUBLISHED_THROUGH: &str = "UPDATE outbox_control SET wal_published_through = $1::text::pg_lsn WHERE id";

/// How far message-mode events are published, as the relay recorded it; `NULL` when it is past the end of the
/// server's WAL (a position of another cluster, restored with the table: it would skip messages never published).
const READ_PUBLISHED_THROUGH: &str = "\
SELECT wal_published_through::text FROM outbox_control
 WHERE id AND wal_published_through <= pg_current_wal_lsn()";

/// The outcomes of streamed events ([`outcomes_sql`]): no fence, as one relay reads a slot.
macro_rules! settle_by_id {
    ($write:expr, $join:literal) => {
        concat!(
            "WITH ",
            record_published_through!("$5"),
            ",\n",
            outcomes_sql!($write, $join, "$1::uuid[], $2::text[], $3::text[], $4::float8[]", "true"),
            "\n",
            outcome_counts!()
        )
    };
}

/// Every row of `$1` published, the usual case: each found where the read found it (`$2`), else by id, by
/// `outbox_settle_published_at` (migrations 11 and 12), whose plan fetches each row by position or primary key at
/// any table size; only rows still pending change, deleted when `$3`.
/// With `$4`, how far message-mode events are published is recorded in the same statement.
const ALL_PUBLISHED_AT: &str = concat!(
    "WITH ",
    record_published_through!("$4"),
    "\nSELECT 'published'::text AS outcome, outbox_settle_published_at($1::uuid[], $2::text[], $3) AS n"
);

const MARK_BY_ID: &str = settle_by_id!(mark_published!(), "  FROM");
const DELETE_BY_ID: &str = settle_by_id!(delete_published!(), " USING");

fn source(name: &str) -> Source {
    if name == "wal" {
        Source::Wal
    } else {
        Source::Table
    }
}

/// The source, once no change of source is in progress: read in a statement that starts after the wait, so it
/// sees what the change committed.
pub(super) async fn source_of(pool: &PgPool) -> Result<Source> {
    let mut tx = pool.begin().await?;
    sqlx::query(AWAIT_SWITCH).bind(SOURCE_SWITCH_LOCK).execute(&mut *tx).await?;
    let state = state_from(sqlx::query(STATE).fetch_optional(&mut *tx).await?)?;
    tx.commit().await?;
    Ok(state.source)
}

async fn wal_state(pool: &PgPool) -> Result<WalState> {
    state_from(sqlx::query(STATE).fetch_optional(pool).await?)
}

fn state_from(row: Option<sqlx::postgres::PgRow>) -> Result<WalState> {
    let Some(row) = row else { return Ok(WalState::default()) };
    Ok(WalState {
        source: source(&row.try_get::<String, _>("source")?),
        slot: row.try_get("wal_slot")?,
        backlog_through: row.try_get("wal_backlog_through")?,
    })
}

/// The WAL source's statements, for the WAL relay and `outbox wal`. PostgreSQL only.
impl PgStore {
    /// Drops the replication slot `slot` if it is one of this database's (slot names are shared by a server's
    /// databases: another database's slot of that name is left alone). For a slot no relay recorded, which no
    /// producer wrote for.
    ///
    /// # Errors
    ///
    /// [`Error::Database`](crate::Error::Database), e.g. while a session streams the slot.
    pub async fn drop_unrecorded_slot(&self, slot: &str) -> Result<()> {
        sqlx::query(DROP_SLOT).bind(slot).execute(&self.pool).await?;
        Ok(())
    }

    /// The source that publishes the table, the WAL relay's slot and its backlog.
    ///
    /// # Errors
    ///
    /// [`Error::Database`](crate::Error::Database); SQLSTATE 42703 (no `source` column) before `outbox migrate`.
    pub async fn wal_state(&self) -> Result<WalState> {
        wal_state(&self.pool).await
    }

    /// Makes `to` the source that publishes the table, if no relay of the other source is live; the check and the
    /// change hold [`SOURCE_SWITCH_LOCK`], which a starting table relay waits for. Switching to
    /// [`Source::Table`] also drops the WAL relay's slot, so that a later switch back starts from a fresh
    /// snapshot and never replays what the table source published; the slot is first closed to message-mode
    /// producers, which takes a second (their sessions remember a check of the slot that long).
    ///
    /// # Errors
    ///
    /// [`Error::Database`](crate::Error::Database).
    pub async fn switch_source(&self, to: Source) -> Result<SourceSwitch> {
        let recorded = if to == Source::Table { recorded_slot(&self.pool).await? } else { None };
        if let Some((slot, true)) = recorded {
            return Ok(SourceSwitch::SlotActive(slot));
        }
        if recorded.is_none() {
            let mut connection = self.pool.acquire().await?;
            if let Some(switched) = switch_source_on(&mut connection, to, None).await? {
                return Ok(switched);
            }
            // A WAL relay recorded its slot meanwhile: it is closed to producers first, as below.
        }
        let switched = ClosedToProducers::run(&self.pool, async |connection, shut| {
            switch_source_on(connection, to, Some(shut)).await
        })
        .await?;
        Ok(switched.unwrap_or(SourceSwitch::Unchanged))
    }

    /// Drops the WAL relay's slot (the next WAL relay creates a new one, publishing first what is pending), unless
    /// a session reads it; the slot is first closed to message-mode producers, as [`switch_source`](Self::switch_source)
    /// does. `Ok(None)` when there was no slot to drop.
    ///
    /// # Errors
    ///
    /// [`Error::Database`](crate::Error::Database).
    pub async fn drop_wal_slot(&self) -> Result<Option<SourceSwitch>> {
        match recorded_slot(&self.pool).await? {
            None => return Ok(None),
            Some((slot, true)) => return Ok(Some(SourceSwitch::SlotActive(slot))),
            Some((_, false)) => {}
        }
        ClosedToProducers::run(&self.pool, async |connection, shut| drop_wal_slot_on(connection, shut).await).await
    }

    /// Records the slot the WAL relay created and the highest `seq` pending at its snapshot (`None`: nothing
    /// was), once no change of source is in progress ([`SOURCE_SWITCH_LOCK`]). `false`, and nothing recorded,
    /// when the table source publishes the table by then (`outbox wal disable` ran meanwhile), or another slot is
    /// recorded (a relay with another slot name recorded its own first): the relay must drop the slot and stop.
    ///
    /// # Errors
    ///
    /// [`Error::Database`](crate::Error::Database).
    pub async fn record_wal_slot(&self, slot: &str, backlog_through: Option<i64>) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(AWAIT_SWITCH).bind(SOURCE_SWITCH_LOCK).execute(&mut *tx).await?;
        let recorded = sqlx::query(RECORD_SLOT).bind(slot).bind(backlog_through).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(recorded.rows_affected() == 1)
    }

    /// Records that the rows pending at the slot's creation, through `seq` `through`, are all published.
    ///
    /// # Errors
    ///
    /// [`Error::Database`](crate::Error::Database).
    pub async fn wal_backlog_done(&self, through: i64) -> Result<()> {
        sqlx::query(BACKLOG_DONE).bind(through).execute(&self.pool).await?;
        Ok(())
    }

    /// The ids of the rows pending at the snapshot `snapshot` (exported by the creation of a replication slot
    /// on a session still open), in `seq` order, and the highest `seq` among them.
    ///
    /// # Errors
    ///
    /// [`Error::Database`](crate::Error::Database), also when the snapshot is no longer valid.
    pub async fn pending_at_snapshot(&self, snapshot: &str) -> Result<(Vec<Uuid>, Option<i64>)> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY").execute(&mut *tx).await?;
        // The name comes from the server; quoted as a literal all the same.
        let import = format!("SET TRANSACTION SNAPSHOT '{}'", snapshot.replace('\'', "''"));
        sqlx::query(&import).execute(&mut *tx).await?;
        jit_off(&mut tx).await?;
        let rows = sqlx::query(PENDING_IDS).fetch_all(&mut *tx).await?;
        tx.commit().await?;
        let mut ids = Vec::with_capacity(rows.len());
        let mut through = None;
        for row in rows {
            ids.push(row.try_get("id")?);
            through = Some(row.try_get::<i64, _>("seq")?);
        }
        Ok((ids, through))
    }

    /// The ids of the rows still pending with a `seq` up to `through`, in `seq` order.
    ///
    /// # Errors
    ///
    /// [`Error::Database`](crate::Error::Database).
    pub async fn pending_through(&self, through: i64) -> Result<Vec<Uuid>> {
        let mut tx = without_jit(&self.pool).await?;
        let ids = sqlx::query_scalar(PENDING_IDS_THROUGH).bind(through).fetch_all(&mut *tx).await?;
        tx.commit().await?;
        Ok(ids)
    }

    /// The rows among `ids` that are still pending, in the order of `ids`
    /// ([`ReadRow::range`](crate::store::ReadRow::range) is the index in `ids`); rows published, failed, cancelled or deleted since are left out. `xids` are the transactions that
    /// inserted them, as the replication stream names them: until each is visible to the read,
    /// [`PendingById::NotVisibleYet`] (a row not visible yet would look deleted). While publishing is paused
    /// (`outbox pause`), which the same statement reads as the table source's read does,
    /// [`PendingById::Paused`].
    ///
    /// # Errors
    ///
    /// [`Error::Database`](crate::Error::Database).
    pub async fn pending_by_id(&self, ids: &[Uuid], xids: &[u32]) -> Result<PendingById> {
        let xids: Vec<i64> = xids.iter().map(|&xid| i64::from(xid)).collect();
        // Prepared once: its plan, a lookup by primary key per id, suits every batch size, and planning it at every
        // call was half of a small batch's read (0.9 ms against 0.4 ms at 1,000 events/s).
        let rows = sqlx::query(BY_ID).bind(ids).bind(xids).fetch_all(&self.pool).await?;
        let flag = |name: &str| rows.first().map(|row| row.try_get::<bool, _>(name)).transpose();
        if flag("paused")? == Some(true) {
            return Ok(PendingById::Paused);
        }
        if flag("visible")? == Some(false) {
            return Ok(PendingById::NotVisibleYet);
        }
        let mut read = super::read::ReadColumns::read_rows(&rows)?;
        // The statement's lookups return them so; sorted only if they did not (by index: a row is large to move).
        if !read.is_sorted_by_key(|row| row.range) {
            read.sort_by_cached_key(|row| row.range);
        }
        Ok(PendingById::Rows(read))
    }

    /// Writes the outcomes of streamed events in one statement: published rows marked (or deleted with
    /// `delete_published`), failures counted. Only rows still pending change. When every event was published, each
    /// row is found where [`pending_by_id`](Self::pending_by_id) read it ([`Settlement::version`]), one tuple fetch
    /// instead of a descent of the primary key; rows that moved since, or without a version, are found by id.
    ///
    /// # Errors
    ///
    /// [`Error::Database`](crate::Error::Database).
    pub async fn settle_by_id(&self, settlements: &[Settlement], delete_published: bool) -> Result<SettleReport> {
        self.settle_streamed(settlements, delete_published, None).await
    }

    /// [`settle_by_id`](Self::settle_by_id), and, with `messages_through` (a WAL position as PostgreSQL writes it,
    /// `0/16B3748`), records in the same statement that the message-mode events of every transaction that ends
    /// there or before are published ([`wal_published_through`](Self::wal_published_through)): one write per
    /// batch, none per event. With no settlements, only that record is written.
    ///
    /// # Errors
    ///
    /// [`Error::Database`](crate::Error::Database).
    pub async fn settle_streamed(
        &self,
        settlements: &[Settlement],
        delete_published: bool,
        messages_through: Option<&str>,
    ) -> Result<SettleReport> {
        if settlements.is_empty() {
            if let Some(through) = messages_through {
                sqlx::query(PUBLISHED_THROUGH).bind(through).execute(&self.pool).await?;
            }
            return Ok(SettleReport::default());
        }
        if let Some((ids, versions)) = all_published(settlements) {
            // Prepared once: the function's nested loop of tuple fetches by `ctid`, whatever the batch's size.
            let rows = sqlx::query(ALL_PUBLISHED_AT)
                .bind(ids)
                .bind(versions)
                .bind(delete_published)
                .bind(messages_through)
                .fetch_all(&self.pool)
                .await?;
            return report(&rows, settlements.len());
        }
        let columns = columns(settlements);
        let sql = if delete_published { DELETE_BY_ID } else { MARK_BY_ID };
        let rows = sqlx::query(sql)
            .persistent(false)
            .bind(columns.ids)
            .bind(columns.outcomes)
            .bind(columns.errors)
            .bind(columns.delays)
            .bind(messages_through)
            .fetch_all(&self.pool)
            .await?;
        report(&rows, settlements.len())
    }

    /// How far the WAL relay has published message-mode events: the end of the last streamed transaction whose
    /// messages are all published or written to the table (as PostgreSQL writes a WAL position), as
    /// [`settle_streamed`](Self::settle_streamed) recorded it. `None` when none is recorded, or the one recorded is
    /// past the end of the server's WAL (it belongs to another cluster). A slot's confirmed position can fall back
    /// behind it (PostgreSQL 14 to 16 write it to disk only now and then): the messages streamed again up to it
    /// are not published again.
    ///
    /// # Errors
    ///
    /// [`Error::Database`](crate::Error::Database); SQLSTATE 42703 before `outbox migrate`.
    pub async fn wal_published_through(&self) -> Result<Option<String>> {
        Ok(sqlx::query_scalar(READ_PUBLISHED_THROUGH).fetch_optional(&self.pool).await?.flatten())
    }

    /// The WAL relay's slot as the server sees it: whether a relay reads it, how much WAL it keeps, when the
    /// reader last reported its position. `None` when no slot is recorded or it does not exist.
    ///
    /// # Errors
    ///
    /// [`Error::Database`](crate::Error::Database).
    pub async fn wal_slot_status(&self) -> Result<Option<SlotStatus>> {
        let Some(row) = sqlx::query(SLOT_STATUS).fetch_optional(&self.pool).await? else { return Ok(None) };
        let age: Option<f64> = row.try_get("report_age_secs")?;
        Ok(Some(SlotStatus {
            slot: row.try_get("slot_name")?,
            active: row.try_get("active")?,
            lag_bytes: row.try_get::<Option<i64>, _>("lag_bytes")?.unwrap_or(0).unsigned_abs(),
            last_report_age: age.and_then(|age| std::time::Duration::try_from_secs_f64(age.max(0.0)).ok()),
        }))
    }
}

/// The message-mode events `slot` has not confirmed, pending again (`None`: no outcome yet). Content that is not
/// an outbox event is left out, as the relay leaves it out.
async fn slot_messages(tx: &mut sqlx::PgConnection, slot: &str) -> Result<Vec<(StoredEvent, Option<SettleOutcome>)>> {
    let written: String = sqlx::query_scalar(WAL_WRITTEN).fetch_one(&mut *tx).await?;
    // The WAL writer flushes within a second, whatever the settings.
    while !sqlx::query_scalar::<_, bool>(WAL_FLUSHED_THROUGH).bind(&written).fetch_one(&mut *tx).await? {
        sqlx::query("SELECT pg_sleep(0.02)").execute(&mut *tx).await?;
    }
    let prefix = format!("{WAL_MESSAGE_PREFIX}\0");
    let contents: Vec<Vec<u8>> =
        sqlx::query_scalar(SLOT_MESSAGES).bind(slot).bind(prefix.as_bytes()).fetch_all(&mut *tx).await?;
    let now = time::OffsetDateTime::now_utc();
    Ok(contents
        .iter()
        .filter_map(|content| decode_wal_message(content, now, 0).ok())
        .map(|event| (event, None))
        .collect())
}

/// [`PgStore::switch_source`] in a transaction on `connection`. `None`, and nothing changed, when the switch
/// would drop a slot that `shut` does not say is closed to producers.
async fn switch_source_on(
    connection: &mut PgConnection,
    to: Source,
    shut: Option<&ProducersShut>,
) -> Result<Option<SourceSwitch>> {
    let messages = match (to, shut) {
        (Source::Table, Some(_)) => match move_slot_messages(connection, Some(Source::Wal)).await? {
            SlotMessages::Active(slot) => return Ok(Some(SourceSwitch::SlotActive(slot))),
            messages => messages,
        },
        _ => SlotMessages::None,
    };
    let mut tx = connection.begin().await?;
    sqlx::query(LOCK_SWITCH).bind(SOURCE_SWITCH_LOCK).execute(&mut *tx).await?;
    let state = wal_state_in(&mut tx).await?;
    if state.source == to {
        return Ok(Some(SourceSwitch::Unchanged));
    }
    let mut moved = 0;
    let mut lost = false;
    let mut dropped = false;
    match to {
        Source::Wal => {
            if sqlx::query(TO_WAL).execute(&mut *tx).await?.rows_affected() == 0 {
                let live: Vec<Uuid> = sqlx::query_scalar(LIVE_TABLE_RELAYS).fetch_all(&mut *tx).await?;
                return Ok(Some(SourceSwitch::TableRelaysLive(live)));
            }
        }
        Source::Table => {
            if let Some(slot) = &state.slot {
                let Some(shut) = shut else { return Ok(None) };
                match drop_slot_in(&mut tx, slot, &messages, shut).await? {
                    SourceSwitch::Switched { moved_to_table, slot_lost, slot_dropped } => {
                        moved = moved_to_table;
                        lost = slot_lost;
                        dropped = slot_dropped;
                    }
                    refused => return Ok(Some(refused)),
                }
            }
            sqlx::query(TO_TABLE).execute(&mut *tx).await?;
        }
    }
    tx.commit().await?;
    Ok(Some(SourceSwitch::Switched { moved_to_table: moved, slot_lost: lost, slot_dropped: dropped }))
}

/// [`PgStore::drop_wal_slot`] in a transaction on `connection`, the slot closed to producers.
async fn drop_wal_slot_on(connection: &mut PgConnection, shut: &ProducersShut) -> Result<Option<SourceSwitch>> {
    let messages = match move_slot_messages(connection, None).await? {
        SlotMessages::Active(slot) => return Ok(Some(SourceSwitch::SlotActive(slot))),
        messages => messages,
    };
    let mut tx = connection.begin().await?;
    let Some(slot) = wal_state_in(&mut tx).await?.slot else { return Ok(None) };
    let dropped = drop_slot_in(&mut tx, &slot, &messages, shut).await?;
    if matches!(dropped, SourceSwitch::Switched { .. }) {
        tx.commit().await?;
    }
    Ok(Some(dropped))
}

/// The state, locked until `tx` ends: two switches never interleave.
async fn wal_state_in(tx: &mut sqlx::PgConnection) -> Result<WalState> {
    state_from(sqlx::query(STATE_FOR_UPDATE).fetch_optional(&mut *tx).await?)
}

/// Whether a WAL relay reads or leads `slot` (a drop is refused then), and, when the slot exists, whether it is
/// active and whether the server invalidated it.
async fn slot_use(connection: &mut PgConnection, slot: &str) -> Result<(bool, Option<(bool, Option<bool>)>)> {
    let led: bool =
        sqlx::query_scalar(SLOT_LED).bind(WAL_LEADER_LOCK_CLASS).bind(slot).fetch_one(&mut *connection).await?;
    let found: Option<(bool, Option<bool>)> =
        sqlx::query_as(SLOT_ACTIVE).bind(slot).fetch_optional(&mut *connection).await?;
    Ok((led || found.is_some_and(|(active, _)| active), found))
}

/// The recorded slot, and whether a WAL relay reads or leads it: a drop that would be refused is refused before
/// it closes the slot to producers, which would refuse their enqueues for a second for nothing.
async fn recorded_slot(pool: &PgPool) -> Result<Option<(String, bool)>> {
    let mut connection = pool.acquire().await?;
    let Some(slot) = state_from(sqlx::query(STATE).fetch_optional(&mut *connection).await?)?.slot else {
        return Ok(None);
    };
    let (in_use, _) = slot_use(&mut connection, &slot).await?;
    Ok(Some((slot, in_use)))
}

/// What the recorded slot held before it is dropped ([`move_slot_messages`]).
enum SlotMessages {
    /// No slot is recorded (or the source is not the one the caller switches from): nothing to move.
    None,
    /// A session reads the slot: nothing moved, and the slot must not be dropped.
    Active(String),
    /// The slot's message-mode events are in the table, committed: `moved` rows written; `lost` when the server
    /// had invalidated the slot, whose messages went with its WAL.
    Moved { slot: String, moved: u64, lost: bool },
}

/// Writes the message-mode events the recorded slot still holds to the table as pending rows, and commits them,
/// before the slot is dropped. They have no row of their own and the slot is the only place that keeps them, and
/// dropping a slot is not transactional: rows written in the transaction that drops it would be lost with it if
/// that transaction then failed (a lost connection, a stop). Committed first, they are at worst written twice
/// when the drop does not happen (the slot still holds them; an id is written once), never lost. `from`: only
/// while the source is this one. The slot is closed to producers ([`ClosedToProducers`]): no message is written
/// for it after this.
async fn move_slot_messages(connection: &mut PgConnection, from: Option<Source>) -> Result<SlotMessages> {
    let mut tx = connection.begin().await?;
    sqlx::query(LOCK_SWITCH).bind(SOURCE_SWITCH_LOCK).execute(&mut *tx).await?;
    let state = wal_state_in(&mut tx).await?;
    let Some(slot) = state.slot.filter(|_| from.is_none_or(|from| state.source == from)) else {
        return Ok(SlotMessages::None);
    };
    let (in_use, found) = slot_use(&mut tx, &slot).await?;
    if in_use {
        return Ok(SlotMessages::Active(slot));
    }
    // An invalidated slot can decode nothing: its messages went with its WAL.
    let lost = found.is_some_and(|(_, lost)| lost == Some(true));
    let mut moved = 0;
    if found.is_some() && !lost {
        sqlx::query(LOCK_EMITS).bind(WAL_EMIT_LOCK).execute(&mut *tx).await?;
        match slot_messages(&mut tx, &slot).await {
            Ok(events) => moved = super::wal_handover::write_wal_events(&mut *tx, &events, None).await?.1,
            Err(crate::error::Error::Database(sqlx::Error::Database(db))) if db.code().as_deref() == Some("55006") => {
                return Ok(SlotMessages::Active(slot));
            }
            Err(error) => return Err(error),
        }
    }
    tx.commit().await?;
    Ok(SlotMessages::Moved { slot, moved, lost })
}

/// Drops `slot` and forgets it in `tx`: `Switched` with the number of message-mode events moved to the table
/// (`messages`, committed before), or `SlotActive` when a session reads it (nothing changed; roll `tx` back).
/// `_shut`: no producer can write for the slot any more ([`ClosedToProducers`]).
async fn drop_slot_in(
    tx: &mut sqlx::PgConnection,
    slot: &str,
    messages: &SlotMessages,
    _shut: &ProducersShut,
) -> Result<SourceSwitch> {
    let (in_use, found) = slot_use(&mut *tx, slot).await?;
    if in_use {
        return Ok(SourceSwitch::SlotActive(slot.to_owned()));
    }
    let (moved, lost) = match messages {
        SlotMessages::Moved { slot: moved_from, moved, lost } if moved_from == slot => (*moved, *lost),
        // Another slot was recorded meanwhile (a switch ran between the two transactions): its messages were not
        // moved, so it is not dropped; the caller reports it in use and can run again.
        _ if found.is_some() => return Ok(SourceSwitch::SlotActive(slot.to_owned())),
        _ => (0, false),
    };
    match sqlx::query(DROP_SLOT).bind(slot).execute(&mut *tx).await {
        Ok(_) => {}
        Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("55006") => {
            return Ok(SourceSwitch::SlotActive(slot.to_owned()));
        }
        Err(error) => return Err(error.into()),
    }
    sqlx::query(FORGET_SLOT).execute(&mut *tx).await?;
    Ok(SourceSwitch::Switched { moved_to_table: moved, slot_lost: lost, slot_dropped: true })
}
