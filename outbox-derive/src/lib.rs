//! `#[derive(OutboxEvent)]`: re-exported by `outbox-core`; depend on that crate instead.
