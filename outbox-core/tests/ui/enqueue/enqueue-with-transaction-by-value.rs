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

async fn confirm(pool: sqlx::PgPool) -> Result<(), outbox_core::Error> {
    let tx = pool.begin().await?;
    // The transaction itself must be lent (`&mut tx`), not moved: it would be gone before the commit.
    outbox_core::enqueue(tx, &PaymentPaid { payment_id: 1 }).await?;
    Ok(())
}

fn main() {}
