//! Compile-fail tests of `#[derive(OutboxEvent)]`, `#[derive(Redact)]` and `#[derive(RedactedDebug)]`: one file per
//! mistake, each with the message the user gets (`TRYBUILD=overwrite cargo test -p outbox-core --test derive_ui`
//! regenerates them).

#[test]
fn each_mistake_in_a_derive_gets_its_message() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/derive/*.rs");
}
