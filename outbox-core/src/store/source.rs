//! Which source publishes the outbox table: relays reading its rows, or one relay streaming its inserts from the
//! write-ahead log.

/// The source that publishes the events of a database's outbox table. Exactly one at a time: a relay of the other
/// source refuses to start, and switching is an explicit step (`outbox wal enable`, `outbox wal disable`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Source {
    /// Relays read the pending rows (`outbox relay`, the default).
    #[default]
    Table,
    /// One relay streams the inserts through logical replication (`outbox relay --source wal`, PostgreSQL).
    Wal,
}

impl Source {
    /// The name stored in the control row and accepted by the CLI: `table` or `wal`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Table => "table",
            Self::Wal => "wal",
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the control row of a PostgreSQL database says about the WAL source.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WalState {
    /// The source that publishes the table.
    pub source: Source,
    /// The replication slot the WAL relay created, until `outbox wal disable` or `outbox wal drop-slot` drops it.
    pub slot: Option<String>,
    /// The highest `seq` that was pending when the slot was created, while those rows are not all published.
    pub backlog_through: Option<i64>,
}

/// The transaction advisory lock a change of source holds (exclusive) from before it checks for live relays of
/// the other source until it commits; a relay of the table source takes it shared to read the source after it
/// registered. A relay that starts while `outbox wal enable` commits therefore either is seen live (and the
/// switch is refused) or waits and reads the new source (and refuses to start): never both publish. A tool that
/// changes `outbox_control.source` by hand should take it too.
pub const SOURCE_SWITCH_LOCK: i64 = 0x006f_7574_626f_7873; // "outboxs"

/// The first key of the session advisory lock the WAL relay that reads a slot holds for as long as it leads it (the
/// second key is `hashtext(slot name)`); standby relays wait for it. `outbox wal disable` and `drop-slot` refuse
/// while it is held, so a relay between its start and its stream is seen as reading the slot.
pub const WAL_LEADER_LOCK_CLASS: i32 = 0x6f75_7462; // "outb"

/// What [`PgStore::switch_source`](crate::store::PgStore::switch_source) did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SourceSwitch {
    /// The table is now published by the source asked for. Removing the WAL relay's slot first wrote the
    /// message-mode events it had not published yet to the table as pending rows: how many (0 otherwise).
    Switched {
        /// Message-mode events moved from the slot to the table as pending rows.
        moved_to_table: u64,
        /// The slot dropped had been invalidated by the server (`max_slot_wal_keep_size`): the WAL it kept is
        /// gone, so the message-mode events in it could not be moved (the table's rows are all still there).
        slot_lost: bool,
        /// A slot was dropped (switching back to the table source finds none when it was dropped before).
        slot_dropped: bool,
    },
    /// It already was; nothing changed.
    Unchanged,
    /// Nothing changed: relays of the table source are live (their ids), and must be stopped first.
    TableRelaysLive(Vec<uuid::Uuid>),
    /// Nothing changed: the WAL relay is reading its slot (named), and must be stopped first.
    SlotActive(String),
}

/// What [`PgStore::pending_by_id`](crate::store::PgStore::pending_by_id) read.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum PendingById {
    /// The rows still pending, in the order of the ids asked for.
    Rows(Vec<crate::store::ReadRow>),
    /// Publishing is paused (`outbox pause`): nothing was read.
    Paused,
    /// A transaction asked for is not visible to the read yet. The replication stream sends a commit once its
    /// record is flushed, and the committing session becomes visible to other sessions a moment later (later
    /// still with synchronous replication, which waits in between); read again shortly.
    NotVisibleYet,
}

/// One event of an aggregate that the WAL source handed to the table's retry path, as
/// [`PgStore::wal_handed_over_events`](crate::store::PgStore::wal_handed_over_events) reads it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HandedOverRow {
    /// The row; its `range` is the index of its aggregate among those asked for.
    pub row: crate::store::ReadRow,
    /// It failed for good: with ordering per aggregate, what follows it in the stream's order waits for it.
    pub failed: bool,
    /// A message-mode event written to the table and not numbered yet (its relay stopped in between): the stream
    /// gives it again and numbers it; until then nothing of its aggregate is published from the table.
    pub unnumbered: bool,
}

/// What one read of the WAL source's retry path found
/// ([`PgStore::wal_handed_over_events`](crate::store::PgStore::wal_handed_over_events)).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct HandedOverRead {
    /// Publishing is paused (`outbox pause`); known only when a row was read.
    pub paused: bool,
    /// The rows, each aggregate's in the order the stream handed them over.
    pub rows: Vec<HandedOverRow>,
}

/// The WAL relay's replication slot as the server sees it ([`PgStore::wal_slot_status`](crate::store::PgStore::wal_slot_status)).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SlotStatus {
    /// The slot's name.
    pub slot: String,
    /// Whether a relay reads it now.
    pub active: bool,
    /// Bytes of write-ahead log between the slot's confirmed position and the end of WAL: what the slot keeps
    /// on the server's disk.
    pub lag_bytes: u64,
    /// How long ago the reading relay last reported its position (`None` while no relay reads the slot, or when
    /// the role may not read `pg_stat_replication`).
    pub last_report_age: Option<std::time::Duration>,
}
