//! Secrets given to the `outbox` binary never come back out of it: `--help` of every command (and `--version`)
//! with the database password, the webhook secret and the AWS keys set in the environment shows none of them
//! (clap prints environment values unless told not to); and a relay whose database URL and sink URL hold
//! passwords, run at trace level in both log formats, prints them masked in its start-up line and in its errors,
//! and never the password, the webhook secret or the payload's sensitive value; tokens and passwords given as
//! the URL's user or read from files and the environment never show either, and a broker refusing them stops the
//! relay at start (exit 2, one line), Kafka SASL passwords among them (refused by tansu, at trace level). NATS
//! nkey seeds and `.creds` files (user JWT and seed, operator mode) never show in `--help`, in logs at trace level,
//! in start-up errors or in `/metrics`, whether the server takes them (events published) or refuses them (exit 2).
//! A database URL parameter the database client does not know (`?sslpassword=...`) is refused by its name, its
//! value never printed, at any log level.

mod bad_input_support;
mod common;

use std::sync::LazyLock;
use std::time::Duration;

use bad_input_support::{start, with_password};
use common::{enqueue, event};
use outbox_tests::nats_operator::{NatsOperator, UserCredentials};
use outbox_tests::pg::TestDatabase;
use outbox_tests::process::{free_addr, free_port};

const DB_PASSWORD: &str = "marker-db-password-3f1c";
const SINK_PASSWORD: &str = "marker-sink-password-9a7e";
/// A valid Standard Webhooks secret (`whsec_` + base64) that is a unique marker too.
const WEBHOOK_SECRET: &str = "whsec_bWFya2VyLXdlYmhvb2stc2VjcmV0LTdiMmQtb3V0Ym94";
const AWS_SECRET: &str = "marker-aws-secret-key-5d0b";
/// The sensitive value of every test event (`/card_number`).
const CARD_NUMBER: &str = "4111111111111111";

/// NATS keys cannot be spelled as markers: they are generated once per test binary, and each seed and JWT is a
/// marker. `seed` and `creds` are known to the brokers of the tests, the strangers' are not.
struct NatsKeys {
    operator: NatsOperator,
    creds: UserCredentials,
    stranger_creds: UserCredentials,
    seed: String,
    stranger_seed: String,
}

static NATS: LazyLock<NatsKeys> = LazyLock::new(|| {
    let operator = NatsOperator::generate();
    NatsKeys {
        creds: operator.user("relay"),
        stranger_creds: operator.user_of_an_unknown_account("stranger"),
        operator,
        seed: nkeys::KeyPair::new_user().seed().expect("a seed"),
        stranger_seed: nkeys::KeyPair::new_user().seed().expect("a seed"),
    }
});

/// The nkey seeds, and the seeds and JWTs of the `.creds` files, with each JWT's claims and signature apart.
fn nats_markers() -> Vec<&'static str> {
    let keys = &*NATS;
    let mut markers = vec![keys.seed.as_str(), keys.stranger_seed.as_str()];
    for creds in [&keys.creds, &keys.stranger_creds] {
        markers.extend([creds.seed.as_str(), creds.jwt.as_str()]);
        // The header segment is the same in every NATS JWT: not a marker.
        markers.extend(creds.jwt.split('.').skip(1));
    }
    markers
}

fn markers() -> Vec<&'static str> {
    let mut markers = vec![DB_PASSWORD, SINK_PASSWORD, WEBHOOK_SECRET, "bWFya2VyLXdlYmhvb2stc2VjcmV0", AWS_SECRET];
    markers.extend(nats_markers());
    markers
}

fn assert_no_secret(what: &str, text: &str) {
    for marker in markers().into_iter().chain([CARD_NUMBER]) {
        assert!(!text.contains(marker), "{what} shows `{marker}`:\n{text}");
    }
}

#[test]
fn help_and_version_never_show_secret_environment_values() {
    let commands: Vec<Vec<&str>> = vec![
        vec!["--help"],
        vec!["-h"],
        vec!["--version"],
        vec!["help"],
        vec!["help", "relay"],
        vec!["migrate", "--help"],
        vec!["relay", "--help"],
        vec!["relay", "-h"],
        vec!["status", "--help"],
        vec!["events", "--help"],
        vec!["events", "list", "--help"],
        vec!["events", "show", "--help"],
        vec!["events", "retry", "--help"],
        vec!["events", "cancel", "--help"],
        vec!["events", "purge", "--help"],
        vec!["pause", "--help"],
        vec!["resume", "--help"],
        vec!["contracts", "--help"],
        vec!["contracts", "diff", "--help"],
        vec!["contracts", "rules", "--help"],
    ];
    for args in commands {
        let output = outbox_tests::outbox!()
            .database(&format!("postgres://app:{DB_PASSWORD}@db.example.com/shop"))
            .env("OUTBOX_WEBHOOK_SECRET", WEBHOOK_SECRET)
            .env("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
            .env("AWS_SESSION_TOKEN", AWS_SECRET)
            .env("OUTBOX_TEST_NKEY_SEED", &NATS.seed)
            .env("OUTBOX_TEST_NATS_CREDS", &NATS.creds.creds())
            .run(&args);
        let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert_eq!(output.status.code(), Some(0), "{args:?}: {text}");
        assert!(text.contains("Usage: outbox") || args == ["--version"], "{args:?}: {text}");
        assert_no_secret(&format!("`outbox {}`", args.join(" ")), &text);
    }
    // The variable is still named where it is read, only its value is hidden.
    let output = outbox_tests::outbox!()
        .database(&format!("postgres://app:{DB_PASSWORD}@db.example.com/shop"))
        .run(["relay", "--help"]);
    assert!(String::from_utf8_lossy(&output.stdout).contains("[env: DATABASE_URL]"));
}

/// A database URL typed where an argument or a command was expected (`--database-url` forgotten) is refused with
/// one line that shows it masked.
#[test]
fn a_url_given_as_an_unexpected_argument_or_command_is_shown_masked() {
    let url = format!("postgres://app:{DB_PASSWORD}@db.example.com/shop");
    for args in [vec!["migrate", url.as_str()], vec![url.as_str()], vec!["events", "list", url.as_str()]] {
        let output = outbox_tests::outbox!().run(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains("postgres://app:***@db.example.com/shop"), "named, masked: {stderr}");
        assert_no_secret(&format!("`outbox {}`", args.join(" ")), &stderr);
    }
}

#[tokio::test]
async fn a_relay_prints_its_database_and_sink_masked_at_every_log_level_and_in_its_errors() {
    let db = TestDatabase::migrated().await;
    enqueue(&db.pool, &[event("a", 0), event("b", 0)]).await;
    let database_url = with_password(&db.url, DB_PASSWORD); // the test server trusts 127.0.0.1: any password works
    let broker = format!("amqp://relay:{SINK_PASSWORD}@127.0.0.1:{}/%2f?exchange=outbox", free_port());
    let webhook = format!("http://relay:{SINK_PASSWORD}@127.0.0.1:{}/hook", free_port());
    for format in ["text", "json"] {
        // A broker that is not there: waited for, with a warning naming it.
        let mut relay = start(
            &database_url,
            &["relay", "--sink", &broker, "--log-level", "trace", "--log-format", format],
            &[("OUTBOX_WEBHOOK_SECRET", WEBHOOK_SECRET), ("AWS_SECRET_ACCESS_KEY", AWS_SECRET)],
        );
        relay.wait_for_lines("cannot reach the sink", 2, Duration::from_secs(30)).await;
        let started = relay.lines_with("connecting to the sink");
        assert_eq!(started.len(), 1, "{}", relay.stderr());
        assert!(started[0].contains("amqp://relay:***@127.0.0.1"), "{}", started[0]);
        assert_eq!(relay.terminate().await.code(), Some(0), "{}", relay.stderr());
        assert_no_secret(&format!("the {format} log of a relay waiting for its broker"), &relay.stderr());

        // A webhook receiver that is not there: every event fails (transiently, the destination unreachable: no
        // attempt counted) with an error in the log.
        let mut relay = start(
            &database_url,
            &["relay", "--sink", &webhook, "--log-level", "trace", "--log-format", format, "--poll-interval", "10ms"],
            &[("OUTBOX_WEBHOOK_SECRET", WEBHOOK_SECRET), ("AWS_SECRET_ACCESS_KEY", AWS_SECRET)],
        );
        relay.wait_for_lines("the destination is unreachable; will retry", 2, Duration::from_secs(30)).await;
        let started = relay.lines_with("connecting to the sink");
        assert!(started[0].contains("http://relay:***@127.0.0.1"), "{}", started[0]);
        assert_eq!(relay.terminate().await.code(), Some(0), "{}", relay.stderr());
        assert_no_secret(&format!("the {format} log of a relay failing to post webhooks"), &relay.stderr());
    }

    // Refused at start: the error line names the database, masked.
    let missing = with_password(&db.url.replace(&db.name, &format!("{}_missing", db.name)), DB_PASSWORD);
    let mut relay = start(&missing, &["relay", "--sink", &broker], &[]);
    assert_eq!(relay.wait_for_exit(Duration::from_secs(30)).await.code(), Some(2));
    let stderr = relay.stderr();
    assert!(stderr.contains("postgres:***@127.0.0.1") && stderr.contains("missing database"), "{stderr}");
    assert_no_secret("the error of a relay refused by its database", &stderr);
}

#[tokio::test]
async fn an_unknown_database_url_parameter_is_refused_by_its_name_and_its_value_never_printed() {
    let db = TestDatabase::migrated().await;
    enqueue(&db.pool, &[event("a", 0)]).await;
    // The test database's URL has a query already (`?sslmode=...`).
    let url = format!("{}&sslpassword={DB_PASSWORD}", with_password(&db.url, DB_PASSWORD));
    let commands: [&[&str]; 3] = [
        &["status"],
        &["events", "list", "--log-level", "trace"],
        &["relay", "--sink", "stdout", "--log-level", "trace"],
    ];
    for args in commands {
        let mut command = start(&url, args, &[]);
        let exit = command.wait_for_exit(Duration::from_secs(30)).await;
        let output = command.output();
        assert_eq!(exit.code(), Some(2), "{args:?}: {output}");
        assert_eq!(output.lines().count(), 1, "{args:?}: not one line: {output}");
        assert!(output.starts_with("error: ") && output.contains("`sslpassword`"), "{args:?}: {output}");
        assert_no_secret(&format!("`outbox {}` with an unknown URL parameter", args.join(" ")), &output);
    }
    // The parameters the client knows keep working, a session setting among them.
    let known = format!("{}&application_name=outbox-cli&options[lock_timeout]=5s", db.url);
    let mut status = start(&known, &["status", "--json"], &[]);
    let exit = status.wait_for_exit(Duration::from_secs(30)).await;
    assert_eq!(exit.code(), Some(0), "{}", status.output());
    assert!(
        status.stdout().contains("\"pending\": 1") || status.stdout().contains("\"pending\":1"),
        "{}",
        status.stdout()
    );
}

/// A NATS token, an nkey seed and a password read from a file or the environment: markers too.
const TOKEN: &str = "marker-nats-token-61c4";
const FILE_PASSWORD: &str = "marker-file-password-0e2a";

fn broker_markers() -> Vec<&'static str> {
    let mut markers = vec![TOKEN, FILE_PASSWORD, SINK_PASSWORD];
    markers.extend(nats_markers());
    markers
}

fn assert_no_broker_secret(what: &str, text: &str) {
    for marker in broker_markers() {
        assert!(!text.contains(marker), "{what} shows `{marker}`:\n{text}");
    }
}

#[tokio::test]
async fn tokens_and_passwords_from_files_or_the_environment_never_show_and_refused_credentials_exit_2() {
    use outbox_tests::brokers::{Broker, Kind, Security};

    let db = TestDatabase::migrated().await;
    enqueue(&db.pool, &[event("a", 0)]).await;
    let database_url = with_password(&db.url, DB_PASSWORD);
    let dir = tempfile::Builder::new().prefix("outbox-secret-audit-").tempdir().unwrap();
    let password_file = dir.path().join("password");
    std::fs::write(&password_file, format!("{FILE_PASSWORD}\n")).unwrap();
    let creds_file = dir.path().join("relay.creds");
    NATS.creds.write(&creds_file);
    let port = free_port();

    // Waiting for a broker that is not there: the token (as the URL's user) and the secrets stay out of the logs.
    for sink in [
        format!("nats://{TOKEN}@127.0.0.1:{port}?subject=outbox.x"),
        format!("nats://127.0.0.1:{port}?token_env=OUTBOX_TEST_AUDIT_TOKEN"),
        format!("amqps://relay@127.0.0.1:{port}/%2f?password_file={}", password_file.display()),
        format!("rediss://relay@127.0.0.1:{port}/?password_env=OUTBOX_TEST_AUDIT_PASSWORD"),
        format!("nats://127.0.0.1:{port}?nkey_seed_env=OUTBOX_TEST_AUDIT_SEED"),
        format!("nats://127.0.0.1:{port}?creds_file={}", creds_file.display()),
        format!(
            "kafka://relay@127.0.0.1:{port}?topic=outbox.x&security_protocol=sasl_plaintext\
             &sasl_mechanism=scram-sha-512&password_env=OUTBOX_TEST_AUDIT_PASSWORD"
        ),
        format!(
            "kafka://relay@127.0.0.1:{port}?topic=outbox.x&sasl_mechanism=plain&password_file={}",
            password_file.display()
        ),
    ] {
        let mut relay = start(
            &database_url,
            &["relay", "--sink", &sink, "--log-level", "trace"],
            &[
                ("OUTBOX_TEST_AUDIT_TOKEN", TOKEN),
                ("OUTBOX_TEST_AUDIT_PASSWORD", FILE_PASSWORD),
                ("OUTBOX_TEST_AUDIT_SEED", &NATS.seed),
            ],
        );
        relay.wait_for_lines("cannot reach the sink", 1, Duration::from_secs(30)).await;
        assert_eq!(relay.terminate().await.code(), Some(0), "{}", relay.stderr());
        assert_no_broker_secret(&format!("the log of a relay waiting for {sink}"), &relay.stderr());
    }

    // A secret put in the query is refused, and the refusal masks it.
    let mut relay = start(&database_url, &["relay", "--sink", &format!("nats://127.0.0.1:{port}?token={TOKEN}")], &[]);
    assert_eq!(relay.wait_for_exit(Duration::from_secs(30)).await.code(), Some(2));
    let stderr = relay.stderr();
    assert!(stderr.contains("never goes into the URL") && stderr.trim().lines().count() == 1, "{stderr}");
    assert_no_broker_secret("the refusal of a secret in the query", &stderr);

    // A server refusing the credentials: exit 2 at once, one line, no secret, nothing claimed.
    let broker =
        Broker::start_secured(Kind::Nats, Security { token: Some("the-right-token".into()), ..Security::default() });
    let sink = format!("nats://127.0.0.1:{}?subject=outbox.x&token_env=OUTBOX_TEST_AUDIT_TOKEN", broker.port());
    let mut relay = start(&database_url, &["relay", "--sink", &sink], &[("OUTBOX_TEST_AUDIT_TOKEN", TOKEN)]);
    assert_eq!(relay.wait_for_exit(Duration::from_secs(30)).await.code(), Some(2), "{}", relay.stderr());
    let stderr = relay.stderr();
    assert!(stderr.contains("authorization violation"), "{stderr}");
    assert_eq!(stderr.lines().filter(|line| line.contains("refused the relay")).count(), 1, "{stderr}");
    assert!(!stderr.contains("retrying"), "no retries: {stderr}");
    assert_no_broker_secret("the error of a relay refused by NATS", &stderr);

    // A Kafka broker refusing the SASL password (tansu requiring SCRAM, with no user that can pass it), at trace
    // level: exit 2 at once, one line, the password neither in the log nor in the error.
    let kafka = Broker::start_secured(Kind::Kafka, Security { sasl_with_no_users: true, ..Security::default() });
    for (mechanism, secret) in
        [("scram-sha-256", "password_env=OUTBOX_TEST_AUDIT_PASSWORD"), ("scram-sha-512", "password_file=FILE")]
    {
        let sink = format!(
            "kafka://relay@{}?topic=outbox.x&security_protocol=sasl_plaintext&sasl_mechanism={mechanism}&{}",
            kafka.url(),
            secret.replace("FILE", &password_file.display().to_string())
        );
        let mut relay = start(
            &database_url,
            &["relay", "--sink", &sink, "--log-level", "trace"],
            &[("OUTBOX_TEST_AUDIT_PASSWORD", FILE_PASSWORD)],
        );
        assert_eq!(relay.wait_for_exit(Duration::from_secs(30)).await.code(), Some(2), "{}", relay.stderr());
        let output = relay.output();
        assert!(output.contains("SASL SCRAM authentication failed"), "{output}");
        assert_eq!(output.lines().filter(|line| line.contains("refused the relay")).count(), 1, "{output}");
        assert!(!output.contains("retrying"), "no retries: {output}");
        assert_no_broker_secret(&format!("the log of a relay refused by Kafka ({mechanism})"), &output);
    }
    let attempts: i64 = sqlx::query_scalar("SELECT coalesce(sum(attempts), 0)::bigint FROM outbox_events")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(attempts, 0, "nothing was claimed");
}

/// `outbox relay --sink SINK` at trace level in `format`, serving `/metrics`, until the relay published `n`
/// events; returns its log and its last scrape.
async fn publish_through(
    database_url: &str,
    pool: &sqlx::PgPool,
    sink: &str,
    format: &str,
    n: i64,
) -> (String, String) {
    let metrics = free_addr().to_string();
    let args = ["relay", "--sink", sink, "--create-destinations", "--log-level", "trace", "--log-format", format];
    let mut relay = start(
        database_url,
        &[&args[..], &["--poll-interval", "10ms", "--metrics-addr", &metrics]].concat(),
        &[("OUTBOX_TEST_AUDIT_SEED", &NATS.seed)],
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while common::count(pool, "published").await < n {
        assert!(relay.is_running(), "the relay of {sink} stopped: {}", relay.stderr());
        assert!(tokio::time::Instant::now() < deadline, "not published through {sink}: {}", relay.stderr());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let scrape = reqwest::get(format!("http://{metrics}/metrics")).await.expect("GET /metrics");
    let scrape = scrape.text().await.expect("the scrape");
    assert!(scrape.contains("outbox_events_published_total"), "{scrape}");
    assert_eq!(relay.terminate().await.code(), Some(0), "{}", relay.stderr());
    (relay.output(), scrape)
}

#[tokio::test]
async fn nkey_seeds_and_creds_files_never_show_in_logs_or_metrics_and_unknown_ones_exit_2_in_one_line() {
    use outbox_tests::brokers::{Broker, Kind, Security};

    let db = TestDatabase::migrated().await;
    let database_url = with_password(&db.url, DB_PASSWORD);
    let dir = tempfile::Builder::new().prefix("outbox-secret-audit-").tempdir().unwrap();
    let (creds_file, stranger_file) = (dir.path().join("relay.creds"), dir.path().join("stranger.creds"));
    NATS.creds.write(&creds_file);
    NATS.stranger_creds.write(&stranger_file);
    let public_key = nkeys::KeyPair::from_seed(&NATS.seed).unwrap().public_key();
    let nkey_broker = Broker::start_secured(Kind::Nats, Security { nkey: Some(public_key), ..Security::default() });
    let operator = Security { operator: Some(NATS.operator.clone()), ..Security::default() };
    let creds_broker = Broker::start_secured(Kind::Nats, operator);
    let nkey_sink =
        |variable: &str| format!("nats://127.0.0.1:{}?subject=outbox.x&nkey_seed_env={variable}", nkey_broker.port());
    let creds_sink = |file: &std::path::Path| {
        format!("nats://127.0.0.1:{}?subject=outbox.x&creds_file={}", creds_broker.port(), file.display())
    };

    // Taken: the relay publishes, at trace level in both log formats; neither its log nor /metrics shows a key.
    let mut published = 0;
    for (sink, format) in [
        (nkey_sink("OUTBOX_TEST_AUDIT_SEED"), "text"),
        (nkey_sink("OUTBOX_TEST_AUDIT_SEED"), "json"),
        (creds_sink(&creds_file), "text"),
        (creds_sink(&creds_file), "json"),
    ] {
        enqueue(&db.pool, &[event(format!("{sink}-{format}"), 0), event(format!("{sink}-{format}"), 1)]).await;
        published += 2;
        let (log, scrape) = publish_through(&database_url, &db.pool, &sink, format, published).await;
        assert_no_broker_secret(&format!("the {format} log of a relay publishing to {sink}"), &log);
        assert_no_broker_secret(&format!("/metrics of a relay publishing to {sink}"), &scrape);
    }

    // Refused: a seed the server does not know, a user of an account it does not know: exit 2 at once, one line.
    enqueue(&db.pool, &[event("refused", 0)]).await;
    for sink in [nkey_sink("OUTBOX_TEST_AUDIT_STRANGER_SEED"), creds_sink(&stranger_file)] {
        let mut relay = start(
            &database_url,
            &["relay", "--sink", &sink, "--log-level", "trace"],
            &[("OUTBOX_TEST_AUDIT_SEED", &NATS.seed), ("OUTBOX_TEST_AUDIT_STRANGER_SEED", &NATS.stranger_seed)],
        );
        assert_eq!(relay.wait_for_exit(Duration::from_secs(30)).await.code(), Some(2), "{}", relay.stderr());
        let stderr = relay.stderr();
        assert!(stderr.contains("authorization violation"), "{stderr}");
        assert_eq!(stderr.lines().filter(|line| line.contains("refused the relay")).count(), 1, "{stderr}");
        assert!(!stderr.contains("retrying"), "no retries: {stderr}");
        assert_no_broker_secret(&format!("the error of a relay refused by {sink}"), &relay.output());
    }
    let attempts: i64 =
        sqlx::query_scalar("SELECT coalesce(sum(attempts), 0)::bigint FROM outbox_events WHERE status = 'pending'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(attempts, 0, "nothing was claimed");
}
