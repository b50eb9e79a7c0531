//! The test harness: real servers for the workspace's tests.
//!
//! [`pg::TestDatabase::create`] gives each test its own fresh PostgreSQL database. When `DATABASE_URL` is set it
//! is used as the server (the tests create databases named `outbox_test_*` on it); otherwise a private
//! throwaway cluster is started once per test binary, on a free port of 127.0.0.1, and removed when the binary
//! exits. [`sqlite::TestDatabase::create`] gives each test its own SQLite file.
//! [`brokers::Broker::start`] gives a test its own NATS, Redis, RabbitMQ, SQS (moto) or Kafka-protocol (tansu)
//! server, which it can kill and restart; [`brokers::Broker::start_secured`] one that takes only TLS (with
//! [`certificates::Certificates`] of a private CA) and only the given credentials, for NATS also in operator mode
//! ([`nats_operator::NatsOperator`]: JWTs and `.creds` files). [`asyncapi::parse`] runs the official AsyncAPI parser. [`process`] runs the `outbox`
//! binary ([`outbox!`]) and picks free ports: every test that spawns, signals or kills an `outbox` process does it
//! there.

pub mod asyncapi;
pub mod brokers;
pub mod certificates;
pub mod nats_operator;
pub mod pg;
pub mod process;
pub mod sqlite;
