//! The aggregate id can be a marked field of any `Display` type, a dotted path to a nested field, or a method.

use std::fmt;

use outbox_core::OutboxEvent;
use serde::Serialize;
use uuid::Uuid;

#[derive(Serialize, schemars::JsonSchema)]
struct OrderNumber(u32);

impl fmt::Display for OrderNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ORD-{:06}", self.0)
    }
}

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "id.uuid", aggregate = "thing", version = 1)]
struct ByUuid {
    #[outbox(aggregate_id)]
    id: Uuid,
}

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "id.integer", aggregate = "thing", version = 1)]
struct ByInteger {
    #[outbox(aggregate_id)]
    id: i64,
}

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "id.string", aggregate = "thing", version = 1)]
struct ByString {
    #[outbox(aggregate_id)]
    id: String,
}

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "id.newtype", aggregate = "order", version = 1)]
struct ByNewtype {
    #[outbox(aggregate_id)]
    number: OrderNumber,
}

#[derive(Serialize, schemars::JsonSchema)]
struct Customer {
    id: Uuid,
}

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "id.path", aggregate = "customer", version = 1, aggregate_id = "customer.id")]
struct ByPath {
    customer: Customer,
}

#[derive(Serialize, schemars::JsonSchema, OutboxEvent)]
#[outbox(event_type = "id.method", aggregate = "line", version = 1, aggregate_id = "key()")]
struct ByMethod {
    order: u32,
    line: u32,
}

impl ByMethod {
    fn key(&self) -> String {
        format!("{}:{}", self.order, self.line)
    }
}

#[test]
fn marked_fields_of_display_types_format_to_the_aggregate_id() {
    let uuid = Uuid::now_v7();
    assert_eq!(ByUuid { id: uuid }.aggregate_id(), uuid.to_string());
    assert_eq!(ByInteger { id: -5 }.aggregate_id(), "-5");
    assert_eq!(ByString { id: "abc".into() }.aggregate_id(), "abc");
    assert_eq!(ByNewtype { number: OrderNumber(42) }.aggregate_id(), "ORD-000042");
}

#[test]
fn a_container_path_reaches_a_nested_field() {
    let id = Uuid::now_v7();
    assert_eq!(ByPath { customer: Customer { id } }.aggregate_id(), id.to_string());
}

#[test]
fn a_container_method_computes_the_aggregate_id() {
    assert_eq!(ByMethod { order: 7, line: 2 }.aggregate_id(), "7:2");
}
