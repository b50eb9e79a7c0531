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
//! It is small enough to read. `pg_walstream` decodes more, but its feedback moves only while the consumer pulls,
//! and it creates missing slots by default.
//!
//! TLS ([`Tls`]): the connection takes the database URL's `sslmode`, `sslrootcert`, `sslcert` and `sslkey` (else
//! `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT`, `PGSSLKEY`, as sqlx reads them for the pool), with libpq's meanings,
//! `prefer` when none is given. The client's TLS is rustls with ring, the provider of the relay's other TLS clients:
//! it installs ring as the process's default provider (when none is installed yet) before its first handshake.
//! Its `tls-rustls` feature also turns on rustls's default `aws_lc_rs` feature (the crate does not opt out of
//! rustls's default features), so rustls cannot pick a provider by its features alone: a process that builds a
//! rustls client before any default is installed must install one first.

use std::path::PathBuf;
use std::time::Duration;

use pgwire_replication::{PgWireError, ReplicationClient, ReplicationConfig, SslMode as ClientSslMode, TlsConfig};

use crate::error::Error;

/// The publication `outbox migrate` creates.
pub(crate) const PUBLICATION: &str = "outbox_wal";

/// The longest slot name PostgreSQL takes.
const MAX_SLOT_NAME: usize = 63;

/// The characters of a database's hash in its default slot's name.
const HASH_CHARS: usize = 8;

/// The namespace of the name-based UUIDs whose first characters [`default_slot`] appends (any fixed value: it only
/// has to stay the same from one release to the next).
const SLOT_HASH_NAMESPACE: uuid::Uuid = uuid::Uuid::from_u128(0x6f75_7462_6f78_5f65_7665_6e74_735f_736c);

/// The default slot of a database: `outbox_events_` and the database's name, when that is a slot name
/// (lower-case letters, digits and `_`, 63 at most); otherwise the name in those characters (cut to fit),
/// followed by `_` and 8 hexadecimal digits of a hash (SHA-1) of the exact name. Slot names are shared by the
/// databases of a server: `orders-eu` and `orders_eu`, `Shop` and `shop`, or two long names that share their first
/// 49 characters would otherwise get one slot.
pub(crate) fn default_slot(database: &str) -> String {
    let exact = format!("outbox_events_{database}");
    if valid_slot(&exact) {
        return exact;
    }
    let mut name: String =
        exact.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' }).collect();
    // Each character is now one byte.
    name.truncate(MAX_SLOT_NAME - 1 - HASH_CHARS);
    let hash = uuid::Uuid::new_v5(&SLOT_HASH_NAMESPACE, database.as_bytes()).simple().to_string();
    name.push('_');
    name.push_str(&hash[..HASH_CHARS]);
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

/// Where to stream from: the database URL's host, port, user, password and database, and how to use TLS.
#[derive(Clone)]
pub(crate) struct Target {
    host: String,
    port: u16,
    user: String,
    password: String,
    pub(crate) database: String,
    tls: Tls,
    /// For logs and errors: the URL with the password masked.
    pub(crate) masked: String,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.masked)
    }
}

impl Target {
    /// Parses a `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?host=/socket/dir][&sslmode=...]` URL.
    pub(crate) fn from_url(database_url: &str) -> Result<Self, Error> {
        Self::from_url_and_env(database_url, |name| std::env::var(name).ok())
    }

    /// [`from_url`](Self::from_url), reading the environment through `env`.
    fn from_url_and_env(database_url: &str, env: impl Fn(&str) -> Option<String>) -> Result<Self, Error> {
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
        let tls = Tls::from_url(&url, env).map_err(|reason| invalid(&reason))?;
        Ok(Self {
            tls,
            host,
            port: query("port").and_then(|p| p.parse().ok()).or(url.port()).unwrap_or(5432),
            password: query("password").or_else(|| url.password().map(decode)).unwrap_or_default(),
            user,
            database,
            masked: crate::masked_url::masked_text(database_url.split_once('?').map_or(database_url, |(url, _)| url)),
        })
    }

    /// Opens a gated replication session (see [`ReplicationClient::connect_gated`]) with the URL's TLS settings.
    ///
    /// With `sslmode=allow` (libpq's meaning: a connection without TLS first, then one with TLS if the server
    /// refuses it), the first connection is tried at once (`IDENTIFY_SYSTEM`), so that a refusal is seen here.
    pub(crate) async fn connect(&self, slot: &str, relay: uuid::Uuid) -> Result<ReplicationClient, PgWireError> {
        let mut client = ReplicationClient::connect_gated(self.config(slot, relay)).await?;
        let Some(fallback) = self.tls.fallback().filter(|_| !self.is_unix_socket()) else { return Ok(client) };
        match client.identify_system().await {
            Ok(_) => Ok(client),
            Err(error @ (PgWireError::Server(_) | PgWireError::Auth(_))) => {
                tracing::debug!(error = %error, "the server refused the connection without TLS; trying with TLS");
                drop(client);
                ReplicationClient::connect_gated(self.config_with(slot, relay, fallback)).await
            }
            Err(error) => Err(error),
        }
    }

    fn is_unix_socket(&self) -> bool {
        self.host.starts_with('/')
    }

    /// The replication session's settings, TLS as the URL says (none over a Unix socket, as with libpq).
    fn config(&self, slot: &str, relay: uuid::Uuid) -> ReplicationConfig {
        let tls = if self.is_unix_socket() { TlsConfig::disabled() } else { self.tls.config(&self.host) };
        self.config_with(slot, relay, tls)
    }

    fn config_with(&self, slot: &str, relay: uuid::Uuid, tls: TlsConfig) -> ReplicationConfig {
        let config = if self.is_unix_socket() {
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
            .with_tls(tls)
            // The walsender's side: the leader lock's keepalives ([`super::leader`]), so that a host that vanishes
            // frees the slot as soon as its lock, not after `wal_sender_timeout`.
            .with_options(server_options())
            // Acknowledgements reach the server within 100 ms, so a takeover replays little.
            .with_status_interval(Duration::from_millis(100))
            .with_wakeup_interval(Duration::from_secs(10))
            .with_buffer_size(16_384)
            .with_application_name(format!("outbox-relay-{relay}"))
    }
}

/// The replication connection's server settings (its startup packet's `options`): the TCP keepalives and user
/// timeout the leader's connection asks for ([`super::leader::KEEPALIVES`]). Without them the walsender of a relay
/// whose host vanished (a crash, a network cut) keeps the slot active until `wal_sender_timeout` (60 s by
/// default; never when it is 0), and the standby that took the lock over cannot stream it until then.
fn server_options() -> String {
    super::leader::KEEPALIVES.iter().map(|(name, value)| format!("-c {name}={value}")).collect::<Vec<_>>().join(" ")
}

/// libpq's `sslmode`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SslMode {
    /// No TLS.
    Disable,
    /// No TLS; TLS if the server refuses a connection without it.
    Allow,
    /// TLS if the server offers it (certificate not verified); sqlx's default, and libpq's.
    Prefer,
    /// TLS, certificate not verified (verified as `verify-ca` when `sslrootcert` is given, as libpq does).
    Require,
    /// TLS, the certificate signed by a trusted authority.
    VerifyCa,
    /// TLS, the certificate signed by a trusted authority and made out to the host connected to.
    VerifyFull,
}

impl SslMode {
    /// The values sqlx takes (case-insensitive), libpq's.
    const NAMES: [(&'static str, Self); 6] = [
        ("disable", Self::Disable),
        ("allow", Self::Allow),
        ("prefer", Self::Prefer),
        ("require", Self::Require),
        ("verify-ca", Self::VerifyCa),
        ("verify-full", Self::VerifyFull),
    ];

    fn parse(text: &str) -> Option<Self> {
        Self::NAMES.iter().find(|(name, _)| name.eq_ignore_ascii_case(text)).map(|(_, mode)| *mode)
    }
}

/// How the replication connection uses TLS, read as sqlx reads it for the relay's pool: the URL's `sslmode`
/// (`ssl-mode`), `sslrootcert` (`ssl-root-cert`, `ssl-ca`), `sslcert` (`ssl-cert`) and `sslkey` (`ssl-key`), the
/// last of a repeated key winning; for each one missing, `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT`, `PGSSLKEY`.
/// An `sslmode` that is none of libpq's six is an error, never a weaker mode.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Tls {
    mode: SslMode,
    /// The authorities to trust (a PEM file); without it, `verify-ca` and `verify-full` trust the Mozilla roots
    /// (`webpki-roots`), as sqlx with rustls does.
    root_cert: Option<PathBuf>,
    /// The client certificate and its key (PEM files), sent when the server asks for one.
    client: Option<(PathBuf, PathBuf)>,
}

impl Tls {
    fn from_url(url: &url::Url, env: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        // The URL's value, else the environment's: (value, where it came from).
        let setting = |keys: &[&str], var: &'static str| -> Option<(String, String)> {
            let from_url = url.query_pairs().filter(|(key, _)| keys.contains(&key.as_ref())).last();
            match from_url {
                Some((key, value)) => Some((value.into_owned(), format!("`{key}` of the URL"))),
                None => env(var).map(|value| (value, var.to_owned())),
            }
        };
        // sqlx takes a `PG...` variable that holds a PEM document as the document itself; the client takes paths.
        let path = |keys: &[&str], var: &'static str| -> Result<Option<PathBuf>, String> {
            match setting(keys, var) {
                Some((value, from)) if value.trim_start().starts_with("-----BEGIN") => Err(format!(
                    "cannot be used for the WAL source's replication connection: {from} holds a PEM document, and it \
                     takes the path of a PEM file"
                )),
                other => Ok(other.map(|(value, _)| PathBuf::from(value))),
            }
        };
        let mode = match setting(&["sslmode", "ssl-mode"], "PGSSLMODE") {
            None => SslMode::Prefer,
            Some((value, from)) => SslMode::parse(&value).ok_or_else(|| {
                let names: Vec<&str> = SslMode::NAMES.iter().map(|(name, _)| *name).collect();
                format!("has an unknown sslmode `{value}` (from {from}): use one of {}", names.join(", "))
            })?,
        };
        let root_cert = path(&["sslrootcert", "ssl-root-cert", "ssl-ca"], "PGSSLROOTCERT")?;
        let cert = path(&["sslcert", "ssl-cert"], "PGSSLCERT")?;
        let key = path(&["sslkey", "ssl-key"], "PGSSLKEY")?;
        let client = match (cert, key) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            (Some(_), None) => return Err("has `sslcert` without `sslkey`: a client certificate needs its key".into()),
            (None, Some(_)) => return Err("has `sslkey` without `sslcert`: a client key needs its certificate".into()),
        };
        Ok(Self { mode, root_cert, client })
    }

    /// The client's settings for a connection to `host` (a TCP host name or address).
    fn config(&self, host: &str) -> TlsConfig {
        let tls = match self.mode {
            // `allow` tries without TLS first ([`fallback`](Self::fallback) is the second try).
            SslMode::Disable | SslMode::Allow => return TlsConfig::disabled(),
            SslMode::Prefer => TlsConfig { mode: ClientSslMode::Prefer, ..TlsConfig::default() },
            SslMode::Require if self.root_cert.is_none() => TlsConfig::require(),
            SslMode::Require | SslMode::VerifyCa => TlsConfig::verify_ca(self.root_cert.clone()),
            // The host is also the name the certificate must be made out to, an IP address included (the client
            // refuses `verify-full` to an address unless the name is given; rustls then checks the certificate's
            // IP address entries, as libpq does).
            SslMode::VerifyFull => TlsConfig::verify_full(self.root_cert.clone()).with_sni_hostname(host),
        };
        self.with_client_certificate(tls)
    }

    /// `allow`'s second try, after the server refused a connection without TLS: TLS, certificate not verified.
    fn fallback(&self) -> Option<TlsConfig> {
        (self.mode == SslMode::Allow).then(|| self.with_client_certificate(TlsConfig::require()))
    }

    fn with_client_certificate(&self, tls: TlsConfig) -> TlsConfig {
        match &self.client {
            Some((cert, key)) => tls.with_client_cert(cert, key),
            None => tls,
        }
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
/// (retryable); refused credentials or permissions, and TLS refused or not verified, do not.
pub(crate) fn classify(error: &PgWireError, target: &Target) -> Error {
    let reason = error.to_string();
    match sqlstate(error) {
        Some(code) if code.starts_with("28") || code == "42501" || code.starts_with("3D") => {
            Error::Refused { target: target.masked.clone(), reason }
        }
        _ if error.is_auth() || (error.is_tls() && !tls_connection_lost(&reason)) => {
            Error::Refused { target: target.masked.clone(), reason }
        }
        _ => Error::Unreachable { target: target.masked.clone(), reason },
    }
}

/// Whether a TLS error is the connection lost during the handshake (the server restarting, the network), which
/// passes, rather than a certificate or a setting, which does not: the client reports both as TLS errors, the
/// former as a failed handshake with the I/O error's text.
fn tls_connection_lost(reason: &str) -> bool {
    let reason = reason.to_ascii_lowercase();
    reason.contains("tls handshake failed")
        && ["eof", "connection reset", "broken pipe", "timed out", "os error"].iter().any(|lost| reason.contains(lost))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use pgwire_replication::{PgWireError, SslMode as ClientSslMode, TlsConfig};

    use super::{classify, default_slot, sqlstate, valid_slot, Target};
    use crate::error::Error;

    /// The target of `url` in an environment of `vars` only.
    fn target(url: &str, vars: &[(&str, &str)]) -> Result<Target, Error> {
        Target::from_url_and_env(url, |name| vars.iter().find(|(var, _)| *var == name).map(|(_, v)| (*v).to_owned()))
    }

    /// The replication connection's TLS settings for `url` in an empty environment.
    fn tls(url: &str) -> TlsConfig {
        target(url, &[]).unwrap().config("slot", uuid::Uuid::nil()).tls
    }

    #[test]
    fn every_sslmode_of_libpq_maps_to_the_client_and_prefer_is_the_default() {
        let base = "postgres://relay@db.example.com/shop";
        assert_eq!(tls(base).mode, ClientSslMode::Prefer, "sqlx's and libpq's default");
        assert_eq!(tls(&format!("{base}?sslmode=disable")), TlsConfig::disabled());
        assert_eq!(tls(&format!("{base}?sslmode=prefer")).mode, ClientSslMode::Prefer);
        assert_eq!(tls(&format!("{base}?sslmode=require")), TlsConfig::require());
        assert_eq!(tls(&format!("{base}?sslmode=Verify-CA")), TlsConfig::verify_ca(None), "case-insensitive");
        assert_eq!(
            tls(&format!("{base}?sslmode=verify-full&sslrootcert=/etc/ca.pem")),
            TlsConfig::verify_full(Some("/etc/ca.pem".into())).with_sni_hostname("db.example.com")
        );
        // libpq: `require` with a root certificate verifies as `verify-ca`.
        assert_eq!(
            tls(&format!("{base}?sslmode=require&sslrootcert=/etc/ca.pem")),
            TlsConfig::verify_ca(Some("/etc/ca.pem".into()))
        );
        // `allow`: without TLS first, then with TLS if the server refuses.
        let allow = target(&format!("{base}?sslmode=allow"), &[]).unwrap();
        assert_eq!(allow.config("slot", uuid::Uuid::nil()).tls, TlsConfig::disabled());
        assert_eq!(allow.tls.fallback(), Some(TlsConfig::require()));
        assert_eq!(target(base, &[]).unwrap().tls.fallback(), None);
    }

    #[test]
    fn verify_full_to_an_ip_address_checks_the_address_and_a_client_certificate_is_sent_whole() {
        let url =
            "postgres://relay:pw@127.0.0.1:5433/shop?ssl-mode=verify-full&ssl-ca=/ca.pem&sslcert=/c.pem&sslkey=/k.pem";
        let tls = tls(url);
        assert_eq!(tls.mode, ClientSslMode::VerifyFull);
        assert_eq!(tls.sni_hostname.as_deref(), Some("127.0.0.1"));
        assert_eq!(tls.ca_pem_path, Some(PathBuf::from("/ca.pem")));
        assert_eq!(
            (tls.client_cert_pem_path, tls.client_key_pem_path),
            (Some(PathBuf::from("/c.pem")), Some(PathBuf::from("/k.pem")))
        );
        let half = target("postgres://relay@db/shop?sslmode=require&sslcert=/c.pem", &[]).unwrap_err().to_string();
        assert!(half.contains("`sslcert` without `sslkey`"), "{half}");
    }

    #[test]
    fn the_url_wins_over_the_environment_which_fills_what_the_url_leaves_out() {
        let env = [("PGSSLMODE", "verify-full"), ("PGSSLROOTCERT", "/env/ca.pem")];
        let from_env = target("postgres://relay@db/shop", &env).unwrap().config("s", uuid::Uuid::nil()).tls;
        assert_eq!(from_env, TlsConfig::verify_full(Some("/env/ca.pem".into())).with_sni_hostname("db"));
        let url = "postgres://relay@db/shop?sslmode=prefer&sslmode=verify-ca";
        let from_url = target(url, &env).unwrap().config("s", uuid::Uuid::nil()).tls;
        assert_eq!(from_url, TlsConfig::verify_ca(Some("/env/ca.pem".into())), "the last of a repeated key wins");
        let pem = [("PGSSLROOTCERT", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----")];
        let inline = target("postgres://relay@db/shop?sslmode=verify-ca", &pem).unwrap_err().to_string();
        assert!(inline.contains("PGSSLROOTCERT holds a PEM document"), "{inline}");
    }

    #[test]
    fn an_unknown_sslmode_is_a_one_line_error_not_a_weaker_mode() {
        for (url, env, from) in [
            ("postgres://relay@db/shop?sslmode=verify_full", &[][..], "`sslmode` of the URL"),
            ("postgres://relay@db/shop", &[("PGSSLMODE", "on")][..], "PGSSLMODE"),
        ] {
            let error = target(url, env).unwrap_err();
            assert!(matches!(error, Error::InvalidConfig { field: "database_url", .. }), "{error:?}");
            let text = error.to_string();
            assert!(!text.contains('\n') && text.contains("unknown sslmode") && text.contains(from), "{text}");
            assert!(text.contains("verify-full"), "names the values it takes: {text}");
        }
    }

    #[test]
    fn a_unix_socket_is_never_encrypted_as_with_libpq() {
        let socket = target("postgres:///shop?host=/run/postgresql&sslmode=verify-full", &[]).unwrap();
        assert_eq!(socket.config("s", uuid::Uuid::nil()).tls, TlsConfig::disabled());
    }

    #[test]
    fn tls_refusals_are_fatal_and_a_connection_lost_in_the_handshake_passes() {
        let target = target("postgres://relay@db/shop", &[]).unwrap();
        let refused = [
            "TLS handshake failed: invalid peer certificate: UnknownIssuer",
            "server does not support TLS (SSLRequest rejected)",
            "TLS config error: failed to open CA PEM '/nope': No such file or directory (os error 2)",
        ];
        for reason in refused {
            let error = classify(&PgWireError::Tls(reason.into()), &target);
            assert!(matches!(error, Error::Refused { .. }), "{reason}: {error:?}");
        }
        for reason in
            ["TLS handshake failed: tls handshake eof", "TLS handshake failed: Connection reset by peer (os error 104)"]
        {
            let error = classify(&PgWireError::Tls(reason.into()), &target);
            assert!(error.is_retryable(), "{reason}: {error:?}");
        }
    }

    #[test]
    fn the_default_slot_is_a_valid_name_derived_from_the_database() {
        assert_eq!(default_slot("shop"), "outbox_events_shop");
        assert_eq!(default_slot("orders_eu_2"), "outbox_events_orders_eu_2", "an exact name is kept as it was");
        let exact_longest = "x".repeat(49);
        assert_eq!(default_slot(&exact_longest), format!("outbox_events_{exact_longest}"));
        let my_shop = default_slot("My-Shop");
        assert!(my_shop.starts_with("outbox_events_my_shop_") && my_shop.len() == 30, "{my_shop}");
        assert_eq!(default_slot("My-Shop"), my_shop, "stable");
        let long = default_slot(&"x".repeat(100));
        assert_eq!(long.len(), 63);
        assert!(valid_slot(&long) && valid_slot(&my_shop) && valid_slot("outbox_events_shop"));
        assert!(!valid_slot("Bad-Name") && !valid_slot("") && !valid_slot(&"a".repeat(64)));
    }

    #[test]
    fn databases_that_differ_only_in_what_a_slot_name_cannot_hold_get_slots_of_their_own() {
        // 49 characters: the longest name kept as it is; then two that share them, cut to the same length.
        let (long, long_a, long_b) = ("x".repeat(49), format!("{}a", "x".repeat(49)), format!("{}b", "x".repeat(49)));
        let pairs = [
            ("orders-eu", "orders_eu"),
            ("orders-eu", "orders.eu"),
            ("Shop", "shop"),
            ("Shop", "SHOP"),
            ("caf\u{e9}", "caf_"),
            ("caf\u{e9}", "caf\u{e8}"),
            (long_a.as_str(), long_b.as_str()),
            (long.as_str(), long_a.as_str()),
        ];
        for (one, other) in pairs {
            let (a, b) = (default_slot(one), default_slot(other));
            assert_ne!(a, b, "`{one}` and `{other}`");
            assert!(valid_slot(&a) && valid_slot(&b), "{a} {b}");
        }
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
    fn the_replication_connection_asks_for_the_leader_connections_keepalives() {
        for url in ["postgres://relay@db.example.com/shop", "postgres:///shop?host=/run/postgresql"] {
            let options = target(url, &[]).unwrap().config("s", uuid::Uuid::nil()).options.unwrap();
            assert_eq!(
                options,
                "-c tcp_keepalives_idle=5 -c tcp_keepalives_interval=3 -c tcp_keepalives_count=3 \
                 -c tcp_user_timeout=20000"
            );
        }
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
