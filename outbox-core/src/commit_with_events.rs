//! A PostgreSQL transaction that writes its events in the same round trip as its `COMMIT`.
//!
//! Enqueueing with [`Outbox::enqueue`] costs a round trip of its own. [`OutboxTransaction`] buffers the events
//! instead (each one serialized and checked at once, so a bad event fails where it is enqueued) and sends them with
//! the `COMMIT`, in one message: the commit costs what it costs without an outbox, plus the rows' own work. Its
//! only way to commit writes the buffered events, and an error in that write rolls everything back; dropping it
//! without committing rolls back too (a `ROLLBACK` is queued, which the pool sends before it hands the connection
//! out again, as for sqlx's own transactions; dropped while its commit is being sent, the connection is closed).
//!
//! The events travel as literals in the statement's text, which sqlx logs (every statement at DEBUG, slow ones at
//! WARN) and PostgreSQL shows (`pg_stat_activity`, its log of a failing statement). An event with sensitive fields
//! must not: when one is buffered, the events are written with parameters first and the `COMMIT` follows, one round
//! trip more.
//!
//! The transaction is begun through sqlx's transaction manager, so sqlx knows it is open: a transaction begun on
//! `&mut *tx` (`sqlx::Connection::begin`) is a savepoint inside it, whose `commit` releases the savepoint and
//! commits nothing. Events enqueued there with [`Outbox::enqueue`] are written at once, ahead of those this
//! transaction buffers: enqueue the events of one aggregate through one of the two, or they are published in the
//! order they were written, not the order of the calls. The `COMMIT` that travels with the events is followed by a `BEGIN`, so that the connection is
//! still inside a transaction when sqlx closes its own with a `ROLLBACK` (queued, sent with the connection's
//! release to the pool): neither adds a round trip to the commit, and no server warning is logged.

use std::ops::{Deref, DerefMut};

use sqlx::pool::PoolConnection;
use sqlx::postgres::PgTransactionManager;
use sqlx::{Executor, PgConnection, PgPool, Postgres, TransactionManager};
use uuid::Uuid;

use crate::backend::Backend;
use crate::enqueue::Outbox;
use crate::error::Result;
use crate::event::OutboxEvent;
use crate::new_event::NewEvent;
use crate::store::wal_message::WAL_EMIT_LOCK;
use crate::store::WAL_MESSAGE_PREFIX;
use crate::via_wal::WalOutbox;

/// A transaction on a PostgreSQL pool whose events are written with its `COMMIT`, in one round trip. Run your
/// domain statements on it (`&mut *tx` is a [`PgConnection`]), [`enqueue`](Self::enqueue) events (buffered, with
/// their ids known at once), then [`commit`](Self::commit).
///
/// # Example
///
/// ```no_run
/// # use outbox_core::{Outbox, OutboxEvent};
/// # #[derive(serde::Serialize)] struct OrderPlaced { order_id: i64 }
/// # impl OutboxEvent for OrderPlaced {
/// #     const EVENT_TYPE: &'static str = "order.placed";
/// #     const AGGREGATE_TYPE: &'static str = "order";
/// #     const VERSION: u32 = 1;
/// #     fn aggregate_id(&self) -> String { self.order_id.to_string() }
/// # }
/// # async fn run(pool: sqlx::PgPool) -> Result<(), outbox_core::Error> {
/// let mut tx = Outbox::new().begin(&pool).await?;
/// sqlx::query("UPDATE orders SET state = 'placed' WHERE id = $1").bind(1_i64).execute(&mut *tx).await?;
/// let id = tx.enqueue(&OrderPlaced { order_id: 1 })?; // nothing sent yet
/// tx.commit().await?; // the event's INSERT and the COMMIT, in one round trip
/// # let _ = id;
/// # Ok(())
/// # }
/// ```
#[must_use = "an OutboxTransaction rolls back when dropped: call `commit`"]
pub struct OutboxTransaction {
    connection: PoolConnection<Postgres>,
    events: Vec<NewEvent>,
    notify: Option<String>,
    /// Events go into the write-ahead log as logical decoding messages ([`WalOutbox::begin`]), not into the table.
    via_wal: bool,
    open: bool,
    /// `commit` has begun sending: a drop now (the future cancelled) may leave a message half sent.
    committing: bool,
}

impl std::fmt::Debug for OutboxTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboxTransaction")
            .field("events", &self.events.len())
            .field("notify", &self.notify)
            .field("via_wal", &self.via_wal)
            .field("open", &self.open)
            .finish()
    }
}

impl Outbox {
    /// Begins a transaction on `pool` that writes its events with its `COMMIT` ([`OutboxTransaction`]), with these
    /// settings (notifications included).
    ///
    /// # Errors
    ///
    /// [`Error::Database`](crate::Error::Database) when no connection can be had or `BEGIN` fails.
    pub async fn begin(&self, pool: &PgPool) -> Result<OutboxTransaction> {
        OutboxTransaction::begin(pool, self.notify_channel().map(str::to_owned), false).await
    }
}

impl WalOutbox {
    /// Begins a transaction on `pool` that writes its events into the write-ahead log with its `COMMIT`, in one
    /// round trip ([`OutboxTransaction`], with the rules of [`WalOutbox`]): the commit costs what it costs without
    /// an outbox, plus the messages' WAL records.
    ///
    /// Without the WAL relay's slot the commit fails with [`Error::WalSourceOff`](crate::Error::WalSourceOff) and
    /// the whole transaction is rolled back, domain change included (the `COMMIT` travels with the events, so
    /// there is no transaction left to go on with, unlike [`WalOutbox::enqueue`]).
    ///
    /// # Errors
    ///
    /// [`Error::Database`](crate::Error::Database) when no connection can be had or `BEGIN` fails.
    pub async fn begin(&self, pool: &PgPool) -> Result<OutboxTransaction> {
        OutboxTransaction::begin(pool, None, true).await
    }
}

impl OutboxTransaction {
    async fn begin(pool: &PgPool, notify: Option<String>, via_wal: bool) -> Result<Self> {
        let mut connection = pool.acquire().await?;
        PgTransactionManager::begin(&mut connection, None).await?;
        Ok(Self { connection, events: Vec::new(), notify, via_wal, open: true, committing: false })
    }

    /// Buffers one event and returns its id. Nothing is sent until [`commit`](Self::commit).
    ///
    /// # Errors
    ///
    /// The serialization and validation errors of [`NewEvent::new`]; the event is not buffered.
    pub fn enqueue<E: OutboxEvent + ?Sized>(&mut self, event: &E) -> Result<Uuid> {
        let event = NewEvent::new(event)?;
        self.enqueue_event(event)
    }

    /// Buffers events of one type and returns their ids; if one fails, none is buffered.
    ///
    /// # Errors
    ///
    /// As [`enqueue`](Self::enqueue).
    pub fn enqueue_all<'e, E, I>(&mut self, events: I) -> Result<Vec<Uuid>>
    where
        E: OutboxEvent + 'e,
        I: IntoIterator<Item = &'e E>,
    {
        let events = events.into_iter().map(NewEvent::new).collect::<Result<Vec<_>>>()?;
        events.into_iter().map(|event| self.enqueue_event(event)).collect()
    }

    /// Buffers an already built event (of any type, with headers) and returns its id.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidEvent`](crate::Error::InvalidEvent) when a header was refused ([`NewEvent::check`]) or,
    /// begun with [`WalOutbox::begin`], the aggregate is longer than the message mode takes; the event is not
    /// buffered.
    pub fn enqueue_event(&mut self, event: NewEvent) -> Result<Uuid> {
        if self.via_wal {
            // Also what the WAL relay needs to hand the event to the table's retry path should it fail.
            crate::via_wal::check(&event)?;
        } else {
            event.check()?;
        }
        let id = event.id();
        self.events.push(event);
        Ok(id)
    }

    /// The events buffered so far.
    #[must_use]
    pub fn buffered(&self) -> usize {
        self.events.len()
    }

    /// Writes the buffered events and commits, in one round trip (two when an event has sensitive fields: see the
    /// module's documentation); returns the events' ids. A transaction aborted by a statement whose error was
    /// ignored fails here, rather than rolling back and reporting success as a bare `COMMIT` would.
    ///
    /// # Errors
    ///
    /// [`Error::Database`](crate::Error::Database) when the write or the commit fails, and (begun with
    /// [`WalOutbox::begin`]) [`Error::WalSourceOff`](crate::Error::WalSourceOff) without the WAL relay's slot: then
    /// the whole transaction is rolled back (the domain change with the events).
    /// [`Error::CommitOutcomeUnknown`](crate::Error::CommitOutcomeUnknown) when the connection failed while the
    /// `COMMIT` was under way: the transaction may have committed; do not retry it blindly.
    pub async fn commit(mut self) -> Result<Vec<Uuid>> {
        self.committing = true;
        let mut sql = if self.events.iter().any(|event| !event.sensitive_paths.is_empty()) {
            // Sensitive values never travel as literals: the statement's text is what sqlx logs (every statement
            // at DEBUG, slow ones at WARN) and what PostgreSQL logs when it fails. Parameters first, then the commit.
            let written = if self.via_wal {
                crate::via_wal::emit(&mut self.connection, &self.events).await
            } else {
                <Postgres as Backend>::insert_events(
                    crate::backend::Internal::TOKEN,
                    &mut self.connection,
                    &self.events,
                    self.notify.as_deref(),
                )
                .await
            };
            if let Err(error) = written {
                self.rollback_after_error().await;
                return Err(error);
            }
            CHECKED_COMMIT.to_owned()
        } else if self.via_wal {
            emit_sql(&self.events)
        } else {
            commit_sql(&self.events, self.notify.as_deref())
        };
        // An empty transaction for sqlx's own to close (see the module's documentation).
        sql.push_str(";\nBEGIN");
        // A string without arguments runs through the simple query protocol: several statements, one message.
        let done = self.connection.execute(sql.as_str()).await;
        match done {
            Ok(_) => {
                PgTransactionManager::start_rollback(&mut self.connection);
                self.open = false;
                Ok(self.events.iter().map(NewEvent::id).collect())
            }
            Err(error) => {
                self.rollback_after_error().await;
                if let sqlx::Error::Database(db) = &error {
                    if db.code().as_deref() == Some(WAL_SOURCE_OFF) {
                        return Err(crate::error::Error::WalSourceOff);
                    }
                }
                if outcome_unknown(&error) {
                    let ids = self.events.iter().map(NewEvent::id).collect();
                    return Err(crate::error::Error::CommitOutcomeUnknown { ids, source: error });
                }
                Err(error.into())
            }
        }
    }

    /// After a failed statement, which left the transaction aborted (or the connection broken): rolls it back; if
    /// even that fails, dropping closes the connection, which rolls back on the server.
    async fn rollback_after_error(&mut self) {
        if PgTransactionManager::rollback(&mut self.connection).await.is_ok() {
            self.open = false;
        }
    }

    /// Rolls back the domain change and drops the buffered events.
    ///
    /// # Errors
    ///
    /// [`Error::Database`](crate::Error::Database) when `ROLLBACK` fails (the connection is then closed, which
    /// rolls back on the server).
    pub async fn rollback(mut self) -> Result<()> {
        PgTransactionManager::rollback(&mut self.connection).await?;
        self.open = false;
        Ok(())
    }
}

/// Whether the error of the message that carries the `COMMIT` leaves its outcome unknown: the connection failed
/// (the message may have been taken and committed before the answer was lost), or the server ended the session
/// (SQLSTATE class 08, or 57P01 to 57P03 of a shutdown or a terminated backend, which may come after the `COMMIT`
/// succeeded). Any other error is the server refusing a statement up to and including the `COMMIT`, which then
/// rolled everything back; the statements of one message run in order and stop at the first error.
fn outcome_unknown(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => {
            db.code().is_some_and(|code| code.starts_with("08") || matches!(code.as_ref(), "57P01" | "57P02" | "57P03"))
        }
        _ => false,
    }
}

impl Deref for OutboxTransaction {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        &self.connection
    }
}

impl DerefMut for OutboxTransaction {
    fn deref_mut(&mut self) -> &mut PgConnection {
        &mut self.connection
    }
}

impl Drop for OutboxTransaction {
    fn drop(&mut self) {
        if !self.open {
            return;
        }
        if self.committing {
            // Dropped while the commit was being sent: never back to the pool, where a half-sent message could
            // follow. Closing it rolls back on the server.
            self.connection.close_on_drop();
        } else {
            // As sqlx's own transactions do: a `ROLLBACK` queued, sent by the pool before it hands the connection
            // out again, so an early return (`?`) costs no new connection.
            PgTransactionManager::start_rollback(&mut self.connection);
        }
    }
}

/// A `COMMIT` that fails in a transaction an ignored error aborted: there, `COMMIT` alone rolls back and reports
/// success. (With events, their statement fails first.)
const CHECKED_COMMIT: &str = "SELECT 1;\nCOMMIT";

/// The SQLSTATE of `outbox_wal_emit` (migration 9, raised by migration 6's guard) when the WAL source has no slot
/// to keep the messages.
const WAL_SOURCE_OFF: &str = "OXW01";

/// `outbox_insert_events` (migration 9: the parameterized enqueue's `INSERT`, planned once per session) of
/// `events`, one array literal per column, or `outbox_insert_event` of the one event, with dollar-quoted literals
/// so that the statement needs no parameters and can travel with the `COMMIT` in one simple-protocol message; the
/// optional `pg_notify`, and `COMMIT`.
fn commit_sql(events: &[NewEvent], notify: Option<&str>) -> String {
    if events.is_empty() {
        return CHECKED_COMMIT.to_owned();
    }
    let columns: [Vec<String>; 7] = [
        events.iter().map(|event| event.id.to_string()).collect(),
        events.iter().map(|event| event.aggregate_type.to_owned()).collect(),
        events.iter().map(|event| event.aggregate_id.clone()).collect(),
        events.iter().map(|event| event.event_type.to_owned()).collect(),
        events.iter().map(|event| event.payload.clone()).collect(),
        events.iter().map(|event| crate::backend::json_text(&event.headers)).collect(),
        events.iter().map(|event| crate::backend::json_text(&event.sensitive_paths)).collect(),
    ];
    let tag = quote_tag(&columns.iter().flatten());
    let mut sql = if let [event] = events {
        let [id, aggregate_type, aggregate_id, event_type, payload, headers, sensitive_paths] =
            columns.map(|column| format!("{tag}{}{tag}", column[0]));
        format!(
            "SELECT outbox_insert_event({id}::uuid, {aggregate_type}, {aggregate_id}, {event_type}, {}, {payload}, \
             {headers}, {sensitive_paths});\n",
            event.version
        )
    } else {
        // One array literal per column: PostgreSQL reads it in one pass, where `ARRAY[...]` of a literal per value
        // costs the server a parsed constant per value (measured: a fifth more time for a commit of 100 events).
        let [ids, aggregate_types, aggregate_ids, event_types, payloads, headers, sensitive_paths] =
            columns.map(|column| array_literal(&tag, &column));
        let versions = events.iter().map(|event| event.version.to_string()).collect::<Vec<_>>().join(",");
        format!(
            "SELECT outbox_insert_events({ids}::uuid[], {aggregate_types}::text[], {aggregate_ids}::text[], \
             {event_types}::text[], '{{{versions}}}'::int4[], {payloads}::text[], {headers}::text[], \
             {sensitive_paths}::text[]);\n"
        )
    };
    if let Some(channel) = notify {
        // A checked identifier ([`Outbox::with_notify_channel`]): quoting it as a literal is enough.
        sql.push_str(&format!("SELECT pg_notify({tag}{channel}{tag}, '');\n"));
    }
    sql.push_str("COMMIT");
    sql
}

/// One transactional logical decoding message per event, in order, then `COMMIT`; literals dollar-quoted as in
/// [`commit_sql`]. The first is written by `outbox_wal_emit` (migration 9): the emit lock and the check that a slot
/// keeps the messages, then the message, in one call that raises when no slot keeps them; the others follow as
/// plain calls, under the lock the first took. Each is a statement of its own: a call without a `FROM` is planned
/// in microseconds. An error stops the rest of the string, so nothing is committed after a check that raised.
fn emit_sql(events: &[NewEvent]) -> String {
    if events.is_empty() {
        return CHECKED_COMMIT.to_owned();
    }
    let contents: Vec<String> = events.iter().map(crate::store::wal_message::encode).collect();
    let tag = quote_tag(&contents.iter());
    let mut sql = String::with_capacity(64 + contents.iter().map(|c| c.len() + 64).sum::<usize>());
    for (n, content) in contents.iter().enumerate() {
        if n == 0 {
            sql.push_str(&format!("SELECT outbox_wal_emit({WAL_EMIT_LOCK}, "));
        } else {
            sql.push_str("SELECT pg_logical_emit_message(true, ");
        }
        sql.push_str(&format!("'{WAL_MESSAGE_PREFIX}', {tag}{content}{tag});\n"));
    }
    sql.push_str("COMMIT");
    sql
}

/// `texts` as one array literal, dollar-quoted with `tag`: each element in double quotes, its `"` and `\`
/// escaped with a `\`, as PostgreSQL's array input reads them.
fn array_literal(tag: &str, texts: &[String]) -> String {
    let mut literal = String::with_capacity(2 * tag.len() + 2 + texts.iter().map(|text| text.len() + 3).sum::<usize>());
    literal.push_str(tag);
    literal.push('{');
    for (n, text) in texts.iter().enumerate() {
        if n > 0 {
            literal.push(',');
        }
        literal.push('"');
        for part in text.split_inclusive(['"', '\\']) {
            match part.strip_suffix(['"', '\\']) {
                Some(before) => {
                    literal.push_str(before);
                    literal.push('\\');
                    literal.push_str(&part[before.len()..]);
                }
                None => literal.push_str(part),
            }
        }
        literal.push('"');
    }
    literal.push('}');
    literal.push_str(tag);
    literal
}

/// A dollar-quote tag that occurs in none of `texts`, nor across the end of one and its closing tag (a text that
/// ends in `$o0` would close `$o0$` early: the tag's `$` both ends and begins it), so no value can end its literal
/// early.
fn quote_tag<'t>(texts: &(impl Iterator<Item = &'t String> + Clone)) -> String {
    let mut n: u64 = 0;
    loop {
        let tag = format!("$o{n:x}$");
        let open = &tag[..tag.len() - 1];
        if texts.clone().all(|text| !text.contains(&tag) && !text.ends_with(open)) {
            return tag;
        }
        n += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::{array_literal, commit_sql, emit_sql, quote_tag};
    use crate::new_event::NewEvent;

    #[derive(serde::Serialize)]
    struct Note {
        id: String,
        text: String,
    }

    impl crate::event::OutboxEvent for Note {
        const EVENT_TYPE: &'static str = "note.written";
        const AGGREGATE_TYPE: &'static str = "note";
        const VERSION: u32 = 1;

        fn aggregate_id(&self) -> String {
            self.id.clone()
        }
    }

    #[test]
    fn no_value_can_end_its_literal() {
        let hostile = Note { id: "$o0$'); DROP TABLE x; --".into(), text: "$o1$ $o2$".into() };
        let events = vec![NewEvent::new(&hostile).unwrap()];
        let sql = commit_sql(&events, None);
        assert!(sql.ends_with("COMMIT"));
        assert_eq!(sql.matches("$o3$").count(), 14, "seven literals, each opened and closed once");
        let sql = emit_sql(&events);
        assert!(sql.ends_with("COMMIT"));
        assert_eq!(sql.matches("$o3$").count(), 2, "one literal, opened and closed once");
    }

    #[test]
    fn one_event_is_inserted_from_plain_values_and_several_from_arrays_in_order() {
        let notes: Vec<NewEvent> = ["first", "second"]
            .into_iter()
            .map(|text| NewEvent::new(&Note { id: "n-1".into(), text: text.into() }).unwrap())
            .collect();
        let one = commit_sql(&notes[..1], None);
        assert!(one.starts_with("SELECT outbox_insert_event($o0$"), "{one}");
        assert!(!one.contains("ARRAY["), "{one}");
        let several = commit_sql(&notes, Some("outbox_events"));
        assert!(several.starts_with("SELECT outbox_insert_events($o0${\""), "{several}");
        assert!(several.find("first").unwrap() < several.find("second").unwrap(), "{several}");
        assert!(several.contains("'{1,1}'::int4[]"), "one version per event: {several}");
        assert!(several.ends_with(";\nSELECT pg_notify($o0$outbox_events$o0$, '');\nCOMMIT"), "{several}");
    }

    #[test]
    fn the_first_message_is_written_after_the_check_and_each_event_is_one_message_in_order() {
        let notes: Vec<NewEvent> = ["first", "second", "third"]
            .into_iter()
            .map(|text| NewEvent::new(&Note { id: "n-1".into(), text: text.into() }).unwrap())
            .collect();
        let sql = emit_sql(&notes);
        let statements: Vec<&str> = sql.split(";\n").collect();
        assert_eq!(statements.len(), 4, "{sql}");
        assert!(
            statements[0].starts_with("SELECT outbox_wal_emit(") && statements[0].contains(", 'outbox', "),
            "{sql}"
        );
        for (statement, text) in statements[..3].iter().zip(["first", "second", "third"]) {
            assert!(statement.contains(text), "{sql}");
        }
        for statement in &statements[1..3] {
            assert!(statement.starts_with("SELECT pg_logical_emit_message(true, 'outbox', "), "{sql}");
            assert!(!statement.contains("first"), "{sql}");
        }
        assert_eq!(statements[3], "COMMIT");
    }

    #[test]
    fn array_elements_are_quoted_with_their_quotes_and_backslashes_escaped() {
        let texts =
            ["plain".to_owned(), r#"{"a":"x\"y"}"#.to_owned(), r"\".to_owned(), String::new(), "a,b}".to_owned()];
        assert_eq!(array_literal("$o0$", &texts), r#"$o0${"plain","{\"a\":\"x\\\"y\"}","\\","","a,b}"}$o0$"#);
    }

    #[test]
    fn the_tag_is_the_first_that_no_text_contains() {
        assert_eq!(quote_tag(&["$o0$ $o1$".to_owned(), "$o2$".to_owned()].iter()), "$o3$");
        assert_eq!(quote_tag(&["plain".to_owned()].iter()), "$o0$");
    }

    #[test]
    fn no_text_can_close_the_tag_with_the_tags_own_closing_dollar() {
        assert_eq!(quote_tag(&["x$o0".to_owned()].iter()), "$o1$");
        assert_eq!(quote_tag(&["x$o0".to_owned(), "$o1".to_owned()].iter()), "$o2$");
        // Only the tag's own `$` can complete it: these close nothing.
        assert_eq!(quote_tag(&["x$o".to_owned(), "o0$x".to_owned()].iter()), "$o0$");
    }

    #[test]
    fn an_empty_transaction_only_commits_after_checking_that_it_was_not_aborted() {
        assert_eq!(commit_sql(&[], Some("outbox_events")), "SELECT 1;\nCOMMIT");
        assert_eq!(emit_sql(&[]), "SELECT 1;\nCOMMIT");
    }
}
