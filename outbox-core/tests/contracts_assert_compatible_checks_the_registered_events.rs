//! `assert_compatible` on the events registered in this test binary: it fails until the contracts are written,
//! `OUTBOX_CONTRACTS=overwrite` writes them, and then it passes.
//!
//! One test only: it sets `OUTBOX_CONTRACTS`, which a test running beside it would see.

use std::panic::{catch_unwind, AssertUnwindSafe};

use outbox_core::contracts::{assert_compatible, OVERWRITE_ENV};
use outbox_core::OutboxEvent;

#[derive(serde::Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "invoice.issued", aggregate = "invoice", version = 1)]
struct InvoiceIssued {
    #[outbox(aggregate_id)]
    invoice_id: u64,
    #[outbox(sensitive)]
    customer_tax_id: String,
}

#[derive(serde::Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "invoice.voided", aggregate = "invoice", version = 2)]
struct InvoiceVoided {
    #[outbox(aggregate_id)]
    invoice_id: u64,
    reason: String,
}

fn panic_message(result: std::thread::Result<()>) -> String {
    let payload = result.expect_err("assert_compatible should have failed");
    payload.downcast_ref::<String>().cloned().or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string())).unwrap()
}

#[test]
fn assert_compatible_fails_until_overwrite_writes_the_contracts() {
    let temp = tempfile::Builder::new().prefix("outbox-assert-compatible-").tempdir().unwrap();
    // A folder that does not exist yet: `assert_compatible` creates it only with overwrite.
    let dir = temp.path().join("contracts");
    std::env::remove_var(OVERWRITE_ENV);

    let message = panic_message(catch_unwind(AssertUnwindSafe(|| assert_compatible(&dir))));
    assert!(message.contains("out of date"), "{message}");
    assert!(message.contains("OUTBOX_CONTRACTS=overwrite"), "{message}");
    assert!(message.contains("VERSION_ADDED  invoice.issued v1"), "{message}");
    assert!(!dir.exists(), "nothing is written without overwrite");

    std::env::set_var(OVERWRITE_ENV, "overwrite");
    assert_compatible(&dir);
    std::env::remove_var(OVERWRITE_ENV);
    for file in ["invoice.issued/v1.schema.json", "invoice.voided/v2.schema.json", "asyncapi.json"] {
        assert!(dir.join(file).is_file(), "{file} written");
    }
    let written = std::fs::read_to_string(dir.join("invoice.issued/v1.schema.json")).unwrap();
    assert!(written.contains("\"x-sensitive\": true"), "{written}");

    assert_compatible(&dir); // up to date now

    // A committed contract the code would break: a required property the code does not have.
    let path = dir.join("invoice.voided/v2.schema.json");
    let mut schema: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    schema["properties"]["voided_by"] = serde_json::json!({ "type": "string" });
    schema["required"].as_array_mut().unwrap().push("voided_by".into());
    std::fs::write(&path, serde_json::to_string(&schema).unwrap()).unwrap();
    let message = panic_message(catch_unwind(AssertUnwindSafe(|| assert_compatible(&dir))));
    assert!(message.contains("would break consumers"), "{message}");
    assert!(message.contains("REQUIRED_PROPERTY_REMOVED  invoice.voided v2  /properties/voided_by"), "{message}");
}
