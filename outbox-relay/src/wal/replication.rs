//! The replication connection: its settings from the database URL, the slot's name, the statement that creates
//! it, and what its errors mean.
//!
//! We stream `pgoutput` with [`pgwire_replication`] (crates.io, MIT/Apache-2.0) rather than `pg_walstream` or a
//! fork of tokio-postgres (those with replication exist only as git dependencies). It is a transport-only client: a
//! background task owns the walsender connection, answers keepalives and sends standby status on its own clock,
//! also while our bounded event channel is full, so a slow broker never trips `wal_sender_timeout`. It reports as
//! flushed only the position we pass to `update_applied_lsn`, so the slot's confirmed position never passes what
//! the sink acknowledged. Its gated session runs `CREATE_REPLICATION_SLOT ... (SNAPSHOT 'export')` and then
//! `START_REPLICATION` on one connection: the consistent point and exported snapshot the gap-free switch from the
//! table source needs. It never creates slots on its own. It decodes the transaction frame (`Begin`, `Commit` with
//! its end position and commit time, logical messages); we decode `Relation` and `Insert` ([`super::pgoutput`]).
//! Without TLS it is pure Rust (no C code), and small enough to read. `pg_walstream` decodes more, but its
//! feedback moves only while the consumer pulls, its pure-Rust TLS forces aws-lc-rs, and it creates missing slots
//! by default.

use std::time::Duration;

use pgwire_replication::{PgWireError, ReplicationConfig, TlsConfig};

use crate::error::Error;

/// The publication `outbox migrate` creates.
pub(crate) const PUBLICATION: &str = "outbox_wal";

/// The longest slot name PostgreSQL takes.
const MAX_SLOT_NAME: usize = 63;

/// The default slot of a database: `outbox_events_` and the database's name, in the characters a slot name may
/// have (lower-case letters, digits, `_`), so that the databases of one server get one slot each.
pub(crate) fn default_slot(database: &str) -> String {
    let mut name: String = format!("outbox_events_{database}")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' })
        .collect();
    name.truncate(MAX_SLOT_NAME);
    name
}

/// Whether `slot` is a name PostgreSQL accepts for a replication slot.
pub(crate) fn valid_slot(slot: &str) -> bool {
    !slot.is_empty()
        && slot.len() <= MAX_SLOT_NAME
        && slot.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Creates the slot and exports its snapshot (the syntax of PostgreSQL 15 and later; the older keyword before).
pub(crate) fn create_slot_sql(slot: &str, server_version: u32) -> String {
    if server_version >= 150_000 {
        format!("CREATE_REPLICATION_SLOT {slot} LOGICAL pgoutput (SNAPSHOT 'export')")
    } else {
        format!("CREATE_REPLICATION_SLOT {slot} LOGICAL pgoutput EXPORT_SNAPSHOT")
    }
}

/// Where to stream from: the database URL's host, port, user, password and database.
#[derive(Clone)]
pub(crate) struct Target {
    host: String,
    port: u16,
    user: String,
    password: String,
    pub(crate) database: String,
    /// For logs and errors: the URL with the password masked.
    pub(crate) masked: String,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.masked)
    }
}

impl Target {
    /// Parses a `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?host=/socket/dir]` URL.
    pub(crate) fn from_url(database_url: &str) -> Result<Self, Error> {
        let invalid = |reason: &str| Error::InvalidConfig { field: "database_url", reason: reason.to_owned() };
        let url = url::Url::parse(database_url).map_err(|_| invalid("is not a postgres:// URL"))?;
        if !matches!(url.scheme(), "postgres" | "postgresql") {
            return Err(invalid("is not a postgres:// URL: the WAL source streams from PostgreSQL"));
        }
        let query = |key: &str| url.query_pairs().find(|(k, _)| k == key).map(|(_, v)| v.into_owned());
        let decode = |text: &str| percent_decode(text);
        let host = query("host").or_else(|| url.host_str().map(str::to_owned)).unwrap_or_else(|| "localhost".into());
        let user = query("user").unwrap_or_else(|| decode(url.username()));
        let user = if user.is_empty() { std::env::var("USER").unwrap_or_else(|_| "postgres".into()) } else { user };
        let database = url.path().trim_start_matches('/');
        let database = if database.is_empty() { user.clone() } else { decode(database) };
        Ok(Self {
            host,
            port: query("port").and_then(|p| p.parse().ok()).or(url.port()).unwrap_or(5432),
            password: query("password").or_else(|| url.password().map(decode)).unwrap_or_default(),
            user,
            database,
            masked: crate::masked_url::masked_text(database_url.split_once('?').map_or(database_url, |(url, _)| url)),
        })
    }

    /// The replication session's settings.
    pub(crate) fn config(&self, slot: &str, relay: uuid::Uuid) -> ReplicationConfig {
        let config = if self.host.starts_with('/') {
            ReplicationConfig::unix(
                &self.host,
                self.port,
                &self.user,
                &self.password,
                &self.database,
                slot,
                PUBLICATION,
            )
        } else {
            ReplicationConfig::new(&self.host, &self.user, &self.password, &self.database, slot, PUBLICATION)
                .with_port(self.port)
        };
        config
            .with_tls(TlsConfig::disabled())
            // Acknowledgements reach the server within 100 ms, so a takeover replays little.
            .with_status_interval(Duration::from_millis(100))
            .with_wakeup_interval(Duration::from_secs(10))
            .with_buffer_size(16_384)
            .with_application_name(format!("outbox-relay-{relay}"))
    }
}

fn percent_decode(text: &str) -> String {
    url::form_urlencoded::parse(format!("x={}", text.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, value)| value.into_owned())
        .unwrap_or_default()
}

/// The SQLSTATE a server error carries in its text, e.g. `55006`.
pub(crate) fn sqlstate(error: &PgWireError) -> Option<&str> {
    let PgWireError::Server(message) = error else { return None };
    let start = message.find("SQLSTATE ")? + "SQLSTATE ".len();
    message.get(start..start + 5)
}

/// What a replication error means for the relay: the slot read by another session and a lost connection pass
/// (retryable); refused credentials or permissions do not.
pub(crate) fn classify(error: &PgWireError, target: &Target) -> Error {
    let reason = error.to_string();
    match sqlstate(error) {
        Some(code) if code.starts_with("28") || code == "42501" || code.starts_with("3D") => {
            Error::Refused { target: target.masked.clone(), reason }
        }
        _ if error.is_auth() || error.is_tls() => Error::Refused { target: target.masked.clone(), reason },
        _ => Error::Unreachable { target: target.masked.clone(), reason },
    }
}

#[cfg(test)]
mod tests {
    use super::{default_slot, sqlstate, valid_slot, Target};

    #[test]
    fn the_default_slot_is_a_valid_name_derived_from_the_database() {
        assert_eq!(default_slot("shop"), "outbox_events_shop");
        assert_eq!(default_slot("My-Shop"), "outbox_events_my_shop");
        let long = default_slot(&"x".repeat(100));
        assert_eq!(long.len(), 63);
        assert!(valid_slot(&long) && valid_slot("outbox_events_shop"));
        assert!(!valid_slot("Bad-Name") && !valid_slot("") && !valid_slot(&"a".repeat(64)));
    }

    #[test]
    fn the_url_gives_every_part_and_the_password_stays_masked() {
        let target = Target::from_url("postgres://relay:s%40cret@127.0.0.1:5433/shop?sslmode=disable").unwrap();
        assert_eq!((target.host.as_str(), target.port), ("127.0.0.1", 5433));
        assert_eq!(
            (target.user.as_str(), target.password.as_str(), target.database.as_str()),
            ("relay", "s@cret", "shop")
        );
        assert!(!format!("{target:?}").contains("s%40cret") && !format!("{target:?}").contains("s@cret"));
        let socket = Target::from_url("postgres:///shop?host=/run/postgresql&user=relay").unwrap();
        assert_eq!((socket.host.as_str(), socket.user.as_str()), ("/run/postgresql", "relay"));
        assert!(Target::from_url("sqlite://outbox.db").is_err());
    }

    #[test]
    fn the_sqlstate_is_read_from_the_server_message() {
        let error = pgwire_replication::PgWireError::Server(
            "ERROR: replication slot \"s\" is active for PID 7 (SQLSTATE 55006)".into(),
        );
        assert_eq!(sqlstate(&error), Some("55006"));
        assert_eq!(sqlstate(&pgwire_replication::PgWireError::Protocol("x".into())), None);
    }
}
