use outbox_core::OutboxEvent;

#[derive(serde::Serialize)]
struct PaymentPaid {
    payment_id: i64,
}

impl OutboxEvent for PaymentPaid {
    const EVENT_TYPE: &'static str = "payment.paid";
    const AGGREGATE_TYPE: &'static str = "payment";
    const VERSION: u32 = 1;

    fn aggregate_id(&self) -> String {
        self.payment_id.to_string()
    }
}

async fn confirm(pool: sqlx::SqlitePool) -> Result<(), outbox_core::Error> {
    // The event would commit on its own, apart from the domain change.
    outbox_core::enqueue(pool, &PaymentPaid { payment_id: 1 }).await?;
    Ok(())
}

fn main() {}
