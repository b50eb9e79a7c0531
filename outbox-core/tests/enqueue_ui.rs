//! Compile-fail tests: an event can only be enqueued through a live transaction.

#[test]
fn enqueue_outside_a_transaction_does_not_compile() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/enqueue/*.rs");
}
