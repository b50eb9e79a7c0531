//! Sink URL parsing takes anything a user can type: random text, and random mutations of valid URLs, give a
//! sink or a one-line error naming the sink, never a panic, and a printed sink never shows a password.

use outbox_relay::Sink;
use proptest::prelude::*;

const VALID: [&str; 8] = [
    "stdout",
    "file:/tmp/outbox.jsonl",
    "https://user:hunter2@hooks.example.com/outbox",
    "kafka://127.0.0.1:9092?topic=outbox.{aggregate_type}",
    "nats://user:hunter2@127.0.0.1:4222?subject=outbox.{event_type}",
    "amqp://relay:hunter2@127.0.0.1:5672/%2f?exchange=outbox&routing_key={event_type}",
    "sqs://?queue_url=https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo",
    "redis://:hunter2@127.0.0.1:6379/0?stream=outbox.{aggregate_type}&maxlen=1000",
];

/// What must never be printed: the password of the text read as a URL; or, when it is no URL, anything in the
/// place of a password (`:PASSWORD@`). A mutation can move the text elsewhere (into a query), where it is none.
fn secret_of(text: &str) -> Option<String> {
    match url::Url::parse(text) {
        Ok(url) => url.password().filter(|p| !p.is_empty()).map(|p| format!(":{p}@")),
        Err(_) => text.contains(":hunter2@").then(|| ":hunter2@".to_owned()),
    }
}

fn check(text: &str) {
    let printed = match text.parse::<Sink>() {
        Ok(sink) => sink.to_string(),
        Err(error) => {
            let message = error.to_string();
            assert!(!message.contains('\n'), "{message}");
            message
        }
    };
    if let Some(secret) = secret_of(text) {
        assert!(!printed.contains(&secret), "{printed}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn random_text_is_a_sink_or_a_one_line_error(text in "\\PC{0,80}") {
        check(&text);
    }

    #[test]
    fn mutated_valid_urls_are_a_sink_or_a_one_line_error(
        base in 0..VALID.len(),
        cut in 0usize..120,
        insert in "[ :/?&=%{}@#\\[\\]a-z0-9.-]{0,6}",
    ) {
        let valid = VALID[base];
        let at = valid.char_indices().map(|(i, _)| i).nth(cut % valid.chars().count()).unwrap_or(0);
        check(&format!("{}{}{}", &valid[..at], insert, &valid[at..]));
    }
}

#[test]
fn every_documented_sink_parses_and_prints_without_its_password() {
    for url in VALID {
        let sink: Sink = url.parse().unwrap_or_else(|e| panic!("{url}: {e}"));
        assert!(!sink.to_string().contains("hunter2"), "{sink}");
    }
}
