//! A real PostgreSQL for tests: the server of `DATABASE_URL`, or a private throwaway cluster.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgConnection, PgPool};

/// What to install when no PostgreSQL can be found.
const INSTALL_HINT: &str = "install the PostgreSQL server (Debian: `apt-get install postgresql`) so initdb and \
postgres are on PATH or under /usr/lib/postgresql/*/bin, or set DATABASE_URL to a server the tests may create \
databases on";

/// The server every test of this binary uses: its admin URL.
fn server_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => start_server(Durability::Throwaway)
            .unwrap_or_else(|problem| panic!("no PostgreSQL for the tests: {problem}; {INSTALL_HINT}")),
    })
}

/// A fresh, empty database on the test server, with a pool connected to it.
#[derive(Debug)]
pub struct TestDatabase {
    /// A pool connected to the database.
    pub pool: PgPool,
    /// The database's URL, for child processes such as the `outbox` binary.
    pub url: String,
    /// The database's name.
    pub name: String,
}

impl TestDatabase {
    /// Creates a fresh database with nothing in it (the outbox tables are not migrated).
    ///
    /// # Panics
    ///
    /// When no PostgreSQL can be found or started; the message says what to install.
    pub async fn create() -> Self {
        Self::create_on(server_url()).await
    }

    /// Creates a fresh database on the server of `admin_url` (a URL of a role that may create databases).
    ///
    /// # Panics
    ///
    /// When the URL is not a PostgreSQL URL, or the server refuses.
    pub async fn create_on(admin_url: &str) -> Self {
        let admin: PgConnectOptions = admin_url.parse().expect("not a PostgreSQL URL");
        let name = format!("outbox_test_{}", uuid::Uuid::now_v7().simple());
        let mut conn = connect_with_retry(&admin).await;
        sqlx::raw_sql(&format!("CREATE DATABASE {name}")).execute(&mut conn).await.expect("CREATE DATABASE");
        conn.close().await.ok();
        let options = admin.database(&name);
        let url = options.to_url_lossy().to_string();
        let pool =
            PgPoolOptions::new().max_connections(20).connect_with(options).await.expect("connect to the test database");
        Self { pool, url, name }
    }

    /// Creates a fresh database with the outbox tables migrated.
    ///
    /// # Panics
    ///
    /// As [`create`](Self::create), and when the migrations fail.
    pub async fn migrated() -> Self {
        let db = Self::create().await;
        outbox_core::migrate(&db.pool).await.expect("outbox migrations");
        db
    }

    /// Opens a new connection to the database, outside the pool (for LISTEN, or a second session).
    ///
    /// # Panics
    ///
    /// When the connection fails.
    pub async fn connect(&self) -> PgConnection {
        PgConnection::connect(&self.url).await.expect("connect to the test database")
    }
}

async fn connect_with_retry(options: &PgConnectOptions) -> PgConnection {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match options.connect().await {
            Ok(conn) => return conn,
            Err(error) if Instant::now() < deadline => {
                let _ = error;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => panic!("cannot connect to the test PostgreSQL at {}: {error}", options.to_url_lossy()),
        }
    }
}

/// The directory holding `initdb` and `postgres`: PATH first, then the newest /usr/lib/postgresql/*/bin.
fn postgres_bin_dir() -> Result<PathBuf, String> {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .find(|dir| dir.join("initdb").is_file() && dir.join("postgres").is_file());
    if let Some(dir) = on_path {
        return Ok(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|_| "PostgreSQL server binaries not found".to_owned())?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).ok_or_else(|| "PostgreSQL server binaries not found".to_owned())
}

fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false)
}

/// Runs `program args` as the current user, or as `postgres` when the tests run as root (PostgreSQL refuses
/// to run as root).
fn as_server_user(program: &Path) -> Command {
    if running_as_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

/// Creates a cluster directory under the temp dir (owned by `postgres` when running as root) and runs `initdb`
/// in `DIR/data`; returns `DIR`.
fn init_cluster(bin: &Path, prefix: &str) -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("{prefix}-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    if running_as_root() {
        let status = Command::new("chown").args(["postgres:", &dir.to_string_lossy()]).status();
        if !status.is_ok_and(|s| s.success()) {
            return Err("running as root, but cannot hand the cluster directory to the `postgres` user".to_owned());
        }
    }
    let output = as_server_user(&bin.join("initdb"))
        .arg("-D")
        .arg(dir.join("data"))
        .args(["-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8", "--locale=C.UTF-8"])
        .output()
        .map_err(|e| format!("cannot run initdb: {e}"))?;
    if !output.status.success() {
        return Err(format!("initdb failed: {}", String::from_utf8_lossy(&output.stderr).trim()));
    }
    Ok(dir)
}

/// How a private cluster treats durability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// `fsync`, `synchronous_commit` and `full_page_writes` off: fast, for tests; `wal_level = logical` for the
    /// WAL source.
    Throwaway,
    /// PostgreSQL's defaults (every commit flushed to disk), for benchmarks; `pg_stat_statements` is loaded so a
    /// benchmark can say where the database's time goes, and `wal_level = logical` for the WAL source (it adds
    /// nothing to the WAL of an `INSERT`).
    Durable,
}

impl Durability {
    /// The server settings this durability adds to the defaults.
    #[must_use]
    pub fn settings(self) -> &'static str {
        match self {
            Self::Throwaway => {
                concat!(
                    "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c track_commit_timestamp=on ",
                    "-c wal_level=logical -c max_replication_slots=50 -c max_wal_senders=50"
                )
            }
            Self::Durable => {
                "-c shared_preload_libraries=pg_stat_statements -c wal_level=logical -c max_replication_slots=10 \
                 -c max_wal_senders=10"
            }
        }
    }
}

/// Starts a private cluster on a free port of 127.0.0.1 and returns its admin URL
/// (`postgres://postgres@127.0.0.1:PORT/postgres`). A watchdog shell stops the server and deletes its directory
/// as soon as this process is gone, however it ends.
///
/// # Errors
///
/// A description of what is missing or failed (no server binaries, initdb failed, the server did not start).
pub fn start_server(durability: Durability) -> Result<String, String> {
    let bin = postgres_bin_dir()?;
    let dir = init_cluster(&bin, "outbox-test-pg")?;
    let port = crate::process::free_port();
    let script = r#"
        "$PG_BIN/postgres" -D "$PG_DIR/data" -p "$PG_PORT" -k "$PG_DIR" -c listen_addresses=127.0.0.1 \
            -c max_connections=300 -c shared_buffers=256MB $PG_SETTINGS >"$PG_DIR/server.log" 2>&1 &
        server=$!
        while [ -d "/proc/$WATCHED_PID" ] && [ -d "/proc/$server" ]; do sleep 0.3; done
        kill -INT "$server" 2>/dev/null
        wait "$server"
        rm -rf "$PG_DIR"
    "#;
    as_server_user(Path::new("/bin/sh"))
        .args(["-c", script])
        .env("PG_BIN", &bin)
        .env("PG_DIR", &dir)
        .env("PG_PORT", port.to_string())
        .env("PG_SETTINGS", durability.settings())
        .env("WATCHED_PID", std::process::id().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start postgres: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
            return Err(format!("postgres did not start on 127.0.0.1:{port}: {}", log.trim()));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(format!("postgres://postgres@127.0.0.1:{port}/postgres"))
}

/// A private cluster that a test can stop and start again, to see what happens while the database is away.
/// Unlike [`start_server`], which serves every test of a binary, it belongs to one test; it is stopped and
/// deleted when dropped, and by a watchdog shell if the test process dies first.
#[derive(Debug)]
pub struct PrivateServer {
    /// The admin URL (`postgres://postgres@127.0.0.1:PORT/postgres`), for [`TestDatabase::create_on`].
    pub url: String,
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    settings: String,
}

impl PrivateServer {
    /// Creates and starts a throwaway cluster on a free port of 127.0.0.1.
    ///
    /// # Errors
    ///
    /// A description of what is missing or failed, as [`start_server`].
    pub fn start() -> Result<Self, String> {
        Self::start_with("")
    }

    /// [`start`](Self::start) with server settings that override the throwaway ones (`-c wal_level=replica`).
    ///
    /// # Errors
    ///
    /// A description of what is missing or failed, as [`start_server`].
    pub fn start_with(settings: &str) -> Result<Self, String> {
        Self::start_prepared(settings, |_| Ok(()))
    }

    /// [`start_with`](Self::start_with) a server that takes TLS (`ssl = on`) with `certificates`' server
    /// certificate (made out to `localhost` and `127.0.0.1`), and `hba` as the whole of its `pg_hba.conf`: e.g.
    /// `local` lines and only `hostssl` ones, so that every TCP connection without TLS is refused. Connections that
    /// cannot use TLS reach it through its Unix socket ([`socket_url`](Self::socket_url)); [`url`](Self::url) is
    /// its TCP address.
    ///
    /// # Errors
    ///
    /// A description of what is missing or failed, as [`start_server`], or the files that cannot be written.
    pub fn start_with_tls(
        certificates: &crate::certificates::Certificates,
        hba: &str,
        settings: &str,
    ) -> Result<Self, String> {
        let settings = format!("-c ssl=on -c ssl_cert_file=server.crt -c ssl_key_file=server.key {settings}");
        Self::start_prepared(&settings, |data| {
            let write = |name: &str, contents: &[u8]| -> Result<(), String> {
                let path = data.join(name);
                std::fs::write(&path, contents).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                // The server reads its key only when the server's user alone may read it.
                std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                    .map_err(|e| format!("cannot restrict {}: {e}", path.display()))?;
                if running_as_root() {
                    let status = Command::new("chown").args(["postgres:", &path.to_string_lossy()]).status();
                    if !status.is_ok_and(|s| s.success()) {
                        return Err(format!("cannot hand {} to the `postgres` user", path.display()));
                    }
                }
                Ok(())
            };
            let read = |path: &Path| std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()));
            write("server.crt", &read(&certificates.server_cert)?)?;
            write("server.key", &read(&certificates.server_key)?)?;
            write("pg_hba.conf", hba.as_bytes())
        })
    }

    /// Creates a cluster, lets `prepare` change its data directory (given), and starts it with `settings`.
    fn start_prepared(settings: &str, prepare: impl FnOnce(&Path) -> Result<(), String>) -> Result<Self, String> {
        let bin = postgres_bin_dir()?;
        let dir = init_cluster(&bin, "outbox-test-pg-private")?;
        let port = crate::process::free_port();
        let watchdog = r#"
            while [ -d "/proc/$WATCHED_PID" ] && [ -d "$PG_DIR" ]; do sleep 0.5; done
            "$PG_BIN/pg_ctl" -D "$PG_DIR/data" stop -m immediate >/dev/null 2>&1
            rm -rf "$PG_DIR"
        "#;
        as_server_user(Path::new("/bin/sh"))
            .args(["-c", watchdog])
            .env("PG_BIN", &bin)
            .env("PG_DIR", &dir)
            .env("WATCHED_PID", std::process::id().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start the watchdog: {e}"))?;
        let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
        let server = Self { url, bin, dir, port, settings: settings.to_owned() };
        prepare(&server.dir.join("data"))?;
        server.start_again()?;
        Ok(server)
    }

    /// The server's port on 127.0.0.1 (also the number of its Unix socket).
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The admin URL through the server's Unix socket (`postgres:///postgres?host=DIR&port=PORT&user=postgres`),
    /// for [`TestDatabase::create_on`]: a `local` connection of `pg_hba.conf`, never TLS.
    #[must_use]
    pub fn socket_url(&self) -> String {
        format!("postgres:///postgres?host={}&port={}&user=postgres", self.dir.display(), self.port)
    }

    /// Stops the server (fast shutdown: sessions are disconnected) and waits until it is down.
    ///
    /// # Errors
    ///
    /// When `pg_ctl stop` fails.
    pub fn stop(&self) -> Result<(), String> {
        self.pg_ctl(&["stop", "-m", "fast", "-w"])
    }

    /// Starts the stopped server again on the same port and data, and waits until it accepts connections.
    ///
    /// # Errors
    ///
    /// When `pg_ctl start` fails or the server does not come up in 30s.
    pub fn start_again(&self) -> Result<(), String> {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=100 {} {}",
            self.port,
            self.dir.display(),
            Durability::Throwaway.settings(),
            self.settings
        );
        self.pg_ctl(&["start", "-w", "-t", "30", "-l", &self.dir.join("server.log").to_string_lossy(), "-o", &options])
    }

    fn pg_ctl(&self, args: &[&str]) -> Result<(), String> {
        let output = as_server_user(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run pg_ctl: {e}"))?;
        if output.status.success() {
            Ok(())
        } else {
            let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
            Err(format!("pg_ctl {args:?} failed: {} {}", String::from_utf8_lossy(&output.stderr).trim(), log.trim()))
        }
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        let _ = self.pg_ctl(&["stop", "-m", "immediate", "-w"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The grants of `migrations/roles/postgres_relay_role.sql` for a role named `role` instead of `outbox_relay` (the
/// tables it names keep their names).
#[must_use]
pub fn relay_role_sql(role: &str) -> String {
    for_role(include_str!("../../migrations/roles/postgres_relay_role.sql"), role)
}

/// The grants of `migrations/roles/postgres_wal_relay_grants.sql` (the WAL source's, beyond the relay role's) for
/// a role named `role` instead of `outbox_relay`.
#[must_use]
pub fn wal_relay_grants_sql(role: &str) -> String {
    for_role(include_str!("../../migrations/roles/postgres_wal_relay_grants.sql"), role)
}

/// `sql` with the role `outbox_relay` renamed `role` (the table `outbox_relays` keeps its name).
fn for_role(sql: &str, role: &str) -> String {
    sql.replace("outbox_relays", "\u{0}").replace("outbox_relay", role).replace('\u{0}', "outbox_relays")
}
