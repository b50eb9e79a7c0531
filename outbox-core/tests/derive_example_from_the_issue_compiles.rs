//! The example users start from compiles with only outbox-core, serde, schemars, uuid and time.

use outbox_core::OutboxEvent;
use schemars::JsonSchema;
use serde::Serialize;
use time::OffsetDateTime;
use uuid::Uuid;

#[derive(Serialize, JsonSchema, OutboxEvent)]
#[outbox(event_type = "payment.paid", aggregate = "payment", version = 1)]
struct PaymentPaid {
    #[outbox(aggregate_id)]
    payment_id: Uuid,
    order_id: Uuid,
    #[outbox(sensitive)]
    payer_email: String,
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String")]
    paid_at: OffsetDateTime,
}

#[test]
fn the_example_event_has_its_declared_metadata() {
    let payment_id = Uuid::now_v7();
    let event = PaymentPaid {
        payment_id,
        order_id: Uuid::now_v7(),
        payer_email: "ana@example.com".into(),
        paid_at: OffsetDateTime::UNIX_EPOCH,
    };
    assert_eq!(PaymentPaid::EVENT_TYPE, "payment.paid");
    assert_eq!(PaymentPaid::AGGREGATE_TYPE, "payment");
    assert_eq!(PaymentPaid::VERSION, 1);
    assert_eq!(event.aggregate_id(), payment_id.to_string());
    assert_eq!(PaymentPaid::sensitive_paths(), ["/payer_email"]);
    assert_eq!(event.redacted()["payer_email"], "[REDACTED]");
    assert_eq!(event.redacted()["paid_at"], "1970-01-01T00:00:00Z");
}
