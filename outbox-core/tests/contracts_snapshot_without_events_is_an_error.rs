//! A snapshot in a test binary that registers no event (the application crate is not linked) says so, instead
//! of writing an empty contracts folder.

use outbox_core::contracts::{ContractError, Snapshot};

#[test]
fn a_snapshot_without_registered_events_is_an_error() {
    let temp = tempfile::Builder::new().prefix("outbox-no-events-").tempdir().unwrap();
    let dir = temp.path().join("contracts");
    let error = Snapshot::new(&dir).overwrite(true).check().unwrap_err();
    assert!(matches!(error, ContractError::NoEvents), "{error}");
    assert!(error.to_string().contains("extern crate"), "{error}");
    assert!(!dir.exists(), "nothing is written");
}
