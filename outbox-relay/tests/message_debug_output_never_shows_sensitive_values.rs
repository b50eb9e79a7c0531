//! A publisher that logs `?message` prints the payload with its sensitive values masked, in both `{:?}` and
//! `{:#?}`.

#[test]
fn message_debug_output_masks_the_sensitive_values_of_the_payload() {
    let mut message = outbox_relay::Message::new(
        uuid::Uuid::now_v7(),
        "customer.subscribed",
        "customer",
        "7",
        r#"{"customer_id":7,"email":"ana.leak-probe@example.com","cards":[{"number":"4111-LEAK-PROBE"}],"plan":"pro-plan"}"#,
    );
    message.sensitive_paths = vec!["/email".to_owned(), "/cards/*/number".to_owned()];
    for output in [format!("{message:?}"), format!("{message:#?}")] {
        assert!(!output.contains("ana.leak-probe@example.com"), "{output}");
        assert!(!output.contains("4111-LEAK-PROBE"), "{output}");
        assert!(output.contains("[REDACTED]") && output.contains("pro-plan"), "{output}");
    }
}
