//! The outbox relay.
