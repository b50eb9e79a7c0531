//! Secrets given to the `outbox` binary never come back out of it: `--help` of every command (and `--version`)
//! with the database password, the webhook secret and the AWS keys set in the environment shows none of them
//! (clap prints environment values unless told not to); and a relay whose database URL and sink URL hold
//! passwords, run at trace level in both log formats, prints them masked in its start-up line and in its errors,
//! and never the password, the webhook secret or the payload's sensitive value; tokens and passwords given as
//! the URL's user or read from files and the environment never show either, and a broker refusing them stops the
//! relay at start (exit 2, one line).

mod bad_input_support;
mod common;

use std::time::Duration;

use bad_input_support::{start, with_password};
use common::{enqueue, event};
use outbox_tests::pg::TestDatabase;
use outbox_tests::process::free_port;

const DB_PASSWORD: &str = "marker-db-password-3f1c";
const SINK_PASSWORD: &str = "marker-sink-password-9a7e";
/// A valid Standard Webhooks secret (`whsec_` + base64) that is a unique marker too.
const WEBHOOK_SECRET: &str = "whsec_bWFya2VyLXdlYmhvb2stc2VjcmV0LTdiMmQtb3V0Ym94";
const AWS_SECRET: &str = "marker-aws-secret-key-5d0b";
/// The sensitive value of every test event (`/card_number`).
const CARD_NUMBER: &str = "4111111111111111";

fn markers() -> [&'static str; 5] {
    [DB_PASSWORD, SINK_PASSWORD, WEBHOOK_SECRET, "bWFya2VyLXdlYmhvb2stc2VjcmV0", AWS_SECRET]
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

        // A webhook receiver that is not there: every event fails (transiently) with an error in the log.
        let mut relay = start(
            &database_url,
            &["relay", "--sink", &webhook, "--log-level", "trace", "--log-format", format, "--poll-interval", "10ms"],
            &[("OUTBOX_WEBHOOK_SECRET", WEBHOOK_SECRET), ("AWS_SECRET_ACCESS_KEY", AWS_SECRET)],
        );
        relay.wait_for_lines("publish failed; will retry", 2, Duration::from_secs(30)).await;
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

/// A NATS token, an nkey seed and a password read from a file or the environment: markers too.
const TOKEN: &str = "marker-nats-token-61c4";
const FILE_PASSWORD: &str = "marker-file-password-0e2a";

fn broker_markers() -> [&'static str; 3] {
    [TOKEN, FILE_PASSWORD, SINK_PASSWORD]
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
    let dir = std::env::temp_dir().join(format!("outbox-secret-audit-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let password_file = dir.join("password");
    std::fs::write(&password_file, format!("{FILE_PASSWORD}\n")).unwrap();
    let port = free_port();

    // Waiting for a broker that is not there: the token (as the URL's user) and the secrets stay out of the logs.
    for sink in [
        format!("nats://{TOKEN}@127.0.0.1:{port}?subject=outbox.x"),
        format!("nats://127.0.0.1:{port}?token_env=OUTBOX_TEST_AUDIT_TOKEN"),
        format!("amqps://relay@127.0.0.1:{port}/%2f?password_file={}", password_file.display()),
        format!("rediss://relay@127.0.0.1:{port}/?password_env=OUTBOX_TEST_AUDIT_PASSWORD"),
    ] {
        let mut relay = start(
            &database_url,
            &["relay", "--sink", &sink, "--log-level", "trace"],
            &[("OUTBOX_TEST_AUDIT_TOKEN", TOKEN), ("OUTBOX_TEST_AUDIT_PASSWORD", FILE_PASSWORD)],
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
    let attempts: i64 = sqlx::query_scalar("SELECT coalesce(sum(attempts), 0)::bigint FROM outbox_events")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(attempts, 0, "nothing was claimed");
    std::fs::remove_dir_all(dir).unwrap();
}
